# Writes a token file of documents for packed-sequence tests: documents of
# the given lengths, each ending with the end-of-document token, over and
# over (--repeats), as little-endian int32; the other tokens are drawn from
# the vocabulary without it, seeded.
#
# Usage: /usr/bin/python3 documents.py OUT.bin --lengths 3,1,20 --eos ID
#            --vocab V [--repeats 8]

import argparse
import random

import numpy as np


def write_documents(path, lengths, eos, vocab, repeats=8):
    rng = random.Random(0)
    others = [t for t in range(vocab) if t != eos]
    tokens = []
    for _ in range(repeats):
        for n in lengths:
            tokens += [rng.choice(others) for _ in range(n - 1)] + [eos]
    np.array(tokens, dtype="<i4").tofile(path)
    return len(tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--lengths", required=True)
    parser.add_argument("--eos", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    n = write_documents(args.out, [int(x) for x in args.lengths.split(",")],
                        args.eos, args.vocab, args.repeats)
    print(f"{args.out}: {n} tokens")


if __name__ == "__main__":
    main()
