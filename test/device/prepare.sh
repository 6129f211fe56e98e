#!/usr/bin/env bash
# Prepares the device check on a build machine (this project built with the
# CUDA toolkit; no GPU needed): compiles every program the check runs for
# --target cuda --no-mpi (one process, no MPI library on the GPU machine),
# runs the CPU references the GPU results are compared with, and copies the
# scripts, into one folder that run.sh uses on the GPU machine.
#
#   test/device/prepare.sh [BUILD_DIR [OUT_DIR]]   (default build,
#                                                   BUILD_DIR/device-bundle)
#
# Programs (docs/device-check.md):
#   small-f32, small-bf16  the Llama-3.2-1B shape at a small size (2 layers,
#                          hidden 128, 4 heads, vocab 2048, seq 128, batch 2),
#                          optimizer=none, f32 and bf16 (mp_policy); the CPU
#                          runtime's dumps of the same steps are in ref/
#   small-offload          the same with AdamW (clip 0.5) and CPU offload, 4
#                          steps, f32; the optimizer on the host's cores
#   small-offload-gpu      the same, the optimizer as kernels reading pinned
#                          memory (--offload-optimizer=gpu)
#   llama1b-grad           Llama-3.2-1B (16 layers, hidden 2048, vocab
#                          128256, tied), bf16 params and f32 masters,
#                          batch 1 x 2048, optimizer=none, for transformers
#   llama1b-train          the same with AdamW, batch FSDP_DEVICE_BATCH
#                          (default 4) x 2048, for the step time
#
# FSDP_DEVICE_DRY_RUN=1 prepares a bundle that runs without a GPU, to test
# this script, run.sh and table.py (test/CUDA/device-check.test): the
# programs for the CPU runtime, the CPU kernel test in place of the CUDA
# one, PyTorch on the CPU, and the small model in place of Llama-3.2-1B.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
out=${2:-$build/device-bundle}
bin=$build/bin
batch=${FSDP_DEVICE_BATCH:-4}
big=$src/test/device/llama-3.2-1b.json big_seq=2048 target=(--target cuda --no-mpi)
kernel_test=fsdp-runtime-kernel-test-cuda device=cuda
collectives=fsdp-runtime-collectives-program-cuda
if [[ ${FSDP_DEVICE_DRY_RUN:-0} == 1 ]]; then
  big=$src/test/device/llama-3.2-1b-small.json big_seq=128 target=()
  kernel_test=fsdp-runtime-kernel-test device=cpu batch=2
  collectives=fsdp-runtime-collectives-program
fi

if [[ ! -x $bin/$kernel_test ]]; then
  echo "error: $bin/$kernel_test is missing: this build" \
    "has no CUDA runtime (configure with the CUDA toolkit on PATH)" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out"/{bin,ref,graphs,configs,scripts}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp "$src"/test/device/{run.sh,hf_step.py,bench_torch.py,table.py} \
  "$src"/test/Runtime/{check_kernels.py,compare_backends.py} \
  "$src"/test/E2E/{reference.py,checks.py,compare_dumps.py,compare_losses.py} \
  "$out/scripts/"
cp "$src"/test/device/llama-3.2-1b-small.json "$out/configs/"
cp "$big" "$out/configs/llama-3.2-1b.json"
echo "$batch" >"$out/configs/batch"
echo "$big_seq" >"$out/configs/seq"
echo "$device" >"$out/configs/device"

echo "== kernels: the CUDA test program and the CPU results"
cp "$bin/$kernel_test" "$out/bin/fsdp-runtime-kernel-test-cuda"
cp "$bin/$collectives" "$out/bin/fsdp-runtime-collectives-program-cuda"
"$bin/fsdp-runtime-kernel-test" "$out/ref/kernels" >/dev/null
"$bin/fsdp-runtime-kernel-test" --grad "$out/ref/grad" >/dev/null

# compile NAME CONFIG BATCH OPTIMIZER [PRECISION]: graphs/NAME.json and
# bin/NAME (CUDA); PRECISION bf16 compiles with mp_policy bf16/f32, train
# with f32 (AdamW with a clip that clips, 4 steps on the CPU runtime in
# ref/NAME.log instead of a dump), offload as train with offload_policy.
compile() {
  local name=$1 config=$2 batch=$3 optimizer=$4 precision=${5:-f32}
  local graph=$out/graphs/$name.json args=()
  "$bin/fsdp-graphgen" "$config" --batch "$batch" --seq "${SEQ:-$big_seq}" \
    -o "$graph" >/dev/null
  if [[ $precision == bf16 ]]; then
    echo '{"mp_policy": {"param_dtype": "bf16", "reduce_dtype": "fp32",
           "output_dtype": "bf16"}}' >"$work/mp.json"
    args=(--parallel "$work/mp.json")
  fi
  local passes="fsdp-build-train-step{optimizer=$optimizer lr=1e-4}"
  if [[ $precision == offload-gpu ]]; then
    args=(--offload-optimizer=gpu)
    precision=offload
  fi
  if [[ $precision == offload || $precision == train ]]; then
    local policy=
    [[ $precision == offload ]] && policy=', "offload_policy": {}'
    echo '{"mp_policy": {"param_dtype": "fp32", "reduce_dtype": "fp32",
           "output_dtype": "fp32"}'"$policy}" >"$work/$precision.json"
    args+=(--parallel "$work/$precision.json")
    passes="fsdp-build-train-step{optimizer=$optimizer lr=1e-3 max-grad-norm=0.5}"
  fi
  "$bin/fsdp-compile" "$graph" "${args[@]}" --passes="$passes" \
    "${target[@]}" --report-json "$out/ref/$name.report.json" -o "$out/bin/$name"
  if [[ $config == *small* ]]; then
    # The same step on the CPU runtime, dumped.
    "$bin/fsdp-compile" "$graph" "${args[@]}" --passes="$passes" \
      -o "$work/$name-cpu"
    if [[ $precision == offload || $precision == train ]]; then
      "$work/$name-cpu" --steps 4 >"$out/ref/$name.log"
    else
      "$work/$name-cpu" --steps 1 --quiet --dump-dir "$out/ref/$name.dump"
    fi
  fi
}

echo "== programs"
SEQ=128 compile small-f32 "$src/test/device/llama-3.2-1b-small.json" 2 none
SEQ=128 compile small-bf16 "$src/test/device/llama-3.2-1b-small.json" 2 none bf16
SEQ=128 compile small-adamw "$src/test/device/llama-3.2-1b-small.json" 2 adamw train
SEQ=128 compile small-offload "$src/test/device/llama-3.2-1b-small.json" 2 adamw offload
SEQ=128 compile small-offload-gpu "$src/test/device/llama-3.2-1b-small.json" 2 adamw offload-gpu
compile llama1b-grad "$out/configs/llama-3.2-1b.json" 1 none bf16
compile llama1b-train "$out/configs/llama-3.2-1b.json" "$batch" adamw bf16

# The programs travel gzipped (each carries every kernel's cubin, about 8
# MiB, a quarter of that compressed); run.sh unpacks them.
gzip -f "$out"/bin/*

size=$(du -sm "$out" | cut -f1)
echo "== $out: ${size} MiB"
if ((size > 60)); then
  echo "error: the bundle is ${size} MiB; the device machine takes 64 MiB" >&2
  exit 1
fi
