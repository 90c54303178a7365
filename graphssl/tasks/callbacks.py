"""The trainer callbacks of a run, built from ``cfg.callbacks`` (``conf/callbacks/``) with the
run-time objects they ask for by name."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from graphssl.data.base import DataModule
from graphssl.evaluation import Evaluation
from graphssl.tasks.components import build_evaluation
from graphssl.training.callbacks.checkpoint import ModelCheckpoint
from graphssl.training.trainer import Callback

__all__ = ["build_callbacks"]


def _callback_enabled(node: Any) -> bool:
    """An entry of ``callbacks`` is off when it is null or its ``every`` is null (the
    ``checkpoint`` entry has ``every_n_epochs`` instead: it also writes the epochs another
    callback asks for, so it is on whenever it is there)."""
    if node is None:
        return False
    return not (isinstance(node, DictConfig) and "every" in node and node.every is None)


def build_callbacks(
    cfg: DictConfig,
    dm: DataModule,
    sink: Any,
    checkpoint_path: str | os.PathLike[str] | None = None,
    evaluation: Evaluation | None = None,
) -> tuple[list[Callback], dict[str, Callback]]:
    """The trainer callbacks of ``cfg.callbacks`` (``conf/callbacks/``), by name.

    Each entry is instantiated from its ``_target_``; a partial (``_partial_: true``) is then
    called with the run-time objects its signature names: ``embed`` (the extraction of
    ``evaluation``, default: the one ``cfg.eval`` builds), ``sink``, ``probe`` (a fresh copy of
    the probe of ``eval.probes`` the entry's own ``probe`` key names), ``labels``, ``splits`` and
    ``checkpoint_path`` (the run's checkpoint file). A config that builds no
    :class:`~graphssl.training.callbacks.checkpoint.ModelCheckpoint` (its callbacks have no
    ``checkpoint`` entry, e.g. a stored config being rerun) gets one named ``checkpoint``
    writing ``checkpoint_path`` every ``trainer.checkpoint_every`` epochs, when a path is given:
    resuming and the store-outage checkpoints rely on it. ``callbacks.checkpoint=null`` writes
    no checkpoints.

    Raises:
        ValueError: a callback asks for a probe that is not configured, for labels the dataset
            does not have, or for the checkpoint path when none was given.
    """
    ev = evaluation if evaluation is not None else build_evaluation(cfg)
    device = str(cfg.trainer.device)

    def embed(model: torch.nn.Module) -> torch.Tensor:
        return ev.extract(model, dm, device)[0]

    def probe(entry: str, chosen: Any) -> Any:
        # the entry names one of eval.probes (a stored config from before the callbacks'
        # settings moved to conf/callbacks names it in eval.select.probe)
        legacy = (cfg.eval.get("select") or {}).get("probe", "logreg")
        name = str(chosen if isinstance(chosen, str) else legacy)
        probes = ev.probes_for(str(getattr(dm, "task", "classification")))
        if name not in probes:
            raise ValueError(
                f"callbacks.{entry}.probe={name!r} is not among the configured probes "
                f"{sorted(probes)}; expected the name of one of eval.probes"
            )
        return probes[name]

    def labels(entry: str, node: Any) -> torch.Tensor:
        if dm.labels is None:
            raise ValueError(
                f"callbacks.{entry}.every={node.get('every')} selects on a probe's validation "
                f"score, but dataset {dm.name!r} has no labels; set callbacks.{entry}.every=null"
            )
        return dm.labels

    def run_checkpoint_path() -> Path:
        if checkpoint_path is None:
            raise ValueError(
                "a trainer callback of callbacks.* asks for checkpoint_path, but none was given; "
                "expected the run's checkpoint file (outputs/checkpoints/<config hash>/last.pt)"
            )
        return Path(checkpoint_path)

    runtime: dict[str, Callable[[], Any]] = {
        "embed": lambda: embed,
        "sink": lambda: sink,
        "splits": dm.splits,
        "checkpoint_path": run_checkpoint_path,
    }
    entries = cfg.get("callbacks") or {}
    built: dict[str, Callback] = {}
    for name, node in entries.items():
        if not _callback_enabled(node):
            continue
        obj = instantiate(node)
        if not isinstance(obj, Callback) and callable(obj):
            wanted = inspect.signature(obj).parameters
            kwargs = {k: make() for k, make in runtime.items() if k in wanted}
            if "labels" in wanted:
                kwargs["labels"] = labels(str(name), node)
            if "probe" in wanted:
                chosen = getattr(obj, "keywords", {}).get("probe")
                kwargs["probe"] = probe(str(name), chosen)
            obj = obj(**kwargs)
        if not isinstance(obj, Callback):
            raise TypeError(
                f"callbacks.{name} must build a graphssl trainer Callback, got "
                f"{type(obj).__name__} from {node.get('_target_')!r}"
            )
        built[str(name)] = obj
    if (
        checkpoint_path is not None
        and "checkpoint" not in entries
        and not any(isinstance(cb, ModelCheckpoint) for cb in built.values())
    ):
        every = cfg.trainer.get("checkpoint_every") if "trainer" in cfg else None
        built["checkpoint"] = ModelCheckpoint(checkpoint_path, every_n_epochs=every)
    return list(built.values()), built
