"""Compares two dumps (--dump-dir) of programs on the same mesh, tensor by
tensor and rank by rank: each must agree within --rtol of the first's
largest magnitude (max |a - b| / max |a|), or with --norm of its norm
(||a - b|| / ||a||). Prints the largest difference and the tensor it is
in; exits 1 above --rtol or when the dumps hold different tensors.

    compare_dumps.py A_DIR B_DIR [--rtol 1e-6] [--norm] [--skip NAME,...]
"""

import argparse
import os
import sys

import numpy as np

import reference


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rtol", type=float, default=1e-6)
    parser.add_argument("--norm", action="store_true")
    parser.add_argument("--skip", default="")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    ranks = sorted(d for d in os.listdir(args.a) if d.startswith("rank"))
    if ranks != sorted(d for d in os.listdir(args.b) if d.startswith("rank")):
        print("FAIL: the dumps have different ranks")
        return 1
    worst, where, count = 0.0, "", 0
    for rank in ranks:
        da, db = os.path.join(args.a, rank), os.path.join(args.b, rank)
        ma, mb = reference.read_manifest(da), reference.read_manifest(db)
        if ma != mb:
            print(f"FAIL: {rank} holds different tensors")
            return 1
        for name, (dtype, shape) in ma.items():
            if name in skip or dtype not in reference.FLOAT_DTYPES:
                continue
            a = np.asarray(reference.load_tensor(da, name, dtype, shape),
                           dtype=np.float64)
            b = np.asarray(reference.load_tensor(db, name, dtype, shape),
                           dtype=np.float64)
            if args.norm:
                diff = float(np.linalg.norm(a - b)) / max(
                    float(np.linalg.norm(a)), 1e-30)
            else:
                diff = float(np.max(np.abs(a - b))) / max(
                    float(np.max(np.abs(a))), 1e-30)
            count += 1
            if diff > worst:
                worst, where = diff, f"{rank}/{name}"
    kind = "max_norm_rel_diff" if args.norm else "max_rel_diff"
    print(f"{count} tensors, {kind} {worst:.2e}" +
          (f" ({where})" if where else ""))
    if worst > args.rtol:
        print(f"FAIL above {args.rtol:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
