"""Compares two fsdp-simulate tables (fsdp-compile --simulate): prints
whether the first predicts less exposed communication and a shorter step
than the second, with both numbers.

    sim_compare.py FIRST.txt SECOND.txt
"""

import re
import sys


def read(path):
    text = open(path).read()
    return {what: float(re.search("^" + what + r"\s+(\S+) ms", text,
                                  re.M).group(1))
            for what in ("step time", "exposed communication")}


def main():
    a, b = read(sys.argv[1]), read(sys.argv[2])
    for what in ("exposed communication", "step time"):
        verdict = "less" if a[what] < b[what] else "NOT less"
        print(f"{what}: {a[what]:.3f} ms vs {b[what]:.3f} ms: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
