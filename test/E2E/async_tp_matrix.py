"""async-tp.test's model matrix: for each MODEL:TP, compiles the graph
DIR/MODEL.json with DIR/syncTP.json and DIR/asyncTP.json (optimizer none),
runs one step of each on TP ranks and compares the gradient dumps
(compare_dumps.py --norm --rtol 1e-6), printing one line per pair.
"""

import argparse
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("pairs", nargs="+")
    args = parser.parse_args()
    ok = True
    for pair in args.pairs:
        model, tp = pair.split(":")
        dumps = []
        for kind in ("sync", "async"):
            exe = os.path.join(args.dir, f"{model}-{kind}{tp}")
            subprocess.run(
                [os.path.join(args.bin_dir, "fsdp-compile"),
                 os.path.join(args.dir, model + ".json"), "--parallel",
                 os.path.join(args.dir, f"{kind}{tp}.json"), "--world-size",
                 tp, "--passes=fsdp-build-train-step{optimizer=none}", "-o",
                 exe], check=True, capture_output=True)
            dump = exe + ".d"
            subprocess.run(shlex.split(args.mpirun) +
                           ["-np", tp, exe, "--steps", "1", "--dump-dir",
                            dump], check=True, capture_output=True)
            dumps.append(dump)
        result = subprocess.run(
            [sys.executable, os.path.join(HERE, "compare_dumps.py"), *dumps,
             "--norm", "--rtol", "1e-6"], capture_output=True, text=True)
        ok &= result.returncode == 0
        print(f"{model} tp {tp}: " + result.stdout.strip().replace("\n", " "))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
