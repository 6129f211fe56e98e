"""Whether two generated programs make the same runtime calls, up to value
names and the order of independent calls: the multisets of call lines with
every SSA name (vN) and string literal normalized."""
import re, sys, collections
def calls(path):
    out = collections.Counter()
    for line in open(path):
        line = re.sub(r'"[^"]*"', '""', line.strip())
        line = re.sub(r'\bv\d+\b', 'v', line)
        out[line] += 1
    return out
a, b = calls(sys.argv[1]), calls(sys.argv[2])
diff = (a - b) + (b - a)
print(f"{sum(a.values())} lines, {sum(diff.values())} differ")
for l, n in list(diff.items())[:10]: print(n, l)
sys.exit(1 if diff else 0)
