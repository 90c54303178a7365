"""Write graphssl/data/_embedded/cora.npz from the raw Planetoid Cora files.

The packaged copy lets the default experiment run where the raw files are absent (see
graphssl/data/embedded.py). Run once when the layout changes:

    python scripts/build_embedded_cora.py [--data-dir ../shared/data]

PyG reads the raw files into a temporary folder (it writes ``processed/`` beside ``raw/``), and
the written file is read back and compared with PyG's graph before the script reports success.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import torch

from graphssl.data.embedded import load_embedded, save_embedded

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "graphssl" / "data" / "_embedded" / "cora.npz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("GRAPHSSL_DATA_DIR", str(REPO.parent / "shared" / "data"))
    parser.add_argument("--data-dir", type=Path, default=Path(default))
    parser.add_argument("--out", type=Path, default=TARGET)
    args = parser.parse_args()

    from torch_geometric.datasets import Planetoid

    raw = args.data_dir / "Planetoid" / "Cora" / "raw"
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(raw, Path(tmp) / "Cora" / "raw")
        data = Planetoid(tmp, "Cora", split="public")[0]
    save_embedded(data, args.out)
    back = load_embedded(args.out)
    for key in ("x", "edge_index", "y", "train_mask", "val_mask", "test_mask"):
        a, b = getattr(data, key), getattr(back, key)
        if a.dtype != b.dtype or not torch.equal(a, b):
            raise SystemExit(f"{key} differs after the round trip ({a.dtype} vs {b.dtype})")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.1f} KiB), identical to PyG's Cora")


if __name__ == "__main__":
    main()
