"""Checks a Chrome/Perfetto trace from fsdp-simulate: valid JSON, the named
tracks (thread_name metadata) are exactly the arguments, each with spans
(complete events, "X"), and spans on one track never overlap (a stream
runs one thing at a time). Prints the tracks and their span counts.

    check_trace.py trace.json TRACK...
"""

import json
import sys
from collections import defaultdict


def main():
    path, expected = sys.argv[1], sys.argv[2:]
    with open(path) as f:
        trace = json.load(f)
    names = {}
    spans = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[e["tid"]] = e["args"]["name"]
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0, e
            spans[names[e["tid"]]].append((e["ts"], e["ts"] + e["dur"]))
    counts = {name: len(spans[name]) for name in names.values()}
    tracks = sorted(set(names.values()))
    print("tracks: " + ", ".join(tracks))
    if tracks != sorted(expected):
        print(f"FAIL: expected tracks {sorted(expected)}")
        return 1
    for name, intervals in spans.items():
        intervals.sort()
        for (_, end), (start, _) in zip(intervals, intervals[1:]):
            if start < end - 1e-6:
                print(f"FAIL: overlapping spans on {name}")
                return 1
        if not intervals:
            print(f"FAIL: no spans on {name}")
            return 1
    print("spans per track: " + ", ".join(
        f"{name} {counts[name]}" for name in tracks))
    print("no track runs two spans at once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
