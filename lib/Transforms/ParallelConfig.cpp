//===- ParallelConfig.cpp - The fsdp-parallel-config pass -----------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-parallel-config`: parallel.json (and the options that
// override it) read once, the mesh it resolves to, and the whole config
// recorded on the module as `#fsdp.parallel`, the one place later passes
// read their settings from.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "TPAnnotation.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Transforms/Passes.h"

#include "llvm/Support/MemoryBuffer.h"

namespace fsdp {
#define GEN_PASS_DEF_PARALLELCONFIGPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

/// Where in parallel.json `error` (`<file>: ...` or `<file>:L:C: ...`, as
/// parseParallelConfig words it) points: the line and column it names, or
/// the first occurrence of the key of the `field 'a.b'` it names. Returns the
/// location and the message without the file prefix.
std::pair<Location, std::string> configErrorLoc(MLIRContext *context,
                                                StringRef file, StringRef text,
                                                StringRef error) {
  StringRef rest = error;
  if (!rest.consume_front(file))
    return {FileLineColLoc::get(context, file, 0, 0), error.str()};
  unsigned line = 0, column = 0;
  if (rest.consume_front(":") && !rest.consumeInteger(10, line) &&
      rest.consume_front(":") && !rest.consumeInteger(10, column))
    return {FileLineColLoc::get(context, file, line, column),
            rest.drop_while([](char c) { return c == ':' || c == ' '; }).str()};
  rest = error.drop_front(file.size()).ltrim(": ");
  line = column = 0;
  size_t field = rest.find("field '");
  if (field != StringRef::npos) {
    StringRef name = rest.drop_front(field + 7).take_until(
        [](char c) { return c == '\'' || c == '['; });
    name = name.rsplit('.').second.empty() ? name : name.rsplit('.').second;
    size_t at = text.find(("\"" + name + "\"").str());
    if (at != StringRef::npos) {
      StringRef before = text.take_front(at);
      line = before.count('\n') + 1;
      column = at - (before.rfind('\n') + 1) + 1;
    }
  }
  return {FileLineColLoc::get(context, file, line, column), rest.str()};
}

struct ParallelConfigPass
    : fsdp::impl::ParallelConfigPassBase<ParallelConfigPass> {
  using ParallelConfigPassBase::ParallelConfigPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ParallelConfig parallel;
    std::optional<MeshSizes> sizes = resolveConfig(parallel);
    if (!sizes || failed(buildMesh(module, *sizes)))
      return signalPassFailure();
    module->setAttr("fsdp.parallel", attributeOf(parallel, *sizes));
  }

  /// The configuration (the file's, then the options that override it) and
  /// the mesh sizes it resolves to; emits the error and returns none when
  /// either is wrong.
  std::optional<MeshSizes> resolveConfig(ParallelConfig &parallel);
  /// The module's mesh, checked against `sizes`, or a new one.
  LogicalResult buildMesh(ModuleOp module, const MeshSizes &sizes);
  /// `parallel` on a mesh of `sizes`, as the IR records it.
  ParallelConfigAttr attributeOf(const ParallelConfig &parallel,
                                 const MeshSizes &sizes);
};

std::optional<MeshSizes>
ParallelConfigPass::resolveConfig(ParallelConfig &parallel) {
  MLIRContext *context = &getContext();
  std::string error, configText;
  if (!config.empty()) {
    auto buffer = llvm::MemoryBuffer::getFile(config);
    if (!buffer) {
      emitError(FileLineColLoc::get(context, config, 0, 0),
                "cannot read parallel config: ")
          << buffer.getError().message();
      return std::nullopt;
    }
    configText = (*buffer)->getBuffer().str();
    std::optional<ParallelConfig> parsed =
        parseParallelConfig(configText, config, error);
    if (!parsed) {
      auto [loc, message] = configErrorLoc(context, config, configText, error);
      emitError(loc, message);
      return std::nullopt;
    }
    parallel = *parsed;
  }
  if (tp < 0 || worldSize < 0) {
    emitError(UnknownLoc::get(context), "tp and world-size must be >= 0");
    return std::nullopt;
  }
  if (tp > 0)
    parallel.tpSize = tp;
  if (sequenceParallel != FromConfig::Config)
    parallel.sequenceParallel = sequenceParallel == FromConfig::True;
  std::optional<MeshSizes> sizes = resolveMesh(parallel, worldSize, error);
  if (!sizes) {
    if (config.empty()) {
      emitError(UnknownLoc::get(context), error);
    } else {
      auto [loc, message] = configErrorLoc(context, config, configText, error);
      emitError(loc, message);
    }
    return std::nullopt;
  }
  return sizes;
}

LogicalResult ParallelConfigPass::buildMesh(ModuleOp module,
                                            const MeshSizes &sizes) {
  if (dist::MeshOp mesh = dist::findMesh(module)) {
    if (mesh.getAxisSize("tp").value_or(1) == sizes.tp)
      return success();
    return mesh.emitOpError("has tp = ")
           << mesh.getAxisSize("tp").value_or(1)
           << " but the parallel configuration asks for tp = " << sizes.tp;
  }
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto view = [&](StringRef name, ArrayRef<StringRef> axes) {
    return b.getNamedAttr(name, b.getStrArrayAttr(axes));
  };
  if (sizes.ep == 1) {
    dist::MeshOp::create(
        b, module.getLoc(), "mesh",
        b.getStrArrayAttr({"dp_replicate", "dp_shard", "cp", "tp"}),
        b.getDenseI64ArrayAttr(
            {sizes.dpReplicate, sizes.dpShard, sizes.cp, sizes.tp}),
        b.getDictionaryAttr(
            {view("dp", {"dp_replicate", "dp_shard"}),
             view("dp_shard_cp", {"dp_shard", "cp"}),
             view("dp_cp", {"dp_replicate", "dp_shard", "cp"})}));
    return success();
  }
  // Expert parallelism: dp_shard is (ep_shard, ep), ep innermost, so the
  // ranks of one expert group are adjacent (Automodel's moe_mesh).
  dist::MeshOp::create(
      b, module.getLoc(), "mesh",
      b.getStrArrayAttr({"dp_replicate", "ep_shard", "ep", "cp", "tp"}),
      b.getDenseI64ArrayAttr({sizes.dpReplicate, sizes.dpShard / sizes.ep,
                              sizes.ep, sizes.cp, sizes.tp}),
      b.getDictionaryAttr(
          {view("dp_shard", {"ep_shard", "ep"}),
           view("dp", {"dp_replicate", "ep_shard", "ep"}),
           view("dp_shard_cp", {"ep_shard", "ep", "cp"}),
           view("dp_cp", {"dp_replicate", "ep_shard", "ep", "cp"})}));
  return success();
}

ParallelConfigAttr
ParallelConfigPass::attributeOf(const ParallelConfig &parallel,
                                const MeshSizes &sizes) {
  MLIRContext *context = &getContext();
  Builder b(context);
  auto dtype = [&](FloatDtype d) -> Type {
    return d == FloatDtype::F32   ? Type(b.getF32Type())
           : d == FloatDtype::F16 ? Type(b.getF16Type())
                                  : Type(b.getBF16Type());
  };
  const MixedPrecision &mp = parallel.mpPolicy;
  auto mpPolicy = MixedPrecisionPolicyAttr::get(
      context, dtype(mp.paramDtype), dtype(mp.reduceDtype),
      dtype(mp.outputDtype), b.getBoolAttr(mp.castForwardInputs));
  ArrayAttr plan;
  if (parallel.tpPlan) {
    SmallVector<Attribute> entries;
    for (const TPPlanEntry &entry : *parallel.tpPlan)
      entries.push_back(tp::encode(b, entry.style, entry.pattern));
    plan = b.getArrayAttr(entries);
  }
  auto [forwardDepth, backwardDepth] = parallel.scheduleDepths();
  return ParallelConfigAttr::get(
      context, sizes.dpReplicate, sizes.dpShard, sizes.cp, parallel.cpCommType,
      sizes.tp, parallel.epSize, b.getBoolAttr(parallel.sequenceParallel),
      b.getBoolAttr(parallel.asyncTP), parallel.reshardAfterForward,
      b.getBoolAttr(parallel.deferGradSync), parallel.activationCheckpointing,
      b.getF64FloatAttr(parallel.activationMemoryBudget),
      parallel.offloadPolicy, forwardDepth, backwardDepth, mpPolicy, plan,
      config.empty() ? StringAttr() : b.getStringAttr(config));
}

} // namespace
