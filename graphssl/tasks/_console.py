"""What the console scripts show: their version, actionable warnings only, and one line on Ctrl-C.

Every entry point of :mod:`graphssl.cli` goes through :func:`console_entry`, which

- answers ``--version`` (``importlib.metadata``) before Hydra parses anything;
- hides the library noise a user cannot act on (:func:`quiet_libraries`): a deprecation of
  ``torch.jit.script`` inside PyG, two beta notices of PyTorch's sparse CSR tensors raised from
  PyG, MLflow's schema-migration lines, PyG's ``Processing... Done!``, matplotlib's font cache,
  gensim's progress lines and the colour codes of Optuna's log lines off a terminal;
- turns the remaining warnings into one-line log records (``UserWarning: ...``), so they reach
  the Hydra job log as well as the terminal;
- ends Ctrl-C with one line naming the MLflow run(s) it marked ``KILLED`` and exit status 130;
  Ctrl-C pressed again meanwhile is ignored.

The filters match a message and the module that raises it, never a whole category.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = [
    "ENV_WARNINGS",
    "INTERRUPTED_EXIT",
    "NOISE_LOGGERS",
    "NOISE_WARNINGS",
    "console_entry",
    "graphssl_version",
    "log_to_files",
    "moved_key",
    "quiet_libraries",
]

#: config keys that moved, as ``old prefix -> new prefix`` (the training-time callbacks' settings
#: live with the callbacks in ``conf/callbacks/``)
MOVED_KEYS = {
    "eval.select": "callbacks.selection",
    "eval.diag_every": "callbacks.monitor.every",
    "eval.diag_subset": "callbacks.monitor.subset",
    "eval.collapse": "callbacks.monitor.thresholds",
}


def moved_key(override: str) -> str | None:
    """One paragraph when ``override`` sets a key that moved (``eval.select.every=5``), else
    ``None``."""
    key, sep, value = override.lstrip("+~").partition("=")
    for old, new in MOVED_KEYS.items():
        if key == old or key.startswith(f"{old}."):
            renamed = new + key[len(old) :]
            return (
                f"{key} has moved to {renamed} (the settings of the training-time callbacks "
                f"live in conf/callbacks/); expected {renamed}{sep}{value}"
            )
    return None


log = logging.getLogger("graphssl")

#: exit status of a run ended by Ctrl-C (128 + SIGINT), as a shell reports it
INTERRUPTED_EXIT = 130
#: exit status of a command ended by SIGTERM (128 + SIGTERM)
TERMINATED_EXIT = 143

#: (category, message regex, module regex) of warnings no graphssl user can act on
NOISE_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    # PyG's pooling modules still script a helper at import time
    (FutureWarning, r"`torch\.jit\.script` is deprecated", r"torch\.jit"),
    # PyG builds CSR adjacency matrices; PyTorch announces the beta status of those tensors
    (UserWarning, r"Sparse invariant checks are implicitly disabled", r"torch_geometric\.utils"),
    (UserWarning, r"Sparse CSR tensor support is in beta state", r"torch_geometric\.utils"),
)

#: the same filters as ``PYTHONWARNINGS`` entries (literal message prefix, exact module), for the
#: processes a task starts (EMIR's spawned workers, launcher workers): they inherit the variable
_PYG_SPARSE = "UserWarning:torch_geometric.utils.sparse"
ENV_WARNINGS = (
    "ignore:`torch.jit.script` is deprecated:FutureWarning:torch.jit._script",
    f"ignore:Sparse invariant checks are implicitly disabled:{_PYG_SPARSE}",
    f"ignore:Sparse CSR tensor support is in beta state:{_PYG_SPARSE}",
)

#: library loggers whose INFO lines are progress chatter (schema migration, font cache, ...)
NOISE_LOGGERS = (
    "alembic",
    "mlflow.store.db.utils",
    "gensim",
    "matplotlib.font_manager",
    "optuna",
)

_pyg_patched = False


def graphssl_version() -> str:
    """The installed version of graphssl (``0+unknown`` when it is not installed)."""
    from graphssl.package import distribution_version

    return distribution_version()


def _format_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    return f"{category.__name__}: {message}"


def quiet_libraries() -> None:
    """Install the warning filters and library log levels; idempotent and cheap.

    Called by every console script before Hydra runs and again inside each task (a job of a
    multirun may run in a fresh worker process). Once PyG is imported, its dataset processing
    reports through the ``graphssl`` logger at INFO instead of printing to stderr.
    """
    for category, message, module in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    inherited = [w for w in os.environ.get("PYTHONWARNINGS", "").split(",") if w]
    os.environ["PYTHONWARNINGS"] = ",".join(
        [*inherited, *(w for w in ENV_WARNINGS if w not in inherited)]
    )
    for name in NOISE_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.formatwarning = _format_warning  # type: ignore[assignment]
    logging.captureWarnings(True)
    if not sys.stderr.isatty():
        os.environ.setdefault("NO_COLOR", "1")  # colorlog (Optuna's lines) writes no ANSI codes
    _patch_pyg_processing()


def _patch_pyg_processing() -> None:
    """Route PyG's ``Processing...``/``Done!`` prints to one INFO record of our logger."""
    global _pyg_patched
    if _pyg_patched or "torch_geometric" not in sys.modules:
        return
    from torch_geometric.data import dataset as pyg_dataset

    original = pyg_dataset.Dataset._process

    def _process(self: Any) -> None:
        fresh = not pyg_dataset.files_exist(self.processed_paths)
        verbose, self.log = self.log, False
        try:
            if fresh and verbose:
                log.info(
                    "processing %s into %s (first use)", type(self).__name__, self.processed_dir
                )
            original(self)
        finally:
            self.log = verbose

    pyg_dataset.Dataset._process = _process  # type: ignore[method-assign]
    _pyg_patched = True


def log_to_files(text: str, logger: logging.Logger = log) -> None:
    """Write ``text`` (one INFO record) to the file handlers of the logging tree only.

    The summary table is printed on stdout as it is; this puts the same text in the Hydra job
    log (``<run dir>/<job>.log``) without printing it twice on the terminal.
    """
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, text, (), None)
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
                handler.handle(record)
        current = current.parent if current.propagate else None


def _killed_runs(err: BaseException) -> list[str]:
    runs = getattr(err, "graphssl_killed_runs", None)
    return [str(r) for r in runs] if isinstance(runs, list) else []


def interrupted_line(err: BaseException) -> str:
    """The one line ending Ctrl-C or SIGTERM: what was marked ``KILLED``.

    In the launching process of a sweep, the sweep's parent run is closed ``KILLED`` here with
    the counts of what ran (:func:`graphssl.tracking.sweep.stop_active_sweep`); its children
    still running in this process, or left by workers that are gone, are marked too.
    """
    from graphssl.tracking.sweep import stop_active_sweep

    why = str(err) or "Ctrl-C"
    runs = _killed_runs(err)
    # a second Ctrl-C (or SIGTERM) while the parent is being closed would raise inside the
    # store calls and print their tracebacks: both are ignored until it is closed
    held: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        sweep = stop_active_sweep(why)
    except Exception as failure:  # the store is away: say so in the same line
        sweep = f"the sweep parent could not be closed ({type(failure).__name__}: {failure})"
    finally:
        for s, handler in held.items():
            signal.signal(s, handler)
    if sweep is not None:
        return f"interrupted ({why}); {sweep}"
    where = f"run {', '.join(runs)} marked KILLED" if runs else "no run was started"
    return f"interrupted; {where}"


def _on_first_ctrl_c(signum: int, frame: FrameType | None) -> None:
    # a KeyboardInterrupt always ends the command (every handler on its way closes what it
    # opened and raises it again): from here Ctrl-C pressed again is ignored, so it cannot land
    # in that cleanup (a finally block, a weakref callback) and print its traceback there
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _redeliver_swallowed_ctrl_c(unraisable: Any) -> None:
    """``sys.unraisablehook``: a Ctrl-C that landed in a weakref callback, a ``__del__`` or a
    garbage-collector finalizer is delivered again.

    Python prints and drops an exception raised there, so the first Ctrl-C would be lost (with
    a traceback on stderr) and, SIGINT being ignored from then on, the command would run on
    with Ctrl-C dead. Instead the handler is put back and a helper thread sends SIGINT again
    a moment later, once this hook and the callback have returned (a signal raised here would
    run the handler inside this hook, where it would be dropped too); should it land in
    another such callback, this happens again.
    """
    if (
        type(unraisable.exc_value) is KeyboardInterrupt
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):
        signal.signal(signal.SIGINT, _on_first_ctrl_c)
        resend = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT))
        resend.daemon = True
        resend.start()
        return
    _previous_unraisablehook(unraisable)


_previous_unraisablehook = sys.unraisablehook


def _interrupt_once() -> None:
    """Ctrl-C raises KeyboardInterrupt once per command (main thread, Python's default handler
    only: a shell's background job that ignores SIGINT keeps ignoring it), and again where
    Python dropped it (:func:`_redeliver_swallowed_ctrl_c`)."""
    global _previous_unraisablehook
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_first_ctrl_c)
        if sys.unraisablehook is not _redeliver_swallowed_ctrl_c:
            _previous_unraisablehook = sys.unraisablehook
            sys.unraisablehook = _redeliver_swallowed_ctrl_c


def console_entry(prog: str, hydra_main: Callable[[], Any]) -> Callable[[], Any]:
    """Wrap a ``@hydra.main`` function as the console script ``prog``."""

    def entry() -> Any:
        if any(arg in ("--version", "-V") for arg in sys.argv[1:]):
            print(f"{prog} {graphssl_version()}")
            raise SystemExit(0)
        for arg in sys.argv[1:]:
            if (message := moved_key(arg)) is not None:
                print(f"{prog}: error: {message}", file=sys.stderr)
                raise SystemExit(2)
        quiet_libraries()
        _interrupt_once()
        try:
            return hydra_main()
        except KeyboardInterrupt as err:
            # from here the command only closes its runs, reports and exits: Ctrl-C pressed
            # again (or a repeated SIGTERM) would interrupt the close or the interpreter's exit
            # and end the process by the signal, so both stay ignored until it has ended
            if threading.current_thread() is threading.main_thread():
                for s in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(s, signal.SIG_IGN)
            print(f"{prog}: {interrupted_line(err)}", file=sys.stderr)
            sigterm = "SIGTERM" in str(err)
            raise SystemExit(TERMINATED_EXIT if sigterm else INTERRUPTED_EXIT) from None

    entry.__name__ = getattr(hydra_main, "__name__", prog)
    entry.__doc__ = hydra_main.__doc__
    return entry
