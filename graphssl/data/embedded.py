"""Cora's public Planetoid split shipped inside the package, for machines without the raw files.

``graphssl/data/_embedded/cora.npz`` holds exactly what PyG's ``Planetoid(root, "Cora")[0]``
returns (features, edges, labels and the public train/validation/test masks) in a code-free
``.npz`` (read with ``allow_pickle=False``), so the default experiment (DGI on Cora) runs on a
fresh clone with no data folder and no network. ``scripts/build_embedded_cora.py`` writes the
file from the raw Planetoid files and the test suite checks that both load to the same graph.

Layout (all arrays; ``n`` nodes, ``f`` features, ``e`` directed edges):

* ``x_indptr [n+1]``, ``x_indices [nnz]``, ``x_data [nnz]``: the features as CSR rows;
* ``shape [2]``: ``(n, f)``;
* ``edge_index [2, e]``: PyG's edge order (coalesced, both directions);
* ``y [n]``: class ids;
* ``train_mask``, ``val_mask``, ``test_mask``: ``np.packbits`` of the boolean masks.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ["EMBEDDED", "embedded_path", "load_embedded", "save_embedded"]

#: Planetoid datasets shipped with the package: name -> file in ``graphssl/data/_embedded``
EMBEDDED: dict[str, str] = {"Cora": "cora.npz"}

_MASKS = ("train_mask", "val_mask", "test_mask")


def embedded_path(name: str) -> Path | None:
    """The packaged file of dataset ``name``, or ``None`` when none is shipped."""
    file = EMBEDDED.get(name)
    if file is None:
        return None
    path = Path(str(resources.files("graphssl.data") / "_embedded" / file))
    return path if path.is_file() else None


def _smallest_int(max_value: int) -> type[np.integer[Any]]:
    for dtype in (np.uint8, np.int16, np.int32):
        if max_value <= np.iinfo(dtype).max:
            return dtype
    return np.int64


def save_embedded(data: Data, path: Path) -> None:
    """Write ``data`` (``x``, ``edge_index``, ``y`` and the three masks) in the layout above."""
    x = data.x.numpy()
    n, f = x.shape
    rows, cols = np.nonzero(x)  # row-major: CSR order
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    arrays: dict[str, np.ndarray] = {
        "shape": np.array([n, f], dtype=np.int64),
        "x_indptr": indptr.astype(np.int32),
        "x_indices": cols.astype(_smallest_int(f - 1)),
        "x_data": x[rows, cols].astype(np.float32),
        "edge_index": data.edge_index.numpy().astype(_smallest_int(n - 1)),
        "y": data.y.numpy().astype(_smallest_int(int(data.y.max()))),
    }
    for mask in _MASKS:
        arrays[mask] = np.packbits(getattr(data, mask).numpy())
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]


def load_embedded(path: Path) -> Data:
    """The graph stored at ``path``, with PyG's dtypes (float32 ``x``, int64 ``edge_index`` and
    ``y``, bool masks); nothing in the file is executed (``allow_pickle=False``)."""
    with np.load(path, allow_pickle=False) as npz:
        n, f = (int(v) for v in npz["shape"])
        indptr = torch.from_numpy(npz["x_indptr"].astype(np.int64))
        indices = torch.from_numpy(npz["x_indices"].astype(np.int64))
        values = torch.from_numpy(npz["x_data"].astype(np.float32))
        x = torch.zeros(n, f, dtype=torch.float32)
        row = torch.repeat_interleave(torch.arange(n), indptr.diff())
        x[row, indices] = values
        data = Data(
            x=x,
            edge_index=torch.from_numpy(npz["edge_index"].astype(np.int64)),
            y=torch.from_numpy(npz["y"].astype(np.int64)),
        )
        for mask in _MASKS:
            bits = np.unpackbits(npz[mask], count=n).astype(bool)
            setattr(data, mask, torch.from_numpy(bits))
    return data
