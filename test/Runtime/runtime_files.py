#!/usr/bin/env python3
"""Files for the host runtime tests (needs numpy; check-loss needs torch).

  runtime_files.py drop IN.safetensors NAME OUT.safetensors
      copies a safetensors file without tensor NAME (parsing it independently
      of the runtime: 8-byte length, JSON header, data)
  runtime_files.py tokens OUT.bin COUNT HIGH
      writes COUNT little-endian int32 tokens in [0, HIGH)
  runtime_files.py check-loss DUMPDIR
      recomputes embedding -> linear -> mean cross-entropy of
      program-basics.cpp from a --dump-dir and compares with its loss
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"f32": np.float32, "i32": np.int32, "i64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    return header, data


def drop(src, name, dst):
    header, data = read_safetensors(src)
    meta = header.pop("__metadata__", None)
    assert name in header, name
    del header[name]
    out = {} if meta is None else {"__metadata__": meta}
    blobs, offset = [], 0
    for key, entry in header.items():
        begin, end = entry["data_offsets"]
        blobs.append(data[begin:end])
        out[key] = dict(entry, data_offsets=[offset, offset + end - begin])
        offset += end - begin
    text = json.dumps(out).encode()
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def tokens(dst, count, high):
    rng = np.random.default_rng(0)
    rng.integers(0, high, int(count), dtype=np.int32).tofile(dst)


def load_dump(rank_dir):
    tensors = {}
    for line in open(f"{rank_dir}/manifest.txt"):
        name, dtype, dims = line.split()
        shape = () if dims == "scalar" else tuple(int(d) for d in dims.split("x"))
        tensors[name] = np.fromfile(f"{rank_dir}/{name}.bin",
                                    dtype=DTYPES[dtype]).reshape(shape)
    return tensors


def check_loss(dump):
    import torch
    t = {k: torch.from_numpy(v.copy()) for k, v in load_dump(f"{dump}/rank0").items()}
    h = t["model.embed_tokens.weight"].double()[t["input_ids"]]
    logits = h @ t["lm_head.weight"].double().T + t["lm_head.bias"].double()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             t["labels"].reshape(-1))
    assert torch.allclose(logits.float(), t["logits"], rtol=1e-5, atol=1e-5)
    err = abs(loss.item() - t["loss"].item())
    print("loss matches" if err <= 1e-5 * max(1, abs(loss.item())) else
          f"loss MISMATCH: runtime {t['loss'].item()} torch {loss.item()}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "drop":
        drop(*sys.argv[2:5])
    elif cmd == "tokens":
        tokens(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "check-loss":
        check_loss(sys.argv[2])
    else:
        sys.exit(f"unknown command {cmd}")
