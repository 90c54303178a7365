"""Trained methods as MLflow artifacts, and loading them back by run id.

Every training run logs ``model/``:

- ``model/weights.pt``: the method's ``state_dict`` (``torch.save``; read back with
  ``torch.load(weights_only=True)``, so loading never unpickles code);
- ``model/model.yaml``: the method's config with the sizes taken from the dataset filled in
  (``encoder.in_channels``, ``num_classes``), enough to rebuild it without the dataset;
- ``model/config.yaml``: the run's whole resolved config.

Load a trained method in one line::

    method = graphssl.tracking.models.load_method("<run id>")  # tracking_uri=... for a server

``mlflow.pytorch.log_model`` is not used: it pickles the whole module and its loader needs
``torch.load(weights_only=False)``, which executes code from the artifact store.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from graphssl.tracking import mlflow_store
from graphssl.utils import UnsafeFileError, load_weights_only

if TYPE_CHECKING:
    from graphssl.methods.base import SSLMethod
    from graphssl.tracking.run import RunTracker
    from graphssl.tracking.store import TrackingStore

__all__ = [
    "MODEL_DIR",
    "WeightsFileError",
    "download_weights",
    "initial_state",
    "load_method",
    "load_state",
    "log_method",
]

MODEL_DIR = "model"
WEIGHTS = f"{MODEL_DIR}/weights.pt"


def log_method(
    tracker: RunTracker, method: torch.nn.Module, model_cfg: DictConfig, cfg: DictConfig
) -> None:
    """Log ``method``'s weights, its filled model config and the run config under ``model/``."""
    with tempfile.TemporaryDirectory(prefix="graphssl-model-") as tmp:
        folder = Path(tmp)
        state = {k: v.detach().cpu() for k, v in method.state_dict().items()}
        torch.save(state, folder / "weights.pt")
        (folder / "model.yaml").write_text(OmegaConf.to_yaml(model_cfg))
        (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        tracker.log_artifacts(folder, MODEL_DIR)


class WeightsFileError(ValueError):
    """A ``ckpt_path=``/``from_run=`` weights file that cannot be used; the message names the
    file, what it holds and what was expected."""

    def __init__(
        self, path: str | os.PathLike[str], reason: str, source: str | None = None
    ) -> None:
        where = source or f"ckpt_path={str(path)!r}"
        super().__init__(f"{where} cannot be used: {reason}; expected {_EXPECTED_WEIGHTS}")
        self.path = Path(path)


#: what a weights file holds, for error messages
_EXPECTED_WEIGHTS = (
    f"a run's {WEIGHTS} (torch.save of the method's state_dict) or a trainer checkpoint "
    f"last.pt (a dict whose 'model' entry is that state_dict)"
)


def load_state(path: str | os.PathLike[str], source: str | None = None) -> dict[str, torch.Tensor]:
    """A ``state_dict`` file (``model/weights.pt`` or a trainer checkpoint), weights only.

    Args:
        path: the file.
        source: how messages name it (default: ``ckpt_path='<path>'``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsafeFileError: the file needs full unpickling (refused without running it).
        WeightsFileError: the file is empty, truncated, not a torch file, or holds neither a
            state dict nor a checkpoint with one.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"ckpt_path={str(path)!r} does not exist; expected {_EXPECTED_WEIGHTS}"
        )
    size = p.stat().st_size
    if size == 0:
        raise WeightsFileError(path, "the file is empty (0 bytes)", source)
    try:
        state = load_weights_only(p, _EXPECTED_WEIGHTS)
    except UnsafeFileError:
        raise
    except Exception as err:  # truncated zip, a text file, an .npz: RuntimeError, KeyError, ...
        if zipfile.is_zipfile(p) and all(n.endswith(".npy") for n in zipfile.ZipFile(p).namelist()):
            reason = "it is a numpy .npz archive, not a torch.save file"
        else:
            first = " ".join(str(err).split()).split(". ")[0][:120]
            reason = (
                f"its {size} bytes are not a readable torch.save file — truncated, or another "
                f"format ({type(err).__name__}: {first})"
            )
        raise WeightsFileError(path, reason, source) from err
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # a trainer checkpoint
    if not isinstance(state, dict):
        raise WeightsFileError(path, f"it holds a {type(state).__name__}, not a state dict", source)
    if not state:
        raise WeightsFileError(path, "it holds an empty dict, not a state dict", source)
    odd = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if odd:
        raise WeightsFileError(
            path,
            f"it holds a dict whose entry {odd[0]!r} is a {type(state[odd[0]]).__name__}, not "
            f"a tensor ({len(odd)} of {len(state)} entries), so it is not a state dict",
            source,
        )
    return state


def download_weights(client: Any, run_id: str, dest: str | os.PathLike[str]) -> Path:
    """Download run ``run_id``'s ``model/`` folder into ``dest``; returns the folder.

    Raises:
        LookupError: the run does not exist or logged no model.
    """
    try:
        client.get_run(run_id)
    except Exception as err:
        raise LookupError(
            f"from_run={run_id!r}: no such run in the tracking store ({err})"
        ) from err
    try:
        local = client.download_artifacts(run_id, MODEL_DIR, str(dest))
    except Exception as err:
        raise LookupError(
            f"from_run={run_id!r}: the run has no {MODEL_DIR}/ artifact (runs log it unless "
            f"logger.log_model=false)"
        ) from err
    folder = Path(local)
    if not (folder / "weights.pt").is_file():
        raise LookupError(f"from_run={run_id!r}: the run has no {WEIGHTS} artifact")
    return folder


def initial_state(
    store: TrackingStore, ckpt: str | None, run_id: str | None
) -> dict[str, torch.Tensor] | None:
    """The weights ``ckpt_path=`` (``ckpt``) or ``from_run=`` (``run_id``) asks a run to start
    from, else ``None``.

    Raises:
        ValueError: both are set.
    """
    if ckpt and run_id:
        raise ValueError(
            f"ckpt_path={ckpt!r} and from_run={run_id!r} are both set; expected at most one "
            f"source of initial weights"
        )
    if ckpt:
        return load_state(str(ckpt))
    if run_id:
        with tempfile.TemporaryDirectory(prefix="graphssl-from-run-") as tmp:
            folder = download_weights(store.client, str(run_id), tmp)
            return load_state(folder / "weights.pt", f"from_run={str(run_id)!r} ({WEIGHTS})")
    return None


def load_method(
    run_id: str, tracking_uri: str | None = None, map_location: str = "cpu"
) -> SSLMethod:
    """Rebuild run ``run_id``'s trained method from its ``model/`` artifact.

    Args:
        run_id: the training run.
        tracking_uri: the store (default: ``$MLFLOW_TRACKING_URI``, else the default
            ``sqlite:///<outputs>/mlflow.db`` with ``$GRAPHSSL_OUTPUTS`` or ``outputs``).
        map_location: device the weights are loaded onto.

    Raises:
        LookupError: the run does not exist or logged no model.
    """
    from hydra.utils import instantiate

    uri = tracking_uri or mlflow_store.resolve_tracking_uri(
        None, Path(os.environ.get("GRAPHSSL_OUTPUTS", "outputs")).absolute()
    )
    client = mlflow_store.client(uri)
    with tempfile.TemporaryDirectory(prefix="graphssl-load-") as tmp:
        folder = download_weights(client, run_id, tmp)
        model_cfg = OmegaConf.load(folder / "model.yaml")
        state = load_weights_only(folder / "weights.pt", _EXPECTED_WEIGHTS, map_location)
    method = instantiate(model_cfg)
    method.load_state_dict(state)
    method.eval()
    return method  # type: ignore[no-any-return]
