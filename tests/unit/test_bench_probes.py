"""``benchmarks/bench_probes.py``'s solver comparison on a small mixture and on stored
embeddings: the probe's objective as it was and as it is give the same fits, and the split of a
stored matrix is stratified and complete."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def bench(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("bench_probes")


def test_the_row_objective_equals_the_probes(bench: ModuleType) -> None:
    from graphssl.evaluation import logreg_probe

    x, y = bench.gaussian_mixture(200, 8, 3, 3.0, seed=0)
    x64 = torch.from_numpy(x).double()
    xt = logreg_probe._design(x64, x64.mean(0), x64.std(0))
    labels = torch.from_numpy(y)
    theta = torch.randn(9 * 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for lam in (0.0, 0.3):
        before = bench._rows_objective(xt.T.contiguous(), labels, 3, lam)(theta)
        now = logreg_probe._softmax_objective(xt, labels, 3, lam)(theta)
        torch.testing.assert_close(before[0], now[0])
        torch.testing.assert_close(before[1], now[1])


def test_solver_rows_agree(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    x, y = bench.gaussian_mixture(600, 10, 4, 3.0, seed=1)
    bench.bench_solver(x, y, 400, 100)
    out = capsys.readouterr().out
    rows = re.findall(r"^\s*(\S+) +(\d+) +[\d.]+ +([\d.]+) \| +(\d+) +[\d.]+ +([\d.]+)$", out, re.M)
    assert len(rows) == 12  # one per value of the default grid
    for lam, _, before, _, now in rows:
        if float(lam) >= 1e-2:  # strictly convex enough that both reach the same optimum
            assert before == now, lam
    assert re.search(r"CPU before [\d.]+ s, now [\d.]+ s: [\d.]+x", out)


def test_stored_embeddings_split(bench: ModuleType, tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    labels = torch.tensor([0] * 60 + [1] * 40)
    path = tmp_path / "embeddings.pt"
    torch.save({"embeddings": torch.randn(100, 5, generator=g), "labels": labels}, path)
    x, y, n_train, n_val = bench.stored_embeddings(path, seed=3)
    assert (n_train, n_val, len(y)) == (80, 10, 100)
    assert sorted(y.tolist()) == sorted(labels.tolist())  # every row once
    assert np.mean(y[:n_train]) == pytest.approx(0.4)  # stratified
    assert x.dtype == np.float64 and x.shape == (100, 5)


def test_folds_compare_the_solver_before_and_now(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    from graphssl.evaluation import logreg_probe

    x, y = bench.gaussian_mixture(300, 6, 2, 2.0, seed=2)
    bench.bench_folds(x, y, folds=3, selection="split", seed=0)
    out = capsys.readouterr().out
    folds = re.findall(
        r"fold \d:  before +[\d.]+ CPU s, λ (\S+), test ([\d.]+)  now +[\d.]+ CPU s, λ (\S+), "
        r"test ([\d.]+)",
        out,
    )
    assert len(folds) == 3
    assert re.search(r"probe over 3 folds: before [\d.]+ CPU s .* now [\d.]+ CPU s", out)
    # the solver is put back after the 'before' probe
    assert logreg_probe._minimize_lbfgs.__module__ == "graphssl.evaluation.logreg_probe"
    assert logreg_probe._softmax_objective.__name__ == "_softmax_objective"
