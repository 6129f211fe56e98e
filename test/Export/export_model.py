"""Exports a model built from CONFIG.json (random weights) with
fsdp_mlir.export and writes the graph.json: what a model export pipeline
does with its own model. The model is Hugging Face's for the config, or
what `--factory FILE.py:FUNC` builds from the config dict (a model that is
not from Hugging Face).

    TORCH_PYTHON export_model.py CONFIG.json -o GRAPH.json [--batch 2]
        [--seq 16] [--factory FILE.py:FUNC] [--set KEY=JSON ...]
        [--attention-mask] [--ignore-index N] [--packed]

`--set` overrides a config field (`--set resid_pdrop=0.1`);
`--attention-mask` also passes an all-ones `attention_mask` input.
"""

import argparse
import importlib.util
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import fsdp_mlir  # noqa: E402


def build_model(config_path, factory=None, overrides=()):
    """(model, vocabulary size, model name) for CONFIG.json."""
    with open(config_path) as f:
        config = json.load(f)
    for item in overrides:
        key, value = item.split("=", 1)
        config[key] = json.loads(value)
    torch.manual_seed(0)
    if factory:
        path, func = factory.rsplit(":", 1)
        spec = importlib.util.spec_from_file_location("factory", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = getattr(module, func)(config)
        return model, config["vocab"], type(model).__name__
    import transformers
    hf = transformers.AutoConfig.for_model(**config)
    model = transformers.AutoModelForCausalLM.from_config(hf)
    return model, hf.vocab_size, hf.architectures[0]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--factory")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--attention-mask", action="store_true")
    p.add_argument("--ignore-index", type=int, default=-100)
    p.add_argument("--packed", action="store_true")
    args = p.parse_args()
    model, vocab, name = build_model(args.config, args.factory, args.set)
    ids = torch.randint(0, vocab, (args.batch, args.seq))
    inputs = {"input_ids": ids,
              "position_ids": torch.arange(args.seq).repeat(args.batch, 1)}
    if args.attention_mask:
        inputs["attention_mask"] = torch.ones_like(ids)
    try:
        graph = fsdp_mlir.export(model, inputs,
                                 ignore_index=args.ignore_index,
                                 model_name=name, packed=args.packed)
    except fsdp_mlir.ExportError as e:
        sys.exit(f"error: {args.config}: {e}")
    with open(args.output, "w") as f:
        json.dump(graph, f, indent=1)
    print(f"{len(graph['nodes'])} nodes, "
          f"{len(graph['parameters'])} parameters")


if __name__ == "__main__":
    main()
