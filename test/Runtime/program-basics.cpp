//===- program-basics.cpp - A tiny program for the runtime's main ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// embedding -> linear -> cross_entropy on one rank, written against
// Program.h as generated code would be; outputs `loss` and `logits`.
// FSDP_TEST_BAD_TYPE=1 hands linear a wrong result type, to test the
// runtime's operand checks. FSDP_TEST_PLAN=<kind> hands the runtime a memory
// plan: `ok` is the plan the compiler would make (the embedding's 512 bytes
// at offset 0 of a 512-byte arena, the two outputs on their own); the others
// break one rule each, to test the runtime's plan checks.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Runtime/Program.h"

#include <cstdlib>
#include <cstring>

void fsdp_program_describe(fsdp_program *p) {
  fsdp_prog_input(p, "input_ids", fsdp_type{FSDP_RT_I64, 2, {2, 8}});
  fsdp_prog_input_range(p, "input_ids", 16);
  fsdp_prog_input(p, "labels", fsdp_type{FSDP_RT_I64, 2, {2, 8}});
  fsdp_prog_input_range(p, "labels", 16);
  fsdp_prog_param(p, "model.embed_tokens.weight",
                  fsdp_type{FSDP_RT_F32, 2, {16, 8}}, FSDP_INIT_NORMAL, 0.0,
                  1.0);
  fsdp_prog_param(p, "lm_head.weight", fsdp_type{FSDP_RT_F32, 2, {16, 8}},
                  FSDP_INIT_NORMAL, 0.0, 0.5);
  fsdp_prog_param(p, "lm_head.bias", fsdp_type{FSDP_RT_F32, 1, {16}},
                  FSDP_INIT_UNIFORM, -0.1, 0.1);
  fsdp_prog_output_name(p, "loss");
  fsdp_prog_output_name(p, "logits");
  // (bytes, offset) per device allocation: h, logits, loss.
  const char *plan = std::getenv("FSDP_TEST_PLAN");
  if (!plan)
    return;
  static int64_t table[] = {512, 0, 1024, -1, 4, -1, 4, -1};
  int64_t arena = 512, count = 3;
  if (!std::strcmp(plan, "size")) {
    table[0] = 256;
  } else if (!std::strcmp(plan, "overlap")) {
    arena = 1536;
    table[3] = 256;
  } else if (!std::strcmp(plan, "outlive")) {
    arena = 1536;
    table[3] = 512;
  } else if (!std::strcmp(plan, "short")) {
    count = 4;
  } else if (!std::strcmp(plan, "misaligned")) {
    table[1] = 100;
  }
  fsdp_prog_memory_plan(p, arena, count, table);
}

void fsdp_program_forward(fsdp_program *p) {
  fsdp_tensor *ids = fsdp_prog_arg(p, 0);
  fsdp_tensor *labels = fsdp_prog_arg(p, 1);
  fsdp_tensor *embed = fsdp_prog_arg(p, 2);
  fsdp_tensor *w = fsdp_prog_arg(p, 3);
  fsdp_tensor *b = fsdp_prog_arg(p, 4);
  fsdp_tensor *h = fsdp_op_embedding(p, fsdp_type{FSDP_RT_F32, 3, {2, 8, 8}},
                                     embed, ids, nullptr);
  int64_t vocab = std::getenv("FSDP_TEST_BAD_TYPE") ? 15 : 16;
  fsdp_tensor *logits =
      fsdp_op_linear(p, fsdp_type{FSDP_RT_F32, 3, {2, 8, vocab}}, h, w, b);
  fsdp_release(h);
  fsdp_tensor *loss = fsdp_op_cross_entropy(
      p, fsdp_type{FSDP_RT_F32, 0, {}}, logits, labels, -100, FSDP_LOSS_MEAN);
  fsdp_prog_result(p, 0, loss);
  fsdp_release(loss);
  fsdp_prog_result(p, 1, logits);
  fsdp_release(logits);
}
