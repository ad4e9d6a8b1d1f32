#!/usr/bin/env python3
"""CPU time of every thread of the processes running one executable.

    bench/thread_cpu.py EXE [LIMIT_S] &   # then start the run, e.g. mpirun ... EXE ...

Samples /proc/PID/task/TID/stat every 0.1 s for processes whose
/proc/PID/exe is EXE (an absolute path), until they have all exited (or
LIMIT_S, default 600, has passed), and prints per process its wall time and
the user+system CPU seconds of each thread that used at least 0.15 s, the
main thread first, then in creation order. CPU time does not count the time
a thread waits for a core, so on a busy machine it shows what a thread
costs where wall-clock figures move with the load: a thread that polls
while it waits has CPU close to its wall time (bench/README.md, "Two cores
against one"). The last sample before a process exits is what is printed,
so up to 0.1 s of each thread's end is missed.
"""
import os
import sys
import time


def main():
    if len(sys.argv) < 2 or not sys.argv[1].startswith("/"):
        sys.exit("usage: thread_cpu.py /ABSOLUTE/PATH/TO/EXE [LIMIT_S]")
    exe = sys.argv[1]
    limit = float(sys.argv[2]) if len(sys.argv) > 2 else 600.0
    hz = os.sysconf("SC_CLK_TCK")
    cpu, start, wall = {}, {}, {}
    seen = False
    deadline = time.time() + limit
    while time.time() < deadline:
        found = False
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{p}/exe") != exe:
                    continue
                found = True
                for t in os.listdir(f"/proc/{p}/task"):
                    s = open(f"/proc/{p}/task/{t}/stat").read()
                    f = s[s.rindex(")") + 2:].split()  # fields from 3 (state) on
                    cpu[(int(p), int(t))] = (int(f[11]) + int(f[12])) / hz  # utime, stime
                start.setdefault(int(p), time.time())
                wall[int(p)] = time.time() - start[int(p)]
            except (OSError, ValueError):
                pass  # exited between the listing and the read
        seen = seen or found
        if seen and not found:
            break
        time.sleep(0.1)
    for p in sorted(wall):
        th = sorted((t, c) for (q, t), c in cpu.items() if q == p)
        busy = " ".join(f"{c:.2f}" for t, c in th if c >= 0.15)
        print(f"pid {p}: wall {wall[p]:.2f} s, thread CPU s (main first, >= 0.15 s): {busy}")


if __name__ == "__main__":
    main()
