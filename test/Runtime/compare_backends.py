# Compares the files of two fsdp-runtime-kernel-test runs (the same cases on
# two backends, e.g. fsdp-runtime-kernel-test-cuda against the CPU build):
# the operands must be identical (both runs draw the same inputs), and each
# result's max relative error, max |a - b| over max |b|, must be within the
# tolerance of its dtype: 1e-5 for f32, 1e-2 for bf16 and f16, exact for
# indices. Prints one line per case and a summary; exits 1 on any failure
# or when the two runs do not have the same cases.
#
# Usage: python3 compare_backends.py TEST_DIR REFERENCE_DIR

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_kernels import TOLERANCE, read_manifest  # noqa: E402


def rel(a, b):
    finite = b[b.isfinite()].abs()
    scale = finite.max().item() if finite.numel() else 0.0
    diff = (a - b).abs()
    # A NaN or infinity in the same place on both sides is agreement.
    same = (a == b) | (a.isnan() & b.isnan())
    diff[same] = 0
    worst = diff.max().item() if diff.numel() else 0.0
    # A NaN where the reference has a number is the worst error there is.
    if worst != worst:
        return float("inf")
    return worst / scale if scale else worst


def identical(a, b):
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def main():
    test, reference = read_manifest(sys.argv[1]), read_manifest(sys.argv[2])
    if [c["name"] for c in test] != [c["name"] for c in reference]:
        print("FAIL the two runs have different cases")
        return 1
    failed = 0
    worst_overall = 0.0
    for a, b in zip(test, reference):
        bad_input = [n for n in b["in"]
                     if not identical(a["in"][n].double(), b["in"][n].double())]
        ok = not bad_input
        worst, worst_name = -1.0, ""
        for name, value in b["out"].items():
            dtype = b["dtypes"]["out." + name]
            e = rel(a["out"][name].double(), value.double())
            ok &= e <= TOLERANCE.get(dtype, 0.0)
            if e > worst:
                worst, worst_name = e, name
        failed += not ok
        worst_overall = max(worst_overall, worst)
        note = f" inputs differ: {','.join(bad_input)}" if bad_input else ""
        print(f"{a['name']} {a['op']} max_rel_err {worst:.2e} ({worst_name})"
              f"{note} {'OK' if ok else 'FAIL'}")
    print(f"{len(test)} cases, {failed} failed, worst {worst_overall:.2e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
