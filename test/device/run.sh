#!/usr/bin/env bash
# The device check, on a GPU machine (nvcc, PyTorch with transformers; no
# MLIR, no MPI, no network needed), in the folder prepare.sh wrote on the
# build machine. Runs every check, then prints one table (table.py); each
# check's raw output stays in RESULTS. Exits 1 if a check failed.
#
#   bash run.sh [BUNDLE [RESULTS]]   (default build/device-bundle,
#                                     BUNDLE/results)
#
# PYTHON names the interpreter with torch and transformers (python3);
# FSDP_DEVICE_QUICK=1 skips torch.compile (the slowest part, ~2 minutes);
# FSDP_DEVICE_DEADLINE=SECONDS cuts every check's time limit so that the
# whole run ends within SECONDS (a check left no time does not run, and the
# table says so), for a device lease shorter than the checks' limits.
set -uo pipefail
bundle=$(cd "${1:-build/device-bundle}" && pwd)
results=${2:-$bundle/results}
py=${PYTHON:-python3}
scripts=$bundle/scripts
bin=$bundle/bin
# prepare.sh gzips the programs.
for f in "$bin"/*.gz; do
  if [[ -e $f ]]; then gzip -d -f "$f"; fi
done
batch=$(cat "$bundle/configs/batch")
seq=$(cat "$bundle/configs/seq")
device=$(cat "$bundle/configs/device")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$results"
mkdir -p "$results"

# The programs link libcublas.so.13 (the CUDA toolkit) and libnccl.so.2 (the
# toolkit's or PyTorch's wheel, whichever the machine has).
libs=$("$py" - <<'EOF'
import glob, os, site
roots = ["/usr/local/cuda/lib64", "/usr/local/cuda/lib",
         "/usr/local/cuda/targets/x86_64-linux/lib"] + site.getsitepackages()
found = []
for name in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
             "libnccl.so.2"):
    for root in roots:
        hits = glob.glob(os.path.join(root, name)) or \
            glob.glob(os.path.join(root, "nvidia", "*", "lib", name)) or \
            glob.glob(os.path.join(root, "nvidia", "*", "lib64", name))
        if hits:
            found.append(os.path.dirname(hits[0]))
            break
print(":".join(dict.fromkeys(found)))
EOF
)
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# check NAME SECONDS COMMAND...: output in RESULTS/NAME.txt, exit status in
# RESULTS/NAME.rc, wall seconds in RESULTS/NAME.seconds; a check past its
# time limit is killed (status 124).
deadline=$((SECONDS + ${FSDP_DEVICE_DEADLINE:-100000}))
check() {
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  ((limit > deadline - SECONDS)) && limit=$((deadline - SECONDS))
  if ((limit < 5)); then
    echo "== $name: skipped, past FSDP_DEVICE_DEADLINE" >&2
    return
  fi
  echo "== $name (limit ${limit} s)" >&2
  timeout "$limit" "$@" >"$results/$name.txt" 2>&1
  echo $? >"$results/$name.rc"
  echo $((SECONDS - start)) >"$results/$name.seconds"
}

# diagnose NAME COMMAND...: when check NAME crashed (not a time-out or a
# failed comparison: a signal or a CUDA error), reruns it under
# compute-sanitizer, if the machine has one, to name the kernel.
diagnose() {
  local name=$1 rc
  shift
  rc=$(cat "$results/$name.rc" 2>/dev/null) || return
  [[ $rc == 0 || $rc == 124 ]] && return
  local sanitizer
  sanitizer=$(command -v compute-sanitizer ||
    ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) || return
  check "$name-sanitizer" 120 "$sanitizer" --print-limit 10 "$@"
}

check gpu 30 nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader
check env 60 "$py" -c "import os, torch, transformers
print('torch', torch.__version__, 'transformers', transformers.__version__,
      'cuda', torch.version.cuda)
print('LD_LIBRARY_PATH', os.environ['LD_LIBRARY_PATH'])"
check libraries 30 ldd "$bin/llama1b-train"

# Kernels: the CUDA backend on the CPU build's inputs, against its outputs
# and against PyTorch (on the CPU, as the CPU tests check).
check kernels-run 120 "$bin/fsdp-runtime-kernel-test-cuda" "$work/kernels"
diagnose kernels-run "$bin/fsdp-runtime-kernel-test-cuda" "$work/kernels-s"
check kernels-vs-cpu 120 "$py" "$scripts/compare_backends.py" \
  "$work/kernels" "$bundle/ref/kernels"
check kernels-vs-torch 300 "$py" "$scripts/check_kernels.py" "$work/kernels"
check grad-kernels-run 120 "$bin/fsdp-runtime-kernel-test-cuda" --grad \
  "$work/grad"
diagnose grad-kernels-run "$bin/fsdp-runtime-kernel-test-cuda" --grad \
  "$work/grad-s"
check grad-kernels-vs-cpu 120 "$py" "$scripts/compare_backends.py" \
  "$work/grad" "$bundle/ref/grad"
# Attention through cuBLAS products alone (the default takes the flash
# kernels for the attention_flash cases), then through the exact per-row
# kernels.
for path in products exact; do
  check $path-kernels-run 120 env FSDP_RT_CUDA_ATTENTION=$path \
    "$bin/fsdp-runtime-kernel-test-cuda" "$work/$path"
  check $path-kernels-vs-cpu 120 "$py" "$scripts/compare_backends.py" \
    "$work/$path" "$bundle/ref/kernels"
  check $path-grad-kernels-run 120 env FSDP_RT_CUDA_ATTENTION=$path \
    "$bin/fsdp-runtime-kernel-test-cuda" --grad "$work/$path-grad"
  check $path-grad-kernels-vs-cpu 120 "$py" "$scripts/compare_backends.py" \
    "$work/$path-grad" "$bundle/ref/grad"
done

# Every collective over NCCL, each communicator of one rank.
check collectives 120 env FSDP_TEST_MESH=1x1 \
  "$bin/fsdp-runtime-collectives-program-cuda" --steps 1

# The small steps: the CUDA program against the same step on the CPU
# runtime, and against transformers (float64) on the GPU.
small=$bundle/configs/llama-3.2-1b-small.json
for v in f32 bf16; do
  check small-$v-run 120 "$bin/small-$v" --steps 1 --quiet \
    --dump-dir "$work/small-$v"
  diagnose small-$v-run "$bin/small-$v" --steps 1 --quiet
  tolerance=1e-5 yardstick=()
  [[ $v == bf16 ]] && tolerance=2e-2 yardstick=(--yardstick)
  check small-$v-vs-cpu 120 "$py" "$scripts/compare_dumps.py" \
    "$work/small-$v" "$bundle/ref/small-$v.dump" --rtol $tolerance
  check small-$v-vs-hf 300 "$py" "$scripts/hf_step.py" "$small" \
    "$work/small-$v" --device "$device" --label small-$v "${yardstick[@]}"
done

# CPU offload: 4 AdamW steps over pinned host memory, the optimizer on the
# host's cores (host functions on the stream) and, -gpu, as kernels reading
# the pinned memory, against the CPU runtime's losses; memory, host syncs
# and step times from --report.
for name in small-offload small-offload-gpu; do
  check $name-run 120 "$bin/$name" --steps 4 --report
  check $name-vs-cpu 60 "$py" "$scripts/compare_losses.py" \
    "$bundle/ref/$name.log" "$results/$name-run.txt" --rtol 1e-5
done

# The step recorded as a CUDA graph (--cuda-graph: step 0 runs as calls,
# step 1 is recorded, steps 1-3 replay it), with and without CPU offload,
# against the CPU runtime's losses: a replay that missed a per-step value
# (the step count of AdamW's bias corrections) or an update would differ
# from step 2 on.
for name in small-adamw small-offload; do
  for mode in calls graph; do
    flags=()
    [[ $mode == graph ]] && flags=(--cuda-graph)
    [[ $name == small-offload && $mode == calls ]] && continue
    check $name-$mode-run 120 "$bin/$name" --steps 4 --report "${flags[@]}"
    diagnose $name-$mode-run "$bin/$name" --steps 4 "${flags[@]}"
    check $name-$mode-vs-cpu 60 "$py" "$scripts/compare_losses.py" \
      "$bundle/ref/$name.log" "$results/$name-$mode-run.txt" --rtol 1e-5
  done
done

# Llama-3.2-1B, bf16 params and f32 masters: one step against
# transformers, then the training step's time, memory and host syncs.
big=$bundle/configs/llama-3.2-1b.json
check llama1b-grad-run 300 "$bin/llama1b-grad" --steps 1 --quiet \
  --dump-dir "$work/llama1b"
check llama1b-vs-hf 600 "$py" "$scripts/hf_step.py" "$big" "$work/llama1b" \
  --device "$device" --label llama1b --yardstick
rm -rf "$work/llama1b"
check llama1b-train 300 "$bin/llama1b-train" --steps 13 --log-every 4 \
  --report
# The same step recorded once as a CUDA graph and replayed.
check llama1b-train-graph 300 "$bin/llama1b-train" --steps 13 --log-every 4 \
  --report --cuda-graph
# The same step with attention through cuBLAS products, for comparison.
check llama1b-train-products 120 env FSDP_RT_CUDA_ATTENTION=products \
  "$bin/llama1b-train" --steps 9 --log-every 4 --report
check torch-eager 300 "$py" "$scripts/bench_torch.py" "$big" --batch "$batch" \
  --seq "$seq" --device "$device" --mode eager
if [[ ${FSDP_DEVICE_QUICK:-0} != 1 ]]; then
  check torch-compile 420 "$py" "$scripts/bench_torch.py" "$big" \
    --batch "$batch" --seq "$seq" --device "$device" --mode compile
fi

"$py" "$scripts/table.py" "$bundle" "$results"
