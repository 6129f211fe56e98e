#!/usr/bin/env bash
#===- check_abi.sh - Every Runtime.h function is defined by a library ----===#
#
# Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
# Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
#
#===----------------------------------------------------------------------===#
#
# Usage: check_abi.sh LIBRARY.a [INCLUDE_DIR]
#
# Preprocesses Runtime.h (so that the functions Activations.def generates are
# listed too), takes every fsdp_rt_* name followed by '(' as a declared
# function, and compares that list with the text symbols LIBRARY defines.
# Prints the missing functions and exits 1 if there are any; a backend that
# links in place of another must define all of them.
#
#===----------------------------------------------------------------------===#
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 LIBRARY.a [INCLUDE_DIR]" >&2
  exit 2
fi
library=$1
include=${2:-$(cd "$(dirname "$0")/../../../include" && pwd)}

declared=$(echo '#include "fsdp/Runtime/Runtime.h"' |
  "${CC:-cc}" -E -P -I"$include" -x c - |
  grep -oE '\bfsdp_rt_[A-Za-z0-9_]+[[:space:]]*\(' |
  sed -E 's/[[:space:]]*\($//' | sort -u)
defined=$(nm --defined-only "$library" | awk '$2 == "T" { print $3 }' |
  sort -u)

missing=$(comm -23 <(echo "$declared") <(echo "$defined"))
count=$(echo "$declared" | wc -l)
if [[ -n "$missing" ]]; then
  echo "$library lacks $(echo "$missing" | wc -l) of the $count" \
    "functions of Runtime.h:"
  echo "$missing"
  exit 1
fi
echo "$library defines all $count functions of Runtime.h"
