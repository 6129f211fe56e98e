"""The PyTorch side of train_bench.py: a Hugging Face model built from a
config (random weights), trained STEPS steps on random tokens with
torch.optim.AdamW (lr 1e-3, weight decay 0.01) in eager mode, printing
`step <k> loss <v> time <ms> ms` like a compiled program. --dtype bf16
runs the forward and backward under torch.autocast("cpu", torch.bfloat16)
with f32 parameters and optimizer state (our bf16 param_dtype with f32
masters).

    python torch_train_step.py CONFIG.json --batch 4 --seq 256 --steps 6
        [--dtype f32|bf16] [--threads 1]
"""

import argparse
import contextlib
import time

import torch
import transformers


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(args.config)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                  weight_decay=0.01)
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16)
                if args.dtype == "bf16" else contextlib.nullcontext())
    for step in range(args.steps):
        start = time.perf_counter()
        with autocast:
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ms = (time.perf_counter() - start) * 1e3
        print(f"step {step} loss {loss.item():.6f} time {ms:.3f} ms",
              flush=True)


if __name__ == "__main__":
    main()
