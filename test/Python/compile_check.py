"""Compiles GRAPH with fsdp_mlir.compile and runs it with fsdp_mlir.run, and
checks both against what fsdp-compile made with the same options: TOOL.cpp
(--emit-source), TOOL.json (--report-json) and TOOL.log (the program's
output for --steps 2). Prints what it checked; exits 1 at the first
difference.

    %fsdp_python compile_check.py GRAPH --tool TOOL --work DIR
        [--tp N] [--sp] [--parallel JSON] [--passes PIPELINE] [--dict]

`--parallel` is the parallel.json object as text (compile gets it as a
dict); `--dict` passes the graph as the dict GRAPH holds, as `export()`
returns it. The run dumps every tensor after its second step to DIR/dump, which
the test compares bit for bit with the tool's program's dump.
"""

import argparse
import json
import os
import re
import sys

import fsdp_mlir

STEP = re.compile(r"^step (\d+) loss (\S+)", re.M)


def fail(message):
    print("FAIL " + message)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("graph")
    parser.add_argument("--tool", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tp", type=int)
    parser.add_argument("--sp", action="store_true")
    parser.add_argument("--parallel", type=json.loads)
    parser.add_argument("--passes")
    parser.add_argument("--dict", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)

    graph = args.graph
    if args.dict:
        with open(args.graph) as f:
            graph = json.load(f)
    compiled = fsdp_mlir.compile(
        graph, parallel=args.parallel, passes=args.passes, tp=args.tp,
        sequence_parallel=True if args.sp else None,
        source=os.path.join(args.work, "program.cpp"),
        output=os.path.join(args.work, "program"))
    print(f"world size {compiled.world_size}")
    # The C++ and the executable are built without torch.
    print(f"torch imported: {'torch' in sys.modules}")

    with open(args.tool + ".cpp") as f:
        tool_source = f.read()
    with open(compiled.source) as f:
        if f.read() != tool_source:
            fail("the C++ differs from fsdp-compile's")
    print("source: same as fsdp-compile's")

    with open(args.tool + ".json") as f:
        tool_reports = json.load(f)
    ours = {"plan": compiled.plan, "communication": compiled.communication,
            "memory": compiled.memory}
    for name in ("plan", "communication", "memory"):
        if ours[name] != tool_reports[name]:
            fail(f"the {name} report differs from fsdp-compile's")
    if set(tool_reports) != set(ours):
        fail(f"fsdp-compile's report has {sorted(tool_reports)}")
    print("reports: same as fsdp-compile --report-json's")

    mesh = compiled.plan["mesh"]
    print(f"plan: mesh dp_shard {mesh['dp_shard']} tp {mesh['tp']}, "
          f"{mesh['ranks']} ranks")
    for entry in compiled.plan["entries"]:
        if entry["entry"].endswith("q_proj"):
            print(f"plan: {entry['entry']} {entry['style']}, "
                  f"{entry['modules']} modules")
    groups = sorted({f"{c['kind']} {c['group']}"
                     for c in compiled.communication["collectives"]})
    print("communication: " + ", ".join(groups))
    memory = compiled.memory
    print(f"memory: estimated peak {memory['estimated_peak']} bytes, "
          f"largest gathered unit {memory['largest_gathered_unit']} bytes")
    if not memory["estimated_peak"] >= memory["parameters"] > 0:
        fail("the estimated peak is not above the parameters")
    # The memory plan: its arena holds at least the bytes live at once, and
    # the estimate is the arguments, the arena and the peak outside it.
    plan = memory["memory_plan"]
    if not plan or not 0 < plan["live_peak"] <= plan["arena"]:
        fail(f"memory plan {plan}")
    if memory["estimated_peak"] != (
            memory["parameters"] + memory["optimizer_state"] +
            memory["inputs"] + plan["arena"] + plan["outside_peak"]):
        fail(f"the estimated peak is not the arguments, the arena and the "
             f"peak outside it: {memory}")

    result = fsdp_mlir.run(compiled, args=(
        "--steps", 2, "--dump-dir", os.path.join(args.work, "dump"),
        "--dump-step", 1))
    losses = STEP.findall(result.stdout)
    with open(args.tool + ".log") as f:
        tool_losses = STEP.findall(f.read())
    if len(losses) != 2 or losses != tool_losses:
        fail(f"losses {losses}, fsdp-compile's program's {tool_losses}")
    print("losses: " + ", ".join(f"step {k} loss {v}" for k, v in losses) +
          ": same")


if __name__ == "__main__":
    main()
