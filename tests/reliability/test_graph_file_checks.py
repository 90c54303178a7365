"""A user's graph file (``dataset=graph_file``) is checked when it is loaded, before training:
each failure is one paragraph naming the file, the array, the offending value or row, and what
was expected — never the shared data folder or its ``MANIFEST.sha256``. The train config check
reads the file before the run starts, so missing labels for the configured probes and a training
set smaller than the kNN probe's ``k`` are refused before any MLflow run or training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from graphssl.data.custom import GraphFileDataModule
from graphssl.data.paths import GraphFileError
from graphssl.tasks.components import resolve_config
from graphssl.tasks.validate import ConfigError, validate_train_config

CONF = Path(__file__).resolve().parents[2] / "conf"
N = 12


def graph(**changes: Any) -> dict[str, Any]:
    """A ring of ``N`` nodes with 3 features, 2 classes and disjoint 4/4/4 masks."""
    idx = np.arange(N)
    masks = {k: np.zeros(N, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][:4], masks["val_mask"][4:8], masks["test_mask"][8:] = True, True, True
    fields = {
        "edge_index": np.stack([idx, (idx + 1) % N]),
        "x": np.random.default_rng(0).normal(size=(N, 3)).astype("float32"),
        "y": idx % 2,
        **masks,
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


def save(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "mine.npz"
    np.savez(path, **graph(**changes))
    return path


def with_value(key: str, index: tuple[int, ...], value: Any, dtype: str = "float64") -> Any:
    arr = graph()[key].astype(dtype)
    arr[index] = value
    return arr


CASES = {
    "float node id": (
        {"edge_index": with_value("edge_index", (1, 5), 2.5)},
        ["edge_index[1, 5] is 2.5", "integer node ids", "not rounded or truncated"],
    ),
    "NaN feature": ({"x": with_value("x", (7, 2), np.nan)}, ["x row 7 holds nan", "finite"]),
    "inf feature": ({"x": with_value("x", (3, 0), np.inf)}, ["x row 3 holds inf", "finite"]),
    "no nodes": (
        {"x": np.zeros((0, 3)), "y": None, "train_mask": None, "val_mask": None, "test_mask": None},
        ["x has shape (0, 3)", "at least one node"],
    ),
    "no feature column": ({"x": np.zeros((N, 0))}, ["x has shape (12, 0)", "one feature column"]),
    "no edges": (
        {"edge_index": np.zeros((2, 0), dtype=np.int64)},
        ["edge_index has no edges", "at least one edge"],
    ),
    "NaN label": ({"y": with_value("y", (5,), np.nan)}, ["y[5] is nan", "integer class ids"]),
    "fractional label": ({"y": with_value("y", (2,), 0.5)}, ["y[2] is 0.5"]),
    "negative label": ({"y": with_value("y", (4,), -1, "int64")}, ["y row 4 is -1", ">= 0"]),
    "string labels": (
        {"y": np.array(["cat", "dog"] * (N // 2))},
        ["labels y are strings ('cat', 'dog'", "integer class ids", "return_inverse"],
    ),
    "object array": (
        {"y": np.array([{"a": 1}] * N, dtype=object)},
        ["array of Python objects", "never does it"],
    ),
    "overlapping masks": (
        {"val_mask": np.arange(N) < 5},
        [
            "train_mask and val_mask of split 0 share 4 node(s) (first: node 0)",
            "dataset.allow_overlap=true",
        ],
    ),
    "empty split": (
        {"val_mask": np.zeros(N, dtype=bool)},
        ["the val set of split 0 is empty", "at least one node in each"],
    ),
    "mask not 0/1": (
        {"test_mask": with_value("test_mask", (9,), 2, "int64")},
        ["test_mask holds 2 at row 9"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_graph_file(tmp_path, case) -> None:
    changes, needles = CASES[case]
    path = save(tmp_path, **changes)
    shared = tmp_path / "shared-data"
    with pytest.raises(GraphFileError) as err:
        GraphFileDataModule(path, data_dir=shared, cache_dir=tmp_path / "cache").setup()
    text = str(err.value)
    assert text.startswith(f"graph file {path}"), text
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    assert "\n" not in text and "MANIFEST" not in text and str(shared) not in text
    assert "-9223372036854775808" not in text


def test_a_pt_file_is_checked_the_same_way(tmp_path) -> None:
    fields = {k: torch.as_tensor(v) for k, v in graph().items()}
    fields["edge_index"] = fields["edge_index"].double()
    fields["edge_index"][0, 3] = 1.5
    torch.save(fields, tmp_path / "mine.pt")
    with pytest.raises(GraphFileError, match=r"edge_index\[0, 3\] is 1\.5"):
        GraphFileDataModule(tmp_path / "mine.pt").setup()


def test_integral_floats_and_01_masks_are_accepted(tmp_path) -> None:
    g = graph()
    path = save(
        tmp_path,
        edge_index=g["edge_index"].astype("float32"),
        y=g["y"].astype("float64"),
        train_mask=g["train_mask"].astype("int64"),
    )
    dm = GraphFileDataModule(path)
    dm.setup()
    assert dm.data.edge_index.dtype == torch.long and dm.labels.tolist() == (g["y"]).tolist()
    assert dm.splits()[0].train.tolist() == [0, 1, 2, 3]


def compose_graph_file(path: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=["dataset=graph_file", f"dataset.path={path}", *overrides],
        )
    return resolve_config(cfg)


def test_overlap_allowed_by_the_config_key(tmp_path) -> None:
    path = save(tmp_path, val_mask=np.arange(N) < 5)
    cfg = compose_graph_file(path, "dataset.allow_overlap=true", "eval.probes.knn.k=2")
    validate_train_config(cfg)  # reads the file; overlapping masks accepted on request


def test_labels_required_when_probes_are_configured(tmp_path) -> None:
    path = save(tmp_path, y=None)
    with pytest.raises(ConfigError) as err:
        validate_train_config(compose_graph_file(path))
    text = str(err.value)
    assert "need labels" in text and str(path) in text and "'y'" in text
    fix = "eval.probes.knn=null eval.probes.logreg=null"
    assert fix in text
    validate_train_config(compose_graph_file(path, *fix.split()))  # no probes, no labels


def test_training_set_smaller_than_knn_k(tmp_path) -> None:
    path = save(tmp_path)
    with pytest.raises(ConfigError) as err:
        validate_train_config(compose_graph_file(path, "eval.probes.knn.k=5"))
    text = str(err.value)
    assert "eval.probes.knn.k=5" in text and "has 4 node(s)" in text and str(path) in text
    validate_train_config(compose_graph_file(path, "eval.probes.knn.k=4"))


def test_bad_file_refused_by_the_config_check(tmp_path) -> None:
    path = save(tmp_path, x=with_value("x", (7, 2), np.nan))
    with pytest.raises(GraphFileError, match="x row 7 holds nan"):
        validate_train_config(compose_graph_file(path))
