# Compares the static memory report (fsdp-compile --report) with the peak the
# runtime measured (`memory: current C bytes, peak P bytes` of --report).
#
# Usage: /usr/bin/python3 mem_check.py STATIC.txt RUNTIME.txt [--rtol 0.1]

import argparse
import re
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("static")
    parser.add_argument("runtime")
    parser.add_argument("--rtol", type=float, default=0.1)
    args = parser.parse_args()
    with open(args.static) as f:
        estimate = int(re.search(r"^estimated peak\s+(\d+)", f.read(),
                                 re.M).group(1))
    with open(args.runtime) as f:
        measured = int(re.search(r"peak (\d+) bytes", f.read()).group(1))
    ratio = estimate / measured
    print(f"estimated peak {estimate} bytes, measured {measured} bytes, "
          f"ratio {ratio:.3f}")
    if abs(ratio - 1) > args.rtol:
        print(f"FAIL off by more than {args.rtol:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
