"""``bench_emir.py --peer PATH``: loading the authors' package from a folder, mapping the
settings, and the report, against a small stand-in of the authors' API written to a temporary
folder (the authors' code is never needed by the tests)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from graphssl.evaluation.emir import EMIRConfig
from graphssl.evaluation.emir.knife import prepare, split_rows

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# The part of the authors' API the benchmark calls: KNIFEArgs (a frozen dataclass),
# KNIFEEstimator(args, x_dim, y_dim, precomputed_marg_kernel=None) with eval(x, y,
# fit_only_marginal=False) -> (mi, H(Y), H(Y|X)), batched_eval(x, y) -> tensors, and
# .knife.kernel_marg. Its "mutual information" is the mean product of the first columns, so the
# test knows exactly which rows it was given.
STAND_IN = """
from dataclasses import dataclass

import torch

CALLS = []


@dataclass(frozen=True)
class KNIFEArgs:
    batch_size: int = 64
    eval_batch_size: int = 1024
    lr: float = 1e-3
    margin_lr: float = 1e-3
    device: str = "cpu"
    stopping_criterion: str = "max_epochs"
    n_epochs: int = 10
    n_epochs_marg: int = 5
    eps: float = 1e-3
    n_epochs_stop: int = 1
    average: str = "var"
    cov_diagonal: str = "var"
    cov_off_diagonal: str = ""
    optimize_mu: bool = False
    cond_modes: int = 8
    marg_modes: int = 8
    use_tanh: bool = True
    init_std: float = 0.01
    ff_residual_connection: bool = False
    ff_activation: str = "relu"
    ff_layer_norm: bool = True
    ff_layers: int = 2
    ff_dim_hidden: int = 0


class _Knife:
    def __init__(self, marginal):
        self.kernel_marg = marginal


class KNIFEEstimator:
    def __init__(self, args, x_dim, y_dim, precomputed_marg_kernel=None):
        self.args, self.x_dim, self.y_dim = args, x_dim, y_dim
        self.marginal = precomputed_marg_kernel
        self.knife = None

    def eval(self, x, y, fit_only_marginal=False):
        assert x.shape[1] == self.x_dim and y.shape[1] == self.y_dim
        CALLS.append((self.args, x.shape[0], fit_only_marginal, self.marginal is not None))
        self.knife = _Knife(self.marginal or torch.nn.Identity())
        mi, h, hc = self.batched_eval(x, y)
        return mi.item(), h.item(), hc.item()

    def batched_eval(self, x, y, per_samples=False):
        mi = (x[:, 0] * y[:, 0]).mean()
        return mi, torch.ones(()), 1 - mi
"""


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def peer_mod():
    return _module("emir_peer")


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    package = tmp_path / "peer" / "emir"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(STAND_IN))
    (package / "estimators").mkdir()
    yield tmp_path / "peer"
    for name in [m for m in sys.modules if m == "emir" or m.startswith("emir.")]:
        del sys.modules[name]


def _check_message(message: str, path: Path) -> None:
    assert str(path) in message
    assert "folder containing the `emir` package" in message
    assert "\n" not in message  # one paragraph


def test_wrong_paths_name_the_path_and_what_was_expected(peer_mod, stand_in, tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(peer_mod.PeerError) as err:
        peer_mod.load_peer(missing)
    _check_message(str(err.value), missing)
    assert "does not exist" in str(err.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(peer_mod.PeerError) as err:
        peer_mod.load_peer(empty)
    _check_message(str(err.value), empty)
    assert "has no emir/__init__.py" in str(err.value)

    # the package folder itself instead of the folder that contains it
    with pytest.raises(peer_mod.PeerError) as err:
        peer_mod.load_peer(stand_in / "emir")
    _check_message(str(err.value), stand_in / "emir")
    assert f"pass its parent folder {stand_in}" in str(err.value)


def test_a_package_without_the_estimator_is_refused(peer_mod, tmp_path):
    package = tmp_path / "other" / "emir"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("KNIFEArgs = None\n")
    try:
        with pytest.raises(peer_mod.PeerError) as err:
            peer_mod.load_peer(tmp_path / "other")
        _check_message(str(err.value), tmp_path / "other")
        assert "has no KNIFEEstimator" in str(err.value)
    finally:
        for name in [m for m in sys.modules if m == "emir" or m.startswith("emir.")]:
            del sys.modules[name]


def test_load_peer_imports_from_the_path_only(peer_mod, stand_in):
    before = list(sys.path)
    module = peer_mod.load_peer(stand_in)
    assert Path(module.__file__).resolve() == (stand_in / "emir" / "__init__.py").resolve()
    assert sys.path == before


def test_settings_are_mapped_onto_the_authors_arguments(peer_mod, stand_in):
    module = peer_mod.load_peer(stand_in)
    config = EMIRConfig(batch_size=32, cond_modes=4, marg_modes=6, n_epochs=3, lr=2e-3)
    args, lines = peer_mod.peer_settings(config, module.KNIFEArgs)
    assert (args.batch_size, args.cond_modes, args.marg_modes) == (32, 4, 6)
    assert (args.n_epochs, args.n_epochs_marg, args.lr, args.margin_lr) == (3, 5, 2e-3, 1e-3)
    assert args.optimize_mu is True  # the authors' default is False; EMIR sets it
    assert args.cov_off_diagonal == "" and args.cov_diagonal == "var"
    text = "\n".join(lines)
    for word in ("optimizer", "kernel type", "held-out", "in-sample", "not expressible"):
        assert word in text

    @dataclasses.dataclass
    class Older:
        batch_size: int = 64

    with pytest.raises(peer_mod.PeerError, match="has no average"):
        peer_mod.peer_settings(config, Older)


def test_report_is_computed_from_the_two_matrices(peer_mod):
    rng = np.random.default_rng(0)
    ours = rng.normal(size=(4, 4))
    theirs = ours + 0.1 * rng.normal(size=(4, 4))
    for m in (ours, theirs):
        np.fill_diagonal(m, np.nan)
    theirs[0, 1] = np.nan  # a pair only one side has is left out
    report = peer_mod.peer_report(ours, theirs, (2.0, 3.0), (7.0, 6.0))
    keep = np.isfinite(ours) & np.isfinite(theirs)
    a, b = ours[keep], theirs[keep]
    assert report["pairs"] == 11
    assert report["pearson"] == pytest.approx(np.corrcoef(a, b)[0, 1], abs=1e-12)
    assert report["spearman"] == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
    assert report["max_abs_diff"] == pytest.approx(np.abs(b - a).max())
    assert report["mean_diff"] == pytest.approx((b - a).mean())
    assert (report["cpu_ratio"], report["wall_ratio"]) == (3.5, 2.0)
    assert math.isnan(report["pearson_held_out"])


def test_compare_runs_both_on_the_same_rows_and_pairs(peer_mod, stand_in):
    g = torch.Generator().manual_seed(0)
    embeddings = {f"e{k}": torch.randn(120, d, generator=g) for k, d in enumerate((3, 4, 5))}
    config = EMIRConfig(n_epochs=1, n_epochs_marg=1, batch_size=32)
    pairs = [("e0", "e1"), ("e2", "e1"), ("e1", "e2")]
    report, matrices = peer_mod.compare_with_peer(
        embeddings, config, pairs, str(stand_in), n_jobs=1, threads=1, verbose=False
    )
    # the stand-in's estimate on graphssl's z-scored fitting / held-out rows, divided by d_Z
    fit, held = split_rows(120, config)
    zs = {n: prepare(x, n, config)[0] for n, x in embeddings.items()}
    expect = np.full((3, 3), np.nan)
    expect_held = np.full((3, 3), np.nan)
    for u, z in pairs:
        i, j = int(u[1]), int(z[1])
        d_z = zs[z].shape[1]
        expect[i, j] = float((zs[u][fit, 0] * zs[z][fit, 0]).mean()) / d_z
        expect_held[i, j] = float((zs[u][held, 0] * zs[z][held, 0]).mean()) / d_z
    np.testing.assert_allclose(matrices["theirs"], expect, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(matrices["theirs_held_out"], expect_held, rtol=1e-5, atol=1e-7)
    assert np.isfinite(matrices["ours"]).sum() == len(pairs)
    assert np.array_equal(np.isfinite(matrices["ours"]), np.isfinite(expect))
    # the report's figures are those of the returned matrices
    again = peer_mod.peer_report(
        matrices["ours"],
        matrices["theirs"],
        (report["ours_cpu_s"], report["ours_wall_s"]),
        (report["theirs_cpu_s"], report["theirs_wall_s"]),
        matrices["ours_held_out"],
        matrices["theirs_held_out"],
    )
    for key, value in again.items():
        assert report[key] == pytest.approx(value, nan_ok=True), key
    assert report["cpu_ratio"] == pytest.approx(report["theirs_cpu_s"] / report["ours_cpu_s"])
    # after the warm-up (256 rows, not timed): per target column, longest first, one
    # marginal-only fit, then one fit per source reusing that marginal, on the fitting rows
    warm_up, *calls = sys.modules["emir"].CALLS
    assert warm_up[1] == 256
    assert [(c[2], c[3]) for c in calls] == [
        (True, False),
        (False, True),
        (False, True),
        (True, False),
        (False, True),
    ]
    assert all(c[1] == len(fit) for c in calls)
    assert all(c[0].optimize_mu and c[0].n_epochs == 1 for c in calls)


def test_cli_wrong_path_is_one_paragraph_without_traceback(tmp_path, monkeypatch, capsys):
    """The script's command line, run in this process: argparse's one-line usage error."""
    # the settings the script sets for itself at import stay within this test
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # its sibling module emir_peer
    bench = _module("bench_emir")
    missing = tmp_path / "nowhere"
    monkeypatch.setattr(sys, "argv", ["bench_emir.py", "--peer", str(missing)])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    message = stderr.strip().splitlines()[-1]
    _check_message(message, missing)
