"""Bring-your-own-graph loaders: ``dataset=pyg`` (a PyG class by name) and
``dataset=graph_file`` (a saved ``Data`` or an ``.npz``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dataset_files import ring_graph, shchur_npz
from torch_geometric.data import Data

from graphssl.data.custom import GraphFileDataModule, PyGDataModule
from graphssl.data.paths import DatasetNotFoundError


def test_pyg_by_class_name_with_kwargs(tmp_path) -> None:
    shchur_npz(tmp_path / "data/Amazon/Photo/raw/amazon_electronics_photo.npz", n=30)
    dm = PyGDataModule(
        "Amazon",
        {"name": "Photo"},
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "c",
        split="public",
    )
    dm.setup()
    assert dm.name == "Photo" and dm.data.num_nodes == 30
    assert dm.splits()[0].train.numel() == 3  # no masks: seeded random 10 %


def test_pyg_bundled_dataset_without_root(tmp_path) -> None:
    dm = PyGDataModule("KarateClub", data_dir=tmp_path, cache_dir=tmp_path / "c")
    dm.setup()
    assert dm.data.num_nodes == 34
    assert dm.splits()[0].train.numel() == 3  # a train mask alone: seeded random 10 %


def test_pyg_missing_files_without_download(tmp_path) -> None:
    dm = PyGDataModule(
        "Coauthor", {"name": "CS"}, data_dir=tmp_path / "none", cache_dir=tmp_path / "c"
    )
    with pytest.raises(DatasetNotFoundError) as err:
        dm.setup()
    assert "CS/raw/ms_academic_cs.npz" in str(err.value)
    assert str(tmp_path / "none" / "Coauthor") in str(err.value)


def test_pyg_unknown_class() -> None:
    with pytest.raises(ValueError, match=r"no dataset class 'Amazonn'.*Amazon"):
        PyGDataModule("Amazonn").setup()


def test_pyg_root_is_not_a_kwarg() -> None:
    with pytest.raises(ValueError, match=r"kwargs\.root"):
        PyGDataModule("Amazon", {"root": "/x"})


def test_graph_file_npz_with_masks(tmp_path) -> None:
    edges, x, y = ring_graph(20, 2, 3)
    masks = {k: np.zeros(20, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][:5] = True
    masks["val_mask"][5:8] = True
    masks["test_mask"][8:] = True
    np.savez(tmp_path / "g.npz", edge_index=edges, x=x, y=y, **masks)
    dm = GraphFileDataModule(tmp_path / "g.npz")
    dm.setup()
    assert dm.name == "g" and dm.num_features == 3 and dm.num_classes == 2
    (split,) = dm.splits()
    assert split.train.tolist() == [0, 1, 2, 3, 4] and split.test.numel() == 12
    assert dm.graph_stats()["data/num_nodes"] == 20


def test_graph_file_saved_data_without_labels(tmp_path) -> None:
    data = Data(x=torch.randn(10, 4), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]))
    torch.save(data, tmp_path / "g.pt")
    dm = GraphFileDataModule(tmp_path / "g.pt", name="mine", to_undirected=True, seed=1)
    dm.setup()
    assert dm.name == "mine" and dm.labels is None
    assert dm.data.edge_index.size(1) == 6
    assert dm.splits()[0].train.numel() == 1  # seeded random 10 %


def test_graph_file_dict_of_tensors(tmp_path) -> None:
    torch.save(
        {
            "x": torch.ones(3, 2),
            "edge_index": torch.tensor([[0], [2]]),
            "y": torch.tensor([0, 1, 0]),
        },
        tmp_path / "d.pt",
    )
    dm = GraphFileDataModule(tmp_path / "d.pt")
    assert dm.labels.tolist() == [0, 1, 0]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"x": np.ones((3, 2))}, "no 'edge_index'"),
        (
            {"x": np.ones((3, 2)), "edge_index": np.array([[0, 5], [1, 2]])},
            r"refers to node 5.*x has 3 rows",
        ),
        ({"x": np.ones((3, 2)), "edge_index": np.zeros((3, 4), dtype=np.int64)}, r"shape \[2, E\]"),
        (
            {"x": np.ones((3, 2)), "edge_index": np.array([[0], [1]]), "y": np.zeros(2)},
            "y has 2 rows but x has 3",
        ),
        (
            {
                "x": np.ones((3, 2)),
                "edge_index": np.array([[0], [1]]),
                "train_mask": np.ones(3, dtype=bool),
            },
            "give all three or none",
        ),
    ],
)
def test_graph_file_errors_name_the_field(tmp_path, fields, match) -> None:
    np.savez(tmp_path / "bad.npz", **fields)
    with pytest.raises(ValueError, match=match):
        GraphFileDataModule(tmp_path / "bad.npz").setup()


def test_graph_file_missing(tmp_path) -> None:
    with pytest.raises(DatasetNotFoundError, match=r"dataset\.path"):
        GraphFileDataModule(tmp_path / "nope.npz").setup()
