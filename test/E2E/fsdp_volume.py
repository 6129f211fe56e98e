# Checks an FSDP training step's communication report (the `communication`
# member of fsdp-compile --report-json) against the FSDP volume of
# performance-anchors.md section 7.3, per unit (a decoder layer, or the
# root: everything else), over N = dp_shard ranks, with p = param_dtype
# bytes and g = reduce_dtype bytes:
#   forward:  one all-gather per unit, sending Psi_u·p·(N-1)/N;
#   backward: one all-gather per resharded unit (reshard_after_forward: None
#             = every layer but the last, true = every layer, false = none;
#             never the root), and one reduce-scatter per unit, sending
#             Psi_u·g·(N-1)/N;
#   plus the all-reduces of the token count and the summed loss over the
#   data-parallel ranks (4 bytes each).
# With every unit resharded this is 3·Psi·(N-1)/N bytes when p = g (ZeRO-3),
# without resharding 2·Psi·(N-1)/N.
#
# Usage: /usr/bin/python3 fsdp_volume.py REPORT.json --graph GRAPH.json
#            --ranks N --reshard none|true|false [--param-bytes 4]
#            [--reduce-bytes 4] [--replicas 1]

import argparse
import json
import re
import sys

import checks

LAYER = re.compile(r"^(.*\.(layers|h)\.[0-9]+)\.")


def units_of(graph):
    """{unit: parameter count}, layers first in index order, then root."""
    units = {}
    for p in graph["parameters"]:
        m = LAYER.match(p["name"])
        unit = m.group(1) if m else ""
        n = 1
        for d in p["shape"]:
            n *= d
        units[unit] = units.get(unit, 0) + n
    return units


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("report")
    parser.add_argument("--graph", required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--reshard", required=True,
                        choices=["none", "true", "false"])
    parser.add_argument("--param-bytes", type=int, default=4)
    parser.add_argument("--reduce-bytes", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    with open(args.graph) as f:
        units = units_of(json.load(f))
    n = args.ranks
    layers = [u for u in units if u]
    last = max(layers, key=lambda u: int(u.rsplit(".", 1)[1])) if layers \
        else None
    resharded = [u for u in layers
                 if args.reshard == "true" or
                 (args.reshard == "none" and u != last)]
    psi = sum(units.values())
    ag_calls = len(units) + len(resharded)
    ag_bytes = sum(units[u] * args.param_bytes * (n - 1) // n
                   for u in list(units) + resharded)
    rs_calls = len(units)
    rs_bytes = sum(units[u] * args.reduce_bytes * (n - 1) // n for u in units)
    want = {"all_gather": (ag_calls, ag_bytes),
            "reduce_scatter": (rs_calls, rs_bytes)}
    got = checks.collectives(args.report)
    failed = False
    print(f"N={n} reshard={args.reshard}: {len(units)} units, "
          f"Psi={psi}, {len(resharded)} resharded")
    for kind, (calls, sent) in want.items():
        have = got.pop((kind, "{dp_shard}"), (0, 0))
        ok = have == (calls, sent)
        failed |= not ok
        print(f"  {kind:15} calls {have[0]:4} (formula {calls:4})  bytes "
              f"{have[1]:9} (formula {sent:9}) {'ok' if ok else 'FAIL'}")
    passes = (ag_bytes / args.param_bytes + rs_bytes / args.reduce_bytes) \
        / (psi * (n - 1) / n)
    print(f"  all-gather + reduce-scatter: {ag_bytes + rs_bytes} bytes, "
          f"{passes:.3f} x Psi·(N-1)/N elements")
    # The loss and its token count, summed over the data-parallel ranks.
    data = got.pop(("all_reduce", "{dp_replicate,dp_shard}"), (0, 0))
    if data[0] != 2:
        print(f"FAIL {data[0]} data-parallel all-reduces, expected 2")
        failed = True
    if args.replicas > 1:
        # HSDP: each unit's gradient shard all-reduced across replicas.
        hsdp = got.pop(("all_reduce", "{dp_replicate}"), (0, 0))
        if hsdp[0] != len(units):
            print(f"FAIL {hsdp[0]} all-reduces across replicas, expected "
                  f"{len(units)}")
            failed = True
    for (kind, group), (calls, _) in got.items():
        print(f"FAIL unexpected {calls} {kind} over {group}")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
