# What the end-to-end drivers (tp_matrix.py, hf_load.py, ckpt_check.py,
# packed_hf.py) share: the model config they generate a graph from, their
# work directory, the tools' directory and how to launch ranks, and
# printing compare_ranks.py's verdict.

import os
import subprocess
import sys


def add_run_arguments(parser):
    """Adds CONFIG, --work, --bin and --mpirun to `parser`."""
    parser.add_argument("config")
    parser.add_argument("--work", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--mpirun", required=True)


def compare_ranks(label, one, many, ranks, rtol, skip):
    """Prints `label: ` and compare_ranks.py's verdict on the N-rank dump
    `many` against the 1-rank dump `one`; True on failure."""
    result = subprocess.run(
        [sys.executable,
         os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "compare_ranks.py"), one, many, "--ranks", str(ranks),
         "--rtol", str(rtol), "--skip", skip],
        capture_output=True, text=True)
    lines = (result.stdout + result.stderr).strip().splitlines()
    print(f"{label}: {lines[0] if lines else 'no output'}")
    for extra in lines[1:]:
        print(f"  {extra}")
    return result.returncode != 0
