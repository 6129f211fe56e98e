# What the check scripts share, without torch: the verdict on an error
# bound (compare_losses.py, eval_check.py, lr_schedule_check.py,
# train_check.py) and reading a communication report's collectives
# (cp_volume.py, fsdp_volume.py, tp_volume.py).

import json


def verdict(name, err, bound):
    """Prints `FAIL NAME ERR > BOUND` unless `err` is within `bound` (a NaN
    is not); returns the exit status, 1 then and 0 otherwise."""
    if not err <= bound:
        print(f"FAIL {name} {err:.2e} > {bound:g}")
        return 1
    return 0


def collectives(path, table=False):
    """{(kind, group): (calls, bytes)} of a report, in its order: the
    `communication` member of fsdp-compile --report-json or, with `table`,
    the collective table of the runtime's report text. Both have one row a
    kind and group; rows that repeat one would be added up."""
    if table:
        with open(path) as f:
            lines = f.read().splitlines()
        start = next(i for i, line in enumerate(lines)
                     if line.startswith("collective"))
        rows = []
        for line in lines[start + 1:]:
            words = line.split()
            if len(words) != 4 or not words[2].isdigit():
                break
            rows.append((words[0], words[1], int(words[2]), int(words[3])))
    else:
        with open(path) as f:
            rows = [(r["kind"], r["group"], r["calls"], r["bytes"])
                    for r in json.load(f)["communication"]["collectives"]]
    out = {}
    for kind, group, calls, sent in rows:
        had_calls, had_sent = out.get((kind, group), (0, 0))
        out[(kind, group)] = (had_calls + calls, had_sent + sent)
    return out
