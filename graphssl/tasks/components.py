"""What the tasks build from a composed config: the resolved and checked config, the run's
identity, the datamodule, the method and the evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from graphssl.data.base import DataModule
from graphssl.evaluation import Evaluation
from graphssl.evaluation.extraction import ExtractionPlan
from graphssl.methods.base import SSLMethod
from graphssl.utils import check_allocator_mode

if TYPE_CHECKING:
    from graphssl.tracking import RunIdentity

__all__ = [
    "CALLBACK_KEYS",
    "baseline_key",
    "build_datamodule",
    "build_evaluation",
    "build_method",
    "build_probes",
    "configured_extraction",
    "configured_extraction_plan",
    "configured_probes",
    "method_config",
    "prepare_train_config",
    "resolve_config",
    "run_identity",
    "run_name",
    "set_threads",
]


def run_name(cfg: DictConfig) -> str:
    """``logger.run_name``, else ``<model>-<dataset>``."""
    name = cfg.logger.get("run_name")
    if name:
        return str(name)
    model = str(cfg.model.get("_target_", "model")).rsplit(".", 1)[-1].lower()
    return f"{model}-{cfg.dataset.get('name', 'data')}"


def prepare_train_config(cfg: DictConfig) -> DictConfig:
    """The resolved train config, with the ``debug`` group's limits applied, checked before any
    work: modalities (an image method on a graph is refused), keys and ranges
    (:func:`~graphssl.tasks.validate.validate_train_config`), the allocator mode."""
    from graphssl.tasks.debug import apply_debug_limits
    from graphssl.tasks.modality import check_modalities
    from graphssl.tasks.validate import validate_train_config

    resolved = apply_debug_limits(resolve_config(cfg))
    check_modalities(resolved)
    validate_train_config(resolved)
    check_allocator_mode(str(resolved.get("cpu_allocator", "reuse")))
    return resolved


def run_identity(cfg: DictConfig) -> RunIdentity:
    """The :class:`~graphssl.tracking.RunIdentity` of a resolved config: its name, config hash,
    outputs folder, resume switch, and how Hydra launched the job (when it did)."""
    # imported here: the spawned ranks of trainer.devices build from this module and never
    # import the tracking layer
    from graphssl.tracking import Launch, RunIdentity
    from graphssl.tracking.identity import config_hash

    launch = Launch()
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        config_dir = None
        if hc.output_subdir:
            config_dir = Path(hc.runtime.output_dir) / hc.output_subdir
        launch = Launch(
            overrides=tuple(hc.overrides.task),
            output_dir=str(hc.runtime.output_dir),
            config_dir=config_dir,
            multirun=hc.mode == RunMode.MULTIRUN,
            sweep_dir=str(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None,
        )
    return RunIdentity(
        name=run_name(cfg),
        config_hash=config_hash(cfg),
        outputs_dir=Path(str(cfg.paths.outputs_dir)),
        resume=bool(cfg.get("resume", False)),
        rerun_of=str(cfg.rerun) if cfg.get("rerun") else None,
        launch=launch,
    )


def resolve_config(cfg: DictConfig) -> DictConfig:
    """A resolved copy of ``cfg`` (without the ``hydra`` node); missing values fail here,
    before any work."""
    keys = [str(k) for k in cfg if k != "hydra"]
    container = OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, keys), resolve=True, throw_on_missing=True
    )
    assert isinstance(container, dict)
    out = OmegaConf.create(container)
    assert isinstance(out, DictConfig)
    return out


def build_datamodule(cfg: DictConfig) -> DataModule:
    """Instantiate ``cfg.dataset`` and set it up."""
    dm = instantiate(cfg.dataset)
    if not isinstance(dm, DataModule):
        raise TypeError(
            f"dataset._target_ must build a graphssl DataModule, got "
            f"{type(dm).__name__} from {cfg.dataset['_target_']!r}"
        )
    dm.setup()
    return dm


def _fill_from_dataset(enc: DictConfig, dm: DataModule) -> None:
    """Set the encoder keys that are -1/null and that the dataset decides: ``in_channels``
    for GNNs; ``in_chans``/``img_size`` for image encoders (``dm.encoder_overrides()``)."""
    pending = [str(k) for k, v in enc.items() if v is None or (isinstance(v, int) and v == -1)]
    if not pending:
        return
    overrides_fn = getattr(dm, "encoder_overrides", None)
    if callable(overrides_fn):
        overrides = dict(overrides_fn())
    elif "in_channels" in pending:
        overrides = {"in_channels": dm.num_features}
    else:
        overrides = {}
    for key in pending:
        if key in overrides:
            enc[key] = overrides[key]


def method_config(cfg: DictConfig, dm: DataModule) -> DictConfig:
    """``cfg.model`` resolved, with the sizes taken from the dataset filled in (the encoder's
    input size, ``num_classes``): instantiating it needs no dataset."""
    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    assert isinstance(model_cfg, DictConfig)
    enc = model_cfg.get("encoder")
    if isinstance(enc, DictConfig):
        _fill_from_dataset(enc, dm)
    if model_cfg.get("num_classes", None) in (-1, None) and "num_classes" in model_cfg:
        model_cfg.num_classes = dm.num_classes  # e.g. the supervised classifier
    return model_cfg


def build_method(cfg: DictConfig, dm: DataModule) -> SSLMethod:
    """Instantiate ``cfg.model`` with the encoder's input size taken from the dataset."""
    method = instantiate(method_config(cfg, dm))
    if not isinstance(method, SSLMethod):
        raise TypeError(
            f"model._target_ must build a graphssl SSLMethod, got "
            f"{type(method).__name__} from {cfg.model['_target_']!r}"
        )
    return method


#: keys of ``eval`` read by the trainer callbacks (``conf/callbacks/``), not by the evaluation
CALLBACK_KEYS = ("diag_every", "diag_subset", "collapse", "select")


def build_evaluation(cfg: DictConfig) -> Evaluation:
    """Instantiate ``cfg.eval``: the run's :class:`~graphssl.evaluation.Evaluation` (a stored
    config written before ``eval`` had a ``_target_`` gets the default one)."""
    keys = [str(k) for k in cfg.eval if k not in CALLBACK_KEYS]
    node: Any = OmegaConf.masked_copy(cfg.eval, keys)
    if "_target_" not in node:
        node = OmegaConf.merge({"_target_": "graphssl.evaluation.Evaluation"}, node)
    evaluation = instantiate(node)
    if not isinstance(evaluation, Evaluation):
        raise TypeError(
            f"eval._target_ must build a graphssl Evaluation (or a subclass), got "
            f"{type(evaluation).__name__} from {node['_target_']!r}"
        )
    return evaluation


#: keys of ``eval`` that cannot change the untrained-encoder baseline (callbacks, figures, the
#: cache switch itself); every other key is part of the baseline's cache key
_NOT_BASELINE_KEYS = (*CALLBACK_KEYS, "figures", "figure_max_rows", "baseline", "baseline_cache")


def baseline_key(cfg: DictConfig, dm: DataModule) -> dict[str, Any]:
    """Plain values that, with the seed, device and data the evaluation adds, decide the
    untrained-encoder baseline of a resolved train config: the dataset's config (source,
    split, preprocessing), the method's config with the dataset's sizes filled in and without
    its training-only keys
    (:func:`~graphssl.evaluation.baseline_cache.untrained_model_config`), and ``eval`` without
    the keys the baseline never reads."""
    from graphssl.evaluation.baseline_cache import untrained_model_config

    model = OmegaConf.to_container(method_config(cfg, dm), resolve=True)
    assert isinstance(model, dict)
    eval_keys = [str(k) for k in cfg.eval if k not in _NOT_BASELINE_KEYS]
    return {
        "dataset": OmegaConf.to_container(cfg.dataset, resolve=True),
        "model": untrained_model_config({str(k): v for k, v in model.items()}),
        "eval": OmegaConf.to_container(OmegaConf.masked_copy(cfg.eval, eval_keys), resolve=True),
    }


def build_probes(probes: DictConfig | None, dm: DataModule) -> dict[str, Any]:
    """The configured probes that serve ``dm``'s task, instantiated
    (:meth:`~graphssl.evaluation.Evaluation.probes_for`)."""
    evaluation = Evaluation(probes=instantiate(probes) if probes is not None else None)
    return evaluation.probes_for(str(getattr(dm, "task", "classification")))


def configured_probes(
    eval_cfg: DictConfig, dm: DataModule, z: torch.Tensor, y: torch.Tensor | None, seed: int
) -> dict[str, float]:
    """The run's probes (and OGB's metric) on ``dm``'s splits with its row cap."""
    return build_evaluation(OmegaConf.create({"eval": eval_cfg})).probe_metrics(dm, z, y, seed)


def configured_extraction(
    cfg: DictConfig, model: torch.nn.Module, dm: DataModule
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The embeddings of ``model`` with the run's ``eval.extraction`` settings and device."""
    return build_evaluation(cfg).extract(model, dm, str(cfg.trainer.device))


def configured_extraction_plan(
    cfg: DictConfig, model: torch.nn.Module, dm: DataModule
) -> ExtractionPlan:
    """The :class:`~graphssl.evaluation.extraction.ExtractionPlan` that
    :func:`configured_extraction` follows (its mode and the reason for it)."""
    return build_evaluation(cfg).plan(model, dm)


def set_threads(num_threads: Any) -> None:
    """Apply ``num_threads`` as the process's one thread budget: torch's intra-op threads and
    every BLAS/OpenMP pool (NumPy's, SciPy's, scikit-learn's) get the same count, so the
    probes do not run pools of their own on top of torch's (:mod:`graphssl.threads`).
    ``null``: PyTorch's default (one per core) for all of them."""
    from graphssl.threads import apply_thread_budget

    apply_thread_budget(num_threads)
