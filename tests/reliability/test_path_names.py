"""Names that become paths stay inside their folders: a PyG dataset class or keyword (``name``)
that would resolve outside ``paths.data_dir``/``paths.cache_dir`` is refused, naming the config
key, the value and the folder, before any folder is created."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.data.custom import PyGDataModule
from graphssl.data.paths import UnsafePathError, inside_root
from graphssl.tasks.components import resolve_config

CONF = Path(__file__).resolve().parents[2] / "conf"


def files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


@pytest.mark.parametrize(
    "name", ["../../../../../elsewhere/TRAV", "../TRAV", "/tmp/elsewhere/TRAV", "Cora/../../x"]
)
def test_pyg_dataset_name_leaving_the_data_folder(tmp_path, name) -> None:
    data, cache = tmp_path / "a" / "b" / "data", tmp_path / "a" / "b" / "cache"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=pyg",
                "dataset.cls=Planetoid",
                f"+dataset.kwargs.name={name}",
                f"paths.data_dir={data}",
                f"paths.cache_dir={cache}",
            ],
        )
    with pytest.raises(UnsafePathError) as err:  # a ValueError: the CLI prints one paragraph
        instantiate(resolve_config(cfg).dataset).setup()
    text = str(err.value)
    assert f"dataset.kwargs.name={name!r}" in text and str(data) in text
    assert files_under(tmp_path) == [], "a folder was created"


def test_pyg_class_name_leaving_the_data_folder(tmp_path) -> None:
    dm = PyGDataModule("../x", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    with pytest.raises(UnsafePathError, match=r"dataset\.cls='\.\./x'"):
        dm.setup()
    assert files_under(tmp_path) == []


def test_names_inside_the_folder_are_kept(tmp_path) -> None:
    assert inside_root(tmp_path, "Cora", "k") == (tmp_path / "Cora").resolve()
    assert inside_root(tmp_path, "a/../Cora", "k") == (tmp_path / "Cora").resolve()
    (tmp_path / "link").symlink_to(tmp_path.parent)
    with pytest.raises(UnsafePathError, match="link out of it"):
        inside_root(tmp_path, "link/x", "dataset.kwargs.name")
