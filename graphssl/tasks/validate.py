"""Checks of a resolved train config that run before any work: before the MLflow run, the
datamodule and training, so a mistake costs seconds and never a trained run.

Checked here: every probe of ``eval.probes`` names an importable ``_target_`` that builds an
object with ``evaluate``; mini-batch fanouts (``trainer.num_neighbors``,
``eval.extraction.num_neighbors``) have one entry per message-passing layer of the encoder
(training may add one per hop of a method's decoder, and must on several processes);
``eval.extraction.mode`` is one of the extraction modes and agrees with ``mini_batch``;
``trainer.devices > 1`` asks for a method exact over several processes and, on one graph,
mini-batches; integers lie in a range the code can use (``trainer.epochs`` at most 10^7, any
integer within 64 bits), and the keys of :data:`INT_BOUNDS` hold integers or null, not text
(``trainer.epochs=abc`` is refused here, before the run is opened); a user's graph file
(``dataset=graph_file``) is read and checked, has labels when probes are configured, and has
training sets of at least the kNN probe's ``k`` nodes. Config files that are not UTF-8 or not a
mapping are refused while Hydra composes them (:func:`install_config_file_checks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["ConfigError", "install_config_file_checks", "validate_train_config"]

INT64_MIN = -(2**63)
#: largest value of an integer key (inclusive bounds); any other integer must fit in int64
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "seed": (0, 2**32 - 1),
    "num_threads": (1, 4096),
    # the lower bound is the Trainer's (a negative count fails the run with its own message)
    "trainer.epochs": (INT64_MIN, 10**7),
    "trainer.batch_size": (1, 2**31 - 1),
    "trainer.patience": (1, 10**7),
    "trainer.checkpoint_every": (1, 10**7),
    "callbacks.monitor.every": (1, 10**7),
    "callbacks.monitor.subset": (1, 2**31 - 1),
    "callbacks.selection.every": (1, 10**7),
    "callbacks.selection.patience": (1, 10**7),
    "eval.extraction.chunk_size": (1, 2**63 - 1),
}
INT64 = (-(2**63), 2**63 - 1)
#: encoders without message passing: their fanout is irrelevant
_NO_HOPS = ("MLPEncoder",)


class ConfigError(ValueError):
    """The composed configuration cannot run; the message names the key and what was expected."""


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(node, Mapping):
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.update(_flat(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = node
    return out


def _expected(lo: int, hi: int) -> str:
    return f"at most {hi}" if lo == INT64_MIN else f"in [{lo}, {hi}]"


def _check_integers(container: Mapping[Any, Any]) -> None:
    for key, value in _flat(container).items():
        if isinstance(value, bool) or not isinstance(value, int):
            if key in INT_BOUNDS and value is not None:
                # a command-line value Hydra could not read as a number (trainer.epochs=abc)
                # stays a string in these plain-YAML groups; refused here, before any run
                # is opened, rather than by the object that would receive it
                raise ConfigError(
                    f"{key} must be an integer, got {value!r} ({type(value).__name__}); "
                    f"expected an integer {_expected(*INT_BOUNDS[key])}"
                )
            continue  # other keys' types are checked where the value is used
        lo, hi = INT_BOUNDS.get(key, INT64)
        if not lo <= value <= hi:
            raise ConfigError(
                f"{key}={value} is out of range; expected an integer {_expected(lo, hi)}"
            )


def _check_probes(probes: Any) -> dict[str, Any]:
    """The configured probes, built (``None`` entries left out)."""
    from hydra.utils import instantiate

    built: dict[str, Any] = {}
    for name, node in (probes or {}).items():
        if node is None:
            continue
        where = f"eval.probes.{name}"
        if not isinstance(node, Mapping) or "_target_" not in node:
            shown = OmegaConf.to_container(node) if isinstance(node, DictConfig) else node
            raise ConfigError(
                f"{where}={shown!r} has no _target_; expected a probe config such as {{_target_: "
                f"graphssl.evaluation.knn_probe.KNNProbe, k: 20}} (or null to remove the probe)"
            )
        target = node["_target_"]
        try:
            probe = instantiate(node)
        except Exception as err:  # an unknown class, a wrong keyword: say which probe
            cause = err.__cause__ or err
            raise ConfigError(
                f"{where}._target_={target!r} cannot be built ({type(cause).__name__}: "
                f"{' '.join(str(cause).split())[:300]}); expected an importable "
                f"probe class and keywords it accepts, e.g. "
                f"graphssl.evaluation.logreg_probe.LogRegProbe"
            ) from err
        if not callable(getattr(probe, "evaluate", None)):
            raise ConfigError(
                f"{where}._target_={target!r} builds a {type(probe).__name__}, which has no "
                f"evaluate(); expected a graphssl probe (an evaluator with evaluate())"
            )
        built[str(name)] = probe
    return built


def _check_graph_file(cfg: DictConfig, probes: dict[str, Any]) -> None:
    """Read a user's graph file (``dataset=graph_file``) now, so a bad file, missing labels or a
    training set smaller than a kNN probe's ``k`` fail before the run starts; the datamodule
    checks the file's values and splits, and the run reads the file again from its cache."""
    from hydra.utils import instantiate

    dataset = cfg.get("dataset")
    if not isinstance(dataset, DictConfig):
        return
    if not str(dataset.get("_target_", "")).endswith("custom.GraphFileDataModule"):
        return
    dm = instantiate(dataset)
    dm.setup()
    if probes and dm.labels is None:
        raise ConfigError(
            f"eval.probes {sorted(probes)} need labels, but the graph file {dataset.path} has "
            f"no 'y' array; expected y [N] integer class ids in the file, or no probes "
            f"({' '.join(f'eval.probes.{n}=null' for n in sorted(probes))}) to train and log "
            f"diagnostics only"
        )
    for name, probe in probes.items():
        k = getattr(probe, "k", None)
        if isinstance(k, bool) or not isinstance(k, int):
            continue
        for i, split in enumerate(dm.splits()):
            n = int(split.train.numel())
            if n < k:
                raise ConfigError(
                    f"eval.probes.{name}.k={k}, but the training set of split {i} of the graph "
                    f"file {dataset.path} has {n} node(s); expected k <= {n} — lower k or give "
                    f"the file more training nodes"
                )


def _encoder_depth(cfg: DictConfig) -> int | None:
    model = cfg.get("model")
    encoder = model.get("encoder") if isinstance(model, DictConfig) else None
    if not isinstance(encoder, DictConfig):
        return None  # e.g. DeepWalk: no encoder, no neighbour sampling
    target = str(encoder.get("_target_", ""))
    if target.rsplit(".", 1)[-1] in _NO_HOPS:
        return None
    layers = encoder.get("num_layers")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        return None
    return layers


def _check_fanouts(cfg: DictConfig) -> None:
    depth = _encoder_depth(cfg)
    if depth is None:
        return
    checks: list[tuple[str, Any]] = []
    trainer = cfg.get("trainer") or {}
    if trainer.get("mini_batch") and trainer.get("num_neighbors") is not None:
        checks.append(("trainer.num_neighbors", trainer.get("num_neighbors")))
    extraction = (cfg.get("eval") or {}).get("extraction") or {}
    sampled = extraction.get("mini_batch") or extraction.get("mode") == "mini_batch"
    if sampled and extraction.get("num_neighbors") is not None:
        checks.append(("eval.extraction.num_neighbors", extraction.get("num_neighbors")))
    method = _target_class(cfg.get("model"))
    decoder, name = int(getattr(method, "decoder_hops", 0) or 0), getattr(method, "__name__", "")
    world = int(trainer.get("devices", 1) or 1) * int(trainer.get("num_nodes", 1) or 1)
    for key, fanouts in checks:
        if isinstance(fanouts, str | int) or not hasattr(fanouts, "__iter__"):
            continue  # not a list: the sampler names the type where it is used
        values = list(fanouts)
        # training may also sample the hops of a decoder that passes messages (GraphMAE's),
        # and must on several processes
        decoded = decoder > 0 and key == "trainer.num_neighbors"
        allowed = {depth}
        if decoded:
            allowed = {depth + decoder} if world > 1 else {depth, depth + decoder}
        if len(values) in allowed:
            continue
        if decoded and world > 1:
            example = (
                values + values[-1:] * decoder if len(values) == depth else [10] * (depth + decoder)
            )
            raise ConfigError(
                f"{key}={values} samples {len(values)} hop(s), but {name} on {world} processes "
                f"needs {depth + decoder}: one per layer of its encoder "
                f"(encoder.num_layers={depth}) and of its decoder ({decoder}), so that a seed's "
                f"loss does not depend on the seeds the other processes hold; expected e.g. "
                f"{example}, or null"
            )
        extra = (
            f", or {depth + decoder} to also sample the decoder's hop "
            f"(e.g. {[10] * (depth + decoder)})"
            if decoded
            else ""
        )
        raise ConfigError(
            f"{key}={values} samples {len(values)} hop(s), but the encoder "
            f"(encoder.num_layers={depth}) has {depth} message-passing layer(s); expected "
            f"one fanout per layer, e.g. {[10] * depth} (or {[-1] * depth} for all "
            f"neighbours){extra}"
        )


def _check_extraction_mode(cfg: DictConfig) -> None:
    from graphssl.evaluation.extraction import EXTRACTION_MODES

    extraction = (cfg.get("eval") or {}).get("extraction") or {}
    mode = extraction.get("mode", "auto")
    if mode not in EXTRACTION_MODES:
        raise ConfigError(
            f"eval.extraction.mode={mode!r} is not an extraction mode; expected one of "
            f"{list(EXTRACTION_MODES)}"
        )
    if extraction.get("mini_batch") and mode not in ("auto", "mini_batch"):
        raise ConfigError(
            f"eval.extraction.mini_batch=true asks for mini-batch extraction but "
            f"eval.extraction.mode={mode}; set eval.extraction.mode=mini_batch (and drop "
            f"mini_batch=true), or mini_batch=false"
        )
    budget = extraction.get("memory_budget_gb")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int | float) or budget <= 0
    ):
        raise ConfigError(
            f"eval.extraction.memory_budget_gb={budget!r}; expected a positive number of GiB "
            f"or null"
        )


def _target_class(node: Any) -> type | None:
    """The class a config node's ``_target_`` names, ``None`` when it names none importable
    (instantiation reports that one with its own message)."""
    target = node.get("_target_") if isinstance(node, Mapping) else None
    if not isinstance(target, str):
        return None
    from hydra.utils import get_class

    try:
        return get_class(target)
    except Exception:  # an unknown or unimportable class: reported where it is built
        return None


def _check_devices(cfg: DictConfig) -> None:
    """``trainer.devices > 1`` needs a method whose loss is exact over the global batch and
    batches to shard: refused here, before any process starts."""
    trainer = cfg.get("trainer") or {}
    devices = trainer.get("devices", 1)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ConfigError(f"trainer.devices={devices!r}; expected a positive integer")
    nodes = trainer.get("num_nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"trainer.num_nodes={nodes!r}; expected a positive integer")
    _check_tasks(devices, nodes)
    if devices * nodes == 1:
        return
    world = devices * nodes
    # what the messages below name: the key(s) asking for the processes
    asked = f"trainer.devices={devices}" + (f" x trainer.num_nodes={nodes}" if nodes > 1 else "")
    method = _target_class(cfg.get("model"))
    name = method.__name__ if method is not None else "the method"
    if method is not None and getattr(method, "fit_without_gradients", None) is not getattr(
        _ssl_base(), "fit_without_gradients", None
    ):
        raise ConfigError(
            f"{asked} trains one model by gradient steps on several "
            f"processes, but {name} (DeepWalk/node2vec) trains gensim's Word2Vec on random "
            f"walks without gradient steps, which this does not split across processes; set "
            f"trainer.devices=1 (gensim's own worker threads use the cores)"
        )
    if method is not None and not getattr(method, "supports_distributed", False):
        because = getattr(method, "not_distributed_because", "") or (
            "its loss has not been made exact over the batches of several processes (its "
            "comparisons or statistics would only see each process's slice)"
        )
        raise ConfigError(
            f"{asked}, but {name} does not train on several processes: "
            f"{because}; expected a method listed in docs/distributed.md (DGI, GRACE, "
            f"CCA-SSG, BGRL, GraphDINO, GraphCL, InfoGraph, GraphMAE, SimCLR, BYOL, DINO, "
            f"supervised) or trainer.devices=1"
        )
    dataset = _target_class(cfg.get("dataset"))
    node_level = dataset is not None and getattr(dataset, "is_graph_level", True) is False
    if dataset is not None and node_level and not trainer.get("mini_batch", False):
        raise ConfigError(
            f"{asked} asks for {world} processes, but "
            f"trainer.mini_batch=false trains full-batch on the one graph of dataset "
            f"{cfg.dataset.get('name', dataset.__name__)!r}: every process would compute the "
            f"same step on the whole graph, and there are no batches to split between them. "
            f"Set trainer.mini_batch=true, so that each epoch's seed nodes are shared out "
            f"across the processes (trainer.batch_size seeds per process and step), or "
            f"trainer.devices=1"
        )


def _check_tasks(devices: int, nodes: int, environ: Mapping[str, str] | None = None) -> None:
    """``trainer.num_nodes > 1`` runs one rank per task of a cluster job step, and a step of
    several tasks must have exactly ``devices × num_nodes`` of them: checked against the
    scheduler's environment (:func:`~graphssl.training.distributed.cluster_ranks`)."""
    from graphssl.training.distributed import cluster_ranks

    world = devices * nodes
    try:
        ranks = cluster_ranks(environ)
    except ValueError as err:
        raise ConfigError(f"trainer.num_nodes={nodes}, trainer.devices={devices}: {err}") from err
    overrides = (
        f"hydra.launcher.nodes={nodes} hydra.launcher.tasks_per_node={devices} (or "
        f"hydra/launcher=submitit_slurm_ranks, which reads both from trainer.num_nodes and "
        f"trainer.devices)"
    )
    if ranks is None:
        if nodes > 1:
            raise ConfigError(
                f"trainer.num_nodes={nodes} trains one model on {nodes} machines, one rank per "
                f"task of a SLURM job step ({devices} task(s) per machine, "
                f"trainer.devices={devices}), but this process is not a task of such a step "
                f"(no SLURM_PROCID/SLURM_STEP_ID with SLURM_NTASKS above 1 in its environment). "
                f"Launch it through SLURM: graphssl -m hydra/launcher=submitit_slurm {overrides}; "
                f"or train on the processes of this machine with trainer.num_nodes=1"
            )
        return
    if ranks.world != world:
        raise ConfigError(
            f"this {ranks.source} job step runs {ranks.world} tasks, but trainer.devices="
            f"{devices} x trainer.num_nodes={nodes} = {world} rank(s): each task is one rank of "
            f"the one model, so the step must have exactly {world} task(s) "
            f"({devices} per machine on {nodes} machine(s)). Expected the launcher to start "
            f"them with {overrides}, or trainer.devices and trainer.num_nodes to match the "
            f"step's tasks"
        )


def _ssl_base() -> type:
    from graphssl.methods.base import SSLMethod

    return SSLMethod


def validate_train_config(cfg: DictConfig) -> None:
    """Refuse a resolved train config that cannot run, before any work.

    Raises:
        ConfigError: an unknown or unbuildable probe, a fanout whose length differs from the
            encoder's depth, an integer out of range, or probes a graph file cannot serve; the
            message names the key.
        GraphFileError: a graph file whose values cannot be used (it names the file).
    """
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    _check_integers(container)
    _check_devices(cfg)
    _check_fanouts(cfg)
    _check_extraction_mode(cfg)
    probes = _check_probes((cfg.get("eval") or {}).get("probes"))
    _check_graph_file(cfg, probes)


def install_config_file_checks() -> None:
    """Make Hydra name the file when a config file is not UTF-8 or is not a mapping.

    Hydra reads group files (``experiment=...``, ``dataset=...``) with ``open(...,
    encoding="utf-8")`` and accepts a YAML list silently; both are refused here with a
    one-paragraph error naming the file. Idempotent.
    """
    # Hydra's plugin scanner re-executes its config-source modules, so the repository that
    # asks them for a file is wrapped rather than the file source itself
    from hydra._internal.config_repository import ConfigRepository
    from hydra.core.object_type import ObjectType
    from hydra.errors import ConfigCompositionException
    from omegaconf import ListConfig

    original = ConfigRepository.load_config
    if getattr(original, "_graphssl_checked", False):
        return

    def where(repo: ConfigRepository, config_path: str) -> str:
        source = repo._find_object_source(config_path=config_path, object_type=ObjectType.CONFIG)
        if source is None:
            return config_path
        name = source._normalize_file_name(config_path)
        return f"{source.path.split('://', 1)[-1].rstrip('/')}/{name}"

    def load_config(self: ConfigRepository, config_path: str) -> Any:
        try:
            result = original(self, config_path)
        except UnicodeDecodeError as err:
            raise ConfigCompositionException(
                f"config file {where(self, config_path)} is not valid UTF-8 text (byte "
                f"{err.object[err.start : err.start + 1]!r} at offset {err.start}); expected a "
                f"UTF-8 YAML mapping of config keys — re-save the file as UTF-8"
            ) from None
        if result is not None and isinstance(result.config, ListConfig):
            raise ConfigCompositionException(
                f"config file {where(self, config_path)} holds a YAML list "
                f"({len(result.config)} items); expected a YAML mapping of config keys (e.g. "
                f"`# @package _global_`, then `trainer:` and `  epochs: 50` on the next lines)"
            )
        return result

    load_config._graphssl_checked = True  # type: ignore[attr-defined]
    ConfigRepository.load_config = load_config  # type: ignore[method-assign]
