"""Cross-encoder reconstruction error: the baseline of the EMIR rebuttal (lower is better).

An MLP trained to predict one embedder's (z-scored) embeddings from another's; its test error
says how much of ``Z`` a ``U`` can reconstruct.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation.emir.graph import informativeness
from graphssl.evaluation.emir.inputs import check_pair, validate_embeddings, zscore
from graphssl.evaluation.emir.training import (
    EVAL_BATCH,
    adam,
    build_seeded,
    progress_bar,
    shuffled_batches,
)

__all__ = ["cross_encoder_l2", "cross_encoder_ranking", "pairwise_cross_encoder_l2"]


def _cross_encoder(d_u: int, d_z: int, hidden: int) -> nn.Sequential:
    """``Linear(d_U, h)`` -> 2 x [``Linear(h, h)``, ReLU] -> ``Linear(h, d_Z)``."""
    return nn.Sequential(
        nn.Linear(d_u, hidden),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, d_z),
    )


@torch.no_grad()
def _summed_sq_error(model: nn.Module, u: Tensor, z: Tensor) -> float:
    total = 0.0
    for start in range(0, u.shape[0], EVAL_BATCH):
        sl = slice(start, start + EVAL_BATCH)
        total += float(((model(u[sl]) - z[sl]) ** 2).sum(dim=1).double().sum())
    return total / u.shape[0]


def _cross_encoder_prepared(
    u: Tensor,
    z: Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    hidden: int,
    seed: int,
    per_dim: bool,
) -> float:
    n = u.shape[0]
    n_train, n_val = int(0.8 * n), int(0.1 * n)
    if n_train < 1 or n_val < 1 or n - n_train - n_val < 1:
        raise ValueError(f"cross_encoder_l2 needs at least 10 rows for an 80/10/10 split, got {n}")
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=generator).to(u.device)
    tr, va, te = perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]
    model = build_seeded(seed, lambda: _cross_encoder(u.shape[1], z.shape[1], hidden))
    model = model.to(u.device)
    optimizer = adam(model.parameters(), lr)
    best_val, best_state = float("inf"), copy.deepcopy(model.state_dict())
    train = [u[tr], z[tr]]
    for _ in range(epochs):
        model.train()
        for u_batch, z_batch in shuffled_batches(train, batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            loss = ((model(u_batch) - z_batch) ** 2).sum(dim=1).mean()
            loss.backward()
            optimizer.step()
        model.eval()
        val = _summed_sq_error(model, u[va], z[va])
        if val < best_val:
            best_val, best_state = val, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    model.eval()
    score = _summed_sq_error(model, u[te], z[te])
    return score / z.shape[1] if per_dim else score


def cross_encoder_l2(
    u: Tensor,
    z: Tensor,
    epochs: int = 5,
    seed: int = 0,
    *,
    batch_size: int = 32,
    lr: float = 1e-3,
    hidden: int = 256,
    per_dim: bool = False,
    device: str = "cpu",
) -> float:
    """Cross-encoder reconstruction error of ``Z`` from ``U`` (EMIR rebuttal baseline).

    Both embeddings are z-scored, rows split 80/10/10 at random (seeded), an MLP
    ``Linear(d_U, 256) -> 2 x [Linear(256, 256), ReLU] -> Linear(256, d_Z)`` is trained with Adam
    on the per-sample summed squared error, the epoch with the best validation error is kept, and
    its test error is returned. Lower is better.

    Args:
        u: ``[N, d_U]`` source embeddings.
        z: ``[N, d_Z]`` target embeddings of the same inputs.
        epochs: training epochs (default: ``5``; the slurm scripts used ``2``).
        seed: seeds split, init and shuffling (default: ``0``).
        batch_size: minibatch size (default: ``32``).
        lr: Adam learning rate (default: ``1e-3``).
        hidden: MLP width (default: ``256``).
        per_dim: divide the score by ``d_Z`` (default: ``False``).
        device: training device (default: ``"cpu"``).

    Returns:
        Test mean over samples of ``sum_j (z_hat_j - z_j)^2``.
    """
    check_pair(as_float_matrix(u, name="u"), as_float_matrix(z, name="z"))
    us = zscore(u, name="u")[0].to(device=device, dtype=torch.float32)
    zs = zscore(z, name="z")[0].to(device=device, dtype=torch.float32)
    return _cross_encoder_prepared(
        us,
        zs,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        hidden=hidden,
        seed=seed,
        per_dim=per_dim,
    )


def pairwise_cross_encoder_l2(
    embeddings: Mapping[str, Tensor],
    epochs: int = 5,
    seed: int = 0,
    progress: bool = True,
    *,
    batch_size: int = 32,
    lr: float = 1e-3,
    hidden: int = 256,
    per_dim: bool = False,
    device: str = "cpu",
) -> tuple[list[str], Tensor]:
    """:func:`cross_encoder_l2` for every ordered pair (same arguments).

    Returns:
        ``(names, matrix)``: ``matrix[i, j]`` = test error of ``names[j]`` reconstructed from
        ``names[i]``, float64 ``[M, M]`` with a NaN diagonal.
    """
    checked = validate_embeddings(embeddings)
    names = list(checked)
    prepared = {
        name: zscore(x, name=f"embeddings[{name!r}]")[0].to(device=device, dtype=torch.float32)
        for name, x in checked.items()
    }
    matrix = torch.full((len(names), len(names)), float("nan"), dtype=torch.float64)
    pairs = [(i, j) for i in range(len(names)) for j in range(len(names)) if i != j]
    for i, j in progress_bar(pairs, progress, "cross-encoder pairs"):
        matrix[i, j] = _cross_encoder_prepared(
            prepared[names[i]],
            prepared[names[j]],
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            hidden=hidden,
            seed=seed,
            per_dim=per_dim,
        )
    return names, matrix


def cross_encoder_ranking(
    embeddings: Mapping[str, Tensor],
    epochs: int = 5,
    seed: int = 0,
    progress: bool = True,
    *,
    batch_size: int = 32,
    lr: float = 1e-3,
    hidden: int = 256,
    per_dim: bool = False,
    device: str = "cpu",
) -> dict[str, float]:
    """Median over references ``Z != U`` of :func:`cross_encoder_l2` ``(U, Z)`` (lower = better).

    Arguments as :func:`cross_encoder_l2`; ``progress`` shows a tqdm bar on a terminal.

    Returns:
        ``{name: median test error of the references reconstructed from that embedder}``.
    """
    names, matrix = pairwise_cross_encoder_l2(
        embeddings,
        epochs,
        seed,
        progress,
        batch_size=batch_size,
        lr=lr,
        hidden=hidden,
        per_dim=per_dim,
        device=device,
    )
    return informativeness(matrix, names)
