# Compares an N-rank run's dump with a 1-rank run's: every tensor the 1-rank
# run dumped (parameters, gradients, outputs) must equal, within --rtol of
# its largest magnitude, the N-rank one: a tensor every rank holds whole is
# checked on every rank; a tensor the ranks hold in blocks along one dim (a
# tensor-parallel weight or its gradient) is joined in rank order first.
# A parameter the runtime lists in shards.txt with several groups (a
# strided split, e.g. GPT-2's fused c_attn) is joined group by group, and so
# are its gradient and updated values.
#
# Usage: /usr/bin/python3 compare_ranks.py ONE_DIR MANY_DIR --ranks N
#            [--rtol 1e-5] [--only PREFIX]

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def read_groups(rank_dir):
    """{parameter: groups} for strided splits, from the runtime's shards.txt."""
    path = os.path.join(rank_dir, "shards.txt")
    out = {}
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                words = line.split()
                if len(words) == 3 and int(words[2]) > 1:
                    out[words[0]] = int(words[2])
    return out


def base_name(name):
    """The parameter a dumped tensor belongs to (its gradient, its update)."""
    for prefix in ("grad.", "updated."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    for suffix in (".exp_avg", ".exp_avg_sq", ".momentum_buffer"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("one")
    parser.add_argument("many")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--only", default="")
    parser.add_argument("--norm", action="store_true",
                        help="check the norm-wise relative error "
                             "||a - b|| / ||b|| of each tensor instead of "
                             "max|a - b| / max|b|")
    args = parser.parse_args()
    one_dir = os.path.join(args.one, "rank0")
    one = reference.read_manifest(one_dir)
    dirs = [os.path.join(args.many, f"rank{r}") for r in range(args.ranks)]
    many = [reference.read_manifest(d) for d in dirs]
    groups = read_groups(dirs[0])
    worst, worst_name, split, failures = 0.0, "", 0, []
    worst_elementwise = 0.0
    for name, (dtype, shape) in one.items():
        if not name.startswith(args.only):
            continue
        full = reference.load_tensor(one_dir, name, dtype, shape) \
            .to(torch.float64)
        parts = [reference.load_tensor(d, name, *m[name]).to(torch.float64)
                 for d, m in zip(dirs, many)]
        if parts[0].shape == full.shape:
            candidates = parts
        else:
            dims = [d for d in range(full.dim())
                    if parts[0].shape[d] != full.shape[d]]
            if len(dims) != 1:
                failures.append(f"FAIL {name}: block {tuple(parts[0].shape)} "
                                f"of {tuple(full.shape)}")
                continue
            g = groups.get(base_name(name), 1)
            if g == 1:
                candidates = [torch.cat(parts, dims[0])]
            else:
                pieces = [p.chunk(g, dims[0]) for p in parts]
                candidates = [torch.cat([pieces[r][k]
                                         for k in range(g)
                                         for r in range(len(parts))],
                                        dims[0])]
            split += 1
        scale = full.abs().max().item() or 1.0
        norm = full.norm().item() or 1.0
        for c in candidates:
            e = (c - full).abs().max().item() / scale
            if args.norm:
                worst_elementwise = max(worst_elementwise, e)
                e = (c - full).norm().item() / norm
            if e > worst:
                worst, worst_name = e, name
            if not e <= args.rtol:
                failures.append(f"FAIL {name} {'norm_' if args.norm else ''}"
                                f"rel_err {e:.3e}")
    kind = "max_norm_rel_err" if args.norm else "max_rel_err"
    extra = (f", elementwise max_rel_err {worst_elementwise:.3e}"
             if args.norm else "")
    print(f"{len(one)} tensors ({split} joined from blocks) "
          f"{kind} {worst:.3e} ({worst_name}){extra}")
    for line in failures:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
