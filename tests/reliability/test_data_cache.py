"""Faults of PyG's processed files: a process killed while writing ``processed/data.pt``, a
processed file PyG cannot read, and a ``processed/`` folder left beside the raw files.

graphssl keeps processed files in its own cache, keyed by a digest of the raw files: a damaged
processed file is removed (with a warning naming it) and rebuilt instead of blocking every later
run with an error that blames the raw files, and a stale ``processed/`` folder in the data
folder never hides a damaged raw file.

The kill is a real ``SIGKILL`` of a process writing the file; the loads and runs after it run
in-process (the train task through the ``tasks`` fixture).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from faultkit import run_statuses

from graphssl.data.cache import processed_root, raw_digest
from graphssl.data.node import PlanetoidDataModule

CORA = [
    "dataset=cora",
    "encoder.hidden_channels=16",
    "encoder.num_layers=1",
    "trainer.epochs=1",
    "eval.figures=false",
    "eval.probes.knn=null",
    "logger.log_embeddings=false",
]

# loads Cora through graphssl; PyG's write of processed/data.pt stops after `fraction` of its
# bytes and the process is SIGKILLed there, as a kill during the write leaves it
KILLED_WHILE_WRITING = """
import io, os, signal, sys
import torch
from torch_geometric.io import fs

def dying_save(data, path):
    buf = io.BytesIO()
    torch.save(data, buf)
    raw = buf.getvalue()
    with open(path, "wb") as f:
        f.write(raw[: int(len(raw) * float(sys.argv[3]))])
        f.flush()
    os.kill(os.getpid(), signal.SIGKILL)

fs.torch_save = dying_save
from graphssl.data.node import PlanetoidDataModule
PlanetoidDataModule("Cora", data_dir=sys.argv[1], cache_dir=sys.argv[2]).setup()
"""


def processed_file(cache: Path, data_dir: Path) -> Path:
    digest = raw_digest(data_dir / "Planetoid")
    return cache / f"Planetoid-{digest}" / "Planetoid" / "Cora" / "processed" / "data.pt"


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.0, 0.5], ids=["empty", "truncated"])
def test_kill_while_pyg_writes_processed_data(
    fraction, tasks, cli_env, outputs_dir, data_dir
) -> None:
    cache = outputs_dir / "cache"  # the train task's paths.cache_dir
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_WRITING, str(data_dir), str(cache), str(fraction)],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    damaged = processed_file(cache, data_dir)
    assert damaged.is_file(), "the kill must leave the half-written processed file"
    assert (damaged.stat().st_size == 0) == (fraction == 0.0)

    shown = f"dataset cache: {damaged} is unreadable"
    with pytest.warns(UserWarning, match=re.escape(shown)) as caught:
        if fraction == 0.0:  # the next load rebuilds it
            dm = PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=cache)
            assert dm.data.num_nodes == 2708
        else:  # the next run is not blocked, and the raw files are not blamed
            tasks.train(*CORA)
            assert run_statuses(outputs_dir / "mlflow.db") == ["FINISHED"]
    (warning,) = [str(w.message) for w in caught if shown in str(w.message)]
    assert "removed" in warning and "processing the raw files again" in warning
    assert damaged.stat().st_size > 1_000_000, "the processed file must be written again"


def test_processed_file_pyg_cannot_load_is_rebuilt(tmp_path, data_dir) -> None:
    cache = tmp_path / "cache"
    PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=cache).setup()
    target = processed_file(cache, data_dir)
    torch.save({"not": "a PyG dataset"}, target)  # a complete archive of the wrong content
    with pytest.warns(UserWarning, match="loading failed after reading .*processed"):
        dm = PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=cache)
        assert dm.data.num_nodes == 2708


def test_processed_folder_beside_the_raw_files_is_never_read(
    tasks, outputs_dir, tmp_path, data_dir, monkeypatch
) -> None:
    from graphssl.data.paths import DatasetCorruptError

    # a writable data folder where PyG (an earlier run, another tool) left processed/
    root = tmp_path / "data"
    shutil.copytree(data_dir / "Planetoid" / "Cora", root / "Planetoid" / "Cora")
    from torch_geometric.datasets import Planetoid

    Planetoid(str(root / "Planetoid"), "Cora")
    stale = root / "Planetoid" / "Cora" / "processed" / "data.pt"
    assert stale.is_file()
    allx = root / "Planetoid" / "Cora" / "raw" / "ind.cora.allx"
    allx.write_bytes(allx.read_bytes()[:1000])  # damaged after it was processed
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(root))
    with pytest.raises(DatasetCorruptError, match="dataset 'Cora': could not read its raw files"):
        tasks.train(*CORA)
    assert "FINISHED" not in run_statuses(outputs_dir / "mlflow.db")


def test_loading_never_writes_into_the_data_folder(tmp_path, data_dir) -> None:
    root = tmp_path / "data"
    shutil.copytree(data_dir / "Planetoid" / "Cora", root / "Planetoid" / "Cora")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    dm = PlanetoidDataModule("Cora", data_dir=root, cache_dir=tmp_path / "cache")
    assert dm.data.num_nodes == 2708
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    # changed raw files get their own cache entry: no processed file outlives its raw files
    first = processed_root(root / "Planetoid", tmp_path / "cache")
    (root / "Planetoid" / "Cora" / "raw" / "ind.cora.test.index").write_text("1\n")
    second = processed_root(root / "Planetoid", tmp_path / "cache")
    assert first != second and not (second / "Cora" / "processed").exists()
