"""Runs a command, passes its stdout through, and checks that it used less
than LIMIT seconds of CPU (user + system): a compile-time bound that a
loaded machine does not turn into a flaky wall-clock test. Prints the CPU
and wall seconds.

    cpu_time.py LIMIT COMMAND...
"""

import resource
import subprocess
import sys
import time


def main():
    limit, cmd = float(sys.argv[1]), sys.argv[2:]
    start = time.monotonic()
    result = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        print(f"FAIL: exit {result.returncode}")
        return 1
    verdict = "under" if cpu < limit else "FAIL: over"
    print(f"cpu time {cpu:.2f} s ({verdict} {limit:g} s), wall {wall:.2f} s")
    return 0 if cpu < limit else 1


if __name__ == "__main__":
    sys.exit(main())
