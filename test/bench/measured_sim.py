"""Sets the simulator's per-op prediction of the device check's Llama-3.2-1B
step (16 layers, hidden 2048, batch 4 x 2048, bf16 parameters with f32
masters, AdamW, one GPU) on docs/hardware/h200.json beside the kernel
times the CUDA target measured for the same step on an H200
(docs/device-check.md, 2026-12-04, second session, run 1, commit 15e827d:
the top rows of `--report`'s kernel profile, per step). Compile-only:
nothing runs here.

    /usr/bin/python3 test/bench/measured_sim.py --bin-dir build/bin

The measured attention used cuBLAS products (flash attention came after),
while the simulator times flash-style attention: those rows are not
comparable and are printed apart.
"""

import argparse
import collections
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# ms per step, H200, run 1 of 2026-12-04's second session (device-check.md:
# "Kernel time per step", and the rows the later rewrites cite).
MEASURED = {
    "matmul": 52.5, "linear": 34.2, "adamw": 9.9, "cross_entropy_grad": 7.7,
    "mul": 4.7, "add": 3.5, "cross_entropy": 3.5, "rms_norm": 2.1,
    "rms_norm_grad": 4.0,
}
MEASURED_ATTENTION = {"attention": 46.8, "attention_grad": 57.8}
MEASURED_STEP = 243.5
# The model prepare.sh compiles for the device check's 1B rows.
CONFIG = os.path.join(ROOT, "test", "device", "llama-3.2-1b.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--hardware",
                        default=os.path.join(ROOT, "docs", "hardware",
                                             "h200.json"))
    args = parser.parse_args()
    tool = lambda name: os.path.join(args.bin_dir, name)
    with tempfile.TemporaryDirectory() as tmp:
        graph = os.path.join(tmp, "g.json")
        subprocess.run([tool("fsdp-graphgen"), CONFIG, "--batch", "4",
                        "--seq", "2048", "-o", graph], check=True,
                       capture_output=True)
        mp = os.path.join(tmp, "mp.json")
        with open(mp, "w") as f:
            json.dump({"mp_policy": {"param_dtype": "bf16",
                                     "reduce_dtype": "fp32",
                                     "output_dtype": "bf16"}}, f)
        trace = os.path.join(tmp, "trace.json")
        out = subprocess.run(
            [tool("fsdp-compile"), graph, "--parallel", mp,
             "--passes=fsdp-build-train-step{optimizer=adamw lr=1e-4}",
             "--simulate", args.hardware, "--trace", trace, "--source-only",
             "--emit-source", os.path.join(tmp, "p.cpp")],
            check=True, capture_output=True, text=True).stdout
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    predicted = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e["name"].startswith("nn."):
            predicted[e["name"][3:]] += e["dur"] / 1000.0
    step = float(out.split("step time")[1].split()[0])
    print("| op | measured ms/step | predicted ms/step | measured / "
          "predicted |")
    print("|---|---|---|---|")
    for op, ms in MEASURED.items():
        print(f"| {op} | {ms:.1f} | {predicted[op]:.2f} | "
              f"{ms / predicted[op]:.2f} |")
    gemm = MEASURED["matmul"] + MEASURED["linear"]
    gemm_predicted = predicted["matmul"] + predicted["linear"]
    print(f"| GEMMs (matmul + linear) | {gemm:.1f} | {gemm_predicted:.2f} | "
          f"{gemm / gemm_predicted:.2f} |")
    print()
    print("not comparable (measured: cuBLAS products; predicted: flash):")
    for op, ms in MEASURED_ATTENTION.items():
        print(f"  {op}: measured {ms:.1f} ms, predicted {predicted[op]:.2f} "
              f"ms")
    print(f"step: measured {MEASURED_STEP} ms (product attention), "
          f"predicted {step:.1f} ms (flash)")


if __name__ == "__main__":
    main()
