"""Exports a Hugging Face model built from CONFIG.json (random weights)
with fsdp_mlir.export and writes the graph.json: what a model export
pipeline does with its own model.

    TORCH_PYTHON export_model.py CONFIG.json -o GRAPH.json [--batch 2] [--seq 16]
"""

import argparse
import json
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import fsdp_mlir  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    args = p.parse_args()
    config = transformers.AutoConfig.from_pretrained(args.config)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    positions = torch.arange(args.seq).repeat(args.batch, 1)
    try:
        graph = fsdp_mlir.export(model, {"input_ids": ids,
                                         "position_ids": positions},
                                 model_name=config.architectures[0])
    except fsdp_mlir.ExportError as e:
        sys.exit(f"error: {args.config}: {e}")
    with open(args.output, "w") as f:
        json.dump(graph, f, indent=1)
    print(f"{len(graph['nodes'])} nodes, "
          f"{len(graph['parameters'])} parameters")


if __name__ == "__main__":
    main()
