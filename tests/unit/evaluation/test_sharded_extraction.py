"""Extraction shared out across the ranks of a process group equals one process's.

Two gloo ranks (rank 0 here, rank 1 spawned by :func:`graphssl.training.distributed.launch`)
extract a SAGE encoder's node embeddings mini-batch and layer-wise with
:func:`~graphssl.evaluation.extraction.extract_sharded`; rank 0's rows equal
:func:`~graphssl.evaluation.extraction.extract_embeddings` on one process to 1e-5, and rank 1
gets nothing. Small chunks and a node count that two does not divide make both ranks compute
several chunks of unequal ranges.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.data.node import InMemoryNodeDataModule
from graphssl.evaluation.extraction import (
    extract_embeddings,
    extract_sharded,
    node_range,
)
from graphssl.methods.base import SSLMethod
from graphssl.models.encode import encode
from graphssl.models.encoders import SAGEEncoder
from graphssl.models.layerwise import InferenceGraph
from graphssl.training import distributed

NODES, FEATURES = 101, 6
TOL = 1e-5
#: extraction settings shared out across ranks, and the keyword arguments of each
MODES: dict[str, dict[str, Any]] = {
    "mini_batch": {"mode": "mini_batch"},
    "layerwise": {"mode": "layerwise", "chunk_size": 7},
}


class _Method(SSLMethod):
    """One encoder; forward is its node embeddings, and says so (forward_encoder)."""

    forward_encoder = "encoder"

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)


def _setup() -> tuple[_Method, InMemoryNodeDataModule]:
    g = torch.Generator().manual_seed(0)
    data = Data(
        x=torch.randn(NODES, FEATURES, generator=g),
        edge_index=torch.randint(0, NODES, (2, 5 * NODES), generator=g),
        y=torch.randint(0, 3, (NODES,), generator=g),
    )
    dm = InMemoryNodeDataModule(data, seed=0)
    dm.setup()
    torch.manual_seed(0)
    return _Method(SAGEEncoder(FEATURES, 8, num_layers=2)), dm


def _extract_all() -> dict[str, Any]:
    """This rank's sharded extractions, and the nodes it computed rows for (mini-batch: the
    seeds of its loader; layer-wise: the target ranges of its chunks)."""
    method, dm = _setup()
    out: dict[str, Any] = {"seeds": [], "chunks": []}
    loader, chunks = dm.neighbor_loader, InferenceGraph.chunks

    def recorded_loader(*args: Any, **kwargs: Any) -> Any:
        out["seeds"].append(kwargs.get("input_nodes"))
        return loader(*args, **kwargs)

    def recorded_chunks(graph: InferenceGraph, *args: Any) -> list[tuple[int, int]]:
        got = chunks(graph, *args)
        out["chunks"].append(got)
        return got

    dm.neighbor_loader = recorded_loader  # type: ignore[method-assign]
    InferenceGraph.chunks = recorded_chunks  # type: ignore[method-assign]
    try:
        for name, kwargs in MODES.items():
            got = extract_sharded(method, dm, **kwargs)
            out[name] = (
                None if got is None else (got.embeddings, got.labels, got.ranks, got.plan.mode)
            )
    finally:
        InferenceGraph.chunks = chunks  # type: ignore[method-assign]
    # full-batch is not shared out: every rank gets None and rank 0 extracts alone afterwards
    out["full"] = extract_sharded(method, dm, mode="full")
    return out


def _rank_worker(rank: int, folder: str) -> Callable[[], None]:
    return lambda: torch.save(_extract_all(), Path(folder) / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("ranks")
    rank0 = distributed.launch(
        _extract_all, _rank_worker, (str(folder),), 2, timeout_s=120, threads=1
    )
    method, dm = _setup()
    one = {name: extract_embeddings(method, dm, **kwargs) for name, kwargs in MODES.items()}
    rank1 = torch.load(folder / "rank1.pt", weights_only=False)
    return {"one": one, "rank0": rank0, "rank1": rank1}


@pytest.mark.slow  # a spawned process
@pytest.mark.parametrize("mode", sorted(MODES))
def test_two_ranks_extract_the_rows_of_one_process(runs: dict[str, Any], mode: str) -> None:
    z_one, y_one = runs["one"][mode]
    z, y, ranks, planned = runs["rank0"][mode]
    assert planned == mode and ranks == 2
    assert z.shape == z_one.shape == (NODES, 8) and z.dtype == torch.float32
    assert float((z - z_one).abs().max()) < TOL
    assert torch.equal(y, y_one)
    assert float(z.abs().max()) > 1e-3  # rows of a model, not zeros left unfilled
    assert runs["rank1"][mode] is None  # only rank 0 holds the embeddings


@pytest.mark.slow  # a spawned process
def test_each_rank_computes_the_rows_of_its_own_nodes(runs: dict[str, Any]) -> None:
    for rank, part in ((0, (0, 51)), (1, (51, NODES))):
        out = runs[f"rank{rank}"]
        (seeds,) = out["seeds"]  # mini-batch: a loader over this rank's seeds only
        assert torch.equal(seeds, torch.arange(*part))
        (chunks,) = out["chunks"]  # layer-wise: chunks of 7 target nodes within its range
        assert chunks[0][0] == part[0] and chunks[-1][1] == part[1] and len(chunks) > 1
        assert all(end - start <= 7 for start, end in chunks)


@pytest.mark.slow  # a spawned process
def test_full_batch_extraction_is_not_shared_out(runs: dict[str, Any]) -> None:
    assert runs["rank0"]["full"] is None and runs["rank1"]["full"] is None


def test_node_ranges_cover_every_node_once_in_order() -> None:
    for count, parts in ((101, 2), (7, 3), (4, 4), (10, 1)):
        ranges = [node_range(count, i, parts) for i in range(parts)]
        assert ranges[0][0] == 0 and ranges[-1][1] == count
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        sizes = [last - first for first, last in ranges]
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_without_a_group_sharded_extraction_is_the_whole_extraction() -> None:
    method, dm = _setup()
    got = extract_sharded(method, dm, mode="mini_batch")
    assert got is not None and got.ranks == 1
    z, _ = extract_embeddings(method, dm, mode="mini_batch")
    assert torch.equal(got.embeddings, z)
