"""Times fsdp_mlir.export + fsdp-compile for a Hugging Face config built on
the meta device (no weights materialized; float32 parameters, the masters
the optimizer keeps): model construction, export, and the compile to a
per-rank executable (or C++ only with --source-only).

    TORCH_PYTHON export_meta.py CONFIG.json --bin BUILD/bin --out DIR
        [--batch 8] [--seq 8192] [--tp 8] [--world-size 64] [--source-only]

Prints one line per phase and writes DIR/graph.json and DIR/program.cpp.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import fsdp_mlir  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config")
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--world-size", type=int, default=64)
    p.add_argument("--source-only", action="store_true")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    start = time.perf_counter()
    config = transformers.AutoConfig.from_pretrained(args.config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, torch_dtype=torch.float32)
    built = time.perf_counter()
    ids = torch.zeros(args.batch, args.seq, dtype=torch.long, device="meta")
    positions = torch.arange(args.seq, device="meta").repeat(args.batch, 1)
    graph = fsdp_mlir.export(model, {"input_ids": ids,
                                     "position_ids": positions},
                             model_name=config.architectures[0])
    exported = time.perf_counter()
    path = os.path.join(args.out, "graph.json")
    with open(path, "w") as f:
        json.dump(graph, f, indent=1)
    cmd = [os.path.join(args.bin, "fsdp-compile"), path, "--tp",
           str(args.tp), "--sequence-parallel", "--world-size",
           str(args.world_size), "--passes=fsdp-build-train-step",
           "--emit-source", os.path.join(args.out, "program.cpp"),
           "-o", os.path.join(args.out, "program")]
    if args.source_only:
        cmd.append("--source-only")
    compile_start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    compiled = time.perf_counter()
    if result.returncode:
        sys.exit(f"error: fsdp-compile failed:\n{result.stderr[-2000:]}")
    params = sum(torch.Size(p["shape"]).numel() for p in graph["parameters"])
    print(f"model: {config.architectures[0]}, {params / 1e9:.2f}B "
          f"parameters on the meta device, batch {args.batch} x "
          f"{args.seq} tokens")
    print(f"build (meta): {built - start:.2f} s")
    print(f"export: {exported - built:.2f} s, {len(graph['nodes'])} nodes")
    what = "C++" if args.source_only else "executable"
    print(f"compile (tp {args.tp}, sp, {args.world_size} ranks, "
          f"{what}): {compiled - compile_start:.2f} s")
    print(f"export + compile: {exported - built + compiled - compile_start:.2f} s")


if __name__ == "__main__":
    main()
