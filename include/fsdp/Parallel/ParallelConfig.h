//===- ParallelConfig.h - parallel.json, typed -----------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The parallel configuration of a compile: NeMo Automodel's ParallelismSizes
// and FSDP2Config fields under their reference names and defaults
// (docs/parallel-config.md), the mesh they define, and tensor-parallel plans
// (Hugging Face style strings or torch ParallelStyle objects keyed by
// module-path globs). The JSON is read here and nowhere else: every setting
// comes out typed (sizes, bools, the enums below), and fsdp-parallel-config
// records it on the module as `#fsdp.parallel<...>`, whose parameters are
// these types. Independent of MLIR, so the tools can validate a config
// before they build anything.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_PARALLEL_PARALLELCONFIG_H
#define FSDP_PARALLEL_PARALLELCONFIG_H

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp {

/// A float dtype of the config (MixedPrecisionPolicy's).
enum class FloatDtype { F32, BF16, F16 };
/// FSDP2Config.reshard_after_forward: null (every layer but the last),
/// true, false.
enum class ReshardPolicy { AllButLast, Always, Never };
/// FSDP2Config.activation_checkpointing, normalized.
enum class CheckpointMode { None, Full, Selective };
/// FSDP2Config.offload_policy: none, or a CPUOffloadPolicy.
enum class OffloadPolicy { None, CPU };
/// cp_comm_type: how context-parallel attention exchanges K/V: a ring of
/// permutes (p2p) or one all-gather per layer.
enum class CpCommType { P2P, AllGather };

/// The names the IR spells each enum's values with (`#fsdp.parallel`), in
/// enum order.
template <typename E> struct EnumNames;
template <> struct EnumNames<FloatDtype> {
  static constexpr std::array<const char *, 3> names = {"f32", "bf16", "f16"};
};
template <> struct EnumNames<ReshardPolicy> {
  static constexpr std::array<const char *, 3> names = {"all_but_last",
                                                        "always", "never"};
};
template <> struct EnumNames<CheckpointMode> {
  static constexpr std::array<const char *, 3> names = {"none", "full",
                                                        "selective"};
};
template <> struct EnumNames<OffloadPolicy> {
  static constexpr std::array<const char *, 2> names = {"none", "cpu"};
};
template <> struct EnumNames<CpCommType> {
  static constexpr std::array<const char *, 2> names = {"p2p", "all_gather"};
};
template <typename E> const char *enumName(E value) {
  return EnumNames<E>::names[static_cast<size_t>(value)];
}
template <typename E> std::optional<E> enumNamed(std::string_view name) {
  for (size_t i = 0; i < EnumNames<E>::names.size(); ++i)
    if (name == EnumNames<E>::names[i])
      return static_cast<E>(i);
  return std::nullopt;
}

/// A tensor layout over the tp axis, as torch's placements: Replicate() or
/// Shard(dim) (dim may be negative, counted from the end).
struct TPLayout {
  bool shard = false;
  int64_t dim = 0;

  static TPLayout replicate() { return {}; }
  static TPLayout sharded(int64_t dim) { return {true, dim}; }
  bool operator==(const TPLayout &o) const {
    return shard == o.shard && (!shard || dim == o.dim);
  }
  /// "replicate" or "shard(d)", the form the IR annotation uses.
  std::string str() const;
  /// Parses "replicate" / "Replicate()" / "shard(1)" / "Shard(-1)".
  static std::optional<TPLayout> parse(const std::string &text);
};

/// How one module is parallelized: torch's ColwiseParallel, RowwiseParallel
/// or SequenceParallel with its input/output layouts.
struct TPStyle {
  enum Kind { Colwise, Rowwise, SequenceParallel };
  Kind kind = Colwise;
  TPLayout input, output;
  bool useLocalOutput = true;

  static TPStyle colwise();
  static TPStyle rowwise();
  static TPStyle sequenceParallel();
  /// "colwise", "rowwise" or "sequence_parallel".
  const char *kindName() const;
};

/// One plan entry: modules whose path matches `pattern` get `style`.
struct TPPlanEntry {
  std::string pattern;
  TPStyle style;
};

/// FSDP2Config.mp_policy (torch's MixedPrecisionPolicy).
struct MixedPrecision {
  FloatDtype paramDtype = FloatDtype::BF16;
  FloatDtype reduceDtype = FloatDtype::F32;
  FloatDtype outputDtype = FloatDtype::BF16;
  bool castForwardInputs = true;
};

struct ParallelConfig {
  // ParallelismSizes.
  std::optional<int64_t> dpSize, dpReplicateSize;
  int64_t tpSize = 1, cpSize = 1, ppSize = 1, epSize = 1;
  /// cp_comm_type (Automodel's default: p2p).
  CpCommType cpCommType = CpCommType::P2P;
  // FSDP2Config fields this compiler implements.
  bool sequenceParallel = false;
  /// FSDP2Config.enable_async_tensor_parallel (fsdp-async-tp).
  bool asyncTP = false;
  /// Null: the built-in plan of the model's family.
  std::optional<std::vector<TPPlanEntry>> tpPlan;
  MixedPrecision mpPolicy;
  ReshardPolicy reshardAfterForward = ReshardPolicy::AllButLast;
  CheckpointMode activationCheckpointing = CheckpointMode::None;
  /// activation_memory_budget (beyond the reference): saved activations per
  /// rank in bytes, or a fraction (<= 1) of them without checkpointing; 0
  /// for none.
  double activationMemoryBudget = 0;
  /// CPU: parameter blocks, gradients at the update and optimizer state in
  /// host memory, the optimizer step on the host.
  OffloadPolicy offloadPolicy = OffloadPolicy::None;
  /// FSDP2Config.defer_fsdp_grad_sync.
  bool deferGradSync = true;
  /// FSDP2Config.enable_fsdp2_prefetch and the chain depths.
  bool prefetch = false;
  int64_t forwardPrefetchDepth = 1, backwardPrefetchDepth = 2;
  /// The depths fsdp-schedule uses: the chains' when prefetch is on and
  /// reshard_after_forward is not false, else FSDP2's implicit one unit in
  /// each direction.
  std::pair<int64_t, int64_t> scheduleDepths() const {
    if (prefetch && reshardAfterForward != ReshardPolicy::Never)
      return {forwardPrefetchDepth, backwardPrefetchDepth};
    return {1, 1};
  }
  /// Where the config came from, for messages.
  std::string file = "<defaults>";
};

/// The mesh sizes a config gives for a world, in the reference's axis order
/// (dp_replicate, dp_shard, cp, tp); TP is innermost.
struct MeshSizes {
  int64_t dpReplicate = 1, dpShard = 1, cp = 1, tp = 1;
  /// Expert parallelism: ep divides dpShard (ep_shard = dpShard / ep).
  int64_t ep = 1;
  int64_t world() const { return dpReplicate * dpShard * cp * tp; }
};

/// Parses parallel.json text read from `file`. On error, returns nullopt and
/// sets `error` to a message naming the file and the field.
std::optional<ParallelConfig> parseParallelConfig(const std::string &text,
                                                  const std::string &file,
                                                  std::string &error);

/// Parses a tensor-parallel plan: a JSON object of module-path globs to HF
/// style strings or ParallelStyle objects. `where` prefixes messages.
std::optional<std::vector<TPPlanEntry>> parseTPPlan(const std::string &text,
                                                    const std::string &where,
                                                    std::string &error);

/// The mesh for `worldSize` ranks (0: the smallest world the sizes allow,
/// dp = dp_size or 1), validated as Automodel does: tp·cp·pp divides the
/// world, dp % dp_replicate == 0, dp_replicate < dp unless it is 1.
std::optional<MeshSizes> resolveMesh(const ParallelConfig &config,
                                     int64_t worldSize, std::string &error);

/// The built-in plan for model class `architecture` (LlamaForCausalLM,
/// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel),
/// with its sequence-parallel overlay when `sequenceParallel`; `known` is
/// false when the class has none and the Llama-style default is returned.
std::vector<TPPlanEntry> builtinTPPlan(const std::string &architecture,
                                       bool sequenceParallel, bool &known);

/// Whether module path `path` matches plan key `pattern`: both split at '.',
/// the same number of atoms, each matching as fnmatch (`*`, `?`, `[...]`).
bool matchModulePath(const std::string &pattern, const std::string &path);

} // namespace fsdp

#endif // FSDP_PARALLEL_PARALLELCONFIG_H
