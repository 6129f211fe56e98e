# Compares the `step <k> loss <v>` lines of two program logs.
#
# Usage: /usr/bin/python3 compare_losses.py A.log B.log [--rtol 1e-5]
# Prints the largest relative difference; exits 1 above --rtol or when the
# logs have different step counts.

import argparse
import re
import sys

import checks

STEP = re.compile(r"^step (\d+) loss (\S+)")


def losses(path):
    with open(path) as f:
        return [float(m.group(2)) for m in map(STEP.match, f) if m]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rtol", type=float, default=1e-5)
    args = parser.parse_args()
    a, b = losses(args.a), losses(args.b)
    if not a or len(a) != len(b):
        print(f"FAIL {len(a)} and {len(b)} loss lines")
        return 1
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    print(f"{len(a)} steps max_rel_diff {worst:.2e}")
    return checks.verdict("max_rel_diff", worst, args.rtol)


if __name__ == "__main__":
    sys.exit(main())
