"""Predicts, with fsdp-simulate, the published NeMo Automodel and torchtitan
configurations of ../shared/reference/performance-anchors.md (sections 2
and 6) and prints a markdown table beside the published tokens/s per GPU
and MFU (docs/simulator.md explains each gap). Compile-only: nothing runs.

    /usr/bin/python3 test/bench/published_sim.py --bin-dir build/bin
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
HW = os.path.join(ROOT, "docs", "hardware")

# name, model, GPUs, global batch per step, seq, parallel.json, microbatches
# (the graph's batch is one microbatch of the global batch),
# published tokens/s/GPU, published MFU (None: derived), our hardware
# files to predict on. The published activation checkpointing is applied
# (activation-checkpointing in the step) where the run used it.
CONFIGS = [
    ("torchtitan Llama3 8B, FSDP 8, lbs 2 (eager, selective AC)",
     "llama-3.1-8b", 8, 16, 8192, {"activation_checkpointing": "selective"},
     1, 5762, "33-39%",
     ["h100-sxm", "h100-grand-teton"]),
    ("torchtitan Llama3 8B, FSDP 128, lbs 2 (eager; selective AC assumed, "
     "as in its Table 1)",
     "llama-3.1-8b", 128, 256, 8192, {"activation_checkpointing": "selective"},
     1, 5605, None,
     ["h100-sxm", "h100-grand-teton"]),
    ("torchtitan Llama3 70B, FSDP 32 x TP 8 + SP, lbs 16 (bf16, compile, "
     "full AC)",
     "llama-3.1-70b", 256, 512, 8192,
     {"tp_size": 8, "sequence_parallel": True,
      "activation_checkpointing": True}, 1, 597.3, None,
     ["h100-sxm", "h100-grand-teton"]),
    ("Automodel Llama3 70B, FSDP 32 x CP 2, GBS 128, GA 2 "
     "(TE, compile, full AC)",
     "llama-3.1-70b", 64, 128, 8192,
     {"cp_size": 2, "activation_checkpointing": True,
      "defer_fsdp_grad_sync": False}, 2,
     866.77, "39.3%", ["h100-sxm"]),
] + [
    # torchtitan's Table 2: Llama3 8B on 8 GPUs, FSDP over dp_shard x cp,
    # local batch 1, full AC (compile and Float8, which we do not model).
    (f"torchtitan Llama3 8B, FSDP {8 // cp} x CP {cp}, {seq // 1024}K "
     "(compile, Float8, full AC)",
     "llama-3.1-8b", 8, 8 // cp, seq,
     {"cp_size": cp, "activation_checkpointing": True}, 1, tps, None,
     ["h100-grand-teton"])
    for cp, seq, tps in ((1, 32768, 3890), (2, 65536, 2540),
                         (4, 131072, 1071), (8, 262144, 548))
]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True,
                          text=True).stdout


def field(text, what):
    return re.search("^" + re.escape(what) + r"\s+(\S+)", text, re.M).group(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", required=True)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="published-sim-")
    print("| configuration | GPUs | hardware model | published tok/s/GPU "
          "| predicted tok/s/GPU | published MFU | predicted MFU "
          "| predicted exposed comm | our peak memory estimate |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, model, gpus, batch, seq, parallel, micro, tps, mfu,
         hardware) in CONFIGS:
        graph = os.path.join(tmp, f"{model}-{batch // micro}x{seq}.json")
        if not os.path.exists(graph):
            model_config = os.path.join(ROOT, "test", "models", model,
                                        "config.json")
            with open(model_config) as f:
                hf = json.load(f)
            if seq > hf["max_position_embeddings"]:
                # torchtitan trains past the config's context (262K).
                hf["max_position_embeddings"] = seq
                model_config = os.path.join(tmp, f"{model}-{seq}.json")
                with open(model_config, "w") as f:
                    json.dump(hf, f)
            run([os.path.join(args.bin_dir, "fsdp-graphgen"), model_config,
                 "--batch", str(batch // micro), "--seq", str(seq),
                 "-o", graph])
        config = os.path.join(tmp, "parallel.json")
        with open(config, "w") as f:
            json.dump(parallel, f)
        for hw in hardware:
            out = run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
                       "--parallel", config, "--world-size", str(gpus),
                       f"--passes=fsdp-build-train-step{{microbatches={micro}}}",
                       "--report", "--simulate",
                       os.path.join(HW, hw + ".json"), "--source-only",
                       "--emit-source", os.path.join(tmp, "p.cpp")])
            step = float(field(out, "step time"))
            exposed = float(field(out, "exposed communication"))
            peak = int(field(out, "estimated peak")) / 2**30
            # Unpublished MFU: the published tokens/s times the model FLOPs
            # per token (torchtitan's formula, as the simulator counts
            # them) over the bf16 dense peak.
            flops_per_token = float(field(out, "model FLOPs per rank")) / \
                float(field(out, "tokens per GPU per step"))
            published_mfu = mfu or \
                f"{tps * flops_per_token / 989.4e12:.1%} (derived)"
            print(f"| {name} | {gpus} | {hw} | {tps:,} "
                  f"| {float(field(out, 'tokens/s per GPU')):,.0f} "
                  f"| {published_mfu} "
                  f"| {field(out, 'MFU (vs bf16 dense peak)')} "
                  f"| {exposed / step:.0%} of {step / 1e3:.2f} s "
                  f"| {peak:.0f} GiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
