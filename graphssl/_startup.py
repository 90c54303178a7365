"""What graphssl's console entries set before anything imports torch.

OpenMP runtimes read their settings once, when the library loads (torch's intra-op pool is GNU
OpenMP on Linux). libgomp's default lets a thread that finished its share of a parallel region
spin for a while before it sleeps, so the next region starts without a wake-up. On a machine
whose cores are shared (other jobs of a sweep, other users) the spinning threads hold cores that
other work needs: on 2 cores at load 2.5–3, the default run's training, diagnostics and probes
took 1.4–1.6× the CPU time of one thread with spinning threads, and the same CPU time as one
thread with sleeping ones (``benchmarks/bench_threads.py``). ``OMP_WAIT_POLICY=PASSIVE`` makes
idle threads sleep at once.

Importing this module sets it unless the environment already chose a policy, so a user can
still ask for spinning (``OMP_WAIT_POLICY=ACTIVE``) on a dedicated machine. Spawned ranks and
launcher workers inherit it through the environment.
"""

from __future__ import annotations

import os

#: the OpenMP wait policy graphssl's commands use unless the environment sets one
WAIT_POLICY = "PASSIVE"

os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)
