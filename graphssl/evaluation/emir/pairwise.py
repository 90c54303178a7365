"""``I_S(U -> Z) / d_Z`` for every ordered pair of embedders, in worker processes if asked."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import Tensor

from graphssl.evaluation.emir.config import EMIRConfig, EMIRResult
from graphssl.evaluation.emir.graph import informativeness
from graphssl.evaluation.emir.inputs import validate_embeddings
from graphssl.evaluation.emir.knife import (
    information_sufficiency_prepared,
    marginal_entropies,
    prepare,
    split_rows,
    take_rows,
    train_marginal,
)
from graphssl.evaluation.emir.stacked import information_sufficiency_stacked
from graphssl.processes import die_with_parent, end_processes
from graphssl.progress import stage
from graphssl.utils import allocator, configure_allocator

__all__ = ["PairwiseEMIR", "pairwise_information_sufficiency"]


@dataclass(frozen=True)
class PairwiseEMIR:
    """The pairwise ``I_S(U -> Z) / d_Z`` matrices of one run (rows = sources, columns =
    targets, NaN diagonal), in-sample and held-out, from the same fitted kernels.

    Unpacks as ``names, matrix = pairwise_information_sufficiency(...)``.

    Attributes:
        names: embedder names, in matrix order.
        matrix_in_sample: float64 ``[M, M]``, scored on the rows the kernels were fitted on
            (the reference code's choice).
        matrix_held_out: float64 ``[M, M]``, scored on the held-out rows; all NaN when the
            rows were not split (``held_out=False, held_out_estimate=False``).
        held_out_primary: whether ``matrix`` is the held-out matrix (``EMIRConfig.held_out``).
        n_rows: rows of every embedder.
        n_fit: rows the kernels were fitted on.
        n_held_out: held-out rows (``0`` when not split).
    """

    names: list[str]
    matrix_in_sample: Tensor
    matrix_held_out: Tensor
    held_out_primary: bool = False
    n_rows: int = 0
    n_fit: int = 0
    n_held_out: int = 0

    @property
    def matrix(self) -> Tensor:
        """The primary matrix: held-out if ``held_out_primary``, else in-sample."""
        return self.matrix_held_out if self.held_out_primary else self.matrix_in_sample

    @property
    def informativeness(self) -> dict[str, float]:
        """In-sample informativeness: median over references of the in-sample matrix."""
        return informativeness(self.matrix_in_sample, self.names)

    @property
    def informativeness_held_out(self) -> dict[str, float]:
        """Held-out informativeness (NaN everywhere when the rows were not split)."""
        return informativeness(self.matrix_held_out, self.names)

    def __iter__(self) -> Iterator[object]:
        return iter((self.names, self.matrix))


def _target_column(
    j: int,
    names: Sequence[str],
    prepared: Mapping[str, tuple[Tensor, int]],
    config: EMIRConfig,
) -> list[tuple[int, EMIRResult, float]]:
    """``I_S(U -> names[j])`` for every other source: the target's marginal is fitted once.

    Returns ``(source index, result, seconds)`` per source. One pair at a time, the marginal's
    fitting time is charged to the first source; vectorised (``config.vectorize``), the whole
    column's time is split evenly over its sources.
    """
    zs, dropped_z = prepared[names[j]]
    train_idx, _ = split_rows(zs.shape[0], config)
    t0 = time.perf_counter()
    marginal = train_marginal(take_rows(zs, train_idx), config)  # once per target
    h_z = marginal_entropies(marginal, zs, config)
    sources = [i for i in range(len(names)) if i != j]
    if config.vectorize:
        results = information_sufficiency_stacked(
            [prepared[names[i]] for i in sources], zs, h_z, config, dropped_z
        )
        seconds = (time.perf_counter() - t0) / len(sources)
        return [(i, r, seconds) for i, r in zip(sources, results, strict=True)]
    out = []
    for i in sources:
        us, dropped_u = prepared[names[i]]
        result = information_sufficiency_prepared(us, zs, h_z, config, dropped_u, dropped_z)
        out.append((i, result, time.perf_counter() - t0))
        t0 = time.perf_counter()
    return out


_WORKER: dict[str, object] = {}


def _init_worker(
    names: Sequence[str],
    prepared: Mapping[str, tuple[Tensor, int]],
    config: EMIRConfig,
    parent_pid: int | None = None,
) -> None:
    # a worker holds the embeddings and its nets (GBs): it ends when the comparing process
    # ends, even when that is killed without running any cleanup
    die_with_parent(signal.SIGKILL, parent_pid)
    # Ctrl-C reaches the whole process group: the comparing process ends its workers itself,
    # so a worker does not print its own KeyboardInterrupt traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threads = max(1, (os.cpu_count() or 1) // _n_jobs(config.n_jobs, len(names)))
    torch.set_num_threads(threads)
    configure_allocator(config.cpu_allocator)  # the worker exits when the matrix is done
    _WORKER.update(names=list(names), prepared=dict(prepared), config=config)


def _worker_column(j: int) -> tuple[int, list[tuple[int, EMIRResult, float]]]:
    names, prepared, config = _WORKER["names"], _WORKER["prepared"], _WORKER["config"]
    return j, _target_column(j, names, prepared, config)  # type: ignore[arg-type]


def _column_cost(j: int, dims: Sequence[int], config: EMIRConfig) -> int:
    """Multiply-adds per training row of target ``j``'s column: its conditional nets' sizes
    (the matrix products are what a column's time is made of)."""
    width = config.ff_dim_hidden if config.ff_dim_hidden > 0 else dims[j]
    head = width * config.cond_modes * (2 * dims[j] + 1)
    hidden = (config.ff_layers - 1) * width * width
    return sum(d_u * width + hidden + head for i, d_u in enumerate(dims) if i != j)


def _n_jobs(n_jobs: int, n_targets: int) -> int:
    jobs = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    return max(1, min(jobs, n_targets))


def pairwise_information_sufficiency(
    embeddings: Mapping[str, Tensor],
    config: EMIRConfig | None = None,
    progress: bool = True,
    on_pair: Callable[[str, str, EMIRResult, float], None] | None = None,
) -> PairwiseEMIR:
    """``I_S(U -> Z) / d_Z`` for every ordered pair of embedders, in-sample and held-out.

    Each target's marginal is fitted once and reused for all sources; with
    ``config.vectorize`` all sources of a target are fitted at once in one stacked
    conditional net (the same values as one pair at a time, up to float32 rounding). By
    default (``config.held_out_estimate``) the kernels are fitted on ``1 - held_out_fraction``
    of the rows and every pair is scored both on those rows and on the held-out rows. With
    ``config.n_jobs > 1`` the targets' columns are computed in that many worker processes
    (``spawn``), the most expensive columns first; the values are the same as in one process,
    because every pair is seeded alone. On CPU the fit runs under ``config.cpu_allocator``
    (:func:`graphssl.utils.allocator`; by default freed memory is kept for the next step's
    tensors and given back after).

    Args:
        embeddings: ``{name: [N, d_name]}``, the same N inputs in the same order everywhere.
        config: estimator settings (default: :class:`EMIRConfig` ``()``).
        progress: show a bar over pairs on a terminal, a log line every 30 s off one.
        on_pair: called as ``on_pair(source, target, result, seconds)`` for every pair, in
            this process, as results arrive (``seconds``: the pair's fit, plus the target's
            marginal for its first source; vectorised, the column's time split evenly).

    Returns:
        :class:`PairwiseEMIR`, which unpacks as ``(names, matrix)`` with
        ``matrix[i, j] = I_S(names[i] -> names[j]) / d_{names[j]}``, float64 ``[M, M]``, NaN
        diagonal (rows = sources, columns = targets); ``.matrix_held_out``,
        ``.informativeness`` and ``.informativeness_held_out`` carry the rest.
    """
    config = config or EMIRConfig()
    checked = validate_embeddings(embeddings)
    names = list(checked)
    prepared = {name: prepare(x, f"embeddings[{name!r}]", config) for name, x in checked.items()}
    matrix = torch.full((len(names), len(names)), math.nan, dtype=torch.float64)
    held = matrix.clone()
    n_fit = n_held = 0
    n_pairs = len(names) * (len(names) - 1)
    pairs_done = ExitStack()
    bar = pairs_done.enter_context(stage("EMIR pairs", total=n_pairs, enabled=progress))

    def collect(j: int, column: list[tuple[int, EMIRResult, float]]) -> None:
        nonlocal n_fit, n_held
        for i, result, seconds in column:
            n_fit, n_held = result.n_in_sample, result.n_held_out
            matrix[i, j] = result.i_s_per_dim_in_sample
            held[i, j] = result.i_s_per_dim_held_out
            if on_pair is not None:
                on_pair(names[i], names[j], result, seconds)
            bar.advance(what=f"{names[i]} -> {names[j]}")

    jobs = _n_jobs(config.n_jobs, len(names))
    try:
        if jobs == 1 or str(config.device) != "cpu":
            with allocator(config.cpu_allocator if str(config.device) == "cpu" else "system"):
                for j in range(len(names)):
                    collect(j, _target_column(j, names, prepared, config))
        else:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            import torch.multiprocessing as mp

            pool = ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=mp.get_context("spawn"),
                initializer=_init_worker,
                initargs=(names, prepared, config, os.getpid()),
            )
            try:
                # longest columns first, so that no worker is left with a long one at the end
                dims = [int(prepared[name][0].shape[1]) for name in names]
                order = sorted(
                    range(len(names)), key=lambda j: _column_cost(j, dims, config), reverse=True
                )
                futures = [pool.submit(_worker_column, j) for j in order]
                for future in as_completed(futures):
                    collect(*future.result())
            except BaseException:
                # interrupted (Ctrl-C, SIGTERM) or failed: a clean shutdown would wait for every
                # running column, so the workers are ended first
                workers = list((getattr(pool, "_processes", None) or {}).values())
                pool.shutdown(wait=False, cancel_futures=True)
                end_processes(workers, grace=2.0)
                raise
            pool.shutdown(wait=True)
    finally:
        pairs_done.close()
    return PairwiseEMIR(
        names=names,
        matrix_in_sample=matrix,
        matrix_held_out=held,
        held_out_primary=config.held_out,
        n_rows=int(next(iter(prepared.values()))[0].shape[0]),
        n_fit=int(n_fit),
        n_held_out=int(n_held),
    )
