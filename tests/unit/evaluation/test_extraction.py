"""Tests of ``extract_embeddings``: graph-level, node full-batch and node mini-batch paths."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import global_mean_pool

from graphssl.data.base import DataModule, Split
from graphssl.data.node import InMemoryNodeDataModule
from graphssl.evaluation import extraction
from graphssl.evaluation.extraction import _select_encoder, extract_embeddings
from graphssl.methods.base import SSLMethod
from graphssl.models.encode import encode
from graphssl.models.encoders import GATEncoder, GCNEncoder, MLPEncoder, SAGEEncoder

SHARED_DATA = Path(os.environ.get("GRAPHSSL_SHARED_DATA", "/work/shared/data"))
ENCODERS = {"gcn": GCNEncoder, "sage": SAGEEncoder, "gat": GATEncoder}


# ---------------------------------------------------------------------- test-local helpers
class _GraphLevelDataModule(DataModule):
    """Graph-level DataModule over a list of small graphs, evaluated in batches of 3."""

    is_graph_level = True

    def __init__(self, graphs: list[Data]) -> None:
        super().__init__("tiny-graphs")
        self._graphs = graphs

    def _setup(self) -> None:
        pass

    @property
    def data(self) -> Data:
        return Batch.from_data_list(self._graphs)

    @property
    def num_classes(self) -> int:
        return 2

    @property
    def labels(self) -> Tensor | None:
        return torch.cat([g.y for g in self._graphs])

    def splits(self) -> Sequence[Split]:
        idx = torch.arange(len(self._graphs))
        return [Split(idx[:3], idx[3:5], idx[5:])]

    def train_dataloader(self) -> Iterable[Data]:
        return DataLoader(self._graphs, batch_size=3, shuffle=False)

    def eval_dataloader(self) -> Iterable[Data]:
        return DataLoader(self._graphs, batch_size=3, shuffle=False)


class _OneEncoderMethod(SSLMethod):
    """Minimal SSL method: one encoder, forward = its node (or mean-pooled graph) embeddings."""

    def __init__(self, encoder: nn.Module, graph_level: bool = False) -> None:
        super().__init__()
        self.encoder = encoder
        self.graph_level = graph_level

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, graph_level=self.graph_level)

    def prepare(self, data: Data) -> Data:
        return self.encoder.prepare(data)  # type: ignore[operator]


class _TeacherStudent(SSLMethod):
    def __init__(self) -> None:
        super().__init__()
        self.teacher = SAGEEncoder(3, 8, num_layers=1)
        self.student = SAGEEncoder(3, 8, num_layers=1)

    def encoders(self) -> dict[str, nn.Module]:
        return {"teacher": self.teacher, "student": self.student}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.teacher, batch)


def _tiny_graph(with_y: bool = True) -> Data:
    g = torch.Generator().manual_seed(0)
    edge_index = torch.tensor([[0, 1, 1, 2, 3, 4, 5, 0], [1, 0, 2, 1, 4, 3, 0, 5]])
    data = Data(x=torch.randn(7, 3, generator=g), edge_index=edge_index, num_nodes=7)
    if with_y:
        data.y = torch.tensor([0, 1, 0, 1, 0, 1, 0])
    return data


@pytest.fixture(scope="module")
def planetoid_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = SHARED_DATA / "Planetoid"
    if not source.is_dir():
        pytest.skip(f"Planetoid raw files not found at {source} (set GRAPHSSL_SHARED_DATA)")
    root = tmp_path_factory.mktemp("data") / "Planetoid"
    shutil.copytree(source, root)  # PyG writes processed/ beside raw/: needs a writable copy
    return root


@pytest.fixture(scope="module")
def planetoid(planetoid_root: Path) -> dict[str, Data]:
    from torch_geometric.datasets import Planetoid

    return {name: Planetoid(str(planetoid_root), name)[0] for name in ("Cora", "CiteSeer")}


# ---------------------------------------------------------------------- node-level
@pytest.mark.parametrize("dataset", ["Cora", "CiteSeer"])
@pytest.mark.parametrize("kind", sorted(ENCODERS))
def test_mini_batch_all_neighbours_equals_full_batch(
    planetoid: dict[str, Data], dataset: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(extraction, "MINI_BATCH_SIZE", 512)
    graph = planetoid[dataset]
    torch.manual_seed(0)
    model = _OneEncoderMethod(ENCODERS[kind](graph.num_features, 64, num_layers=2))
    dm = InMemoryNodeDataModule(name=dataset, graph=graph)

    full, y = extract_embeddings(model, dm)
    assert full.shape == (graph.num_nodes, 64) and full.dtype == torch.float32
    assert y is not None and torch.equal(y, graph.y)
    # "auto" samples from model.prepare(data), "encoder" from encoder.prepare(data); both paths
    # are checked on GCN (the one whose prepare matters), the explicit one on every encoder.
    for source in ("auto", "encoder") if kind == "gcn" else ("encoder",):
        mini, y_mini = extract_embeddings(
            model, dm, encoder_source=source, mini_batch=True, num_neighbors=[-1, -1]
        )
        assert mini.shape == full.shape and mini.dtype == torch.float32
        assert (mini - full).abs().max().item() <= 1e-5, (dataset, kind, source)
        assert y_mini is not None and torch.equal(y_mini, graph.y)


def test_sampled_mini_batch_covers_every_node(planetoid: dict[str, Data]) -> None:
    graph = planetoid["Cora"]
    model = _OneEncoderMethod(SAGEEncoder(graph.num_features, 16, num_layers=2))
    dm = InMemoryNodeDataModule(name="Cora", graph=graph)
    emb, _ = extract_embeddings(
        model, dm, encoder_source="encoder", mini_batch=True, num_neighbors=[5, 5]
    )
    assert emb.shape == (graph.num_nodes, 16)
    assert bool(emb.abs().sum(dim=1).gt(0).all())  # every row was written


def test_default_num_neighbors_and_labels_none() -> None:
    graph = _tiny_graph(with_y=False)
    torch.manual_seed(0)
    model = _OneEncoderMethod(GCNEncoder(3, 8, num_layers=2))
    dm = InMemoryNodeDataModule(name="tiny", graph=graph)
    full, y = extract_embeddings(model, dm)
    assert y is None
    mini, y_mini = extract_embeddings(model, dm, mini_batch=True)  # num_neighbors=None: [-1,-1]
    assert y_mini is None
    assert torch.allclose(mini, full, atol=1e-6)
    assert graph.x.device.type == "cpu" and "edge_weight" not in graph  # datamodule untouched


@pytest.mark.parametrize(
    ("encoder", "source", "expected"),
    [
        (GCNEncoder(3, 8, num_layers=1), "auto", [-1]),
        (SAGEEncoder(3, 8, num_layers=3), "encoder", [-1, -1, -1]),
        (GATEncoder(3, 8, num_layers=2), "auto", [-1, -1]),
        (MLPEncoder(3, 8, num_layers=2), "auto", [0]),  # an MLP reads no neighbours
    ],
)
def test_default_fanout_follows_the_encoder_depth(
    encoder: nn.Module, source: str, expected: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _tiny_graph()
    dm = InMemoryNodeDataModule(name="tiny", graph=graph)
    seen: list[list[int]] = []
    real = dm.neighbor_loader

    def spy(num_neighbors: list[int], *args: object, **kwargs: object) -> Iterable[Data]:
        seen.append(list(num_neighbors))
        return real(num_neighbors, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dm, "neighbor_loader", spy)
    model = _OneEncoderMethod(encoder)
    full, _ = extract_embeddings(model, dm, encoder_source=source)
    mini, _ = extract_embeddings(model, dm, encoder_source=source, mini_batch=True)
    assert seen == [expected]
    torch.testing.assert_close(mini, full, atol=1e-6, rtol=0)


def test_fanout_of_another_depth_is_an_error() -> None:
    model = _OneEncoderMethod(SAGEEncoder(3, 8, num_layers=2))
    dm = InMemoryNodeDataModule(name="tiny", graph=_tiny_graph())
    with pytest.raises(ValueError, match=r"num_neighbors=\[5, 5, 5\].*3 hop.*2 message-passing"):
        extract_embeddings(model, dm, mini_batch=True, num_neighbors=[5, 5, 5])
    # an encoder whose depth cannot be read keeps the two-hop default and any fanout
    assert extraction.extraction_fanouts(None, nn.Linear(3, 3)) == [-1, -1]
    assert extraction.extraction_fanouts([4, 4, 4], nn.Linear(3, 3)) == [4, 4, 4]
    assert extraction.encoder_depth(model) == 2


def test_training_mode_restored() -> None:
    model = _OneEncoderMethod(SAGEEncoder(3, 8, num_layers=1))
    model.train()
    extract_embeddings(model, InMemoryNodeDataModule(name="tiny", graph=_tiny_graph()))
    assert model.training


# ---------------------------------------------------------------------- encoder_source
def test_explicit_encoder_source_selects_sub_encoder() -> None:
    model = _TeacherStudent()
    dm = InMemoryNodeDataModule(name="tiny", graph=_tiny_graph())
    auto, _ = extract_embeddings(model, dm)
    teacher, _ = extract_embeddings(model, dm, encoder_source="teacher")
    student, _ = extract_embeddings(model, dm, encoder_source="student")
    assert torch.equal(auto, teacher)
    assert not torch.allclose(teacher, student)


def test_unknown_encoder_source_names_model_and_choices() -> None:
    dm = InMemoryNodeDataModule(name="tiny", graph=_tiny_graph())
    with pytest.raises(ValueError, match=r"'online'.*_TeacherStudent.*\['student', 'teacher'\]"):
        extract_embeddings(_TeacherStudent(), dm, encoder_source="online")
    with pytest.raises(ValueError, match=r"'encoder'.*Linear.*encoder_source='auto'"):
        _select_encoder(nn.Linear(2, 2), "encoder")
    with pytest.raises(ValueError, match=r"'target'.*SSLMethod.*names none"):
        _select_encoder(SSLMethod(), "target")  # base encoders() raises NotImplementedError
    with pytest.raises(TypeError, match="encoder_source must be a string"):
        extract_embeddings(_TeacherStudent(), dm, encoder_source=None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- graph-level
def _graphs() -> list[Data]:
    g = torch.Generator().manual_seed(1)
    graphs = []
    for i, n in enumerate([4, 6, 5, 3, 7, 4, 5]):
        src = torch.arange(n)
        edge_index = torch.cat(
            [torch.stack([src, (src + 1) % n]), torch.stack([(src + 1) % n, src])], dim=1
        )
        graphs.append(
            Data(x=torch.randn(n, 3, generator=g), edge_index=edge_index, y=torch.tensor([i % 2]))
        )
    return graphs


def test_graph_level_one_row_per_graph() -> None:
    graphs = _graphs()
    dm = _GraphLevelDataModule(graphs)
    torch.manual_seed(0)
    model = _OneEncoderMethod(GCNEncoder(3, 8, num_layers=2), graph_level=True)

    auto, y = extract_embeddings(model, dm, mini_batch=True)  # mini_batch ignored
    explicit, _ = extract_embeddings(model, dm, encoder_source="encoder")
    assert auto.shape == (len(graphs), 8) and auto.dtype == torch.float32
    assert y is not None and y.tolist() == [i % 2 for i in range(len(graphs))]
    model.eval()
    with torch.no_grad():
        expected = torch.cat(
            [
                global_mean_pool(model.encoder(g.x, g.edge_index), None)  # type: ignore[operator]
                for g in graphs
            ]
        )
    assert torch.allclose(auto, expected, atol=1e-6)
    assert torch.allclose(explicit, expected, atol=1e-6)


def test_graph_level_label_count_mismatch_is_reported() -> None:
    dm = _GraphLevelDataModule(_graphs())
    dm.__class__ = type("_Broken", (_GraphLevelDataModule,), {"labels": torch.zeros(3)})
    model = _OneEncoderMethod(SAGEEncoder(3, 8, num_layers=1), graph_level=True)
    with pytest.raises(ValueError, match=r"7 embedding rows but datamodule\.labels has 3"):
        extract_embeddings(model, dm)
