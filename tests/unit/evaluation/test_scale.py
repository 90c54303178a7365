"""Evaluation at scale: the seeded row caps, and the float32 path that never copies the whole
matrix to float64."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from graphssl.evaluation.diagnostics import embedding_diagnostics
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.evaluation.ridge_probe import RidgeProbe
from graphssl.evaluation.runner import cap_splits, evaluation_settings, run_probes
from graphssl.evaluation.subsample import cap_rows, check_max_rows, row_generator


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclass
class _Split:
    train: Tensor
    val: Tensor
    test: Tensor


def _data(n: int = 3000, d: int = 8, c: int = 5, seed: int = 0) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, c, (n,), generator=gen)
    centres = 0.8 * torch.randn(c, d, generator=gen)  # overlapping classes
    return (centres[y] + torch.randn(n, d, generator=gen)).float(), y


def _splits(n: int) -> list[_Split]:
    idx = torch.arange(n)
    return [_Split(idx[: n // 2], idx[n // 2 : 3 * n // 4], idx[3 * n // 4 :])]


# --------------------------------------------------------------------------- cap_rows
def test_cap_rows_is_seeded_and_a_subset_of_the_split() -> None:
    rows = torch.arange(100, 10_100)
    first = cap_rows(rows, 500, row_generator(3))
    again = cap_rows(rows, 500, row_generator(3))
    other = cap_rows(rows, 500, row_generator(4))
    assert first.capped and first.rows.numel() == 500 and first.added == 0
    assert torch.equal(first.rows, again.rows)
    assert not torch.equal(first.rows, other.rows)
    assert bool(torch.isin(first.rows, rows).all())
    assert first.rows.unique().numel() == 500
    assert bool((first.rows[1:] > first.rows[:-1]).all())  # the split's order is kept
    # at most max_rows rows: nothing to drop, the split itself comes back
    small = cap_rows(rows[:300], 500, row_generator(3))
    assert not small.capped and torch.equal(small.rows, rows[:300])
    assert cap_rows(rows, None, row_generator(3)).rows is rows


def test_cap_rows_keeps_every_class_of_the_split() -> None:
    labels = torch.zeros(20_000, dtype=torch.long)
    labels[[7, 12_345]] = torch.tensor([4, 9])  # two classes of a single row each
    rows = torch.arange(20_000)
    out = cap_rows(rows, 50, row_generator(0), labels)
    assert set(labels[out.rows].tolist()) == {0, 4, 9}
    assert out.added == 2 and out.rows.numel() == 52
    # without labels a draw of 50 rows misses the rare classes
    plain = cap_rows(rows, 50, row_generator(0))
    assert set(labels[plain.rows].tolist()) == {0}


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "10"])
def test_max_rows_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match=r"eval\.max_rows must be a positive integer"):
        check_max_rows(bad, "eval.max_rows")
    with pytest.raises(ValueError, match="max_rows"):
        KNNProbe(max_rows=bad)  # type: ignore[arg-type]


def test_evaluation_settings() -> None:
    assert evaluation_settings({}) == {"max_rows": None, "figure_max_rows": 100_000}
    assert evaluation_settings({"max_rows": 5000, "figure_max_rows": 100_000}) == {
        "max_rows": 5000,
        "figure_max_rows": 5000,
    }
    assert (
        evaluation_settings({"max_rows": None, "figure_max_rows": None})["figure_max_rows"] is None
    )
    with pytest.raises(ValueError, match=r"eval\.figure_max_rows"):
        evaluation_settings({"figure_max_rows": 0})


# ------------------------------------------------------------------------- run_probes
def test_run_probes_caps_every_split_with_the_seed(caplog: pytest.LogCaptureFixture) -> None:
    x, y = _data()
    splits = _splits(x.shape[0])
    probes = {"logreg": LogRegProbe(weight_decay=[1e-2, 0.0])}
    with caplog.at_level(logging.WARNING, logger="graphssl.evaluation.runner"):
        capped = run_probes(x, y, splits, probes, max_rows=400, seed=7)
    assert capped["eval/max_rows"] == 400.0
    message = caplog.text
    assert "eval.max_rows=400" in message
    assert re.search(r"train 40\d of 1500, val 40\d of 750, test 40\d of 750", message), message
    assert run_probes(x, y, splits, probes, max_rows=400, seed=7) == capped
    assert run_probes(x, y, splits, probes, max_rows=400, seed=8) != capped
    # the same as evaluating the probe on the drawn rows directly
    (drawn,), _ = cap_splits(splits, x.shape[0], y, 400, 7)
    direct = probes["logreg"].evaluate(x, y, drawn.train, drawn.val, drawn.test)
    assert capped["probe/logreg/test_acc"] == direct["test_acc"]
    # no cap: every row, no eval/max_rows; a cap above every split changes nothing
    full = run_probes(x, y, splits, probes)
    assert "eval/max_rows" not in full
    above = run_probes(x, y, splits, probes, max_rows=10_000)
    assert {k: v for k, v in above.items() if k != "eval/max_rows"} == full


def test_knn_max_rows_subsamples_each_split_seeded() -> None:
    x, y = _data(n=4000)
    (split,) = _splits(x.shape[0])
    probe = KNNProbe(k=5, max_rows=300, seed=1)
    out = probe.evaluate(x, y, split.train, split.val, split.test)
    assert out["max_rows"] == 300 and probe.train_embeddings_.shape[0] <= 305
    assert (
        KNNProbe(k=5, max_rows=300, seed=1).evaluate(x, y, split.train, split.val, split.test)
        == out
    )
    full = KNNProbe(k=5).evaluate(x, y, split.train, split.val, split.test)
    assert "max_rows" not in full and full["test_acc"] == pytest.approx(out["test_acc"], abs=0.1)


# ---------------------------------------------------------------- the float32 path
def _peak_extra_bytes(fn: Callable[[], Any]) -> int:
    """Peak resident memory above the current one while ``fn`` runs (Linux VmHWM)."""

    def status(key: str) -> int:
        text = Path("/proc/self/status").read_text()
        return int(re.search(rf"{key}:\s+(\d+)", text).group(1)) * 1024  # type: ignore[union-attr]

    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = status("VmRSS")
    fn()
    return status("VmHWM") - before


def _big() -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    n, d = 200_000, 64
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 8, (n,), generator=gen)
    x = (torch.randn(8, d, generator=gen)[y] + torch.randn(n, d, generator=gen)).float()
    idx = torch.arange(n)
    return x, y, idx[:2000], idx[2000:4000], idx[4000:]


def _run_stage(stage: str, x: Tensor, y: Tensor, train: Tensor, val: Tensor, test: Tensor) -> Any:
    if stage == "logreg":
        return LogRegProbe(weight_decay=[1.0, 0.0]).evaluate(x, y, train, val, test)
    if stage == "ridge":
        return RidgeProbe(weight_decay=[1.0]).evaluate(x, y.double(), train, val, test)
    if stage == "knn":
        return KNNProbe(k=5).evaluate(x, y, train[:200], val, test[:50_000])
    if stage == "diagnostics":
        return embedding_diagnostics(x)
    if stage == "spectrum_figure":
        from graphssl.evaluation.plots import spectrum_figure

        return spectrum_figure(x, max_rows=None)
    split = _Split(train, val, test)
    return run_probes(x, y, [split], {"knn": KNNProbe(k=5)}, max_rows=500)


STAGES = ["logreg", "ridge", "knn", "diagnostics", "spectrum_figure", "run_probes_capped"]


def _measure(stages: list[str]) -> None:
    """Print ``<stage> <peak extra bytes> <input bytes>`` per stage, each stage in a child forked
    from this fresh process after the imports and the input: a process of its own per stage, as
    the peak is that of the process, without an interpreter start per stage."""
    import os
    import warnings

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    x, y, train, val, test = _big()
    for stage in stages:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _run_stage(stage, x, y, train, val, test)  # warm up (imports, allocator pools)
                extra = _peak_extra_bytes(lambda s=stage: _run_stage(s, x, y, train, val, test))
                print(stage, extra, x.numel() * x.element_size(), flush=True)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise SystemExit(f"stage {stage}: the measuring child failed ({status})")


@pytest.fixture(scope="module")
def float32_peaks() -> dict[str, tuple[int, int]]:
    """Every stage's peak in one fresh process: the peak is that of the process, and threads or
    memory left by other tests of this session would count in it."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import test_scale; test_scale._measure({STAGES!r})"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [line.split() for line in res.stdout.splitlines()]
    return {r[0]: (int(r[1]), int(r[2])) for r in rows if len(r) == 3 and r[0] in STAGES}


@pytest.mark.slow  # one fresh interpreter for the six stages
@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux's resettable peak RSS"
)
@pytest.mark.parametrize("stage", STAGES)
def test_float32_evaluation_never_copies_the_matrix_to_float64(
    stage: str, float32_peaks: dict[str, tuple[int, int]]
) -> None:
    extra, input_bytes = float32_peaks[stage]
    # a float64 copy alone would be twice the input; one float32 working copy (centring) fits
    assert extra < 1.5 * input_bytes, f"{stage}: peak +{extra / 2**20:.0f} MiB"
