//===- Gradient.h - Reverse-mode differentiation of nn and dist ops -*- C++
//-*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The state a gradient rule (GradientOpInterface) works on: the gradients of
// values found so far, which values need one, and a builder that creates ops
// with their generated builders (result types from the shape rules).
// `differentiate` is the reverse-mode driver.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_GRADIENT_H
#define FSDP_DIALECT_NN_IR_GRADIENT_H

#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

#include <functional>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace fsdp::nn {

/// Builds nn ops with their generated builders, at one location, counting
/// them; result types come from the ops' shape rules.
class ShapeRuleBuilder {
public:
  ShapeRuleBuilder(mlir::OpBuilder &builder, mlir::Location loc)
      : builder(builder), loc(loc) {}

  mlir::OpBuilder &getBuilder() { return builder; }
  mlir::Location getLoc() const { return loc; }
  void setLoc(mlir::Location l) { loc = l; }
  /// Counts an op built directly with `OpTy::create`.
  void noteCreated() { ++created; }
  /// The ops built so far.
  unsigned getNumCreated() const { return created; }

  /// Creates `OpTy` with its generated builder, `args` being the builder's
  /// typed operands and attributes but the trailing `path` (none), at the
  /// builder's location; the result types come from the op's shape rule
  /// (InferTypeOpInterface).
  template <typename OpTy, typename... Args> OpTy make(Args &&...args) {
    ++created;
    return OpTy::create(builder, loc, std::forward<Args>(args)...,
                        mlir::StringAttr());
  }

  /// A tensor of `type` filled with `v`.
  mlir::Value fill(double v, mlir::RankedTensorType type);
  /// `x` reshaped (itself when it has the shape already).
  mlir::Value reshape(mlir::Value x, llvm::ArrayRef<int64_t> shape);
  /// `g` summed down to `type` (the transpose of broadcasting).
  mlir::Value sumTo(mlir::Value g, mlir::Type type);
  /// `x` flattened to [rows, last dim].
  mlir::Value rows(mlir::Value x);
  /// `x` cast to element type `element` (itself when it has it).
  mlir::Value castTo(mlir::Value x, mlir::Type element);

private:
  mlir::OpBuilder &builder;
  mlir::Location loc;
  unsigned created = 0;
};

/// What a gradient rule (GradientOpInterface) works on: the gradients found
/// so far, the values that need one, and a builder.
class GradientBuilder : public ShapeRuleBuilder {
public:
  /// A hook on the gradient of an all_gather's result before the rule
  /// transposes it (FSDP's deferred gradient sync holds it over
  /// microbatches): returns the gradient to transpose now, or null to stop.
  using GatherHook = std::function<mlir::Value(mlir::Operation *gather,
                                               mlir::Value resultGrad)>;

  /// Gradients flow to the values in `needs`; gradients crossing ranks are
  /// reduced in `reduceType` (MixedPrecisionPolicy.reduce_dtype; null: their
  /// own type).
  GradientBuilder(mlir::OpBuilder &builder, mlir::Location loc,
                  const llvm::DenseSet<mlir::Value> &needs,
                  mlir::Type reduceType = {})
      : ShapeRuleBuilder(builder, loc), needs(needs), reduceType(reduceType) {}

  /// The gradient found so far for `v` (null: none).
  mlir::Value grad(mlir::Value v) const { return grads.lookup(v); }
  /// Whether `v` depends on a parameter, so that its gradient is wanted.
  bool needsGrad(mlir::Value v) const { return v && needs.contains(v); }
  /// Adds `g` to the gradient of `v` (nothing when `g` is null or `v` needs
  /// no gradient).
  void accumulate(mlir::Value v, mlir::Value g);
  /// Sets the seed gradient of `v`, whether or not `v` is in `needs`.
  void seed(mlir::Value v, mlir::Value g) { grads[v] = g; }

  /// `v` in reduce_dtype, to cross ranks.
  mlir::Value toReduce(mlir::Value v) {
    return reduceType ? castTo(v, reduceType) : v;
  }

  /// The hook on all_gather result gradients (may be empty).
  const GatherHook &getGatherHook() const { return gatherHook; }
  void setGatherHook(GatherHook hook) { gatherHook = std::move(hook); }

private:
  const llvm::DenseSet<mlir::Value> &needs;
  mlir::Type reduceType;
  GatherHook gatherHook;
  llvm::DenseMap<mlir::Value, mlir::Value> grads;
};

/// The gradient rule of an activation `y = f(x)` (NN_ActivationOp): its
/// gradient op `GradOp` computes `dy · f'(x)`.
template <typename GradOp, typename OpTy>
llvm::LogicalResult buildActivationGradient(OpTy op, GradientBuilder &grads) {
  if (grads.needsGrad(op.getInput()))
    grads.accumulate(
        op.getInput(),
        grads.template make<GradOp>(op.getInput(), grads.grad(op.getResult())));
  return llvm::success();
}

/// Reverse-mode differentiation: runs the gradient rule of each op of
/// `forward`, last to first, on the gradients `grads` holds (seeded by the
/// caller). An op whose results have gradients but that has no rule is an
/// error at the op.
llvm::LogicalResult differentiate(llvm::ArrayRef<mlir::Operation *> forward,
                                  GradientBuilder &grads);

/// Attaches GradientOpInterface to the dist dialect's ops (the rules of
/// the collectives and their Megatron f/g conjugates).
void registerDistGradientModels(mlir::DialectRegistry &registry);

} // namespace fsdp::nn

#endif // FSDP_DIALECT_NN_IR_GRADIENT_H
