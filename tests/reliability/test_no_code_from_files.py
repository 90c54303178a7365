"""No file runs code: graph files, ``ckpt_path=`` weights, trainer checkpoints, embeddings files
and PyG's processed cache files are read with ``torch.load(weights_only=True)`` (or as ``.npz``),
and Planetoid's raw pickles rebuild only NumPy/SciPy data classes, as do the raw files of any
other PyG class built by ``dataset=pyg`` (``pickle.load``, ``numpy.load(allow_pickle=True)``).
A ``.pt`` whose pickle names other Python objects is refused with one paragraph naming the file
and how to convert it; its ``__reduce__`` (which would create a marker file) never runs."""

from __future__ import annotations

import ast
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphssl.data.cache import load_with_processed_repair, weights_only_loads
from graphssl.data.custom import GraphFileDataModule, PyGDataModule, load_graph_file
from graphssl.data.node import PlanetoidDataModule
from graphssl.data.paths import DatasetCorruptError
from graphssl.tracking.embeddings import load_payload
from graphssl.tracking.models import initial_state, load_state
from graphssl.training.checkpoint import load_checkpoint
from graphssl.utils import UnsafeFileError

PACKAGE = Path(__file__).resolve().parents[2] / "graphssl"


class _Payload:
    """Unpickling this object creates ``marker``: what a malicious file would do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def malicious(path: Path, marker: Path, how: str = "torch") -> Path:
    """A ``.pt`` whose loading with full unpickling would create ``marker``."""
    if how == "torch":  # a torch archive whose dict holds the object (like a pickled Data)
        torch.save({"x": torch.ones(2, 2), "edge_index": _Payload(marker)}, path)
    else:  # a bare pickle (torch.load's legacy format)
        path.write_bytes(pickle.dumps(_Payload(marker), protocol=2))
    assert not marker.exists()
    return path


def assert_refused(err: pytest.ExceptionInfo[BaseException], path: Path, marker: Path) -> None:
    text = str(err.value)
    assert isinstance(err.value, UnsafeFileError)
    assert str(path) in text and "never does it" in text
    assert "torch.save(" in text and "numpy.savez(" in text, text  # how to convert it
    assert "\n" not in text  # one paragraph
    assert not marker.exists(), "the file's code ran"


@pytest.mark.parametrize("how", ["torch", "pickle"])
def test_graph_file_pickle_is_refused(tmp_path, how) -> None:
    marker = tmp_path / "MARKER"
    path = malicious(tmp_path / "graph.pt", marker, how)
    with pytest.raises(UnsafeFileError) as err:
        load_graph_file(path)
    assert_refused(err, path, marker)
    # through the datamodule: the same paragraph, not wrapped in a data-folder error
    with pytest.raises(UnsafeFileError) as err:
        GraphFileDataModule(path, data_dir=tmp_path / "data").setup()
    assert_refused(err, path, marker)
    assert "MANIFEST" not in str(err.value)


def test_ckpt_path_pickle_is_refused(tmp_path) -> None:
    marker = tmp_path / "MARKER"
    path = malicious(tmp_path / "weights.pt", marker)
    with pytest.raises(UnsafeFileError) as err:
        load_state(path)
    assert_refused(err, path, marker)
    with pytest.raises(UnsafeFileError) as err:
        initial_state(None, str(path), None)  # type: ignore[arg-type]
    assert_refused(err, path, marker)


def test_trainer_checkpoint_pickle_is_refused(tmp_path) -> None:
    marker = tmp_path / "MARKER"
    path = malicious(tmp_path / "last.pt", marker)
    with pytest.raises(UnsafeFileError) as err:
        load_checkpoint(path)
    assert_refused(err, path, marker)


def test_embeddings_file_pickle_is_not_run(tmp_path) -> None:
    marker = tmp_path / "MARKER"
    path = malicious(tmp_path / "embeddings.pt", marker)
    with pytest.raises(ValueError, match="cannot be read"):
        load_payload(path)
    assert not marker.exists()


def test_every_torch_load_is_weights_only_while_datasets_load(tmp_path) -> None:
    from torch_geometric.io import fs

    marker = tmp_path / "MARKER"
    path = malicious(tmp_path / "data.pt", marker)
    with weights_only_loads(), pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=False)  # as PyG loads pre_transform.pt
    with pytest.raises(pickle.UnpicklingError):
        load_with_processed_repair(lambda: fs.torch_load(str(path)))  # PyG's own fall-back
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ  # restored afterwards


def test_processed_cache_file_with_code_is_rebuilt_not_run(tmp_path, data_dir) -> None:
    cache = tmp_path / "cache"
    PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=cache).setup()
    (processed,) = [p for p in cache.rglob("processed") if p.is_dir()]
    marker = tmp_path / "MARKER"
    for name in ("data.pt", "pre_transform.pt"):
        malicious(processed / name, marker)
    with pytest.warns(UserWarning, match="loading failed after reading"):
        dm = PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=cache)
        assert dm.data.num_nodes == 2708
    assert not marker.exists()


def test_planetoid_raw_pickle_naming_code_is_refused(tmp_path, data_dir) -> None:
    root = tmp_path / "data"
    shutil.copytree(
        data_dir / "Planetoid" / "Cora",
        root / "Planetoid" / "Cora",
        ignore=shutil.ignore_patterns("processed"),
    )
    marker = tmp_path / "MARKER"
    raw = root / "Planetoid" / "Cora" / "raw" / "ind.cora.x"
    raw.write_bytes(pickle.dumps(_Payload(marker), protocol=2))  # the raw format is a pickle
    dm = PlanetoidDataModule("Cora", data_dir=root, cache_dir=tmp_path / "cache")
    with pytest.raises(DatasetCorruptError, match=r"the pickle names io\.open"):
        dm.setup()
    assert not marker.exists()


def _lastfm_asia(raw: Path, marker: Path) -> Path:
    """LastFMAsia's one raw file, ``lastfm_asia.npz``, with an object array as ``features``."""
    path = raw / "lastfm_asia.npz"
    features = np.empty(1, dtype=object)
    features[0] = _Payload(marker)
    np.savez(path, features=features, target=np.zeros(1), edges=np.zeros((1, 2)))
    return path


def _zinc(raw: Path, marker: Path) -> Path:
    """ZINC's six raw files, ``train.pickle`` (read first) a pickle naming code."""
    for name in ("val.pickle", "test.pickle", "train.index", "val.index", "test.index"):
        (raw / name).write_bytes(pickle.dumps([], protocol=2))
    path = raw / "train.pickle"
    path.write_bytes(pickle.dumps([{"atom_type": _Payload(marker)}], protocol=2))
    return path


@pytest.mark.parametrize(
    ("write", "cls", "refusal"),
    [
        (_lastfm_asia, "LastFMAsia", "'features' is an array of Python objects"),
        (_zinc, "ZINC", "names io.open"),
    ],
    ids=["LastFMAsia-npz", "ZINC-pickle"],
)
def test_pyg_class_raw_file_naming_code_is_refused(tmp_path, write, cls, refusal) -> None:
    """A class of ``dataset=pyg`` whose ``process()`` unpickles its raw files reads them with
    the same restriction as Planetoid's: the file is refused by name before its code runs."""
    raw = tmp_path / "data" / cls / "raw"
    raw.mkdir(parents=True)
    marker = tmp_path / "MARKER"
    path = write(raw, marker)
    dm = PyGDataModule(cls, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    with pytest.raises(UnsafeFileError) as err:
        dm.setup()
    text = str(err.value)
    assert not marker.exists(), "the raw file's code ran"
    assert path.name in text and refusal in text, text
    assert f"torch_geometric.datasets.{cls}" in text, text
    assert "numpy.savez(" in text and "\n" not in text, text  # how to convert it; one paragraph
    assert pickle.load.__module__ in ("pickle", "_pickle"), "pickle.load is restored"
    assert np.load.__module__.startswith("numpy"), "numpy.load is restored"


def test_pyg_class_raw_npz_of_numbers_loads(tmp_path) -> None:
    """The restriction refuses Python objects only: LastFMAsia's raw arrays of numbers load."""
    raw = tmp_path / "data" / "LastFMAsia" / "raw"
    raw.mkdir(parents=True)
    edges = np.array([[0, 1], [1, 2], [2, 3]])
    np.savez(raw / "lastfm_asia.npz", features=np.eye(4), target=np.arange(4), edges=edges)
    dm = PyGDataModule(
        "LastFMAsia", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", split="random"
    )
    dm.setup()
    assert dm.data.num_nodes == 4 and dm.data.edge_index.shape == (2, 3)


def test_no_call_site_unpickles() -> None:
    """Every ``torch.load`` in the package passes ``weights_only=True`` (directly or through
    :func:`graphssl.utils.load_weights_only`); nothing calls ``pickle.load`` or loads numpy
    arrays with ``allow_pickle=True``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            kwargs = {k.arg: ast.unparse(k.value) for k in node.keywords}
            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {name}"
            if name == "torch.load" and kwargs.get("weights_only") != "True":
                found.append(where)
            if name in ("pickle.load", "pickle.loads", "cloudpickle.load", "joblib.load"):
                found.append(where)
            if kwargs.get("allow_pickle") not in (None, "False"):
                found.append(where)
    assert found == []
