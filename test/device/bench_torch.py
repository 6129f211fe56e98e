# The PyTorch side of the device check's step-time comparison: the Hugging
# Face model of CONFIG.json on one GPU, trained the way PyTorch users train
# in bf16 (float32 parameters, torch.autocast bf16, SDPA attention,
# torch.optim.AdamW(fused=True)), eager or under torch.compile, on random
# tokens of the program's batch and sequence length. Times --steps steps
# after --warmup (compilation included in the warm-up), synchronizing before
# and after, and prints one JSON line: step_ms, tokens_per_s,
# max_memory_allocated, max_memory_reserved, loss.
#
# Usage: python3 bench_torch.py CONFIG.json --batch B --seq S
#            [--mode eager|compile] [--steps 10] [--warmup 3]

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
import transformers


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--mode", choices=["eager", "compile"],
                        default="eager")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    torch.manual_seed(0)
    with open(args.config) as f:
        config = transformers.AutoConfig.for_model(**json.load(f))
    config._attn_implementation = "sdpa"
    device = torch.device(args.device)
    with device:
        model = getattr(transformers, config.architectures[0])(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                  fused=device.type == "cuda")
    vocab = config.vocab_size
    tokens = torch.randint(0, vocab, (args.batch, args.seq + 1),
                           device=device)
    input_ids, labels = tokens[:, :-1], tokens[:, 1:]

    def train_step():
        with torch.autocast(device.type, torch.bfloat16):
            logits = model(input_ids=input_ids).logits
            loss = F.cross_entropy(logits.float().reshape(-1, vocab),
                                   labels.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    if args.mode == "compile":
        model = torch.compile(model)
    for _ in range(args.warmup):
        loss = train_step()
    synchronize = torch.cuda.synchronize if device.type == "cuda" else \
        (lambda: None)
    synchronize()

    start = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step()
    synchronize()
    step_s = (time.perf_counter() - start) / args.steps
    cuda = device.type == "cuda"
    memory = torch.cuda.max_memory_allocated() if cuda else 0
    reserved = torch.cuda.max_memory_reserved() if cuda else 0
    print(json.dumps({
        "mode": args.mode, "step_ms": step_s * 1e3,
        "tokens_per_s": args.batch * args.seq / step_s,
        "max_memory_allocated": memory, "max_memory_reserved": reserved,
        "loss": loss.item()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
