//===- ParallelConfig.cpp - parallel.json: sizes, FSDP2Config, TP plans ---===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Parallel/ParallelConfig.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <fnmatch.h>
#include <functional>
#include <map>

using json = nlohmann::ordered_json;
using namespace fsdp;

//===----------------------------------------------------------------------===//
// Layouts and styles
//===----------------------------------------------------------------------===//

std::string TPLayout::str() const {
  return shard ? "shard(" + std::to_string(dim) + ")" : "replicate";
}

std::optional<TPLayout> TPLayout::parse(const std::string &text) {
  std::string t;
  for (char c : text)
    if (c != ' ')
      t += char(std::tolower(static_cast<unsigned char>(c)));
  if (t == "replicate" || t == "replicate()")
    return replicate();
  if (t.rfind("shard(", 0) == 0 && t.size() > 7 && t.back() == ')') {
    std::string digits = t.substr(6, t.size() - 7);
    size_t used = 0;
    try {
      int64_t dim = std::stoll(digits, &used);
      if (used == digits.size())
        return sharded(dim);
    } catch (...) {
    }
  }
  return std::nullopt;
}

TPStyle TPStyle::colwise() {
  return {Colwise, TPLayout::replicate(), TPLayout::sharded(-1), true};
}
TPStyle TPStyle::rowwise() {
  return {Rowwise, TPLayout::sharded(-1), TPLayout::replicate(), true};
}
TPStyle TPStyle::sequenceParallel() {
  return {SequenceParallel, TPLayout::sharded(1), TPLayout::sharded(1), false};
}

const char *TPStyle::kindName() const {
  switch (kind) {
  case Colwise:
    return "colwise";
  case Rowwise:
    return "rowwise";
  case SequenceParallel:
    return "sequence_parallel";
  }
  return "?";
}

bool fsdp::matchModulePath(const std::string &pattern,
                           const std::string &path) {
  auto atoms = [](const std::string &s) {
    std::vector<std::string> out(1);
    for (char c : s) {
      if (c == '.')
        out.emplace_back();
      else
        out.back() += c;
    }
    return out;
  };
  std::vector<std::string> p = atoms(pattern), m = atoms(path);
  if (p.size() != m.size())
    return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (fnmatch(p[i].c_str(), m[i].c_str(), 0) != 0)
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {

/// Thrown (and caught within this file) with a message naming the field.
struct ConfigError {
  std::string message;
};

[[noreturn]] void reject(const std::string &where, const std::string &what) {
  throw ConfigError{where + ": " + what};
}

std::string field(const std::string &where, const std::string &key) {
  return where + ": field '" + key + "'";
}

json parseJson(const std::string &text, const std::string &file) {
  try {
    return json::parse(text);
  } catch (const json::parse_error &e) {
    // Line and column of the byte where parsing stopped.
    size_t byte = e.byte ? e.byte - 1 : 0, line = 1, col = 1;
    for (size_t i = 0; i < byte && i < text.size(); ++i) {
      col = text[i] == '\n' ? 1 : col + 1;
      line += text[i] == '\n';
    }
    std::string what = e.what();
    size_t colon = what.find(": ", what.find("column"));
    reject(file + ":" + std::to_string(line) + ":" + std::to_string(col),
           "malformed JSON: " +
               (colon == std::string::npos ? what : what.substr(colon + 2)));
  }
}

/// The layout of a style object's `input_layouts`/`output_layouts`: a
/// placement string or a one-element list of one.
TPLayout parseLayout(const json &value, const std::string &where) {
  const json *v = &value;
  if (v->is_array() && v->size() == 1)
    v = &(*v)[0];
  if (!v->is_string())
    reject(where,
           "must be \"Replicate()\" or \"Shard(dim)\", got " + value.dump());
  std::optional<TPLayout> layout = TPLayout::parse(v->get<std::string>());
  if (!layout)
    reject(where,
           "must be \"Replicate()\" or \"Shard(dim)\", got " + value.dump());
  return *layout;
}

/// Checks the layouts a style supports.
void checkLayouts(const TPStyle &s, const std::string &where) {
  TPLayout rep = TPLayout::replicate(), seq = TPLayout::sharded(1),
           last = TPLayout::sharded(-1);
  // `layout` (the style's field `field`) must be `a` or `b` (`names`).
  auto require = [&](const char *style, const char *field, TPLayout layout,
                     TPLayout a, TPLayout b, const char *names) {
    if (!(layout == a) && !(layout == b))
      reject(where, std::string(style) + " " + field + " must be " + names +
                        ", got " + layout.str());
  };
  switch (s.kind) {
  case TPStyle::Colwise:
    require("ColwiseParallel", "input_layouts", s.input, rep, seq,
            "Replicate() or Shard(1)");
    require("ColwiseParallel", "output_layouts", s.output, last, rep,
            "Shard(-1) or Replicate()");
    return;
  case TPStyle::Rowwise:
    require("RowwiseParallel", "input_layouts", s.input, last, rep,
            "Shard(-1) or Replicate()");
    require("RowwiseParallel", "output_layouts", s.output, rep, seq,
            "Replicate() or Shard(1)");
    return;
  case TPStyle::SequenceParallel:
    if (!(s.input == seq) || !(s.output == seq))
      reject(where, "SequenceParallel shards the sequence dim: its layouts "
                    "must be Shard(1), got " +
                        s.input.str() + " -> " + s.output.str());
    return;
  }
}

/// One plan value: a Hugging Face style string or a ParallelStyle object.
/// Returns nullopt for styles the reference drops (FSDP syncs their grads).
std::optional<TPStyle> parseStyle(const std::string &key, const json &value,
                                  const std::string &where) {
  if (value.is_string()) {
    std::string s = value.get<std::string>();
    bool lmHead = key == "lm_head" || key == "language_model.lm_head";
    if (s == "colwise")
      return TPStyle::colwise();
    if (s == "rowwise")
      return TPStyle::rowwise();
    if (s == "colwise_rep") {
      TPStyle style = TPStyle::colwise();
      // As Automodel: on lm_head the logits stay vocabulary-sharded.
      if (lmHead)
        style.useLocalOutput = false;
      else
        style.output = TPLayout::replicate();
      return style;
    }
    if (s == "rowwise_rep") {
      TPStyle style = TPStyle::rowwise();
      style.input = TPLayout::replicate();
      return style;
    }
    if (s == "sequence_parallel")
      return TPStyle::sequenceParallel();
    if (s == "replicated_with_grad_allreduce")
      return std::nullopt;
    reject(where, "unknown style '" + s +
                      "' (expected colwise, rowwise, colwise_rep, "
                      "rowwise_rep, sequence_parallel, or an object with "
                      "\"style\")");
  }
  if (!value.is_object())
    reject(where, "must be a style string or an object, got " + value.dump());
  auto styleIt = value.find("style");
  if (styleIt == value.end() || !styleIt->is_string())
    reject(where, "needs \"style\": \"ColwiseParallel\", \"RowwiseParallel\" "
                  "or \"SequenceParallel\"");
  std::string name = styleIt->get<std::string>();
  TPStyle style;
  if (name == "ColwiseParallel")
    style = TPStyle::colwise();
  else if (name == "RowwiseParallel" || name == "VocabParallelEmbedding")
    style = TPStyle::rowwise();
  else if (name == "SequenceParallel" ||
           name == "SequenceParallelAllGatherActivation")
    style = TPStyle::sequenceParallel();
  else
    reject(where + ".style",
           "unknown ParallelStyle '" + name +
               "' (expected ColwiseParallel, RowwiseParallel, "
               "SequenceParallel, VocabParallelEmbedding or "
               "SequenceParallelAllGatherActivation)");
  for (auto &[k, v] : value.items()) {
    std::string at = where + "." + k;
    if (k == "style")
      continue;
    if (k == "input_layouts")
      style.input = parseLayout(v, at);
    else if (k == "output_layouts")
      style.output = parseLayout(v, at);
    else if (k == "use_local_output") {
      if (!v.is_boolean())
        reject(at, "must be true or false, got " + v.dump());
      style.useLocalOutput = v.get<bool>();
    } else
      reject(at, "unknown field (expected style, input_layouts, "
                 "output_layouts, use_local_output)");
  }
  checkLayouts(style, where);
  return style;
}

std::vector<TPPlanEntry> parsePlan(const json &plan, const std::string &where) {
  if (!plan.is_object())
    reject(where, "must be an object of module-path globs to styles");
  std::vector<TPPlanEntry> entries;
  for (auto &[key, value] : plan.items()) {
    if (key.empty())
      reject(where, "has an empty module path");
    if (std::optional<TPStyle> style =
            parseStyle(key, value, where + "['" + key + "']"))
      entries.push_back({key, *style});
  }
  return entries;
}

FloatDtype parseDtype(const json &v, const std::string &where) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.rfind("torch.", 0) == 0)
      s = s.substr(6);
    if (s == "float32" || s == "fp32" || s == "f32" || s == "float")
      return FloatDtype::F32;
    if (s == "bfloat16" || s == "bf16")
      return FloatDtype::BF16;
    if (s == "float16" || s == "fp16" || s == "f16" || s == "half")
      return FloatDtype::F16;
  }
  reject(where,
         "must be a float dtype (float32, bfloat16, float16), got " + v.dump());
}

int64_t parseSize(const json &v, const std::string &where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 1)
    reject(where, "must be an integer >= 1, got " + v.dump());
  return v.get<int64_t>();
}

int64_t parseDepth(const json &v, const std::string &where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    reject(where, "must be an integer >= 0, got " + v.dump());
  return v.get<int64_t>();
}

bool parseBool(const json &v, const std::string &where) {
  if (!v.is_boolean())
    reject(where, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

/// FSDP2Config.activation_checkpointing as Automodel normalizes it: a bool,
/// or a string where true/on/full/enabled/yes mean full, false/off/none/
/// disabled/no mean none, and "selective" the op policy (case-insensitive,
/// '-' and '_' alike).
CheckpointMode parseCheckpointing(const json &v, const std::string &where) {
  if (v.is_boolean())
    return v.get<bool>() ? CheckpointMode::Full : CheckpointMode::None;
  if (!v.is_string())
    reject(where,
           "must be true, false, \"full\" or \"selective\", got " + v.dump());
  std::string s = v.get<std::string>();
  for (char &c : s)
    c = c == '-' ? '_' : static_cast<char>(std::tolower(c));
  for (const char *full : {"true", "on", "full", "enabled", "yes"})
    if (s == full)
      return CheckpointMode::Full;
  for (const char *none : {"false", "off", "none", "disabled", "no"})
    if (s == none)
      return CheckpointMode::None;
  if (s == "selective")
    return CheckpointMode::Selective;
  reject(where,
         "must be true, false, \"full\" or \"selective\", got " + v.dump());
}

/// cp_comm_type: "p2p" (a ring of K/V permutes) or "all_gather" (K/V
/// gathered once per layer); "a2a" (Ulysses) is not built.
CpCommType parseCpCommType(const json &v, const std::string &where) {
  if (v.is_string()) {
    std::string type = v.get<std::string>();
    if (std::optional<CpCommType> known = enumNamed<CpCommType>(type))
      return *known;
    if (type == "a2a")
      reject(where, "\"a2a\" (Ulysses) is not built yet; use \"p2p\" or "
                    "\"all_gather\"");
  }
  reject(where, "must be \"p2p\" or \"all_gather\", got " + v.dump());
}

/// FSDP2Config.activation_checkpointing_scope: our graphs are language
/// models, so "all" (or default/auto) and "language" select every decoder
/// layer; a vision or audio group matches nothing here.
void checkCheckpointingScope(const json &v, const std::string &where) {
  std::vector<std::string> groups;
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i)
      if (i == s.size() || s[i] == ',' || s[i] == '+') {
        groups.push_back(s.substr(start, i - start));
        start = i + 1;
      }
  } else if (v.is_array()) {
    for (const json &x : v) {
      if (!x.is_string())
        reject(where, "must be a string or a list of strings, got " + v.dump());
      groups.push_back(x.get<std::string>());
    }
  } else {
    reject(where, "must be a string or a list of strings, got " + v.dump());
  }
  for (std::string &g : groups) {
    for (char &c : g)
      c = static_cast<char>(std::tolower(c));
    g.erase(0, g.find_first_not_of(' '));
    g.erase(g.find_last_not_of(' ') + 1);
    if (g == "default" || g == "auto")
      g = "all";
    if (g == "all" && groups.size() > 1)
      reject(where, "\"all\" cannot be combined with other groups");
    if (g == "vision" || g == "audio" || g == "multimodal")
      reject(where, "selects the " + g +
                        " layers, and the graph is a language model with "
                        "none; use \"all\" or \"language\"");
    if (g != "all" && g != "language")
      reject(where, "unknown layer group \"" + g +
                        "\" (expected all, language, vision, audio or "
                        "multimodal)");
  }
}

/// A field whose only accepted value is its default: the feature it
/// switches is not built yet, and a config that asks for it must not run as
/// if it had been applied.
void requireDefault(const json &v, const json &defaultValue,
                    const std::string &where, const std::string &why) {
  if (v != defaultValue)
    reject(where, "= " + v.dump() + " is not supported yet (" + why +
                      "); only " + defaultValue.dump() + " is accepted");
}

/// FSDP2Config.offload_policy: null, or torch's CPUOffloadPolicy as an
/// object (`_target_` optional; `pin_memory` only at its default, true).
OffloadPolicy parseOffloadPolicy(const json &v, const std::string &file,
                                 const std::string &key) {
  std::string where = field(file, key);
  if (v.is_null())
    return OffloadPolicy::None;
  if (!v.is_object())
    reject(where, "must be null or a CPUOffloadPolicy object "
                  "({\"pin_memory\": true}); got " +
                      v.dump());
  for (auto &[k, x] : v.items()) {
    std::string sub = field(file, key + "." + k);
    if (k == "_target_") {
      std::string target = x.is_string() ? x.get<std::string>() : "";
      if (target != "torch.distributed.fsdp.CPUOffloadPolicy" &&
          target != "CPUOffloadPolicy")
        reject(sub, "is " + x.dump() +
                        "; only torch.distributed.fsdp.CPUOffloadPolicy "
                        "is an offload policy here");
    } else if (k == "pin_memory") {
      requireDefault(x, true, sub, "pageable host buffers");
    } else {
      reject(sub, "unknown CPUOffloadPolicy field (expected _target_, "
                  "pin_memory)");
    }
  }
  return OffloadPolicy::CPU;
}

ParallelConfig parseConfig(const std::string &text, const std::string &file) {
  json root = parseJson(text, file);
  if (!root.is_object())
    reject(file, "expected a JSON object at the top level");
  ParallelConfig config;
  config.file = file;
  for (auto &[key, v] : root.items()) {
    std::string at = field(file, key);
    if (key == "dp_size")
      config.dpSize =
          v.is_null() ? std::nullopt : std::optional(parseSize(v, at));
    else if (key == "dp_replicate_size")
      config.dpReplicateSize =
          v.is_null() ? std::nullopt : std::optional(parseSize(v, at));
    else if (key == "tp_size")
      config.tpSize = parseSize(v, at);
    else if (key == "cp_size")
      config.cpSize = parseSize(v, at);
    else if (key == "cp_comm_type")
      config.cpCommType = parseCpCommType(v, at);
    else if (key == "pp_size")
      config.ppSize = parseSize(v, at);
    else if (key == "ep_size")
      config.epSize = parseSize(v, at);
    else if (key == "sequence_parallel")
      config.sequenceParallel = parseBool(v, at);
    else if (key == "tp_plan") {
      if (v.is_string())
        reject(at, "names a plan (\"" + v.get<std::string>() +
                       "\"); give the plan itself as an object, or null for "
                       "the built-in plan");
      if (!v.is_null())
        config.tpPlan = parsePlan(v, at);
    } else if (key == "mp_policy") {
      if (v.is_null())
        continue;
      if (!v.is_object())
        reject(at, "must be an object or null");
      for (auto &[k, x] : v.items()) {
        std::string sub = field(file, key + "." + k);
        if (k == "_target_")
          continue;
        if (k == "param_dtype")
          config.mpPolicy.paramDtype = parseDtype(x, sub);
        else if (k == "reduce_dtype")
          config.mpPolicy.reduceDtype = parseDtype(x, sub);
        else if (k == "output_dtype")
          config.mpPolicy.outputDtype = parseDtype(x, sub);
        else if (k == "cast_forward_inputs")
          config.mpPolicy.castForwardInputs = parseBool(x, sub);
        else
          reject(sub, "unknown MixedPrecisionPolicy field (expected "
                      "param_dtype, reduce_dtype, output_dtype, "
                      "cast_forward_inputs)");
      }
    } else if (key == "enable_async_tensor_parallel") {
      config.asyncTP = parseBool(v, at);
      if (config.asyncTP && !(root.contains("sequence_parallel") &&
                              root["sequence_parallel"] == true))
        reject(at, "= true requires sequence_parallel = true");
    } else if (key == "offload_policy")
      config.offloadPolicy = parseOffloadPolicy(v, file, key);
    else if (key == "autocast_dtype")
      requireDefault(v, nullptr, at, "autocast");
    else if (key == "activation_checkpointing")
      config.activationCheckpointing = parseCheckpointing(v, at);
    else if (key == "activation_checkpointing_scope")
      checkCheckpointingScope(v, at);
    else if (key == "activation_memory_budget") {
      if (!v.is_null() && (!v.is_number() || v.get<double>() < 0))
        reject(at, "must be a number of bytes per rank, or a fraction in "
                   "(0, 1], or 0 or null for none; got " +
                       v.dump());
      config.activationMemoryBudget = v.is_null() ? 0 : v.get<double>();
    } else if (key == "defer_fsdp_grad_sync")
      config.deferGradSync = parseBool(v, at);
    else if (key == "reshard_after_forward")
      config.reshardAfterForward = v.is_null() ? ReshardPolicy::AllButLast
                                   : parseBool(v, at) ? ReshardPolicy::Always
                                                      : ReshardPolicy::Never;
    else if (key == "enable_compile")
      requireDefault(v, false, at, "per-layer compile");
    else if (key == "enable_fsdp2_prefetch")
      config.prefetch = parseBool(v, at);
    else if (key == "fsdp2_backward_prefetch_depth")
      config.backwardPrefetchDepth = parseDepth(v, at);
    else if (key == "fsdp2_forward_prefetch_depth")
      config.forwardPrefetchDepth = parseDepth(v, at);
    else if (key == "patch_is_packed_sequence")
      requireDefault(v, false, at,
                     "a transformers monkeypatch; compiled attention never "
                     "syncs on packed-sequence checks");
    else if (key == "multimodal") {
      if (!v.is_object())
        reject(at, "must be an object");
      for (auto &[k, x] : v.items())
        if (k == "frozen_sharding")
          requireDefault(x, "root", field(file, "multimodal." + k),
                         "multimodal towers");
        else
          reject(field(file, "multimodal." + k), "unknown field");
    } else
      reject(at, "unknown field (see docs/parallel-config.md for the "
                 "ParallelismSizes and FSDP2Config fields)");
  }
  if (config.ppSize != 1)
    reject(field(file, "pp_size"), "pipeline parallelism is not supported "
                                   "yet; pp_size must be 1");
  return config;
}

} // namespace

std::optional<ParallelConfig> fsdp::parseParallelConfig(const std::string &text,
                                                        const std::string &file,
                                                        std::string &error) {
  try {
    return parseConfig(text, file);
  } catch (const ConfigError &e) {
    error = e.message;
  } catch (const json::exception &e) {
    error = file + ": " + e.what();
  }
  return std::nullopt;
}

std::optional<std::vector<TPPlanEntry>>
fsdp::parseTPPlan(const std::string &text, const std::string &where,
                  std::string &error) {
  try {
    return parsePlan(parseJson(text, where), where);
  } catch (const ConfigError &e) {
    error = e.message;
  } catch (const json::exception &e) {
    error = where + ": " + e.what();
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

std::optional<MeshSizes> fsdp::resolveMesh(const ParallelConfig &config,
                                           int64_t worldSize,
                                           std::string &error) {
  const std::string &file = config.file;
  int64_t inner = config.tpSize * config.cpSize * config.ppSize;
  int64_t dp = 0;
  if (config.dpSize) {
    dp = *config.dpSize;
    if (worldSize && dp * inner != worldSize) {
      error = file + ": dp_size (" + std::to_string(dp) + ") x tp_size (" +
              std::to_string(config.tpSize) + ") x cp_size (" +
              std::to_string(config.cpSize) + ") x pp_size (" +
              std::to_string(config.ppSize) +
              ") = " + std::to_string(dp * inner) +
              " does not match the world size " + std::to_string(worldSize);
      return std::nullopt;
    }
  } else if (worldSize) {
    if (worldSize % inner != 0) {
      error = file + ": the world size " + std::to_string(worldSize) +
              " is not divisible by tp_size (" + std::to_string(config.tpSize) +
              ") x cp_size (" + std::to_string(config.cpSize) +
              ") x pp_size (" + std::to_string(config.ppSize) +
              ") = " + std::to_string(inner);
      return std::nullopt;
    }
    dp = worldSize / inner;
  } else {
    dp = config.dpReplicateSize.value_or(1);
  }
  int64_t replicate = config.dpReplicateSize.value_or(1);
  if (dp % replicate != 0) {
    error = file + ": dp (" + std::to_string(dp) +
            ") is not divisible by dp_replicate_size (" +
            std::to_string(replicate) + ")";
    return std::nullopt;
  }
  if (replicate > 1 && replicate >= dp) {
    error = file + ": dp_replicate_size (" + std::to_string(replicate) +
            ") must be less than dp (" + std::to_string(dp) +
            ") unless it is 1: pure replication (DDP) is not FSDP2";
    return std::nullopt;
  }
  // Expert parallelism splits the data-parallel shard ranks into (ep_shard,
  // ep): the experts spread over ep, and each expert's weights are
  // FSDP-sharded over ep_shard.
  if ((dp / replicate) % config.epSize != 0) {
    error = file + ": ep_size (" + std::to_string(config.epSize) +
            ") does not divide dp_shard (" + std::to_string(dp / replicate) +
            "), the data-parallel shard ranks the experts spread over";
    return std::nullopt;
  }
  MeshSizes mesh;
  mesh.dpReplicate = replicate;
  mesh.dpShard = dp / replicate;
  mesh.ep = config.epSize;
  mesh.cp = config.cpSize;
  mesh.tp = config.tpSize;
  return mesh;
}

//===----------------------------------------------------------------------===//
// Built-in plans
//===----------------------------------------------------------------------===//

std::vector<TPPlanEntry> fsdp::builtinTPPlan(const std::string &architecture,
                                             bool sp, bool &known) {
  TPStyle colwise = TPStyle::colwise(), rowwise = TPStyle::rowwise();
  // The vocabulary-parallel embedding: rows split, ids replicated.
  TPStyle embedding = rowwise;
  embedding.input = TPLayout::replicate();
  // lm_head: column-parallel with vocabulary-sharded logits, which the
  // vocabulary-parallel cross-entropy consumes without gathering them.
  TPStyle head = colwise;
  head.useLocalOutput = false;
  TPStyle norm = TPStyle::sequenceParallel();
  if (sp) {
    embedding.output = TPLayout::sharded(1);
    embedding.useLocalOutput = false;
    rowwise.output = TPLayout::sharded(1);
    rowwise.useLocalOutput = false;
    head.input = TPLayout::sharded(1);
  }
  std::vector<TPPlanEntry> plan;
  auto add = [&](const std::string &key, const TPStyle &style) {
    plan.push_back({key, style});
  };
  if (architecture == "GPT2LMHeadModel") {
    known = true;
    add("transformer.wte", embedding);
    // c_attn is the fused [Q | K | V] Conv1D: the partitioner splits each
    // third over tp (strided), because its output is split three ways.
    add("transformer.h.*.attn.c_attn", colwise);
    add("transformer.h.*.attn.c_proj", rowwise);
    add("transformer.h.*.mlp.c_fc", colwise);
    add("transformer.h.*.mlp.c_proj", rowwise);
    if (sp) {
      add("transformer.h.*.ln_1", norm);
      add("transformer.h.*.ln_2", norm);
      add("transformer.ln_f", norm);
    }
    add("lm_head", head);
    return plan;
  }
  known = architecture == "LlamaForCausalLM" ||
          architecture == "MistralForCausalLM" ||
          architecture == "Qwen2ForCausalLM" ||
          architecture == "Qwen3ForCausalLM" ||
          architecture == "Qwen3MoeForCausalLM" ||
          architecture == "MixtralForCausalLM";
  add("model.embed_tokens", embedding);
  for (const char *p : {"q_proj", "k_proj", "v_proj"})
    add(std::string("model.layers.*.self_attn.") + p, colwise);
  add("model.layers.*.self_attn.o_proj", rowwise);
  for (const char *p : {"gate_proj", "up_proj"})
    add(std::string("model.layers.*.mlp.") + p, colwise);
  add("model.layers.*.mlp.down_proj", rowwise);
  // A sparse layer's router and experts are not in the plan: each tp rank
  // runs every expert on its tokens (all of them, or with sequence
  // parallelism its share); expert parallelism splits the experts.
  if (sp) {
    // Qwen3's q_norm/k_norm act on head-sharded data and stay as they are.
    add("model.layers.*.input_layernorm", norm);
    add("model.layers.*.post_attention_layernorm", norm);
    add("model.norm", norm);
  }
  add("lm_head", head);
  return plan;
}
