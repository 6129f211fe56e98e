//===- NNGradOps.cpp - Shape rules of the nn backward ops -----------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A backward op takes its forward op's operands and the gradient of the
// forward's result. Where it can, its rule runs the forward op's own rule on
// those operands (so both report the same broken shape) and then requires
// the gradient to have the forward result's type.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

#include "mlir/Dialect/Traits.h"

using namespace mlir;
using namespace fsdp::nn;
using namespace fsdp::nn::detail;

NN_SHAPE_RULE(GeluGradOp) {
  StringRef approximate = adaptor.getApproximate();
  if (approximate != "none" && approximate != "tanh")
    return reject<GeluGradOp>(
        loc, "approximate must be \"none\" or \"tanh\", got \"", approximate,
        "\"");
  if (failed(checkGrad<GeluGradOp>(loc, adaptor.getGrad(),
                                   adaptor.getInput().getType())))
    return failure();
  results.push_back(adaptor.getInput().getType());
  return success();
}

NN_SHAPE_RULE(AttentionGradOp) {
  SmallVector<Type> forward;
  // The forward's operands, its positions among them.
  SmallVector<Value, 5> operands = {adaptor.getQuery(), adaptor.getKey(),
                                    adaptor.getValue()};
  for (Value v : {adaptor.getPositions(), adaptor.getKeyPositions()})
    if (v)
      operands.push_back(v);
  if (adaptor.getKeyPositions() && !adaptor.getPositions())
    return reject<AttentionGradOp>(loc, "key_positions need positions");
  // A packed forward's document positions: the rule below checks the rest
  // as an unpacked attention's.
  if (Value documents = adaptor.getDocumentPositions()) {
    RankedTensorType q = tensorOf(adaptor.getQuery());
    if (!adaptor.getCausal())
      return reject<AttentionGradOp>(loc, "document_positions need causal");
    if (tensorOf(documents).getShape() !=
        ArrayRef<int64_t>{q.getDimSize(0), q.getDimSize(1)})
      return reject<AttentionGradOp>(loc, "document positions ",
                                     documents.getType(), " must be [B, S] of ",
                                     q);
  }
  if (failed(forwardResults<AttentionOp, AttentionGradOp>(
          context, loc, operands, adaptor, forward)) ||
      failed(checkGrad<AttentionGradOp>(loc, adaptor.getGrad(), forward[0])))
    return failure();
  if (adaptor.getOutput().getType() != forward[0])
    return reject<AttentionGradOp>(loc, "output ",
                                   adaptor.getOutput().getType(),
                                   " is not the forward's ", forward[0]);
  if (adaptor.getLogsumexp().getType() != forward[1])
    return reject<AttentionGradOp>(loc, "logsumexp ",
                                   adaptor.getLogsumexp().getType(),
                                   " is not the forward's ", forward[1]);
  if (Value lseGrad = adaptor.getLogsumexpGrad();
      lseGrad && lseGrad.getType() != forward[1])
    return reject<AttentionGradOp>(loc, "logsumexp_grad ", lseGrad.getType(),
                                   " is not the forward's ", forward[1]);
  results.append({adaptor.getQuery().getType(), adaptor.getKey().getType(),
                  adaptor.getValue().getType()});
  return success();
}

NN_SHAPE_RULE(AttentionCombineGradOp) {
  SmallVector<Type> forward;
  if (failed(forwardResults<AttentionCombineOp, AttentionCombineGradOp>(
          context, loc,
          {adaptor.getResultA(), adaptor.getLogsumexpA(), adaptor.getResultB(),
           adaptor.getLogsumexpB()},
          adaptor, forward)) ||
      failed(checkGrad<AttentionCombineGradOp>(loc, adaptor.getGrad(),
                                               forward[0])))
    return failure();
  if (adaptor.getResult().getType() != forward[0] ||
      adaptor.getLogsumexp().getType() != forward[1])
    return reject<AttentionCombineGradOp>(
        loc, "result and logsumexp are not the forward's");
  if (Value lseGrad = adaptor.getLogsumexpGrad();
      lseGrad && lseGrad.getType() != forward[1])
    return reject<AttentionCombineGradOp>(loc, "logsumexp_grad ",
                                          lseGrad.getType(),
                                          " is not the forward's ", forward[1]);
  results.append({forward[0], forward[1], forward[0], forward[1]});
  return success();
}

NN_SHAPE_RULE(SoftmaxGradOp) {
  RankedTensorType output = tensorOf(adaptor.getOutput());
  if (failed(normalizeDim<SoftmaxGradOp>(loc, adaptor.getDim(),
                                         output.getRank())) ||
      failed(checkGrad<SoftmaxGradOp>(loc, adaptor.getGrad(), output)))
    return failure();
  results.push_back(output);
  return success();
}

NN_SHAPE_RULE(EmbeddingGradOp) {
  RankedTensorType ids = tensorOf(adaptor.getIds());
  RankedTensorType grad = tensorOf(adaptor.getGrad());
  int64_t rows = static_cast<int64_t>(adaptor.getNumEmbeddings());
  if (rows < 1)
    return reject<EmbeddingGradOp>(loc, "num_embeddings must be >= 1, got ",
                                   rows);
  if (Value index = adaptor.getShardIndex())
    if (failed(checkScalar<EmbeddingGradOp>(loc, "shard_index", index)))
      return failure();
  if (grad.getRank() != ids.getRank() + 1 ||
      grad.getShape().drop_back() != ids.getShape())
    return reject<EmbeddingGradOp>(loc, "gradient ", grad,
                                   " must be the ids' shape plus a hidden "
                                   "dim, ids are ",
                                   ids);
  results.push_back(RankedTensorType::get({rows, grad.getShape().back()},
                                          grad.getElementType()));
  return success();
}

NN_SHAPE_RULE(CrossEntropyPartialGradOp) {
  SmallVector<Type> forward;
  CrossEntropyPartialOp::Properties properties;
  if (failed(CrossEntropyPartialOp::inferTypes(
          context, loc,
          forwardAdaptor<CrossEntropyPartialOp, CrossEntropyPartialGradOp>(
              context,
              {adaptor.getLogits(), adaptor.getLabels(), adaptor.getShift(),
               adaptor.getShardIndex()},
              adaptor, properties),
          forward)) ||
      failed(checkGrad<CrossEntropyPartialGradOp>(loc, adaptor.getGradSumExp(),
                                                  forward[0])) ||
      failed(checkGrad<CrossEntropyPartialGradOp>(loc, adaptor.getGradTarget(),
                                                  forward[1])))
    return failure();
  results.push_back(adaptor.getLogits().getType());
  return success();
}

NN_SHAPE_RULE(CrossEntropyCombineGradOp) {
  Value sumExp = adaptor.getSumExp();
  SmallVector<Type> forward;
  CrossEntropyCombineOp::Properties properties;
  if (failed(CrossEntropyCombineOp::inferTypes(
          context, loc,
          forwardAdaptor<CrossEntropyCombineOp, CrossEntropyCombineGradOp>(
              context, {sumExp, sumExp, adaptor.getLabels()}, adaptor,
              properties),
          forward)) ||
      failed(checkGrad<CrossEntropyCombineGradOp>(loc, adaptor.getGrad(),
                                                  forward[0])))
    return failure();
  results.append({sumExp.getType(), sumExp.getType()});
  return success();
}

NN_SHAPE_RULE(ReduceSumToOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> shape = adaptor.getShape();
  SmallVector<int64_t> broadcast;
  if (!OpTrait::util::getBroadcastedShape(shape, input.getShape(), broadcast) ||
      ArrayRef<int64_t>(broadcast) != input.getShape())
    return reject<ReduceSumToOp>(loc, "shape [", shape,
                                 "] does not broadcast to the input ", input);
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

NN_SHAPE_RULE(PadOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  FailureOr<int64_t> dim =
      normalizeDim<PadOp>(loc, adaptor.getDim(), input.getRank());
  if (failed(dim))
    return failure();
  int64_t before = adaptor.getBefore(), after = adaptor.getAfter();
  if (before < 0 || after < 0)
    return reject<PadOp>(loc, "padding must be >= 0, got ", before, " and ",
                         after);
  SmallVector<int64_t> shape(input.getShape());
  shape[*dim] += before + after;
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}
