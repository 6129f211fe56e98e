//===- RuntimeCallInterface.cpp - An op's runtime call
//---------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Interfaces/RuntimeCallInterface.h"

#include "fsdp/Interfaces/RuntimeCallInterface.cpp.inc"
