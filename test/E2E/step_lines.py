"""Prints, for each generated program given, the lines of its step function
(fsdp_program_forward) and the number of layer functions:

    step lines <n1> <n2> ...
    layer functions <f1> <f2> ...
"""
import re
import sys


def measure(path):
    lines = open(path).read().splitlines()
    start = next(i for i, l in enumerate(lines)
                 if l.startswith("void fsdp_program_forward("))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    functions = sum(1 for l in lines
                    if re.match(r"static void fsdp_layer_function_\d+\(", l))
    return end - start + 1, functions


def main():
    measured = [measure(path) for path in sys.argv[1:]]
    print("step lines", *[m[0] for m in measured])
    print("layer functions", *[m[1] for m in measured])


if __name__ == "__main__":
    main()
