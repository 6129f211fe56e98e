# Checks that the blocks of sharded parameters that the ranks of a 2x2
# (dp, tp) mesh dumped tile the whole tensors a 1-rank run dumped, bit for
# bit: rank r has mesh coordinates (r // 2, r % 2).
#
# Usage: /usr/bin/python3 check_blocks.py BLOCKS_DIR WHOLE_DIR

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def load(directory, name):
    manifest = reference.read_manifest(directory)
    return reference.load_tensor(directory, name, *manifest[name])


def main():
    blocks, whole = sys.argv[1], sys.argv[2]
    ranks = [os.path.join(blocks, f"rank{r}") for r in range(4)]
    w = torch.cat([torch.cat([load(ranks[dp * 2 + tp], "w") for tp in (0, 1)],
                             dim=1) for dp in (0, 1)], dim=0)
    # v's columns are split over (dp, tp), dp major: block index = rank.
    v = torch.cat([load(ranks[r], "v") for r in range(4)], dim=1)
    ok = True
    for name, mine in (("w", w), ("v", v)):
        full = load(os.path.join(whole, "rank0"), name)
        same = mine.shape == full.shape and torch.equal(mine, full)
        print(f"{name} {tuple(mine.shape)} {'equal' if same else 'DIFFERENT'}")
        ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
