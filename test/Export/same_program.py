"""Whether two generated programs make the same runtime calls, up to value
names and the order of independent calls: the multisets of call lines with
every SSA name (vN) and string literal normalized. With --rtol R, a line
left over on each side pairs up when the two differ only in numbers with a
fraction, each within R of the other (frequencies transformers computes in
float32 against ones computed in float64). The memory plan's table depends
on the calls' order, so it is compared as the sorted sizes it plans, and
the arena's size is left out."""
import argparse
import collections
import re
import sys

PLAN = re.compile(r'(static const int64_t fsdp_memory_plan\[\d+\]) = \{(.*)\};')
ARENA = re.compile(r'(fsdp_prog_memory_plan\(v\d+, )\d+,')
NUMBER = re.compile(r'\b\d+\.\d+(?:e[-+]?\d+)?\b')

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("a")
p.add_argument("b")
p.add_argument("--rtol", type=float)
args = p.parse_args()


def calls(path):
    out = collections.Counter()
    for line in open(path):
        plan = PLAN.match(line)
        if plan:
            values = [int(v) for v in plan.group(2).split(",")]
            line = plan.group(1) + str(sorted(values[0::2]))
        line = ARENA.sub(r'\1#,', line)
        line = re.sub(r'"[^"]*"', '""', line.strip())
        line = re.sub(r'\bv\d+\b', 'v', line)
        out[line] += 1
    return out


def close(x, y):
    if NUMBER.sub("#", x) != NUMBER.sub("#", y):
        return False
    return all(abs(float(u) - float(w)) <= args.rtol * abs(float(w))
               for u, w in zip(NUMBER.findall(x), NUMBER.findall(y)))


a, b = calls(args.a), calls(args.b)
only_a, only_b = a - b, b - a
if args.rtol is not None:
    for x in list(only_a.elements()):
        match = next((y for y in only_b.elements() if close(x, y)), None)
        if match is not None:
            only_a[x] -= 1
            only_b[match] -= 1
    only_a, only_b = +only_a, +only_b
diff = only_a + only_b
print(f"{sum(a.values())} lines, {sum(diff.values())} differ")
for l, n in list(diff.items())[:10]:
    print(n, l[:300])
sys.exit(1 if diff else 0)
