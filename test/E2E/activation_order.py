"""Checks that memory reports (fsdp-compile --report) have strictly growing
"activations and temporaries, peak": prints the values and yes or no.

    activation_order.py SMALLEST.txt ... LARGEST.txt
"""

import re
import sys


def main():
    values = [int(re.search(r"^activations and temporaries, peak\s+(\d+)",
                            open(path).read(), re.M).group(1))
              for path in sys.argv[1:]]
    ordered = all(a < b for a, b in zip(values, values[1:]))
    print("activations and temporaries: " +
          " < ".join(str(v) for v in values) +
          (": yes" if ordered else ": NO"))
    return 0 if ordered else 1


if __name__ == "__main__":
    sys.exit(main())
