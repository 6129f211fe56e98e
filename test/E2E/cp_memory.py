# Reads `activations and temporaries, peak` from the memory reports
# (fsdp-compile --report) of one model at cp 1, 2, 4, ... and prints each
# against cp 1; exits 1 unless they fall as cp grows.
#
# Usage: /usr/bin/python3 cp_memory.py CP1.txt CP2.txt [CP4.txt ...]

import re
import sys


def main():
    peaks = []
    for path in sys.argv[1:]:
        with open(path) as f:
            peaks.append(int(re.search(
                r"^activations and temporaries, peak\s+(\d+)", f.read(),
                re.M).group(1)))
    parts = [f"cp 1 {peaks[0]}"]
    for i, peak in enumerate(peaks[1:], 1):
        parts.append(f"cp {2 ** i} {peak} ({peak / peaks[0]:.2f} of cp 1)")
    print("activations and temporaries, peak: " + ", ".join(parts))
    if any(b >= a for a, b in zip(peaks, peaks[1:])):
        print("FAIL: the activations do not fall with cp")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
