# Reads one line of the memory reports (fsdp-compile --report) of one
# model compiled several ways and prints each against the first; exits 1
# unless each is below the one before.
#
# Usage: /usr/bin/python3 cp_memory.py [--field NAME] LABEL=REPORT ...
#   --field: the report line (default "activations and temporaries, peak")

import argparse
import re
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--field", default="activations and temporaries, peak")
    parser.add_argument("reports", nargs="+", metavar="LABEL=REPORT")
    args = parser.parse_args()
    labels, values = [], []
    for item in args.reports:
        label, _, path = item.partition("=")
        with open(path) as f:
            found = re.search(rf"^{re.escape(args.field)}\s+(\d+)", f.read(),
                              re.M)
        if not found:
            print(f"FAIL: {path}: no line '{args.field}'")
            return 1
        labels.append(label)
        values.append(int(found.group(1)))
    parts = [f"{labels[0]} {values[0]}"]
    for label, value in zip(labels[1:], values[1:]):
        parts.append(f"{label} {value} ({value / values[0]:.2f} of "
                     f"{labels[0]})")
    print(f"{args.field}: " + ", ".join(parts))
    if any(b >= a for a, b in zip(values, values[1:])):
        print(f"FAIL: '{args.field}' does not fall in the order given")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
