"""One thread budget per process, shared by torch and every native thread pool.

torch's intra-op pool (OpenMP), NumPy's and SciPy's OpenBLAS (separate libraries with separate
pools) and scikit-learn's OpenMP each start one thread per core by default. graphssl calls them
one after another from one Python thread, so they never need more threads than the budget at
once; but a pool left at the core count still competes with the others (its threads spin for a
while after each call) and ignores ``num_threads``: a job told to use one thread, next to other
jobs, would still run two-thread BLAS in its probes. :func:`apply_thread_budget` gives every
pool the same size, :func:`thread_budget` re-applies it around a stage that may have loaded new
libraries (e.g. SciPy imported lazily by a probe).

threadpoolctl can only resize libraries already loaded, so :func:`apply_thread_budget` also
sets the environment variables the BLAS and OpenMP runtimes read when they load later
(``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``) and loads NumPy's and
SciPy's BLAS first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["THREAD_ENV_VARS", "apply_thread_budget", "pool_sizes", "thread_budget"]

#: variables read by the OpenMP and BLAS runtimes when they are loaded
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _check(num_threads: Any) -> int:
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer or null, got {num_threads!r}")
    return num_threads


def _limit_loaded_pools(num_threads: int) -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=num_threads)  # every loaded BLAS and OpenMP pool, until changed


def apply_thread_budget(num_threads: int | None) -> int:
    """Give torch and every BLAS/OpenMP pool of this process ``num_threads`` threads
    (``None``: torch's current count, by default one per core). Returns the budget."""
    budget = torch.get_num_threads() if num_threads is None else _check(num_threads)
    torch.set_num_threads(budget)
    for name in THREAD_ENV_VARS:
        os.environ[name] = str(budget)
    import numpy  # noqa: F401  (loads NumPy's BLAS, so its pool is resized now)
    import scipy.linalg  # noqa: F401  (SciPy ships its own BLAS)

    _limit_loaded_pools(budget)
    return budget


@contextmanager
def thread_budget(num_threads: int | None = None) -> Iterator[int]:
    """Within the block, every loaded pool has ``num_threads`` threads (``None``: torch's
    count); the previous sizes come back afterwards. For a stage that may load libraries after
    :func:`apply_thread_budget` ran (probes, diagnostics)."""
    from threadpoolctl import threadpool_limits

    budget = torch.get_num_threads() if num_threads is None else _check(num_threads)
    with threadpool_limits(limits=budget):
        yield budget


def pool_sizes() -> dict[str, int]:
    """``{library file: threads}`` of every loaded BLAS/OpenMP pool, and torch's count."""
    from threadpoolctl import threadpool_info

    out = {str(i["filepath"]).rsplit("/", 1)[-1]: int(i["num_threads"]) for i in threadpool_info()}
    out["torch"] = torch.get_num_threads()
    return out
