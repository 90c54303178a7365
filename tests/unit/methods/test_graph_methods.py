"""Graph-level methods (InfoGraph, GraphCL): training on MUTAG (or the generated graphs when the
real data is absent), graph embeddings through the probes, the readout, losses and the batched
augmentations."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch_geometric.data import Batch, Data

from graphssl.data.graph import SyntheticGraphsDataModule
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.evaluation.runner import run_probes
from graphssl.methods.graphcl import (
    GraphCL,
    drop_nodes,
    mask_attributes,
    perturb_edges,
    random_choice,
    random_subgraph,
)
from graphssl.methods.infograph import (
    InfoGraph,
    layer_outputs,
    local_global_jsd,
    local_global_jsd_terms,
    multi_layer_readout,
)
from graphssl.methods.losses import graphcl_nt_xent
from graphssl.models.encoders import GCNEncoder, GINEncoder
from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.training.trainer import Trainer
from graphssl.utils import seed_everything

REPO = Path(__file__).resolve().parents[3]
CONF = REPO / "conf"
GRAPH_METHODS = ["infograph", "graphcl"]


def _tu_data_dir() -> Path | None:
    for c in (os.environ.get("GRAPHSSL_DATA_DIR"), str(REPO.parent / "shared" / "data")):
        if c and (Path(c) / "TUDataset" / "MUTAG" / "raw").is_dir():
            return Path(c)
    return None


def graph_config(model: str, tmp_path: Path, *extra: str):
    """A small run of ``model`` on MUTAG, or on the generated graphs without the real data."""
    data = _tu_data_dir()
    dataset = ["dataset=mutag", f"paths.data_dir={data}"] if data else ["dataset=synthetic_graphs"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                f"model={model}",
                *dataset,
                f"paths.outputs_dir={tmp_path}",
                "encoder=gin",
                "encoder.hidden_channels=32",
                "encoder.num_layers=3",
                "trainer.epochs=8",
                "trainer.patience=null",
                "trainer.progress=false",
                *extra,
            ],
        )
    return resolve_config(cfg)


@pytest.mark.parametrize("model", GRAPH_METHODS)
def test_graph_method_trains_and_probes(model: str, tmp_path: Path) -> None:
    cfg = graph_config(model, tmp_path)
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    assert method.graph_level and not method.supports_mini_batch
    assert set(method.encoders()) == {"encoder"}
    result = instantiate(cfg.trainer).fit(method, dm)
    losses = result.losses
    assert len(losses) == 8 and all(math.isfinite(v) for v in losses)
    first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
    assert last < first, f"{model}: loss did not fall ({first:.4f} -> {last:.4f})"

    z, y = extract_embeddings(method, dm)
    assert y is not None and z.shape == (dm.num_graphs, 3 * 32) and y.shape == (dm.num_graphs,)
    assert torch.isfinite(z).all()
    z_enc, _ = extract_embeddings(method, dm, encoder_source="encoder")  # mean-pooled last layer
    assert z_enc.shape == (dm.num_graphs, 32)

    splits = dm.splits()
    assert len(splits) == 10
    res = LogRegProbe(weight_decay=[1e-2, 1e-4]).evaluate(
        z, y, splits[0].train, splits[0].val, splits[0].test
    )
    assert 0.0 <= res["test_acc"] <= 1.0
    probes = {"logreg": LogRegProbe(weight_decay=[1e-1, 1e-2, 1e-3])}
    out = run_probes(z, y, splits, probes)
    assert out["probe/logreg/num_splits"] == 10.0
    assert 0.5 <= out["probe/logreg/test_acc"] <= 1.0 and out["probe/logreg/test_acc_std"] >= 0


@pytest.mark.parametrize("model", GRAPH_METHODS)
def test_graph_method_rejects_node_level_dataset(model: str, tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = resolve_config(
            compose(
                config_name="train",
                overrides=[
                    f"model={model}",
                    "dataset=karate",
                    "encoder.hidden_channels=16",
                    "trainer.epochs=1",
                    "trainer.progress=false",
                    f"paths.outputs_dir={tmp_path}",
                ],
            )
        )
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    with pytest.raises(ValueError, match=r"graph-level method .* choose a graph-level dataset"):
        instantiate(cfg.trainer).fit(method, dm)


def test_graph_training_is_deterministic(tmp_path: Path) -> None:
    def once() -> torch.Tensor:
        dm = SyntheticGraphsDataModule(num_graphs=40, batch_size=16)
        seed_everything(0)
        method = GraphCL(GINEncoder(8, 16, 2), optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
        Trainer(epochs=2, progress=False).fit(method, dm)
        return extract_embeddings(method, dm)[0]

    assert torch.equal(once(), once())


def test_probes_follow_the_task_they_declare() -> None:
    from graphssl.evaluation import Evaluation
    from graphssl.evaluation.knn_probe import KNNProbe
    from graphssl.evaluation.logreg_probe import LogRegProbe

    configured = {"logreg": LogRegProbe(max_iter=7), "knn": KNNProbe(k=3), "off": None}
    evaluation = Evaluation(probes=configured)
    classification = evaluation.probes_for("classification")
    assert set(classification) == {"logreg", "knn"}
    assert classification["logreg"] is not configured["logreg"]  # a fresh, unfitted copy
    assert classification["logreg"].max_iter == 7 and classification["knn"].k == 3
    reg = evaluation.probes_for("regression")
    assert list(reg) == ["ridge"] and type(reg["ridge"]).__name__ == "RidgeProbe"
    multi = evaluation.probes_for("multilabel")
    assert list(multi) == ["logreg"] and multi["logreg"].multilabel
    assert multi["logreg"].max_iter == 7 and not configured["logreg"].multilabel
    assert Evaluation().probes_for("regression") == {}


# ------------------------------------------------------------------ readout and losses
def _batch(seed: int = 0, num_graphs: int = 6) -> Batch:
    dm = SyntheticGraphsDataModule(num_graphs=num_graphs, seed=seed, num_folds=2)
    return Batch.from_data_list(dm.graphs)


@pytest.mark.parametrize("encoder_cls", [GINEncoder, GCNEncoder])
def test_layer_outputs_end_with_the_encoder_output(encoder_cls) -> None:
    torch.manual_seed(0)
    enc = encoder_cls(8, 16, num_layers=3).eval()
    batch = _batch()
    outs = layer_outputs(enc, batch)
    assert len(outs) == 3 and all(o.shape == (batch.num_nodes, 16) for o in outs)
    assert torch.allclose(outs[-1], enc(batch.x, batch.edge_index))
    local, graphs = multi_layer_readout(enc, batch, pool="sum")
    assert local.shape == (batch.num_nodes, 48) and graphs.shape == (6, 48)
    assert torch.allclose(graphs[2], local[batch.batch == 2].sum(0), atol=1e-5)
    _, last = multi_layer_readout(enc, batch, pool="mean", concat_layers=False)
    assert torch.allclose(last[0], outs[-1][batch.batch == 0].mean(0), atol=1e-6)


def test_local_global_jsd_matches_naive() -> None:
    torch.manual_seed(0)
    local, summary = torch.randn(7, 4), torch.randn(3, 4)
    index = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    pos, neg = [], []
    for i in range(7):
        for g in range(3):
            s = float(local[i] @ summary[g])
            if g == index[i]:
                pos.append(math.log(2) - math.log1p(math.exp(-s)))
            else:
                neg.append(math.log1p(math.exp(s)) - math.log(2))
    expected = sum(neg) / len(neg) - sum(pos) / len(pos)
    assert local_global_jsd(local, summary, index).item() == pytest.approx(expected, rel=1e-5)
    # one graph: only the positive term
    one = local_global_jsd(local, summary[:1], torch.zeros(7, dtype=torch.long))
    assert torch.isfinite(one)
    # what a process computes for its own nodes against every graph: the terms of node
    # ranges make up the whole loss
    parts = torch.cat(
        [local_global_jsd_terms(local[r], summary, index[r]) for r in (slice(0, 3), slice(3, 7))]
    )
    assert parts.shape == (7,)
    assert parts.mean().item() == pytest.approx(expected, rel=1e-5)


def test_graphcl_nt_xent_matches_naive_and_needs_two_graphs() -> None:
    torch.manual_seed(0)
    z1, z2 = torch.randn(5, 3), torch.randn(5, 3)
    sim = F.normalize(z1, dim=1) @ F.normalize(z2, dim=1).t() / 0.2
    exp = sim.exp()

    def side(e: torch.Tensor) -> float:
        return float(sum(-math.log(e[i, i] / (e[i].sum() - e[i, i])) for i in range(5)) / 5)

    assert graphcl_nt_xent(z1, z2, 0.2).item() == pytest.approx(
        0.5 * (side(exp) + side(exp.t())), rel=1e-5
    )
    aligned = torch.eye(4)
    assert graphcl_nt_xent(aligned, aligned, 0.2) < graphcl_nt_xent(aligned, aligned.flip(0), 0.2)
    with pytest.raises(ValueError, match="at least 2 graphs"):
        graphcl_nt_xent(torch.randn(1, 3), torch.randn(1, 3))


def test_infograph_forward_gives_one_row_per_graph() -> None:
    method = InfoGraph(GINEncoder(8, 16, 2))
    assert method(_batch()).shape == (6, 32) and method.embedding_dim == 32
    single = Data(x=torch.randn(5, 8), edge_index=torch.tensor([[0, 1], [1, 0]]))
    assert method(single).shape == (1, 32)


# -------------------------------------------------------------------------- augmentations
def _edges_within_graphs(b: Data) -> bool:
    src, dst = b.edge_index
    return bool((b.batch[src] == b.batch[dst]).all()) and int(b.edge_index.max()) < b.x.size(0)


@pytest.mark.parametrize("augment", [drop_nodes, random_subgraph])
def test_node_removing_augmentations_keep_graphs_apart(augment) -> None:
    batch = _batch(num_graphs=20)
    torch.manual_seed(0)
    out = augment(batch, 0.3)
    assert out.num_graphs == 20 and out.x.size(0) < batch.x.size(0)
    counts = torch.bincount(out.batch, minlength=20)
    assert bool((counts >= 1).all())
    assert torch.equal(out.ptr, torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]))
    assert _edges_within_graphs(out)
    assert batch.x.size(0) == sum(g.num_nodes for g in _batch(num_graphs=20).to_data_list())
    # roughly (1 - p) of the nodes remain
    assert 0.5 < out.x.size(0) / batch.x.size(0) < 0.9
    torch.manual_seed(0)
    again = augment(batch, 0.3)
    assert torch.equal(again.x, out.x) and torch.equal(again.edge_index, out.edge_index)
    # even p close to 1 leaves one node per graph
    assert bool((torch.bincount(augment(batch, 0.99).batch, minlength=20) >= 1).all())


def test_random_subgraph_is_connected_growth() -> None:
    # a path 0-1-2-...-9: the kept nodes must form one contiguous stretch
    n = 10
    src = torch.arange(n - 1)
    g = Data(
        x=torch.randn(n, 2),
        edge_index=torch.stack([torch.cat([src, src + 1]), torch.cat([src + 1, src])]),
    )
    batch = Batch.from_data_list([g, g])
    torch.manual_seed(1)
    out = random_subgraph(batch, 0.5)
    assert torch.bincount(out.batch).tolist() == [5, 5]
    assert out.edge_index.size(1) == 2 * 2 * 4  # a 5-node path has 4 undirected edges


def test_perturb_edges_and_mask_attributes() -> None:
    batch = _batch(num_graphs=20)
    x_before = batch.x.clone()
    torch.manual_seed(0)
    out = perturb_edges(batch, 0.3)
    assert out.edge_index.shape == batch.edge_index.shape and _edges_within_graphs(out)
    assert not torch.equal(out.edge_index, batch.edge_index)
    masked = mask_attributes(batch, 0.3)
    changed = (masked.x != batch.x).any(1).float().mean()
    assert 0.15 < float(changed) < 0.45 and torch.equal(masked.edge_index, batch.edge_index)
    assert torch.equal(batch.x, x_before)  # the input batch is left untouched
    picked = random_choice(batch, [mask_attributes])
    assert picked.x.shape == batch.x.shape
    with pytest.raises(ValueError, match="ratio p must be in"):
        drop_nodes(batch, 1.0)
