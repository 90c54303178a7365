"""Input checks and the per-dimension standardisation every EMIR estimate starts from."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix

__all__ = ["check_pair", "principal_components", "validate_embeddings", "zscore"]


def zscore(
    embeddings: Tensor, eps: float = 1e-8, *, name: str = "embeddings"
) -> tuple[Tensor, int]:
    """Standardise every dimension: ``(E - mean) / (std + eps)``, unbiased std.

    Dimensions whose values are all equal carry no information and would divide by ``eps``
    only; they are dropped, and how many is returned (and warned about).

    Args:
        embeddings: ``[N, D]`` matrix, ``N >= 2``, finite.
        eps: added to the std (default: ``1e-8``).
        name: how the matrix is called in messages.

    Returns:
        ``(Z, n_dropped)`` with ``Z`` float64 of shape ``[N, D - n_dropped]``.

    Raises:
        ValueError: for fewer than two rows, non-finite rows, or when every dimension is constant.
    """
    x = as_float_matrix(embeddings, name=name)
    if x.shape[0] < 2:
        raise ValueError(
            f"{name} has {x.shape[0]} row; z-scoring needs at least 2 rows (unbiased std)"
        )
    constant = x.amax(dim=0) == x.amin(dim=0)
    n_dropped = int(constant.sum())
    if n_dropped == x.shape[1]:
        raise ValueError(
            f"all {x.shape[1]} dimensions of {name} are constant; nothing to estimate from"
        )
    if n_dropped:
        warnings.warn(
            f"{name}: dropped {n_dropped} of {x.shape[1]} zero-variance dimensions before "
            "z-scoring",
            stacklevel=2,
        )
        x = x[:, ~constant]
    x = (x - x.mean(dim=0)) / (x.std(dim=0) + eps)
    return x, n_dropped


def validate_embeddings(embeddings: Mapping[str, Tensor], *, minimum: int = 2) -> dict[str, Tensor]:
    """Check names, shapes and row counts of a ``{name: [N, d_name]}`` mapping."""
    if not isinstance(embeddings, Mapping):
        raise TypeError(
            f"embeddings must be a mapping {{name: [N, D] tensor}}, got {type(embeddings).__name__}"
        )
    if len(embeddings) < minimum:
        raise ValueError(
            f"need at least {minimum} embedders to compare, got {len(embeddings)}: "
            f"{sorted(map(str, embeddings))}"
        )
    out: dict[str, Tensor] = {}
    for key, value in embeddings.items():
        if not isinstance(key, str):
            raise TypeError(f"embedder names must be strings, got {key!r}")
        out[key] = as_float_matrix(value, name=f"embeddings[{key!r}]")
    rows = {key: int(value.shape[0]) for key, value in out.items()}
    if len(set(rows.values())) > 1:
        raise ValueError(
            f"embedders have different numbers of rows: {rows}; every embedder must embed the "
            "same N inputs in the same order (one row per input)"
        )
    return out


def check_pair(u: Tensor, z: Tensor, u_name: str = "u", z_name: str = "z") -> None:
    if u.shape[0] != z.shape[0]:
        raise ValueError(
            f"{u_name} has {u.shape[0]} rows but {z_name} has {z.shape[0]}; expected the "
            "embeddings of the same N inputs, one row per input in the same order"
        )


def principal_components(embeddings: Tensor, k: int, *, name: str = "embeddings") -> Tensor:
    """The scores of ``embeddings`` on its ``k`` leading principal components.

    Wide embedders (a timm backbone's 1,280 pooled features) make every EMIR pair cost
    ``O(d_Z^2)`` per row; projecting each embedder onto its top-``k`` principal subspace keeps
    the directions of most variance and makes the comparison one of those subspaces. The
    projection is deterministic (eigenvectors of the float64 covariance, each signed so its
    largest-magnitude loading is positive); a matrix of at most ``k`` dimensions is returned
    unchanged.

    Args:
        embeddings: ``[N, D]`` finite matrix.
        k: number of components, ``>= 1``.
        name: how the matrix is called in messages.

    Returns:
        ``[N, min(k, D)]`` float32 scores (centred), in order of decreasing variance.
    """
    if int(k) < 1:
        raise ValueError(f"the number of principal components must be >= 1, got k={k!r}")
    x = as_float_matrix(embeddings, name=name)
    if x.shape[1] <= k:
        return x.float()
    x = x.double()
    x = x - x.mean(dim=0)
    _, vectors = torch.linalg.eigh(x.T @ x)
    top = vectors[:, -k:].flip(1)  # eigh sorts ascending: the k largest, largest first
    sign = torch.sign(top.gather(0, top.abs().argmax(dim=0, keepdim=True)))
    return (x @ (top * sign)).float()
