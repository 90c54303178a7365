"""Speed of the pure-PyTorch random walker and of gensim skip-gram on Cora_ML (2995 nodes).

DeepWalk settings of the sparsification study (Tsitsulin et al. 2023, §4.2): 10 walks per node
of 80 nodes, d = 128, window 10.
Run: ``python benchmarks/bench_random_walk.py`` (reads ``$GRAPHSSL_DATA_DIR`` or ``shared/data``;
the CitationFull folder is copied to a temporary directory because PyG writes ``processed/``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from graphssl.models.random_walk import random_walks, skipgram_embeddings

REPO = Path(__file__).resolve().parents[1]
WALK_LENGTH, WALKS_PER_NODE, REPEATS = 80, 10, 3


def _data_dir() -> Path:
    for cand in (os.environ.get("GRAPHSSL_DATA_DIR"), "/work/shared/data", REPO / "../shared/data"):
        if cand and (Path(cand) / "CitationFull").is_dir():
            return Path(cand)
    raise SystemExit("CitationFull not found: set GRAPHSSL_DATA_DIR to the shared/data folder")


def main() -> None:
    from torch_geometric.datasets import CitationFull

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "CitationFull"
        shutil.copytree(_data_dir() / "CitationFull", root)
        data = CitationFull(str(root), "Cora_ML")[0]
    n, edge_index = data.num_nodes, data.edge_index
    print(
        f"Cora_ML: {n} nodes, {edge_index.shape[1]} directed edges; {WALKS_PER_NODE} walks/node "
        f"x {WALK_LENGTH} nodes; torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    walks = torch.empty(0, dtype=torch.long)
    for p, q in ((1.0, 1.0), (1.0, 0.5)):
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            walks = random_walks(edge_index, n, WALK_LENGTH, WALKS_PER_NODE, p=p, q=q, seed=0)
            times.append(time.perf_counter() - start)
        best = min(times)
        print(
            f"random_walks p={p:g} q={q:g}: {walks.shape[0]} walks in {best:.3f} s (best of "
            f"{REPEATS}) = {walks.shape[0] / best:,.0f} walks/s, "
            f"{walks.shape[0] * (WALK_LENGTH - 1) / best:,.0f} steps/s"
        )
    walks = random_walks(edge_index, n, WALK_LENGTH, WALKS_PER_NODE, seed=0)
    start = time.perf_counter()
    skipgram_embeddings(walks, n, dim=128, window=10, epochs=1, negative=5, workers=1, seed=0)
    elapsed = time.perf_counter() - start
    print(
        f"skipgram_embeddings (gensim Word2Vec sg=1, d=128, window=10, negative=5, 1 epoch, "
        f"workers=1): {elapsed:.2f} s for {walks.numel():,} tokens = "
        f"{walks.numel() / elapsed:,.0f} tokens/s"
    )


if __name__ == "__main__":
    main()
