"""Layer-wise extraction: the same rows as full-batch for every encoder with a layer-wise step,
the chunking of the graph, the ``auto`` choice, the fallbacks and their reasons, the config."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.data.node import InMemoryNodeDataModule
from graphssl.evaluation.extraction import extract_embeddings, plan_extraction
from graphssl.methods.base import SSLMethod
from graphssl.methods.bgrl import BGRL
from graphssl.methods.dgi import DGI
from graphssl.models.encode import encode, encode_layerwise, layerwise_reason
from graphssl.models.encoders import (
    GATEncoder,
    GCNEncoder,
    GINEncoder,
    MLPEncoder,
    SAGEEncoder,
)
from graphssl.models.layerwise import InferenceGraph, rowwise_reason
from graphssl.tasks.components import configured_extraction_plan, resolve_config
from graphssl.tasks.validate import ConfigError, validate_train_config

CONF = Path(__file__).resolve().parents[3] / "conf"
NUM_NODES = 3000
FEATURES = 40
HUB_IN_EDGES = 400  # in-edges of node 0: more than one edge-bounded chunk may hold


# ---------------------------------------------------------------------- test-local helpers
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


class _Unnamed(_Method):
    """forward embeds with its encoder but does not say which one."""

    forward_encoder = None


def _graph(kind: str = "directed", seed: int = 0) -> Data:
    """``NUM_NODES`` nodes, ~6 in-edges each, 10 % isolated (scattered), a hub with
    ``HUB_IN_EDGES`` in-edges, a few self-loops and duplicated edges; ``undirected`` stores
    both directions, ``weighted`` adds positive edge weights."""
    g = torch.Generator().manual_seed(seed)
    active = int(NUM_NODES * 0.9)
    m = active * 3
    src = torch.randint(0, active, (m,), generator=g)
    dst = torch.randint(0, active, (m,), generator=g)
    hub_src = torch.randint(0, active, (HUB_IN_EDGES,), generator=g)
    loops = torch.arange(0, active, 97)
    edge_index = torch.stack(
        [torch.cat([src, hub_src, loops, src[:50]]), torch.cat([dst, 0 * hub_src, loops, dst[:50]])]
    )
    if kind == "undirected":
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    relabel = torch.randperm(NUM_NODES, generator=g)  # isolated nodes spread over the ids
    edge_index = relabel[edge_index]
    data = Data(
        x=torch.randn(NUM_NODES, FEATURES, generator=g),
        edge_index=edge_index,
        y=torch.randint(0, 3, (NUM_NODES,), generator=g),
        num_nodes=NUM_NODES,
    )
    if kind == "weighted":
        data.edge_weight = torch.rand(edge_index.size(1), generator=g) + 0.1
    return data


ENCODERS: dict[str, Callable[[], nn.Module]] = {
    "gcn": lambda: GCNEncoder(FEATURES, 64, num_layers=2),
    # narrower than its input: the linear map runs before the product with the adjacency
    "gcn_narrow_bn_last": lambda: GCNEncoder(
        FEATURES, 16, num_layers=3, norm="batch_norm", norm_last=True, act_last=True
    ),
    "sage": lambda: SAGEEncoder(FEATURES, 64, num_layers=2),
    "sage_bn_dropout": lambda: SAGEEncoder(
        FEATURES, 32, num_layers=3, norm="batch_norm", dropout=0.5, act="relu", act_last=True
    ),
    "gin": lambda: GINEncoder(FEATURES, 32, num_layers=3),  # batch norm inside and between
    "gat": lambda: GATEncoder(FEATURES, 32, num_layers=2, heads=4),
    "gat_bn_dropout": lambda: GATEncoder(
        FEATURES, 32, num_layers=3, heads=2, norm="batch_norm", dropout=0.3
    ),
    "mlp": lambda: MLPEncoder(FEATURES, 32, num_layers=2, norm="batch_norm"),
}


def _trained(make: Callable[[], nn.Module], data: Data) -> nn.Module:
    """A fresh encoder whose batch norms have running statistics away from their start."""
    torch.manual_seed(0)
    enc = make()
    enc.train()
    with torch.no_grad():
        for _ in range(3):
            encode(enc, data)
    return enc.eval()


def _close(a: Tensor, b: Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------- the same rows
@pytest.mark.parametrize("kind", ["directed", "undirected", "weighted"])
@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_layerwise_equals_full_batch(name: str, kind: str) -> None:
    data = _graph(kind)
    encoder = _trained(ENCODERS[name], data)
    assert layerwise_reason(encoder) is None
    dm = InMemoryNodeDataModule(data)
    model = _Method(encoder)
    full, y = extract_embeddings(model, dm, mode="full")
    # 450 target nodes per chunk: 7 chunks per layer
    layerwise, y2 = extract_embeddings(model, dm, mode="layerwise", chunk_size=450)
    assert layerwise.shape == full.shape == (NUM_NODES, encoder.out_channels)
    assert layerwise.dtype == torch.float32 and y is not None and torch.equal(y, y2)
    _close(layerwise, full)
    assert encoder.training is False and model.training is True  # modes restored


@pytest.mark.parametrize("name", ["gat", "sage", "gcn"])
def test_edge_bounded_chunks_equal_full_batch(name: str) -> None:
    # chunks bounded by their in-edges: the hub is a chunk of its own, others are cut around it
    data = _graph("undirected")
    encoder = _trained(ENCODERS[name], data)
    graph = encoder.inference_graph(data)
    rows, per_edge = encoder.inference_floats(FEATURES)
    chunk_bytes = 4 * max(per_edge, 1) * 200
    max_edges = chunk_bytes // (4 * per_edge) if per_edge else None
    with torch.no_grad():
        full = encode(encoder, data)
        out = encode_layerwise(encoder, data, chunk_bytes=chunk_bytes)
    _close(out, full)
    if max_edges is not None:
        chunks = graph.chunks(max(1, chunk_bytes // (4 * rows)), max_edges)
        assert len(chunks) > 10
        assert graph.max_in_degree() > max_edges  # some node is a chunk of its own


def test_methods_extract_layerwise_through_their_forward_encoder() -> None:
    data = _graph("undirected")
    dm = InMemoryNodeDataModule(data)
    for model in (DGI(GCNEncoder(FEATURES, 32, num_layers=2)), BGRL(SAGEEncoder(FEATURES, 32))):
        full, _ = extract_embeddings(model, dm, mode="full")
        plan = plan_extraction(model, dm, mode="layerwise")
        assert plan.mode == "layerwise" and not plan.fallback
        enc_name = model.forward_encoder
        assert enc_name is not None and plan.encoder is model.encoders()[enc_name]
        _close(extract_embeddings(model, dm, mode="layerwise", chunk_size=500)[0], full)
    # an explicit sub-encoder: BGRL's target
    target, _ = extract_embeddings(model, dm, encoder_source="target", mode="full")
    lw, _ = extract_embeddings(model, dm, encoder_source="target", mode="layerwise")
    _close(lw, target)


def test_mini_batch_samples_the_forward_encoders_graph() -> None:
    # GCN through a method's forward: sampled from the full graph's normalisation (the
    # forward encoder's prepare), so all-neighbour mini-batches give the full-batch rows
    data = _graph("directed")
    dm = InMemoryNodeDataModule(data)
    model = DGI(GCNEncoder(FEATURES, 32, num_layers=2))
    full, _ = extract_embeddings(model, dm, mode="full")
    _close(extract_embeddings(model, dm, mini_batch=True)[0], full)


def test_layerwise_progress_bar(capsys: pytest.CaptureFixture[str]) -> None:
    data = _graph()
    encoder = _trained(ENCODERS["sage"], data)
    encode_layerwise(encoder, data, chunk_nodes=1000, progress=True)
    err = capsys.readouterr().err
    assert "extract (layer-wise)" in err and "/6 " in err  # 2 layers x 3 chunks
    encode_layerwise(encoder, data, chunk_nodes=1000)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------- the graph and chunks
def test_inference_graph_groups_in_edges_by_target() -> None:
    edge_index = torch.tensor([[0, 2, 1, 0, 3, 0], [1, 1, 0, 3, 1, 1]])
    weight = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    graph = InferenceGraph.from_edge_index(edge_index, 5, weight)
    assert graph.crow.tolist() == [0, 1, 5, 5, 6, 6]  # node 2 and 4: no in-edges
    assert graph.col.tolist() == [1, 0, 2, 3, 0, 0]  # the given order within a target
    assert graph.weight is not None and graph.weight.tolist() == [3.0, 1.0, 2.0, 5.0, 6.0, 4.0]
    src, dst, w = graph.edges(1, 4)
    assert src.tolist() == [0, 2, 3, 0, 0] and dst.tolist() == [0, 0, 0, 0, 2]
    assert w is not None and w.tolist() == [1.0, 2.0, 5.0, 6.0, 4.0]
    block = graph.block(1, 4).to_dense()
    assert block.shape == (3, 5) and block[0].tolist() == [7.0, 0.0, 2.0, 5.0, 0.0]
    with pytest.raises(ValueError, match=r"expected ids in \[0, 3\)"):
        InferenceGraph.from_edge_index(edge_index, 3)
    with pytest.raises(ValueError, match="one weight per edge"):
        InferenceGraph.from_edge_index(edge_index, 5, weight[:2])


@pytest.mark.parametrize(("max_nodes", "max_edges"), [(450, None), (1000, 500), (5000, 50)])
def test_chunks_cover_every_node_once_within_bounds(max_nodes: int, max_edges: int | None) -> None:
    data = _graph("undirected")
    graph = InferenceGraph.from_edge_index(data.edge_index, NUM_NODES)
    chunks = graph.chunks(max_nodes, max_edges)
    assert chunks[0][0] == 0 and chunks[-1][1] == NUM_NODES
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    crow = graph.crow.long()
    for start, end in chunks:
        assert 1 <= end - start <= max_nodes
        edges = int(crow[end] - crow[start])
        assert max_edges is None or edges <= max_edges or end - start == 1
    if max_edges == 50:
        assert any(int(crow[e] - crow[s]) > 50 for s, e in chunks)  # the hub, alone
    with pytest.raises(ValueError, match="max_nodes >= 1"):
        graph.chunks(0)


# ---------------------------------------------------------------------- auto and fallbacks
def test_auto_is_full_batch_within_the_budget_and_layerwise_above() -> None:
    dm = InMemoryNodeDataModule(_graph())
    model = _Method(GCNEncoder(FEATURES, 64, num_layers=2))
    assert plan_extraction(model, dm).mode == "full"  # no budget
    within = plan_extraction(model, dm, memory_budget_gb=8)
    assert within.mode == "full" and "within the memory budget" in within.reason
    above = plan_extraction(model, dm, memory_budget_gb=1e-4)
    assert above.mode == "layerwise" and "above the memory budget of 0.0001 GiB" in above.reason
    assert above.chunk_bytes == int(1e-4 * 2**30 / 16)
    assert plan_extraction(model, dm, mini_batch=True, memory_budget_gb=1e-4).mode == "mini_batch"


def test_auto_picks_layerwise_at_products_size() -> None:
    # ogbn-products' size, SAGE [256, 256] as in benchmarks/products_e2e.py; the tensors are
    # expanded views, nothing of that size is allocated
    n, e = 2_449_029, 61_859_140
    data = Data(
        x=torch.zeros(1, 100).expand(n, 100),
        edge_index=torch.zeros(2, 1, dtype=torch.long).expand(2, e),
        num_nodes=n,
    )
    dm = InMemoryNodeDataModule(data)
    plan = plan_extraction(BGRL(SAGEEncoder(100, 256)), dm, memory_budget_gb=8)
    assert plan.mode == "layerwise", plan.reason
    # an arxiv-size graph fits the budget: full-batch
    n, e = 169_343, 2_315_598
    small = Data(
        x=torch.zeros(1, 128).expand(n, 128),
        edge_index=torch.zeros(2, 1, dtype=torch.long).expand(2, e),
        num_nodes=n,
    )
    fits = plan_extraction(
        BGRL(SAGEEncoder(128, 256)), InMemoryNodeDataModule(small), memory_budget_gb=8
    )
    assert fits.mode == "full", fits.reason


def test_an_encoder_without_a_layerwise_step_falls_back_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = _graph()
    dm = InMemoryNodeDataModule(data)
    encoder = GCNEncoder(FEATURES, 32, num_layers=2, norm="graph_norm")
    reason = layerwise_reason(encoder)
    assert reason is not None and "GraphNorm" in reason
    model = _Method(encoder)
    auto = plan_extraction(model, dm, memory_budget_gb=1e-4)
    assert auto.mode == "mini_batch" and "GraphNorm" in auto.reason and not auto.fallback
    with caplog.at_level(logging.INFO, logger="graphssl.evaluation.extraction"):
        z, _ = extract_embeddings(model, dm, mode="layerwise")
    (record,) = [r for r in caplog.records if "embedding extraction" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "full" in record.getMessage() and "GraphNorm" in record.getMessage()
    _close(z, extract_embeddings(model, dm, mode="full")[0])
    above = plan_extraction(model, dm, mode="layerwise", memory_budget_gb=1e-4)
    assert above.mode == "mini_batch" and above.fallback
    with pytest.raises(ValueError, match=r"cannot run layer by layer.*GraphNorm"):
        encode_layerwise(encoder.eval(), data)


def test_other_reasons_layerwise_is_not_possible() -> None:
    dm = InMemoryNodeDataModule(_graph())
    unnamed = _Unnamed(SAGEEncoder(FEATURES, 32))
    plan = plan_extraction(unnamed, dm, mode="layerwise")
    assert plan.mode == "full" and plan.fallback and "forward_encoder" in plan.reason
    # the encoder named explicitly runs layer by layer
    assert plan_extraction(unnamed, dm, "encoder", mode="layerwise").mode == "layerwise"
    assert "not a graphssl GNNEncoder" in str(layerwise_reason(nn.Linear(3, 3)))
    assert "LayerNorm" in str(rowwise_reason(nn.Sequential(GCNEncoder(3, 4, norm="layer_norm"))))
    assert rowwise_reason(nn.BatchNorm1d(4)) is None
    assert "running statistics" in str(rowwise_reason(nn.BatchNorm1d(4, track_running_stats=False)))


def test_plan_errors_name_the_value() -> None:
    dm = InMemoryNodeDataModule(_graph())
    model = _Method(SAGEEncoder(FEATURES, 32))
    with pytest.raises(ValueError, match="Could not resolve extraction mode 'sampled'"):
        plan_extraction(model, dm, mode="sampled")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"mini_batch=True .* mode='layerwise'"):
        plan_extraction(model, dm, mode="layerwise", mini_batch=True)
    with pytest.raises(ValueError, match="memory_budget_gb must be > 0"):
        plan_extraction(model, dm, memory_budget_gb=0)
    with pytest.raises(ValueError, match="eval mode"):
        encode_layerwise(model.encoder.train(), dm.data)


# ---------------------------------------------------------------------- config and the run
def _compose(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def test_config_defaults_and_checks() -> None:
    cfg = resolve_config(_compose("dataset=sbm", "trainer.mini_batch=true"))
    ex = cfg.eval.extraction
    assert ex.mode == "auto" and ex.memory_budget_gb == cfg.trainer.memory_budget_gb == 8
    assert ex.chunk_size is None and ex.mini_batch is False
    validate_train_config(cfg)
    with pytest.raises(ConfigError, match=r"eval\.extraction\.mode='sampled'"):
        validate_train_config(
            resolve_config(_compose("dataset=sbm", "eval.extraction.mode=sampled"))
        )
    with pytest.raises(ConfigError, match=r"eval\.extraction\.mode=layerwise"):
        validate_train_config(
            resolve_config(
                _compose(
                    "dataset=sbm",
                    "eval.extraction.mini_batch=true",
                    "eval.extraction.mode=layerwise",
                )
            )
        )
    with pytest.raises(ConfigError, match="num_neighbors"):
        validate_train_config(
            resolve_config(
                _compose(
                    "dataset=sbm",
                    "eval.extraction.mode=mini_batch",
                    "eval.extraction.num_neighbors=[5,5,5]",
                )
            )
        )


def test_configured_plan_follows_the_budget() -> None:
    from graphssl.tasks.components import build_datamodule, build_method

    cfg = resolve_config(_compose("dataset=sbm", "encoder=sage"))
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    assert configured_extraction_plan(cfg, method, dm).mode == "full"
    small = resolve_config(_compose("dataset=sbm", "encoder=sage", "trainer.memory_budget_gb=1e-6"))
    assert configured_extraction_plan(small, method, dm).mode == "layerwise"


def test_a_run_logs_its_extraction_mode(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    from graphssl.tasks.train import train

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    metrics = train(
        _compose(
            "dataset=sbm",
            "trainer.epochs=2",
            "trainer.progress=false",
            "eval.figures=false",
            "eval.baseline=false",
            "logger.log_embeddings=false",
            "eval.extraction.memory_budget_gb=1e-6",
            "eval.extraction.chunk_size=64",
            f"paths.outputs_dir={outputs_dir}",
        )
    )
    assert metrics["time/extract_seconds"] >= 0
    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["extract/mode"] == "layerwise"
    assert "above the memory budget" in run.data.tags["extract/reason"]
    assert "time/extract_seconds" in run.data.metrics
