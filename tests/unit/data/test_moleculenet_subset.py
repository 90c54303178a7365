"""MoleculeNet subsets (``max_molecules``) on a small generated ESOL-layout CSV, and HIV."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from graphssl.data.graph import MoleculeNetDataModule, subset_csv_rows

needs_rdkit = pytest.mark.skipif(
    importlib.util.find_spec("rdkit") is None,
    reason="MoleculeNet needs RDKit (pip install rdkit, or the 'molecules' extra)",
)

SMILES = ["C", "CC", "CCC", "CCO", "CO", "CCN", "CN", "CCCC", "C1CC1", "C1CCC1", "CC(C)C", "OCO"]
HEADER = "Compound ID,predicted,a,b,c,d,e,f,measured log solubility,smiles"


@pytest.fixture
def esol_dir(tmp_path: Path) -> Path:
    """A data folder with an ESOL-layout CSV of 12 molecules whose target is the row number,
    written with the Windows line ends and blank lines of some MoleculeNet files."""
    raw = tmp_path / "data" / "MoleculeNet" / "esol" / "raw"
    raw.mkdir(parents=True)
    lines = [HEADER, *(f"m{i},0,0,0,0,0,0,0,{i},{s}" for i, s in enumerate(SMILES))]
    (raw / "delaney-processed.csv").write_bytes(("\r\n\n".join(lines) + "\r\n").encode())
    return tmp_path / "data"


def _module(data: Path, cache: Path, **kwargs: object) -> MoleculeNetDataModule:
    dm = MoleculeNetDataModule("ESOL", data_dir=data, cache_dir=cache, **kwargs)  # type: ignore[arg-type]
    dm.setup()
    return dm


def test_subset_csv_rows_reads_lines_as_pyg_does() -> None:
    header, rows = subset_csv_rows("smiles,y\nC,1\n\nCC,0\n")
    assert header == "smiles,y" and rows == ["C,1", "CC,0"]
    # PyG drops the last piece: a file without a final newline loses its last line there too
    assert subset_csv_rows("smiles,y\nC,1\nCC,0")[1] == ["C,1"]


@pytest.mark.parametrize("bad", [0, 1, -5, 2.5, True, "10"])
def test_max_molecules_must_be_an_integer_of_at_least_two(bad: object) -> None:
    with pytest.raises(ValueError, match="max_molecules must be null"):
        MoleculeNetDataModule("ESOL", max_molecules=bad)  # type: ignore[arg-type]


def test_hiv_is_a_binary_classification_dataset() -> None:
    dm = MoleculeNetDataModule("hiv")
    assert dm.name == "HIV" and dm.task == "classification"


@needs_rdkit
def test_subset_keeps_seeded_rows_in_file_order(esol_dir: Path, tmp_path: Path) -> None:
    full = _module(esol_dir, tmp_path / "cache")
    assert full.num_graphs == len(SMILES)
    sub = _module(esol_dir, tmp_path / "cache", max_molecules=5, subset_seed=3)
    rows = sub.labels
    assert rows is not None and rows.numel() == 5
    assert torch.all(rows[1:] > rows[:-1])  # file order, no repeats
    # each kept graph is the full dataset's graph of that row
    for graph, row in zip(sub.graphs, rows.long().tolist()):
        assert graph.smiles == SMILES[row]
        assert torch.equal(graph.x, full.graphs[row].x)
    # the run's seed (splits, shuffling) does not move the subset; subset_seed does
    again = _module(esol_dir, tmp_path / "cache2", max_molecules=5, subset_seed=3, seed=7)
    assert torch.equal(again.labels, rows)  # type: ignore[arg-type]
    other = _module(esol_dir, tmp_path / "cache", max_molecules=5, subset_seed=4)
    assert not torch.equal(other.labels, rows)  # type: ignore[arg-type]
    (split,) = sub.splits()
    assert len(split.train) + len(split.val) + len(split.test) == 5


@needs_rdkit
def test_subset_no_smaller_than_the_file_is_the_whole_file(esol_dir: Path, tmp_path: Path) -> None:
    dm = _module(esol_dir, tmp_path / "cache", max_molecules=len(SMILES))
    assert dm.labels is not None
    assert dm.labels.tolist() == [float(i) for i in range(len(SMILES))]
    assert not (tmp_path / "cache" / "MoleculeNet" / "subsets").exists()
