"""Input validation shared by diagnostics, probes and EMIR.

Every check raises a ``ValueError`` (or ``TypeError``) whose message names the value received
and what was expected, as the rest of graphssl does.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import Tensor

NanPolicy = Literal["raise", "drop_rows"]

#: Rows checked for NaN/Inf at a time (bounds the boolean temporary to ``_CHECK_ROWS × D``).
_CHECK_ROWS = 65536


def as_float_matrix(
    embeddings: Tensor | np.ndarray,
    *,
    name: str = "embeddings",
    nan_policy: NanPolicy = "raise",
    dtype: torch.dtype | None = torch.float64,
) -> Tensor:
    """Validate an ``[N, D]`` embedding matrix and return it as a CPU/same-device float tensor.

    The finiteness check runs over row chunks, so that no ``[N, D]`` temporary is made; the
    input is returned without a copy when it already has the requested dtype.

    Args:
        embeddings: ``[N, D]`` tensor or array with a floating dtype.
        name: how the value is called in error messages.
        nan_policy: ``"raise"`` (default) rejects rows with NaN/Inf; ``"drop_rows"`` removes them.
        dtype: floating dtype of the returned tensor; ``None`` keeps float32 and float64 input
            as it is and casts float16/bfloat16 to float32 (default: ``torch.float64``).

    Raises:
        TypeError: for a non-tensor, or an integer/boolean dtype.
        ValueError: for a matrix that is not 2-D, has no rows, or has non-finite rows.
    """
    if isinstance(embeddings, np.ndarray):
        embeddings = torch.from_numpy(embeddings)
    if not isinstance(embeddings, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor or numpy array of shape [N, D], "
            f"got {type(embeddings).__name__}"
        )
    if not (embeddings.is_floating_point()):
        raise TypeError(
            f"{name} must have a floating dtype (float16/bfloat16/float32/float64), got "
            f"{embeddings.dtype}; cast with .float() if integer codes are really features"
        )
    if embeddings.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D matrix [N, D], got {embeddings.ndim}-D with shape "
            f"{tuple(embeddings.shape)}"
        )
    if embeddings.shape[0] == 0 or embeddings.shape[1] == 0:
        raise ValueError(
            f"{name} must have at least one row and one column, got shape {tuple(embeddings.shape)}"
        )
    if dtype is None:
        dtype = embeddings.dtype if embeddings.dtype == torch.float64 else torch.float32
    x = embeddings.detach().to(dtype)
    finite = torch.cat([torch.isfinite(c).all(dim=1) for c in x.split(_CHECK_ROWS)])
    n_bad = int((~finite).sum())
    if n_bad:
        if nan_policy == "drop_rows":
            x = x[finite]
            if x.shape[0] == 0:
                raise ValueError(f"all {n_bad} rows of {name} contain NaN or Inf")
        elif nan_policy == "raise":
            raise ValueError(
                f"{name} has {n_bad} of {embeddings.shape[0]} rows with NaN or Inf values; "
                f"expected finite embeddings (a diverged model?) — pass nan_policy='drop_rows' "
                f"to ignore those rows"
            )
        else:
            raise ValueError(f"nan_policy must be 'raise' or 'drop_rows', got {nan_policy!r}")
    return x


def check_same_length(embeddings: Tensor, labels: Tensor, *, what: str = "labels") -> None:
    """Raise when ``labels`` do not have one entry per embedding row."""
    if embeddings.shape[0] != labels.shape[0]:
        raise ValueError(
            f"embeddings have {embeddings.shape[0]} rows but {what} have {labels.shape[0]}; "
            f"expected one {what[:-1] if what.endswith('s') else what} per row"
        )


def as_index(mask_or_index: Tensor, n: int, *, name: str) -> Tensor:
    """Turn a boolean mask ``[n]`` or an index tensor into a sorted-as-given ``long`` index.

    Raises:
        ValueError: when the split is empty, the mask has the wrong length, or an index is out
            of range.
    """
    t = torch.as_tensor(mask_or_index)
    if t.dtype == torch.bool:
        if t.ndim != 1 or t.shape[0] != n:
            raise ValueError(
                f"{name} mask has shape {tuple(t.shape)}; expected a boolean vector of length {n}"
            )
        idx = t.nonzero(as_tuple=False).view(-1)
    else:
        if t.is_floating_point():
            raise TypeError(f"{name} must be a boolean mask or integer index, got {t.dtype}")
        idx = t.view(-1).long()
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ValueError(
                f"{name} index has values in [{int(idx.min())}, {int(idx.max())}]; expected "
                f"indices in [0, {n - 1}]"
            )
    if idx.numel() == 0:
        raise ValueError(f"{name} split is empty; expected at least one row")
    return idx
