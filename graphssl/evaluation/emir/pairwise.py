"""``I_S(U -> Z) / d_Z`` for every ordered pair of embedders, in worker processes if asked."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from graphssl.evaluation.emir.config import EMIRConfig, EMIRResult
from graphssl.evaluation.emir.inputs import validate_embeddings
from graphssl.evaluation.emir.knife import (
    information_sufficiency_prepared,
    mean_nll_marginal,
    prepare,
    split_rows,
    take_rows,
    train_marginal,
)

__all__ = ["pairwise_information_sufficiency"]


def _target_column(
    j: int,
    names: Sequence[str],
    prepared: Mapping[str, tuple[Tensor, int]],
    config: EMIRConfig,
) -> list[tuple[int, EMIRResult, float]]:
    """``I_S(U -> names[j])`` for every other source: the target's marginal is fitted once.

    Returns ``(source index, result, seconds)`` per source; the marginal's fitting time is
    charged to the first source.
    """
    zs, dropped_z = prepared[names[j]]
    train_idx, eval_idx = split_rows(zs.shape[0], config)
    t0 = time.perf_counter()
    marginal = train_marginal(take_rows(zs, train_idx), config)  # once per target
    h_z = mean_nll_marginal(marginal, take_rows(zs, eval_idx))
    out = []
    for i, source in enumerate(names):
        if i == j:
            continue
        us, dropped_u = prepared[source]
        result = information_sufficiency_prepared(us, zs, h_z, config, dropped_u, dropped_z)
        out.append((i, result, time.perf_counter() - t0))
        t0 = time.perf_counter()
    return out


_WORKER: dict[str, object] = {}


def _init_worker(
    names: Sequence[str], prepared: Mapping[str, tuple[Tensor, int]], config: EMIRConfig
) -> None:
    threads = max(1, (os.cpu_count() or 1) // _n_jobs(config.n_jobs, len(names)))
    torch.set_num_threads(threads)
    _WORKER.update(names=list(names), prepared=dict(prepared), config=config)


def _worker_column(j: int) -> tuple[int, list[tuple[int, EMIRResult, float]]]:
    names, prepared, config = _WORKER["names"], _WORKER["prepared"], _WORKER["config"]
    return j, _target_column(j, names, prepared, config)  # type: ignore[arg-type]


def _n_jobs(n_jobs: int, n_targets: int) -> int:
    jobs = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    return max(1, min(jobs, n_targets))


def pairwise_information_sufficiency(
    embeddings: Mapping[str, Tensor],
    config: EMIRConfig | None = None,
    progress: bool = True,
    on_pair: Callable[[str, str, EMIRResult, float], None] | None = None,
) -> tuple[list[str], Tensor]:
    """``I_S(U -> Z) / d_Z`` for every ordered pair of embedders.

    Each target's marginal is fitted once and reused for all sources. With
    ``config.n_jobs > 1`` the targets' columns are computed in that many worker processes
    (``spawn``); the values are the same as in one process, because every pair is seeded alone.

    Args:
        embeddings: ``{name: [N, d_name]}``, the same N inputs in the same order everywhere.
        config: estimator settings (default: :class:`EMIRConfig` ``()``).
        progress: show a tqdm bar over pairs (only when stderr is a terminal).
        on_pair: called as ``on_pair(source, target, result, seconds)`` for every pair, in
            this process, as results arrive (``seconds``: the pair's fit, plus the target's
            marginal for its first source).

    Returns:
        ``(names, matrix)``: ``matrix[i, j] = I_S(names[i] -> names[j]) / d_{names[j]}``,
        float64 ``[M, M]`` with a NaN diagonal (rows = sources, columns = targets).
    """
    config = config or EMIRConfig()
    checked = validate_embeddings(embeddings)
    names = list(checked)
    prepared = {name: prepare(x, f"embeddings[{name!r}]", config) for name, x in checked.items()}
    matrix = torch.full((len(names), len(names)), float("nan"), dtype=torch.float64)
    n_pairs = len(names) * (len(names) - 1)
    bar = tqdm(total=n_pairs, desc="EMIR pairs", disable=not (progress and sys.stderr.isatty()))

    def collect(j: int, column: list[tuple[int, EMIRResult, float]]) -> None:
        for i, result, seconds in column:
            matrix[i, j] = result.i_s_per_dim
            if on_pair is not None:
                on_pair(names[i], names[j], result, seconds)
            bar.update()

    jobs = _n_jobs(config.n_jobs, len(names))
    try:
        if jobs == 1 or str(config.device) != "cpu":
            for j in range(len(names)):
                collect(j, _target_column(j, names, prepared, config))
        else:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            import torch.multiprocessing as mp

            with ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=mp.get_context("spawn"),
                initializer=_init_worker,
                initargs=(names, prepared, config),
            ) as pool:
                futures = [pool.submit(_worker_column, j) for j in range(len(names))]
                for future in as_completed(futures):
                    collect(*future.result())
    finally:
        bar.close()
    return names, matrix
