"""Another workload on the machine: N processes that spin for BURST_MS every PERIOD_MS, for
SECONDS (a neighbour's bursts, as other jobs, data loaders or agents on a shared host make).

    python tests/analyzers/cpu_hog.py BURST_MS PERIOD_MS SECONDS [N=4]
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time


def spin(burst_s: float, period_s: float, until: float) -> None:
    while time.time() < until:
        start = time.time()
        while time.time() - start < burst_s:
            pass
        time.sleep(max(0.0, period_s - burst_s))


if __name__ == "__main__":
    burst, period, seconds = (float(a) for a in sys.argv[1:4])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    until = time.time() + seconds
    procs = [mp.Process(target=spin, args=(burst / 1e3, period / 1e3, until)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
