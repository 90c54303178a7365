"""The console layer: narrow noise filters, one-line warnings, log-file-only text, whole numbers."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from graphssl.tasks import _console
from graphssl.tasks.train import summary_table


def _warn(message: str, category: type[Warning], module: str) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        for cat, msg, mod in _console.NOISE_WARNINGS:
            warnings.filterwarnings("ignore", message=msg, category=cat, module=mod)
        warnings.warn_explicit(message, category, f"{module.replace('.', '/')}.py", 1, module)
    return [str(w.message) for w in caught]


def test_known_noise_is_filtered_by_message_and_module() -> None:
    jit = "`torch.jit.script` is deprecated. Please switch to `torch.compile` or `torch.export`."
    sparse = "Sparse CSR tensor support is in beta state. If you miss a functionality ..."
    assert _warn(jit, FutureWarning, "torch.jit._script") == []
    assert _warn(sparse, UserWarning, "torch_geometric.utils.sparse") == []
    # the same text from our own code, or another warning of that module, still shows
    assert _warn(sparse, UserWarning, "graphssl.evaluation.runner") == [sparse]
    assert _warn("an edge_index is out of range", UserWarning, "torch_geometric.utils.sparse")


def test_warnings_become_one_line() -> None:
    text = _console._format_warning(UserWarning("grid too small"), UserWarning, "/x/y.py", 3, "s")
    assert text == "UserWarning: grid too small"


def test_library_loggers_are_quieted() -> None:
    _console.quiet_libraries()
    for name in _console.NOISE_LOGGERS:
        assert logging.getLogger(name).getEffectiveLevel() >= logging.WARNING, name
        assert not logging.getLogger(name).isEnabledFor(logging.INFO)


def test_log_to_files_skips_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    logger = logging.getLogger("graphssl.test_console")
    logger.propagate = False
    file_handler = logging.FileHandler(tmp_path / "job.log")
    stream_handler = logging.StreamHandler(sys.stdout)
    logger.addHandler(file_handler)
    logger.addHandler(stream_handler)
    try:
        _console.log_to_files("summary\nrow 1", logger)
    finally:
        file_handler.close()
        logger.removeHandler(file_handler)
        logger.removeHandler(stream_handler)
    assert (tmp_path / "job.log").read_text() == "summary\nrow 1\n"
    assert capsys.readouterr().out == ""


def test_summary_prints_whole_numbers_as_integers() -> None:
    table = summary_table(
        {"train/epochs": 261.0, "probe/logreg/test_acc": 0.818, "select/best_epoch": 0.0},
        "dgi-Cora",
    )
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[2:]}
    assert rows == {
        "probe/logreg/test_acc": "0.8180",
        "train/epochs": "261",
        "select/best_epoch": "0",
    }


PROGS = {
    "main": "graphssl",
    "evaluate_main": "graphssl-evaluate",
    "compare_main": "graphssl-compare",
    "report_main": "graphssl-report",
    "stability_main": "graphssl-stability",
}


@pytest.mark.parametrize("entry", sorted(PROGS))
def test_version_answers_before_hydra(entry: str) -> None:
    """``--version`` exits 0 with graphssl's version; the bogus override is never parsed."""
    code = (
        "import sys; sys.argv = ['x', '--version', 'not=parsed']; "
        f"from graphssl.cli import {entry}; {entry}()"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"{PROGS[entry]} {_console.graphssl_version()}"


def test_child_processes_inherit_the_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spawned worker (EMIR's pairs) sees the filters through ``PYTHONWARNINGS``."""
    monkeypatch.setenv("PYTHONWARNINGS", "default::DeprecationWarning")
    _console.quiet_libraries()
    _console.quiet_libraries()  # idempotent: no entry twice
    entries = os.environ["PYTHONWARNINGS"].split(",")
    assert entries == ["default::DeprecationWarning", *_console.ENV_WARNINGS]
    code = (
        "import warnings, sys\n"
        "warnings.warn_explicit('`torch.jit.script` is deprecated. Please switch', FutureWarning,"
        " 'torch/jit/_script.py', 1, 'torch.jit._script')\n"
        "warnings.warn_explicit('Sparse CSR tensor support is in beta state.', UserWarning,"
        " 'torch_geometric/utils/sparse.py', 1, 'torch_geometric.utils.sparse')\n"
        "warnings.warn_explicit('kept', UserWarning, 'x.py', 1, 'graphssl.x')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "Invalid -W option" not in res.stderr
    assert "jit" not in res.stderr and "Sparse" not in res.stderr
    assert "UserWarning: kept" in res.stderr


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("eval.select.every=5", "expected callbacks.selection.every=5"),
        ("eval.diag_every=2", "expected callbacks.monitor.every=2"),
        ("+eval.collapse.stable_rank=1.1", "expected callbacks.monitor.thresholds.stable_rank=1.1"),
    ],
)
def test_a_moved_key_names_its_new_place(override: str, expected: str) -> None:
    from graphssl.tasks._console import moved_key

    message = moved_key(override)
    assert message is not None and expected in message and "has moved" in message
    assert moved_key("eval.selection=3") is None
    assert moved_key("callbacks.selection.every=5") is None


def test_ctrl_c_interrupts_once_then_is_ignored_while_the_command_closes() -> None:
    import signal
    import time

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _console._interrupt_once()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs as soon as the signal is delivered
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # pressed again while closing: nothing happens
        # a shell's background job ignores SIGINT: the command leaves that as it is
        _console._interrupt_once()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_swallowed_by_a_weakref_callback_is_delivered_again(capsys) -> None:
    # Python drops an exception raised in a weakref callback (a torch WeakIdKeyDictionary's, in
    # training): the first Ctrl-C must not be lost there, with SIGINT ignored from then on
    import signal
    import sys
    import time
    import weakref

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    hook = sys.unraisablehook
    landed: list[str] = []

    class Tensorish:
        pass

    def callback(_: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the handler raises here; Python drops it
        landed.append("in the callback")

    try:
        _console._interrupt_once()
        x = Tensorish()
        ref = weakref.ref(x, callback)
        with pytest.raises(KeyboardInterrupt):
            del x
            landed.append("after the callback")
            time.sleep(5)  # delivered again a moment later, outside the callback
            landed.append("never")
        # the callback was interrupted (its error dropped), the block a moment later
        assert ref() is None and landed == ["after the callback"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # once, as before
        assert "Exception ignored" not in capsys.readouterr().err  # the one-line contract
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook
