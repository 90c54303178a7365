"""graphssl's EMIR estimator timed against its authors' KNIFE code on the same pairwise matrix.

``bench_emir.py --peer PATH`` imports the authors' ``emir`` package from ``PATH`` (a folder that
contains it; it is put on ``sys.path`` for the import only and is never a dependency of graphssl)
and runs both estimators on the same embeddings, the same pairs, the same settings (mapped onto
the authors' ``KNIFEArgs`` by :func:`peer_settings`, which also says what their code cannot
express), in the same processes with the same torch threads.

The unit of work is one target column of one implementation: the target's marginal is fitted
once and every source of the column is fitted against it, in both implementations (the authors'
code by ``eval(u, z, fit_only_marginal=True)`` and ``precomputed_marg_kernel``, as their NLP
script reuses the marginal). The two implementations' columns alternate (which one goes first
alternates too) in one queue that one process, or ``n_jobs`` worker processes of one torch
thread each, work through, so that a change of machine load hits both alike. Every column is
timed in the process that computes it (CPU seconds of that process, one thread: the column's own
CPU time; and wall seconds). :func:`peer_report` compares the two ``I_S / d_Z`` matrices (the
in-sample figure both compute; the held-out figure too) and the summed times.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation.correlation import correlation
from graphssl.evaluation.emir import EMIRConfig, information_sufficiency
from graphssl.evaluation.emir.knife import prepare, split_rows, take_rows
from graphssl.evaluation.emir.pairwise import _column_cost, _target_column
from graphssl.utils import allocator

__all__ = [
    "PeerError",
    "compare_with_peer",
    "load_peer",
    "peer_report",
    "peer_settings",
]

#: what ``--peer`` must name, said in every error about it
EXPECTED = (
    "--peer expects a folder containing the `emir` package of the authors' code "
    "(ills-montreal/emir): a folder with a sub-folder emir/ whose __init__.py exports "
    "KNIFEEstimator and KNIFEArgs, e.g. /work/peers/emir for /work/peers/emir/emir/__init__.py"
)

#: the authors' classes this benchmark calls
_API = ("KNIFEEstimator", "KNIFEArgs")


class PeerError(ValueError):
    """A ``--peer`` path that does not hold the authors' ``emir`` package (one paragraph)."""


def load_peer(path: str | os.PathLike[str]) -> ModuleType:
    """Import the ``emir`` package from the folder ``path`` and check the classes called here.

    Any ``emir`` imported before is dropped first, so that the package found is the one under
    ``path``; ``path`` is on ``sys.path`` during the import only.

    Raises:
        PeerError: ``path`` is not a folder, holds no ``emir/__init__.py`` (the package folder
            itself named instead of its parent is recognised and said), the import fails, or the
            package lacks ``KNIFEEstimator`` / ``KNIFEArgs``.
    """
    folder = Path(path).expanduser()
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise PeerError(f"--peer {path}: {what}. {EXPECTED}.")
    folder = folder.resolve()
    if not (folder / "emir" / "__init__.py").is_file():
        hint = ""
        if (folder / "__init__.py").is_file() and (folder / "estimators").is_dir():
            hint = f" (it looks like the package itself: pass its parent folder {folder.parent})"
        raise PeerError(f"--peer {path}: {folder} has no emir/__init__.py{hint}. {EXPECTED}.")
    for name in [m for m in sys.modules if m == "emir" or m.startswith("emir.")]:
        del sys.modules[name]
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("emir")
    except Exception as exc:  # the authors' package or one of its imports failed
        raise PeerError(
            f"--peer {path}: importing emir from {folder} failed with {type(exc).__name__}: "
            f"{exc}. {EXPECTED}; its own imports (torch, numpy, tqdm) must be importable here."
        ) from exc
    finally:
        sys.path.remove(str(folder))
    missing = [name for name in _API if not hasattr(module, name)]
    if missing:
        raise PeerError(
            f"--peer {path}: the emir package in {folder} ({module.__file__}) has no "
            f"{' or '.join(missing)}. {EXPECTED}."
        )
    return module


def peer_settings(config: EMIRConfig, knife_args: type) -> tuple[Any, list[str]]:
    """The authors' ``KNIFEArgs`` for ``config``, and one line per setting saying how it maps.

    Every setting of :class:`EMIRConfig` that shapes the estimate is passed under the authors'
    name; the lines also say where their code cannot express a graphssl setting, and what this
    benchmark does instead.

    Raises:
        PeerError: ``knife_args`` lacks one of the arguments passed.
    """
    same = {
        "batch_size": config.batch_size,
        "marg_modes": config.marg_modes,
        "cond_modes": config.cond_modes,
        "ff_layers": config.ff_layers,
        "ff_dim_hidden": config.ff_dim_hidden,
        "lr": config.lr,
        "margin_lr": config.margin_lr,
        "n_epochs": config.n_epochs,
        "n_epochs_marg": config.n_epochs_marg,
        "use_tanh": config.use_tanh,
        "optimize_mu": config.optimize_mu,
        "average": config.average,
        "init_std": config.init_std,
        "stopping_criterion": config.stopping_criterion,
        "eps": config.eps,
        "n_epochs_stop": config.n_epochs_stop,
        "device": config.device,
    }
    # graphssl's nets, which have no setting for these: a diagonal mixture (a scale per mode and
    # dimension), [LayerNorm -> Linear -> ReLU] blocks without residual connections
    fixed = {
        "cov_diagonal": "var",
        "cov_off_diagonal": "",
        "ff_residual_connection": False,
        "ff_activation": "relu",
        "ff_layer_norm": True,
    }
    kwargs = {**same, **fixed}
    if not dataclasses.is_dataclass(knife_args):
        raise PeerError(f"the authors' KNIFEArgs ({knife_args!r}) is not a dataclass. {EXPECTED}.")
    fields = {f.name for f in dataclasses.fields(knife_args)}
    missing = sorted(set(kwargs) - fields)
    if missing:
        raise PeerError(
            f"the authors' KNIFEArgs has no {', '.join(missing)}; this benchmark maps "
            f"EMIRConfig onto {', '.join(sorted(kwargs))}. {EXPECTED}."
        )
    args = knife_args(**kwargs)
    lines = [f"{name} = {value!r} (EMIRConfig.{name})" for name, value in same.items()]
    if not config.optimize_mu:
        lines.append("optimize_mu: passed as given (the authors' KNIFEArgs default is False)")
    else:
        lines.append("optimize_mu = True is passed explicitly: KNIFEArgs defaults to False")
    lines += [
        "kernel type: theirs picks 'discrete' when every target value is 0 or 1, else "
        "'gaussian'; z-scored targets give 'gaussian' with cov_diagonal='var', "
        "cov_off_diagonal='' (diagonal), ff_residual_connection=False, ff_activation='relu', "
        "ff_layer_norm=True: graphssl's kernels, which have no such settings",
        "optimizer: Adam(lr) in both; graphssl uses the fused Adam kernel where torch has one, "
        "theirs torch.optim.Adam's default implementation (no setting: not expressible)",
        f"rows: graphssl fits on a seeded {1 - config.held_out_fraction:.0%} of the rows and "
        "scores them (in-sample) and the rest (held-out); theirs has no split: eval(u, z) fits "
        "and scores the rows it is given, so it is given the same fitting rows, and its "
        "held-out figure is batched_eval(u, z) on the same held-out rows"
        if config.splits_rows
        else "rows: both fit and score all rows (no held-out figure)",
        "primary figure: the in-sample I_S / d_Z, which both compute (held_out=False is "
        "graphssl's default and the authors' only figure)",
        "preprocessing: graphssl z-scores every dimension (constant ones dropped); theirs takes "
        "the rows as given, so both get graphssl's z-scored float32 matrices (not timed)",
        "marginal: fitted once per target in both; theirs by eval(u, z, fit_only_marginal=True) "
        "and precomputed_marg_kernel for every source, as their NLP script reuses it",
        f"seed {config.seed}: graphssl seeds initialisation and shuffling with generators of its "
        "own; theirs draw from torch's global generator, seeded with seed + target index "
        "before each column: the two matrices differ by the estimator's seed noise",
        f"vectorize={config.vectorize}: graphssl "
        + (
            "fits all sources of a target in one stacked net"
            if config.vectorize
            else "fits one pair at a time"
        )
        + "; theirs always one pair at a time (no such option)",
        f"cpu_allocator={config.cpu_allocator!r}: graphssl's columns run under it; theirs under "
        "the allocator's defaults (no such setting)",
        "evaluation batch: graphssl 4,096 rows, theirs batch_size rows (batched_eval ignores "
        "eval_batch_size); values unaffected",
        "torch.compile: their eval() wraps KNIFE in torch.compile but calls its kernels "
        "directly, so nothing is compiled",
        "progress bars: theirs (tqdm) are off: bench_emir.py sets TQDM_DISABLE=1 before "
        "tqdm is imported",
    ]
    return args, lines


# --------------------------------------------------------------------------- one column
_STATE: dict[str, Any] = {}


def _setup(
    names: Sequence[str],
    prepared: Mapping[str, tuple[Tensor, int]],
    config: EMIRConfig,
    peer_path: str,
    threads: int | None,
) -> None:
    """Hold the inputs and the authors' package in this process (a worker's initializer, or
    this process), set its torch threads and warm both implementations up (not timed)."""
    if threads is not None:
        torch.set_num_threads(threads)
    peer = load_peer(peer_path)
    args, _ = peer_settings(config, peer.KNIFEArgs)
    _STATE.update(names=list(names), prepared=dict(prepared), config=config, peer=peer, args=args)
    g = torch.Generator().manual_seed(0)
    u, z = torch.randn(256, 8, generator=g), torch.randn(256, 8, generator=g)
    warm = dataclasses.replace(config, n_epochs=1, n_epochs_marg=1)
    information_sufficiency(u, z, warm)  # one-time library and kernel start-up
    warm_args = dataclasses.replace(args, n_epochs=1, n_epochs_marg=1)
    peer.KNIFEEstimator(warm_args, 8, 8).eval(u, z)


def _ours_column(j: int, sources: Sequence[int]) -> tuple[dict[int, float], dict[int, float]]:
    """graphssl's column: :func:`_target_column` (what ``pairwise_information_sufficiency``
    runs per target) on the target and these sources, under ``config.cpu_allocator``."""
    names, prepared, config = _STATE["names"], _STATE["prepared"], _STATE["config"]
    sub = [names[j]] + [names[i] for i in sources]
    with allocator(config.cpu_allocator if str(config.device) == "cpu" else "system"):
        column = _target_column(0, sub, prepared, config)
    in_sample = {sources[k - 1]: r.i_s_per_dim_in_sample for k, r, _ in column}
    held_out = {sources[k - 1]: r.i_s_per_dim_held_out for k, r, _ in column}
    return in_sample, held_out


def _peer_column(j: int, sources: Sequence[int]) -> tuple[dict[int, float], dict[int, float]]:
    """The authors' column: the target's marginal fitted once, then one estimator per source
    with it as ``precomputed_marg_kernel``, on graphssl's fitting (and held-out) rows."""
    names, prepared, config = _STATE["names"], _STATE["prepared"], _STATE["config"]
    peer, args = _STATE["peer"], _STATE["args"]
    zs = prepared[names[j]][0]
    d_z = int(zs.shape[1])
    train_idx, eval_idx = split_rows(int(zs.shape[0]), config)
    z_fit = take_rows(zs, train_idx)
    torch.manual_seed(config.seed + j)
    u_first = take_rows(prepared[names[sources[0]]][0], train_idx)
    marginal_fit = peer.KNIFEEstimator(args, int(u_first.shape[1]), d_z)
    marginal_fit.eval(u_first, z_fit, fit_only_marginal=True)
    marginal = marginal_fit.knife.kernel_marg
    in_sample: dict[int, float] = {}
    held_out: dict[int, float] = {}
    for i in sources:
        us = prepared[names[i]][0]
        u_fit = take_rows(us, train_idx)
        estimator = peer.KNIFEEstimator(
            args, int(us.shape[1]), d_z, precomputed_marg_kernel=marginal
        )
        mi, _, _ = estimator.eval(u_fit, z_fit)
        in_sample[i] = float(mi) / d_z
        held_out[i] = math.nan
        if eval_idx is not None:
            mi_out, _, _ = estimator.batched_eval(take_rows(us, eval_idx), take_rows(zs, eval_idx))
            held_out[i] = float(mi_out) / d_z
    return in_sample, held_out


def _run_column(impl: str, j: int, sources: Sequence[int]) -> dict[str, Any]:
    """One implementation's column, timed in this process (CPU and wall seconds)."""
    cpu, wall = time.process_time(), time.perf_counter()
    in_sample, held_out = (_ours_column if impl == "ours" else _peer_column)(j, sources)
    return {
        "impl": impl,
        "target": j,
        "in_sample": in_sample,
        "held_out": held_out,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan,
    }


# --------------------------------------------------------------------------- the report
def peer_report(
    ours: np.ndarray,
    theirs: np.ndarray,
    ours_seconds: tuple[float, float],
    theirs_seconds: tuple[float, float],
    ours_held_out: np.ndarray | None = None,
    theirs_held_out: np.ndarray | None = None,
) -> dict[str, float]:
    """Agreement and time ratio of the two implementations.

    Args:
        ours, theirs: ``[M, M]`` ``I_S / d_Z`` matrices (NaN where a pair was not run); only the
            pairs finite in both are compared.
        ours_seconds, theirs_seconds: ``(CPU seconds, wall seconds)`` of each implementation.
        ours_held_out, theirs_held_out: the held-out matrices, if any.

    Returns:
        ``pairs``, ``pearson``, ``spearman``, ``max_abs_diff``, ``mean_diff`` (theirs − ours),
        ``pearson_held_out`` (NaN without held-out matrices), each implementation's
        ``*_cpu_s`` / ``*_wall_s``, and ``cpu_ratio`` / ``wall_ratio`` (theirs / ours: how many
        times faster graphssl is).
    """
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    x, y = a[keep], b[keep]
    out: dict[str, float] = {"pairs": float(x.size)}
    out["pearson"] = _pearson(x, y)
    out["spearman"] = correlation(list(x), list(y))[0]
    out["max_abs_diff"] = float(np.abs(y - x).max()) if x.size else math.nan
    out["mean_diff"] = float((y - x).mean()) if x.size else math.nan
    out["pearson_held_out"] = math.nan
    if ours_held_out is not None and theirs_held_out is not None:
        ha, hb = np.asarray(ours_held_out, np.float64), np.asarray(theirs_held_out, np.float64)
        both = np.isfinite(ha) & np.isfinite(hb)
        out["pearson_held_out"] = _pearson(ha[both], hb[both])
    out["ours_cpu_s"], out["ours_wall_s"] = (float(s) for s in ours_seconds)
    out["theirs_cpu_s"], out["theirs_wall_s"] = (float(s) for s in theirs_seconds)
    out["cpu_ratio"] = out["theirs_cpu_s"] / out["ours_cpu_s"]
    out["wall_ratio"] = out["theirs_wall_s"] / out["ours_wall_s"]
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r, NaN for fewer than 2 values or a constant one."""
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


# --------------------------------------------------------------------------- the run
def compare_with_peer(
    embeddings: Mapping[str, Tensor],
    config: EMIRConfig,
    pairs: Sequence[tuple[str, str]],
    peer_path: str,
    n_jobs: int = 1,
    threads: int | None = None,
    verbose: bool = True,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Both implementations on ``pairs`` (``(source, target)`` names), alternating per column.

    Args:
        embeddings: ``{name: [N, d]}`` raw embeddings (z-scored here, once, for both).
        config: graphssl's settings; the authors' are :func:`peer_settings` of it.
        pairs: the ordered pairs to estimate.
        peer_path: the folder that contains the authors' ``emir`` package.
        n_jobs: ``1``: this process, with ``threads`` torch threads (default: as it is);
            more: that many spawned worker processes, ``cpu_count // n_jobs`` threads each
            (as graphssl's ``n_jobs``).
        threads: torch threads of this process when ``n_jobs == 1``.
        verbose: print the mapping, one line per column and the summary.

    Returns:
        ``(report, matrices)``: :func:`peer_report` plus ``elapsed_wall_s`` / ``elapsed_cpu_s``
        (the whole run, workers included), ``load_min`` / ``load_max`` (1-minute load average as
        columns finished); and the matrices ``ours``, ``theirs``, ``ours_held_out``,
        ``theirs_held_out`` (``[M, M]``, NaN where no pair was run).
    """
    peer = load_peer(peer_path)
    _, mapping = peer_settings(config, peer.KNIFEArgs)
    names = list(embeddings)
    index = {n: k for k, n in enumerate(names)}
    prepared = {n: prepare(x, f"embeddings[{n!r}]", config) for n, x in embeddings.items()}
    columns: dict[int, list[int]] = {}
    for u, z in pairs:
        columns.setdefault(index[z], []).append(index[u])
    dims = [int(prepared[n][0].shape[1]) for n in names]
    order = sorted(
        columns,
        key=lambda j: _column_cost(0, [dims[j]] + [dims[i] for i in columns[j]], config),
        reverse=True,
    )  # longest columns first, as graphssl's workers take them
    tasks = []
    for k, j in enumerate(order):
        impls = ("ours", "theirs") if k % 2 == 0 else ("theirs", "ours")
        tasks += [(impl, j, columns[j]) for impl in impls]
    if verbose:
        print(f"authors' code: {peer.__file__}")
        print("settings mapped onto the authors' KNIFEArgs:")
        for line in mapping:
            print(f"  {line}")
    jobs = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    jobs = max(1, min(jobs, len(tasks)))
    worker_threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else threads
    usage = _cpu_seconds()
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    if jobs == 1:
        _setup(names, prepared, config, str(peer_path), threads)
        if verbose:
            print(f"one process, {torch.get_num_threads()} torch thread(s); warm-up done")
        for task in tasks:
            results.append(_report_column(_run_column(*task), names, dims, verbose))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        import torch.multiprocessing as mp

        if verbose:
            print(f"{jobs} worker processes, {worker_threads} torch thread(s) each (spawned)")
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=mp.get_context("spawn"),
            initializer=_setup,
            initargs=(names, prepared, config, str(peer_path), worker_threads),
        ) as pool:
            futures = [pool.submit(_run_column, *task) for task in tasks]
            for future in as_completed(futures):
                results.append(_report_column(future.result(), names, dims, verbose))
    elapsed, elapsed_cpu = time.perf_counter() - start, _cpu_seconds() - usage

    matrices = {
        key: np.full((len(names), len(names)), np.nan)
        for key in ("ours", "theirs", "ours_held_out", "theirs_held_out")
    }
    seconds = {"ours": [0.0, 0.0], "theirs": [0.0, 0.0]}
    for r in results:
        for i, v in r["in_sample"].items():
            matrices[r["impl"]][i, r["target"]] = v
        for i, v in r["held_out"].items():
            matrices[f"{r['impl']}_held_out"][i, r["target"]] = v
        seconds[r["impl"]][0] += r["cpu_s"]
        seconds[r["impl"]][1] += r["wall_s"]
    report = peer_report(
        matrices["ours"],
        matrices["theirs"],
        (seconds["ours"][0], seconds["ours"][1]),
        (seconds["theirs"][0], seconds["theirs"][1]),
        matrices["ours_held_out"],
        matrices["theirs_held_out"],
    )
    loads = [r["load"] for r in results]
    report.update(
        elapsed_wall_s=elapsed,
        elapsed_cpu_s=elapsed_cpu,
        load_min=float(min(loads)),
        load_max=float(max(loads)),
    )
    if verbose:
        _print_summary(report)
    return report, matrices


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the workers, once joined)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _report_column(
    r: dict[str, Any], names: Sequence[str], dims: Sequence[int], verbose: bool
) -> dict[str, Any]:
    if verbose:
        j = r["target"]
        values = " ".join(f"{v:.4f}" for v in r["in_sample"].values())
        print(
            f"  {r['impl']:>6} {names[j]:>12} (d_Z {dims[j]}, {len(r['in_sample'])} sources): "
            f"{r['cpu_s']:7.1f} CPU s {r['wall_s']:7.1f} wall s, load {r['load']:.2f}; "
            f"I_S/d_Z {values}",
            flush=True,
        )
    return r


def _print_summary(report: Mapping[str, float]) -> None:
    print(
        f"graphssl: {report['ours_cpu_s']:.1f} CPU s, {report['ours_wall_s']:.1f} wall s; "
        f"authors' code: {report['theirs_cpu_s']:.1f} CPU s, {report['theirs_wall_s']:.1f} "
        "wall s (sums over their columns, each timed in the process that ran it)"
    )
    print(
        f"time ratio theirs / ours: {report['cpu_ratio']:.2f}x CPU, "
        f"{report['wall_ratio']:.2f}x wall (target >= 3x)"
    )
    print(
        f"agreement over {report['pairs']:.0f} pairs, in-sample I_S/d_Z: Pearson "
        f"{report['pearson']:.5f} (target >= 0.999), Spearman {report['spearman']:.5f}, "
        f"max |diff| {report['max_abs_diff']:.4f}, mean diff (theirs - ours) "
        f"{report['mean_diff']:+.4f}; held-out Pearson {report['pearson_held_out']:.5f}"
    )
    print(
        f"whole run: {report['elapsed_wall_s']:.1f} s wall, {report['elapsed_cpu_s']:.1f} s CPU "
        f"(all processes); load avg (1 min) {report['load_min']:.2f}-{report['load_max']:.2f} "
        "as columns finished, at end " + "/".join(f"{v:.2f}" for v in os.getloadavg())
    )
