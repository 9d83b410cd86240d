"""Run one command and record its wall time and rusage, from a small process.

Input: `python -I -S benchmarks/launch.py RESULT.json COMMAND ARG...`.
Output: the command runs with this process's stdin, stdout and stderr; RESULT.json gets
{"wall_s", "user_s", "sys_s", "maxrss_kib", "status"}; the exit status is the command's.
Rule: the command is started with fork + exec from this small interpreter (standard library
only, no site), never straight from the benchmark runner: Linux carries the high-water RSS
of the address space a process had before exec into its ru_maxrss, and a child spawned with
vfork from a 100 MB runner would report at least 100 MB. Here that floor is this
interpreter's few megabytes. Wall time runs from just before fork to wait4's return.
"""

import json
import os
import sys
import time


def main() -> int:
    result, args = sys.argv[1], sys.argv[2:]
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: become the command
        try:
            os.execvp(args[0], args)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    record = {
        "wall_s": wall,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "maxrss_kib": usage.ru_maxrss,
        "status": code,
    }
    with open(result, "w") as fh:
        json.dump(record, fh)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
