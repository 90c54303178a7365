"""Long stages show progress: a bar on a terminal, a log line every ``every`` seconds off it."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

import graphssl.progress as progress
from graphssl.evaluation.runner import run_probes
from graphssl.progress import stage


class _Seen(logging.Handler):
    """Collects graphssl.progress records; ``event`` is set by the first one."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.event.set()


@pytest.fixture
def seen() -> _Seen:
    handler = _Seen()
    logger = logging.getLogger("graphssl.progress")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old)


@pytest.fixture
def off_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: False)


def test_a_long_stage_off_a_terminal_logs_its_count_then_its_end(seen, off_terminal) -> None:
    with stage("probes", total=3, every=0.01) as st:
        st.advance(what="logreg")
        # the block runs until the heartbeat has spoken (30 s only guards against a hang)
        assert seen.event.wait(30), "no progress line while the stage ran"
    lines = [r.getMessage() for r in seen.records]
    assert lines[0].startswith("probes: 1/3 (logreg), ")
    assert lines[-1].startswith("probes: done in ")


def test_a_stage_shorter_than_the_interval_prints_nothing(seen, off_terminal) -> None:
    with stage("diagnostics", every=3600) as st:
        st.advance()
    assert seen.records == []


def test_a_disabled_stage_prints_nothing_anywhere(seen, capsys, monkeypatch) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    with stage("EMIR pairs", total=2, every=0.0, enabled=False) as st:
        st.advance(2)
    assert st.done == 2
    assert seen.records == [] and capsys.readouterr().err == ""


def test_on_a_terminal_a_counted_stage_is_a_bar(seen, capsys, monkeypatch) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    with stage("EMIR pairs", total=4, every=0.0) as st:
        for _ in range(4):
            st.advance(what="a -> b")
        assert st._bar is not None and st._bar.n == 4
    err = capsys.readouterr().err
    assert "EMIR pairs:" in err and "/4 [" in err  # tqdm's bar, cleared at the end
    assert seen.records == []  # the bar, not log lines


def test_probes_report_progress_off_a_terminal(seen, off_terminal, monkeypatch) -> None:
    """A probe that takes long: the heartbeat names it while it runs (the probe waits for it)."""
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.01)

    class SlowProbe:
        def evaluate(self, z, y, train, val, test):  # type: ignore[no-untyped-def]
            assert seen.event.wait(30), "no progress line while the probe ran"
            return {"test_acc": 1.0}

    z = torch.randn(12, 3)
    y = torch.arange(12) % 2
    split = type(
        "S", (), {"train": torch.arange(6), "val": torch.arange(6, 9), "test": torch.arange(9, 12)}
    )
    out = run_probes(z, y, [split, split], {"slow": SlowProbe()})
    assert out["probe/slow/test_acc"] == 1.0 and out["probe/slow/num_splits"] == 2.0
    first = seen.records[0].getMessage()
    assert first.startswith("probes: 0/2 (slow), ")
