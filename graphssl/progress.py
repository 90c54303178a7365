"""Progress of long stages: a bar on a terminal, a log line at least every 30 s off it.

Training prints an ``Epoch NNN`` line per epoch, but probes (a λ grid per split), extraction,
the untrained baseline and EMIR's pairs can each take minutes without one. A job whose output
goes to a file (a SLURM log, a joblib worker, ``nohup``) would look hung. :func:`stage` wraps
such a block:

- on a terminal, with a known ``total``, a tqdm bar that :meth:`Stage.advance` moves (cleared
  when the stage ends);
- otherwise a background thread logs ``<name>: <done>/<total> (<what>), <s> s`` every
  ``every`` seconds (default :data:`HEARTBEAT_S`) while the block runs, and one closing line
  when the stage took longer than that.

A stage shorter than ``every`` prints nothing off a terminal.

    with stage("probes", total=len(probes) * len(splits)) as st:
        for name, probe in probes.items():
            for split in splits:
                probe.evaluate(...)
                st.advance(what=name)
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["HEARTBEAT_S", "Stage", "on_terminal", "stage"]

log = logging.getLogger("graphssl.progress")

#: seconds between two log lines of a running stage off a terminal
HEARTBEAT_S = 30.0


def on_terminal() -> bool:
    """Whether stderr (where bars and log lines go) is an interactive terminal."""
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(callable(isatty) and isatty())
    except ValueError:  # a closed stream
        return False


class Stage:
    """A running stage: :meth:`advance` counts finished units of work (thread-safe)."""

    def __init__(self, name: str, total: int | None, bar: Any = None) -> None:
        self.name = name
        self.total = total
        self.done = 0
        self.what = ""
        self.started = time.monotonic()
        self._bar = bar
        self._lock = threading.Lock()

    def advance(self, n: int = 1, what: str | None = None) -> None:
        """``n`` more units done; ``what`` names the one in progress (shown in the line)."""
        with self._lock:
            self.done += n
            if what is not None:
                self.what = what
        if self._bar is not None:
            if what is not None:
                self._bar.set_postfix_str(what, refresh=False)
            self._bar.update(n)

    def line(self) -> str:
        """``<name>: <done>/<total> (<what>), <elapsed> s`` as logged off a terminal."""
        with self._lock:
            done, what = self.done, self.what
        count = f" {done}/{self.total}" if self.total is not None else ""
        detail = f" ({what})" if what else ""
        return f"{self.name}:{count}{detail}, {time.monotonic() - self.started:.0f} s"


@contextmanager
def stage(
    name: str, total: int | None = None, *, every: float | None = None, enabled: bool = True
) -> Iterator[Stage]:
    """Show the progress of the block (see the module docstring); yields its :class:`Stage`
    (which shows nothing when ``enabled`` is false)."""
    every = HEARTBEAT_S if every is None else float(every)
    if not enabled:
        yield Stage(name, total)
        return
    if on_terminal() and total is not None:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=name, leave=False)
        try:
            yield Stage(name, total, bar)
        finally:
            bar.close()
        return
    current = Stage(name, total)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            log.info("%s", current.line())

    thread = threading.Thread(target=beat, name=f"progress-{name}", daemon=True)
    thread.start()
    try:
        yield current
    finally:
        stop.set()
        thread.join()
        if time.monotonic() - current.started >= every:
            log.info("%s: done in %.0f s", name, time.monotonic() - current.started)
