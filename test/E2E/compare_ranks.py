# Compares an N-rank run's dump with a 1-rank run's: every tensor the 1-rank
# run dumped (parameters, gradients, optimizer state, outputs) must equal,
# within --rtol of its largest magnitude, the N-rank one.
#
# Each rank's copy is compared with the block of the 1-rank tensor it should
# hold. The runtime describes split tensors in shards.txt (`<name> <dim>
# <groups> <axis,...>`, axes major first; a gradient, update or moment of a
# parameter is split like the parameter) and the mesh in mesh.txt, so blocks
# over several axes, several dims and strided groups (GPT-2's fused c_attn)
# are all placed exactly; a group count of -2 is context parallelism's
# load-balanced sequence split (chunks i and 2n-1-i of 2n on rank i of n),
# -2k the same over k rounds.
# A tensor shards.txt does not describe is compared
# whole on every rank, or, if the ranks hold blocks along one dim, joined in
# rank order.
#
# With --replicas-bitwise, the ranks that hold the same block of an updated
# parameter or optimizer moment (every rank, for a replicated one) must hold
# bit-identical copies: replicas that drift apart are a wrong result even
# when each is close to the 1-rank value.
#
# Usage: /usr/bin/python3 compare_ranks.py ONE_DIR MANY_DIR --ranks N
#            [--rtol 1e-5] [--only PREFIX] [--skip P1,P2] [--norm]
#            [--replicas-bitwise]

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def read_splits(rank_dir):
    """{tensor: {dim: (groups, [axis, ...], inner)}} from the runtime's
    shards.txt; the last `inner` axes split the block the others leave."""
    path = os.path.join(rank_dir, "shards.txt")
    out = {}
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                words = line.split()
                if len(words) in (4, 5):
                    out.setdefault(words[0], {})[int(words[1])] = (
                        int(words[2]), words[3].split(","),
                        int(words[4]) if len(words) == 5 else 0)
    return out


def read_mesh(rank_dir):
    """[(axis, size)] in mesh order, from mesh.txt."""
    path = os.path.join(rank_dir, "mesh.txt")
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [(w[0], int(w[1])) for w in map(str.split, f) if len(w) == 2]


def base_name(name):
    """The parameter a dumped tensor belongs to (its gradient, its update)."""
    for prefix in ("grad.", "updated."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    for suffix in (".exp_avg", ".exp_avg_sq", ".momentum_buffer"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name


def coords_of(rank, mesh):
    """{axis: coordinate} of a rank (row-major, last axis fastest)."""
    coords = {}
    for axis, size in reversed(mesh):
        coords[axis] = rank % size
        rank //= size
    return coords


def expected_block(full, split, coords, sizes, shape):
    """The block of `full` a rank at `coords` holds under `split`. Per dim,
    the outer axes cut each of the dim's groups into pieces (the rank keeps
    its piece of every group; a plain split that does not divide pads the
    last pieces); the inner axes cut that outer block into
    blocks of the local size, the last ones ending in zero padding."""
    block = full
    for dim, (groups, axes, inner) in sorted(split.items()):
        def level(names):
            parts, index = 1, 0
            for axis in names:
                parts *= sizes[axis]
                index = index * sizes[axis] + coords[axis]
            return parts, index
        outer_axes = axes[:len(axes) - inner]
        parts, index = level(outer_axes)
        whole = block.shape[dim]
        if groups <= -2 and groups % 2 == 0:
            # Context parallelism's load-balanced sequence: of 2·parts
            # chunks a round (-groups/2 rounds), chunks index and
            # 2·parts-1-index of each.
            rounds = -groups // 2
            chunk = whole // (2 * parts * rounds)
            block = torch.cat(
                [block.narrow(dim, (m * 2 * parts + j) * chunk, chunk)
                 for m in range(rounds)
                 for j in (index, 2 * parts - 1 - index)], dim)
            continue
        if groups == 1 and not inner and shape[dim] * parts > whole:
            # A one-level FSDP split written before inner levels existed.
            inner, parts, index = len(axes), 1, 0
        group = whole // groups
        piece = group // parts
        if groups == 1 and group % parts:
            # A vocabulary tp does not divide: the last blocks end in zeros.
            piece = -(-group // parts)
            pad = list(block.shape)
            pad[dim] = piece * parts - whole
            block = torch.cat([block, block.new_zeros(pad)], dim)
            group = piece * parts
        block = torch.cat([block.narrow(dim, g * group + index * piece, piece)
                           for g in range(groups)], dim)
        if inner:
            parts, index = level(axes[len(axes) - inner:])
            local = shape[dim]
            if local * parts > block.shape[dim]:
                pad = list(block.shape)
                pad[dim] = local * parts - block.shape[dim]
                block = torch.cat([block, block.new_zeros(pad)], dim)
            block = block.narrow(dim, index * local, local)
    return block


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("one")
    parser.add_argument("many")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--only", default="")
    parser.add_argument("--norm", action="store_true",
                        help="check the norm-wise relative error "
                             "||a - b|| / ||b|| of each tensor instead of "
                             "max|a - b| / max|b|")
    parser.add_argument("--skip", default="",
                        help="comma-separated name prefixes not compared")
    parser.add_argument("--replicas-bitwise", action="store_true",
                        help="ranks holding the same block of an updated "
                             "tensor must hold identical bits")
    args = parser.parse_args()
    one_dir = os.path.join(args.one, "rank0")
    one = reference.read_manifest(one_dir)
    dirs = [os.path.join(args.many, f"rank{r}") for r in range(args.ranks)]
    many = [reference.read_manifest(d) for d in dirs]
    splits = read_splits(dirs[0])
    mesh = read_mesh(dirs[0])
    sizes = dict(mesh)
    worst, worst_name, split_count, failures = 0.0, "", 0, []
    worst_elementwise = 0.0
    replicas_checked = 0
    compared = 0
    for name, (dtype, shape) in one.items():
        if not name.startswith(args.only) or any(
                name.startswith(p) for p in args.skip.split(",") if p):
            continue
        compared += 1
        full = reference.load_tensor(one_dir, name, dtype, shape) \
            .to(torch.float64)
        parts = [reference.load_tensor(d, name, *m[name]).to(torch.float64)
                 for d, m in zip(dirs, many)]
        split = splits.get(name) or splits.get(base_name(name))
        if split and mesh:
            pairs = [(part, expected_block(full, split, coords_of(r, mesh),
                                           sizes, part.shape))
                     for r, part in enumerate(parts)]
            split_count += 1
        elif parts[0].shape == full.shape:
            pairs = [(part, full) for part in parts]
        else:
            dims = [d for d in range(full.dim())
                    if parts[0].shape[d] != full.shape[d]]
            if len(dims) != 1:
                failures.append(f"FAIL {name}: block {tuple(parts[0].shape)} "
                                f"of {tuple(full.shape)}")
                continue
            pairs = [(torch.cat(parts, dims[0]), full)]
            split_count += 1
        if args.replicas_bitwise and name.startswith("updated.") and \
                (split or parts[0].shape == full.shape):
            axes = [a for _, axes, _ in (split or {}).values() for a in axes]
            holders = {}
            for r, part in enumerate(parts):
                coords = coords_of(r, mesh) if mesh else {}
                key = tuple(coords.get(a, 0) for a in axes)
                holders.setdefault(key, []).append((r, part))
            for group in holders.values():
                r0, first = group[0]
                for r, part in group[1:]:
                    replicas_checked += 1
                    if not torch.equal(first, part):
                        failures.append(
                            f"FAIL {name}: replicas on ranks {r0} and {r} "
                            f"differ by {(first - part).abs().max().item():.3e}")
        if any(a.shape != b.shape for a, b in pairs):
            failures.append(f"FAIL {name}: block {tuple(pairs[0][0].shape)} "
                            f"does not fit {tuple(full.shape)}")
            continue
        scale = full.abs().max().item() or 1.0
        e = max((a - b).abs().max().item() for a, b in pairs) / scale
        if args.norm:
            worst_elementwise = max(worst_elementwise, e)
            # Each element counts once however many ranks hold it.
            held = sum(a.numel() for a, _ in pairs) / full.numel()
            diff = sum(((a - b) ** 2).sum().item() for a, b in pairs)
            e = math.sqrt(diff / held) / (full.norm().item() or 1.0)
        if e > worst:
            worst, worst_name = e, name
        if not e <= args.rtol:
            failures.append(f"FAIL {name} {'norm_' if args.norm else ''}"
                            f"rel_err {e:.3e}")
    kind = "max_norm_rel_err" if args.norm else "max_rel_err"
    extra = (f", elementwise max_rel_err {worst_elementwise:.3e}"
             if args.norm else "")
    print(f"{compared} tensors ({split_count} joined from blocks) "
          f"{kind} {worst:.3e} ({worst_name}){extra}" +
          (f", {replicas_checked} replica pairs bitwise equal"
           if args.replicas_bitwise else ""))
    for line in failures:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
