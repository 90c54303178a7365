"""Sparse node features for the first linear map of an encoder.

Bag-of-words features (Cora, CiteSeer, PubMed, Amazon, Coauthor, WikiCS) are about 1 % non-zero,
so the dense product ``x @ W`` of an encoder's first layer mostly multiplies zeros. Here that
product runs as ``torch.sparse.mm(csr(x), W)`` instead: the same sums up to float32 rounding,
with the gradient flowing to ``W`` (never to ``x``, which is why an input that requires a
gradient, such as GraphMAE's features with its learnable ``[MASK]`` token, stays dense).

``x`` itself stays a dense tensor everywhere (data modules, samplers, probes read it as one);
its compressed-sparse-row (CSR) form is kept beside it in a cache keyed on the tensor object
(weakly, so it goes with the tensor) and checked against the tensor's version counter, so an
in-place change is never missed. The untouched feature matrix of a full-batch run is the same
tensor at every step: it is converted once. Augmentations that produce new features by masking
columns, scaling rows or permuting rows of an input that already has a CSR form derive the
output's CSR form from it (:func:`derive_masked_columns`, :func:`derive_scaled_rows`,
:func:`derive_rows`) in time proportional to the non-zeros, instead of converting the dense
result again. Any other new tensor (a sampled mini-batch's rows, say) is measured once and
converted when it is sparse enough.

Modes (``encoder.sparse_input``): ``"auto"`` uses the CSR form when the share of non-zeros is
at most :data:`DENSITY_THRESHOLD` and there are at least :data:`MIN_FEATURES` columns;
``"true"`` whenever the input allows it (a 2-D float32 or float64 tensor without gradient);
``"false"`` never.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary
from torch_geometric.nn.dense.linear import Linear

__all__ = [
    "DENSITY_THRESHOLD",
    "MIN_FEATURES",
    "MODES",
    "SparseInputLinear",
    "SparseMode",
    "check_mode",
    "derive_masked_columns",
    "derive_rows",
    "derive_scaled_rows",
    "known_sparse_form",
    "sparse_form",
    "sparse_linear",
    "use_sparse_input",
]

SparseMode = Literal["auto", "true", "false"]
MODES: tuple[str, ...] = ("auto", "true", "false")

#: Share of non-zero entries up to which ``"auto"`` multiplies the features as a sparse matrix.
#: Measured on this repository's 2-core CPU (``benchmarks/bench_sparse.py --crossover``): for a
#: 2708 x 1433 input and 512 outputs, forward plus weight gradient, the sparse product with the
#: CSR form cached costs as much as the dense one at about 6 % non-zeros on an idle machine
#: (14 % at load 8-10, where the dense product runs at half its idle rate), and with a fresh
#: conversion at every step (sampled mini-batches) at 2.5 % (10 %); bag-of-words features are
#: at 0.5-2 %, TF-IDF ones (PubMed) at 10 %.
DENSITY_THRESHOLD: float = 0.05

#: Fewest feature columns for which ``"auto"`` multiplies sparsely. A sparse product pays a cost
#: per output element (writing the output, reading its gradient) that a narrow dense product
#: does not outweigh: with one non-zero per row (one-hot atom types), 20,000 x 37 inputs ran 2x
#: slower sparse, 3,800 x 100 about even, 3,800 x 300 1.6x faster
#: (``benchmarks/bench_sparse.py --crossover``). Bag-of-words features have 500 to 8,000 columns.
MIN_FEATURES: int = 128

# tensor -> (its version counter when measured, its CSR form or None when it stays dense)
_CACHE: WeakIdKeyDictionary = WeakIdKeyDictionary()


def check_mode(mode: object) -> SparseMode:
    """``mode`` as one of :data:`MODES`; YAML's ``true``/``false`` booleans are accepted.

    Raises:
        ValueError: for anything else.
    """
    if isinstance(mode, bool):
        mode = "true" if mode else "false"
    if mode not in MODES:
        raise ValueError(f"sparse_input must be one of {list(MODES)}, got {mode!r}")
    return mode  # type: ignore[return-value]


def _eligible(x: Tensor) -> bool:
    return (
        x.layout == torch.strided
        and x.dim() == 2
        and x.dtype in (torch.float32, torch.float64)  # the dtypes sparse products support
        and not x.requires_grad
        and x.numel() > 0
    )


def _cached(x: Tensor) -> tuple[bool, Tensor | None]:
    """``(known, csr)``: whether ``x`` (at its current version) was measured, and its CSR form."""
    entry = _CACHE.get(x)
    if entry is None or entry[0] != x._version:
        return False, None
    return True, entry[1]


def _remember(x: Tensor, csr: Tensor | None) -> None:
    _CACHE[x] = (x._version, csr)


@torch.compiler.disable
def sparse_form(x: Tensor, mode: SparseMode = "auto") -> Tensor | None:
    """The CSR form of ``x`` ``(N, F)`` to multiply with, or ``None`` to multiply densely.

    Cached per tensor: the first call on a tensor counts its non-zeros (``"auto"``) and
    converts it; later calls on the same unchanged tensor return the cached answer.
    """
    if mode == "false" or not _eligible(x):
        return None
    known, csr = _cached(x)
    if known and (csr is not None or mode == "auto"):
        return csr
    if mode == "auto":
        if x.size(1) < MIN_FEATURES:
            _remember(x, None)
            return None
        density = int(torch.count_nonzero(x)) / x.numel()
        if density > DENSITY_THRESHOLD:
            _remember(x, None)
            return None
    csr = x.to_sparse_csr()
    _remember(x, csr)
    return csr


def known_sparse_form(x: Tensor) -> Tensor | None:
    """The CSR form recorded for ``x`` (by :func:`sparse_form` or an augmentation), without
    converting anything; ``None`` when there is none."""
    known, csr = _cached(x)
    return csr if known else None


def _row_ids(csr: Tensor) -> Tensor:
    """The row of every stored value of ``csr``, ``(nnz,)``."""
    crow = csr.crow_indices()
    counts = crow.diff()
    return torch.repeat_interleave(torch.arange(counts.numel(), device=crow.device), counts)


def derive_masked_columns(out: Tensor, x: Tensor, keep: Tensor) -> None:
    """Record the CSR form of ``out = x`` with the columns outside ``keep`` ``(F,)`` bool
    zeroed, when ``x`` has one: the same structure, the masked values set to zero."""
    csr = known_sparse_form(x)
    if csr is None:
        return
    values = csr.values() * keep.to(csr.dtype)[csr.col_indices()]
    _remember(out, _with_values(csr, values))


def derive_scaled_rows(out: Tensor, x: Tensor, scale: Tensor) -> None:
    """Record the CSR form of ``out = x * scale[:, None]`` (``scale`` ``(N,)``, e.g. a 0/1
    node mask), when ``x`` has one."""
    csr = known_sparse_form(x)
    if csr is None:
        return
    values = csr.values() * scale.to(csr.dtype)[_row_ids(csr)]
    _remember(out, _with_values(csr, values))


def derive_rows(out: Tensor, x: Tensor, index: Tensor) -> None:
    """Record the CSR form of ``out = x[index]`` (``index`` ``(M,)`` row ids, e.g. a
    permutation), when ``x`` has one: the rows' stored values gathered in the new order."""
    csr = known_sparse_form(x)
    if csr is None:
        return
    crow, col, values = csr.crow_indices(), csr.col_indices(), csr.values()
    starts, counts = crow[index], crow.diff()[index]
    new_crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    nnz = int(new_crow[-1])
    # position j of new row r reads old position starts[r] + (j - new_crow[r])
    offset = torch.repeat_interleave(starts - new_crow[:-1], counts, output_size=nnz)
    gather = torch.arange(nnz, device=crow.device) + offset
    csr_out = torch.sparse_csr_tensor(
        new_crow, col[gather], values[gather], size=(index.numel(), csr.size(1))
    )
    _remember(out, csr_out)


def _with_values(csr: Tensor, values: Tensor) -> Tensor:
    return torch.sparse_csr_tensor(
        csr.crow_indices(), csr.col_indices(), values, size=csr.shape, dtype=values.dtype
    )


def sparse_linear(csr: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``csr @ weight.T (+ bias)``: a linear map ``weight`` ``(out, F)`` of sparse rows
    ``(N, F)``; the gradient flows to ``weight`` and ``bias``."""
    out = torch.sparse.mm(csr, weight.t())
    return out if bias is None else out + bias


class SparseInputLinear(Linear):
    """PyG's ``Linear`` that multiplies a sparse enough input as a CSR matrix
    (:func:`sparse_form`); parameters, state-dict keys and results are those of ``Linear``.

    An encoder turns the first linear map of its first layer into one with
    :func:`use_sparse_input`; ``sparse_mode`` is one of :data:`MODES`.
    """

    sparse_mode: SparseMode = "auto"

    def forward(self, x: Tensor) -> Tensor:
        csr = sparse_form(x, self.sparse_mode)
        if csr is None:
            return F.linear(x, self.weight, self.bias)
        return sparse_linear(csr, self.weight, self.bias)


def use_sparse_input(lin: torch.nn.Module, mode: SparseMode) -> None:
    """Make a PyG ``Linear`` a :class:`SparseInputLinear` in place (same parameters), so it
    multiplies sparse inputs as such; ``mode="false"`` leaves it as it is."""
    if mode == "false" or not isinstance(lin, Linear):
        return
    lin.__class__ = SparseInputLinear
    lin.sparse_mode = mode  # type: ignore[assignment]
