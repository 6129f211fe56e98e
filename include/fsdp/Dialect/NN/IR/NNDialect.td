//===- NNDialect.td - The nn dialect definition ------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_NNDIALECT_TD
#define FSDP_DIALECT_NN_IR_NNDIALECT_TD

include "mlir/IR/OpBase.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::fsdp::nn";
  let summary = "Model-level tensor operations of a traced training graph";
  let description = [{
    The `nn` dialect holds the operations of a transformer's forward (and,
    after autodiff, backward) pass on ranked tensors: embeddings, linear
    layers, norms, rotary embeddings, attention and the loss. Ops are
    deliberately coarse — one op per PyTorch module-level computation — so
    that sharding rules, cost models and backward rules are written once per
    op rather than recovered from elementwise soup.

    Every op may carry `path`, the module path it came from
    (`model.layers.3.mlp.up_proj`); tensor-parallel plans match on it.
    Result types are inferred from operands and attributes, so the verifier
    and the graph importer share one set of shape rules.

    Function arguments carry `nn.input` (a data input's name) or `nn.param`
    (a parameter's fully qualified name) and `nn.init` (its initializer);
    results carry `nn.output`.
  }];
  let useDefaultAttributePrinterParser = 1;
  // Loaded with nn, so that FSDP's annotations on nn programs are verified.
  let dependentDialects = ["::fsdp::FSDPDialect"];
  let extraClassDeclaration = [{
    /// Argument attribute naming a data input.
    static constexpr llvm::StringLiteral kInputAttrName = "nn.input";
    /// Argument attribute holding a parameter's fully qualified name.
    static constexpr llvm::StringLiteral kParamAttrName = "nn.param";
    /// Argument attribute holding a parameter's initializer.
    static constexpr llvm::StringLiteral kInitAttrName = "nn.init";
    /// Argument attribute naming optimizer state (zero-initialized).
    static constexpr llvm::StringLiteral kStateAttrName = "nn.state";
    /// Result attribute: the index of the argument this result replaces
    /// after each step.
    static constexpr llvm::StringLiteral kUpdatesAttrName = "nn.updates";
    /// Result attribute naming a function output.
    static constexpr llvm::StringLiteral kOutputAttrName = "nn.output";
    /// Function attribute naming the model architecture.
    static constexpr llvm::StringLiteral kModelAttrName = "nn.model";
    /// Module attribute: the length (in tokens) of the documents packed
    /// rows hold, for the cost of packed attention (an i64).
    static constexpr llvm::StringLiteral kDocumentLengthAttrName =
        "nn.document_length";
  }];
}

#endif // FSDP_DIALECT_NN_IR_NNDIALECT_TD
