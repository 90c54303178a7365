"""MLflow tracking: the store, runs, sweep parents, stale runs. The only layer importing MLflow.

A task opens its run with :func:`open_run`; the returned :class:`TrackedRun` owns everything the
run writes.
"""

from graphssl.tracking.session import (
    DEFAULT_STORE_WAIT_S,
    Launch,
    RunIdentity,
    TrackedRun,
    open_run,
)

__all__ = ["DEFAULT_STORE_WAIT_S", "Launch", "RunIdentity", "TrackedRun", "open_run"]
