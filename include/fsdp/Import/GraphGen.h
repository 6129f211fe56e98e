//===- GraphGen.h - graph.json from a Hugging Face config -------*- C++ -*-===//
//
// Part of the fsdp-mlir project.
//
//===----------------------------------------------------------------------===//
//
// Builds the forward graph (docs/graph-format.md, version 1) of a causal
// language model from its Hugging Face `config.json`. Module paths and
// parameter names are the ones `model.named_modules()` and
// `model.named_parameters()` give in Hugging Face transformers, and parameters
// are listed in `named_parameters()` order.
//
// Supported `architectures[0]`: LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM and GPT2LMHeadModel. Missing optional
// fields take the defaults of the family's transformers config class. What is
// deliberately not modelled: dropout (the graph is the deterministic forward),
// `rope_scaling` (rotary uses plain `rope_theta` frequencies), and the
// key/value cache.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_IMPORT_GRAPHGEN_H
#define FSDP_IMPORT_GRAPHGEN_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp {

/// Shapes and element type of the generated step.
struct GraphGenOptions {
  /// Batch size B of the `[B, S]` inputs.
  int64_t batch = 2;
  /// Sequence length S of the `[B, S]` inputs.
  int64_t seq = 16;
  /// Element type of every parameter: "f32", "bf16" or "f16".
  std::string dtype = "f32";
  /// Packed rows: each attention sees only its query's document, where
  /// `position_ids` restart at 0 (`packed` attention).
  bool packed = false;
};

/// The outcome of generateGraph(): a graph, or an error message that names the
/// offending config field.
struct GraphGenResult {
  /// The graph.json document; null when generation failed.
  nlohmann::ordered_json graph;
  /// Empty on success.
  std::string error;
  /// What the graph leaves out of the config (dropout), one line each.
  std::vector<std::string> warnings;
  /// The architecture generated (`architectures[0]`).
  std::string architecture;
  /// Number of decoder layers.
  int64_t numLayers = 0;
  /// Hidden size (width of the residual stream).
  int64_t hiddenSize = 0;

  bool succeeded() const { return error.empty(); }
};

/// Builds the forward graph of the model described by the Hugging Face config
/// `config`. Never throws: a bad config is reported through the result's error.
GraphGenResult generateGraph(const nlohmann::json &config,
                             const GraphGenOptions &options = {});

/// Returns the total number of parameter elements in a graph.json document (a
/// tied weight counts once, since it is listed once), or -1 when `graph` has no
/// well-formed `parameters` array.
int64_t countParameters(const nlohmann::ordered_json &graph);
int64_t countParameters(const nlohmann::json &graph);

/// Writes `graph` as JSON text with one input, parameter, node or output per
/// line, which keeps large graphs greppable and diffable.
std::string printGraph(const nlohmann::ordered_json &graph);

/// The architectures generateGraph() accepts, in the order they are listed in
/// diagnostics.
const std::vector<std::string> &getSupportedArchitectures();

} // namespace fsdp

#endif // FSDP_IMPORT_GRAPHGEN_H
