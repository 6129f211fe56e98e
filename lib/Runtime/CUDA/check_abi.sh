#!/usr/bin/env bash
#===- check_abi.sh - Every Runtime.h function is defined by a library ----===#
#
# Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
# Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
#
#===----------------------------------------------------------------------===#
#
# Usage: check_abi.sh LIBRARY.a [LIBRARY.a ...] [INCLUDE_DIR]
#
# Preprocesses Runtime.h (so that the functions Activations.def generates are
# listed too), takes every fsdp_rt_* name followed by '(' as a declared
# function, and compares that list with the text symbols the LIBRARYs define
# together. Prints the missing functions and exits 1 if there are any; a
# backend (with the common runtime library, libFSDPRuntimeFloat.a, which
# keeps the counters) that links in place of another must define all of
# them.
#
#===----------------------------------------------------------------------===#
set -euo pipefail

libraries=()
include=$(cd "$(dirname "$0")/../../../include" && pwd)
for arg in "$@"; do
  if [[ -d $arg ]]; then
    include=$arg
  else
    libraries+=("$arg")
  fi
done
if ((${#libraries[@]} == 0)); then
  echo "usage: $0 LIBRARY.a [LIBRARY.a ...] [INCLUDE_DIR]" >&2
  exit 2
fi
library=$(printf '%s + ' "${libraries[@]##*/}")
library=${library% + }

declared=$(echo '#include "fsdp/Runtime/Runtime.h"' |
  "${CC:-cc}" -E -P -I"$include" -x c - |
  grep -oE '\bfsdp_rt_[A-Za-z0-9_]+[[:space:]]*\(' |
  sed -E 's/[[:space:]]*\($//' | sort -u)
defined=$(for lib in "${libraries[@]}"; do nm --defined-only "$lib"; done |
  awk '$2 == "T" { print $3 }' | sort -u)

missing=$(comm -23 <(echo "$declared") <(echo "$defined"))
count=$(echo "$declared" | wc -l)
if [[ -n "$missing" ]]; then
  echo "$library lacks $(echo "$missing" | wc -l) of the $count" \
    "functions of Runtime.h:"
  echo "$missing"
  exit 1
fi
echo "$library define all $count functions of Runtime.h"
