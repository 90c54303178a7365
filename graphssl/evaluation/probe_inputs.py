"""Input checks and preprocessing shared by the probes.

Embeddings, labels and split masks are validated once per call with the same messages in every
probe; the label checks only look at the rows a probe evaluates, because datasets often mark
unlabelled rows with -1 or NaN.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias, cast

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix, as_index, check_same_length

__all__ = [
    "ArrayLike",
    "class_labels",
    "encode_classes",
    "float64_chunks",
    "multilabel_targets",
    "prepare_inputs",
    "regression_targets",
    "standardization",
    "weight_decay_grid",
]

ArrayLike: TypeAlias = Tensor | np.ndarray

#: Rows cast to float64 at a time where a probe scores a whole split.
ROW_CHUNK = 16384


def float64_chunks(x: Tensor, rows: Tensor | None = None) -> Iterator[Tensor]:
    """The rows of ``x`` (all, or ``rows`` in that order) as float64 chunks of at most
    :data:`ROW_CHUNK` rows, so that a float32 matrix is never copied whole to float64."""
    n = x.shape[0] if rows is None else rows.numel()
    for start in range(0, n, ROW_CHUNK):
        part = x[start : start + ROW_CHUNK] if rows is None else x[rows[start : start + ROW_CHUNK]]
        yield part.to(torch.float64)


def weight_decay_grid(weight_decay: float | Sequence[float]) -> tuple[float, ...]:
    """Validate one L2 strength or several and return them deduplicated, strongest first."""
    if isinstance(weight_decay, Tensor):
        weight_decay = weight_decay.tolist()
    if isinstance(weight_decay, numbers.Real):
        values: list[Any] = [weight_decay]
    else:
        try:
            values = list(cast(Iterable[Any], weight_decay))
        except TypeError:
            raise TypeError(
                f"weight_decay must be a number or a sequence of numbers, got "
                f"{type(weight_decay).__name__}"
            ) from None
    if not values or any(
        not isinstance(v, numbers.Real) or not (0 <= float(v) < math.inf) for v in values
    ):
        raise ValueError(f"weight_decay must be one or more values >= 0, got {weight_decay!r}")
    return tuple(sorted({float(v) for v in values}, reverse=True))


def prepare_inputs(
    embeddings: ArrayLike,
    labels: ArrayLike | None,
    masks: Mapping[str, ArrayLike],
    *,
    dtype: torch.dtype | None = torch.float64,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Validate embeddings [N, D], labels [N, ...] and the split masks/indices.

    Args:
        embeddings: ``[N, D]`` floating embeddings.
        labels: one label (or label vector) per row.
        masks: ``{name: boolean mask [N] or index tensor}``; ``name`` appears in error messages.
        dtype: dtype of the returned embeddings; ``None`` keeps float32/float64 input as it is
            (no copy; float16/bfloat16 become float32). (default: ``torch.float64``)

    Returns:
        The embeddings, the labels on the same device and one ``long`` index tensor per split,
        keyed as ``masks``.
    """
    x = as_float_matrix(embeddings, dtype=dtype)
    if labels is None:
        raise ValueError(
            "labels absent (labels=None): a probe needs one label per embedding row; the "
            "dataset has no `y` attribute, so only the label-free diagnostics can run"
        )
    y = torch.from_numpy(labels) if isinstance(labels, np.ndarray) else torch.as_tensor(labels)
    if y.ndim == 0:
        raise ValueError(f"labels must have one entry per row, got a scalar {y.item()!r}")
    check_same_length(x, y)
    n = x.shape[0]
    idx = {
        name: as_index(torch.as_tensor(m), n, name=name).to(x.device) for name, m in masks.items()
    }
    return x, y.to(x.device), idx


def class_labels(y: Tensor, rows: Tensor) -> Tensor:
    """Validate single-label class ids (checked on ``rows``) and return them as ``long`` [N].

    Labels of rows outside the evaluated splits are not inspected (datasets often mark
    unlabelled nodes with -1 or NaN).
    """
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(
            f"labels must be class ids of shape [N] or [N, 1], got shape {tuple(y.shape)}; "
            f"for [N, T] multilabel targets use LogRegProbe(multilabel=True)"
        )
    if y.is_complex():
        raise TypeError(f"labels must be integer class ids, got dtype {y.dtype}")
    y_eval = y[rows]
    if y.is_floating_point():
        n_nan = int(torch.isnan(y_eval).sum())
        if n_nan:
            raise ValueError(
                f"labels have {n_nan} NaN values in the {rows.numel()} evaluated rows "
                f"(train/val/test); expected a class id for every evaluated row in "
                f"single-label mode (use multilabel=True for tasks with missing labels)"
            )
        finite = torch.isfinite(y_eval)
        bad = ~finite | (y_eval != torch.round(y_eval))
        if bool(bad.any()):
            raise ValueError(
                f"labels have {int(bad.sum())} non-integer values in the evaluated rows (e.g. "
                f"{y_eval[bad][0].item()!r}); expected integer class ids"
            )
    y = y.long()
    y_eval = y[rows]
    if bool((y_eval < 0).any()):
        raise ValueError(
            f"labels must be class ids >= 0, found {int((y_eval < 0).sum())} negative values "
            f"(min {int(y_eval.min())}) in the evaluated rows"
        )
    return y


def multilabel_targets(y: Tensor, rows: Tensor) -> Tensor:
    """Validate ``[N, T]`` (or ``[N]``) targets in {0, 1, NaN = missing} on ``rows``; float64
    ``[N, T]``."""
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2:
        raise ValueError(f"multilabel labels must have shape [N, T], got {tuple(y.shape)}")
    y = y.to(torch.float64)
    y_eval = y[rows]
    observed = y_eval[~torch.isnan(y_eval)]
    bad = (observed != 0) & (observed != 1)
    if bool(bad.any()):
        raise ValueError(
            f"multilabel labels must be 0, 1 or NaN (missing), found {int(bad.sum())} other "
            f"values (e.g. {observed[bad][0].item()!r}) in the evaluated rows"
        )
    return y


def regression_targets(y: Tensor, rows: Tensor) -> Tensor:
    """Validate real ``[N]`` or ``[N, T]`` targets, finite on ``rows``; float64, same shape."""
    if y.ndim not in (1, 2):
        raise ValueError(f"targets must have shape [N] or [N, T], got {tuple(y.shape)}")
    if y.is_complex():
        raise TypeError(f"targets must be real numbers, got dtype {y.dtype}")
    y = y.to(torch.float64)
    bad = ~torch.isfinite(y[rows])
    if bool(bad.any()):
        raise ValueError(
            f"targets have {int(bad.sum())} NaN or Inf values in the {rows.numel()} evaluated "
            f"rows (train/val/test); expected finite targets (drop the unlabelled rows from the "
            f"split masks)"
        )
    return y


def encode_classes(y_train: Tensor) -> tuple[Tensor, Tensor]:
    """Classes of the training split (sorted) and the training labels as indices into them."""
    classes, encoded = torch.unique(y_train, sorted=True, return_inverse=True)
    if classes.numel() < 2:
        raise ValueError(
            f"the training split has {classes.numel()} class ({classes.tolist()}) among its "
            f"{y_train.numel()} rows; expected at least 2 classes"
        )
    return classes, encoded


def standardization(x_train: Tensor, standardize: bool) -> tuple[Tensor, Tensor]:
    """Per-feature mean and scale of the training rows (population std, like sklearn's
    ``StandardScaler``; constant features get scale 1). Identity when ``standardize=False``.
    """
    d = x_train.shape[1]
    if not standardize:
        return x_train.new_zeros(d), x_train.new_ones(d)
    n = x_train.shape[0]
    mean = x_train.mean(dim=0)
    var = x_train.var(dim=0, correction=0)
    eps = torch.finfo(x_train.dtype).eps
    # sklearn's `_is_constant_feature`: variance indistinguishable from rounding noise.
    constant = var <= n * eps * var + (n * mean * eps) ** 2
    return mean, torch.where(constant, torch.ones_like(var), var.sqrt())
