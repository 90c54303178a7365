"""The evaluation of a trained encoder: extraction, diagnostics, probes, baseline and figures.

:class:`Evaluation` is what ``conf/eval/`` instantiates (``_target_:
graphssl.evaluation.Evaluation``). A task hands it the trained model and the datamodule; it
extracts the embeddings (in the mode that
:func:`~graphssl.evaluation.extraction.plan_extraction` picks), runs the diagnostics suite and
any diagnostics of the user's own, fits every probe that serves the dataset's task on every
split, adds OGB's official metric where the dataset has one and the method's own classifier
where it has one, and evaluates an untrained encoder of the same architecture the same way (the
baseline: what training added). It returns flat metric dicts keyed as graphssl logs them
(``diag/<name>``, ``probe/<probe>/<split>_<metric>``, ``diag_baseline/<name>``,
``time/<stage>_seconds``) and draws the figures; logging them is the tracking layer's job.

Probes declare the tasks they serve (:attr:`graphssl.evaluation.probe.Probe.tasks`): a
classification dataset keeps every configured probe, a multilabel one those serving
``"multilabel"`` (switched by their ``multilabel`` parameter), a regression one those serving
``"regression"`` (a default ridge probe when only classifiers are configured).
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from graphssl.evaluation.baseline_cache import BaselineCache, data_digest, environment
from graphssl.evaluation.extraction import (
    ExtractionPlan,
    ShardedExtraction,
    extract_embeddings,
    plan_extraction,
)
from graphssl.evaluation.official import OFFICIAL_METRICS, official_metrics
from graphssl.evaluation.probe import HEADLINE
from graphssl.evaluation.ridge_probe import RidgeProbe
from graphssl.evaluation.runner import (
    DEFAULT_FIGURE_MAX_ROWS,
    evaluation_settings,
    run_diagnostics,
    run_probes,
)
from graphssl.progress import stage
from graphssl.threads import thread_budget
from graphssl.utils import capture_rng, restore_rng, seed_everything

__all__ = ["BASELINE_FROM", "BASELINE_KEY", "HEADLINE", "Evaluation", "EvaluationResult", "gains"]

#: tag of a run whose baseline was read from the cache: the entry's key
BASELINE_FROM = "graphssl.baseline_from"
#: tag of a run whose baseline was computed and stored in the cache: the entry's key
BASELINE_KEY = "graphssl.baseline_key"

log = logging.getLogger(__name__)

#: extraction settings and their defaults (``eval.extraction``)
_EXTRACTION_DEFAULTS: dict[str, Any] = {
    "encoder_source": "auto",
    "mode": "auto",
    "mini_batch": False,
    "num_neighbors": None,
    "memory_budget_gb": None,
    "chunk_size": None,
}


def gains(metrics: Mapping[str, float]) -> dict[str, float]:
    """``probe/<p>/gain`` for every probe with a headline metric and its ``baseline_`` twin:
    trained minus baseline (baseline minus trained for an error such as ``test_mae``), so a
    positive gain always means training helped."""
    probes = {k.split("/")[1] for k in metrics if k.startswith("probe/") and k.count("/") == 2}
    out: dict[str, float] = {}
    for p in sorted(probes):
        for key, higher in HEADLINE:
            trained = metrics.get(f"probe/{p}/{key}")
            base = metrics.get(f"probe/{p}/baseline_{key}")
            if trained is None or base is None:
                continue
            out[f"probe/{p}/gain"] = float(trained - base) if higher else float(base - trained)
            break
    return out


def _fresh(probe: Any, **params: Any) -> Any:
    """An unfitted copy of ``probe`` with ``params`` replaced (a deep copy for a probe without
    :meth:`~graphssl.evaluation.probe.Probe.clone`)."""
    clone = getattr(probe, "clone", None)
    if callable(clone):
        return clone(**params)
    out = copy.deepcopy(probe)
    for key, value in params.items():
        setattr(out, key, value)
    return out


def _describe(obj: Any) -> dict[str, Any]:
    """Plain values naming a probe or a diagnostic function for the baseline's cache key: its
    class or function path and its parameters (a probe's ``get_params()``, a partial's
    arguments); ``repr`` where neither exists."""
    fn = getattr(obj, "func", None) if not hasattr(obj, "get_params") else None
    target = fn if fn is not None else obj
    kind = target if hasattr(target, "__qualname__") else type(target)  # a function or class
    out: dict[str, Any] = {
        "path": f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', '')}"
    }
    if hasattr(obj, "get_params"):
        try:
            out["params"] = {str(k): repr(v) for k, v in obj.get_params().items()}
        except Exception:
            out["repr"] = repr(obj)
    elif fn is not None:
        out["args"] = repr(getattr(obj, "args", ()))
        out["keywords"] = repr(sorted(getattr(obj, "keywords", {}).items()))
    elif not callable(obj) or not hasattr(obj, "__qualname__"):
        out["repr"] = repr(obj)
    return out


def _serves(probe: Any, task: str) -> bool:
    return task in getattr(type(probe), "tasks", ("classification",))


@dataclass
class EvaluationResult:
    """What :meth:`Evaluation.evaluate` measured.

    Attributes:
        embeddings: the trained encoder's embeddings ``[N, D]``.
        labels: their labels, or ``None``.
        metrics: diagnostics, probes, OGB and classifier metrics, then the baseline's.
        timings: ``time/extract_seconds``, ``time/diagnostics_seconds``,
            ``time/probe_seconds``.
        tags: ``extract/mode``, ``extract/reason`` and, when several processes shared the
            extraction, ``extract/ranks`` (their number); with the baseline cache,
            ``graphssl.baseline_from`` (read from the cache) or ``graphssl.baseline_key``
            (computed and stored), each the entry's key.
    """

    embeddings: Tensor
    labels: Tensor | None
    metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


class Evaluation:
    """Everything measured after training (module docstring).

    Args:
        extraction: ``encoder_source`` (auto | encoder | online | target | teacher | student),
            ``mode`` (auto | full | mini_batch | layerwise), ``mini_batch``, ``num_neighbors``,
            ``memory_budget_gb``, ``chunk_size`` (see ``conf/eval/default.yaml``).
        probes: ``{name: probe}``; ``None`` entries are left out.
        diagnostics: ``enabled`` (the suite), ``reference`` (the original authors' formulas)
            and ``extra``: ``{name: fn}`` diagnostics of the user's own, each ``fn(z)``
            returning a float (logged as ``diag/<name>``) or a mapping of floats (each as
            ``diag/<name>/<key>``).
        figures: draw the spectrum and projection figures.
        max_rows: at most this many seeded rows of each split for the probes (``None``: all).
        knn_max_rows: the kNN probe's own row cap (read by its config).
        figure_max_rows: rows of the spectrum figure.
        baseline: evaluate an untrained encoder of the same architecture too.
        baseline_cache: reuse the baseline of an identical untrained encoder and evaluation
            from the disk cache (:mod:`graphssl.evaluation.baseline_cache`) when
            :meth:`evaluate` is given a cache folder and the caller's ``baseline_key``.
    """

    def __init__(
        self,
        extraction: Mapping[str, Any] | None = None,
        probes: Mapping[str, Any] | None = None,
        diagnostics: Mapping[str, Any] | None = None,
        figures: bool = True,
        max_rows: int | None = None,
        knn_max_rows: int | None = None,
        figure_max_rows: int | None = DEFAULT_FIGURE_MAX_ROWS,
        baseline: bool = True,
        baseline_cache: bool = True,
    ) -> None:
        unknown = set(extraction or {}) - set(_EXTRACTION_DEFAULTS)
        if unknown:
            raise ValueError(
                f"eval.extraction has unknown keys {sorted(unknown)}; expected some of "
                f"{sorted(_EXTRACTION_DEFAULTS)}"
            )
        self.extraction = {**_EXTRACTION_DEFAULTS, **dict(extraction or {})}
        self.probes = {str(k): v for k, v in (probes or {}).items() if v is not None}
        diag = dict(diagnostics or {})
        self.diagnostics_enabled = bool(diag.get("enabled", True))
        self.reference = bool(diag.get("reference", False))
        self.extra_diagnostics: dict[str, Callable[[Tensor], Any]] = {
            str(k): v for k, v in (diag.get("extra") or {}).items() if v is not None
        }
        for name, fn in self.extra_diagnostics.items():
            if not callable(fn):
                raise TypeError(
                    f"eval.diagnostics.extra.{name} is a {type(fn).__name__}; expected a "
                    f"function of the embeddings (a config with _target_ and _partial_: true)"
                )
        self.figures_enabled = bool(figures)
        self.knn_max_rows = knn_max_rows
        caps = evaluation_settings({"max_rows": max_rows, "figure_max_rows": figure_max_rows})
        self.max_rows = caps["max_rows"]
        self.figure_max_rows = caps["figure_max_rows"]
        self.baseline_enabled = bool(baseline)
        self.baseline_cache_enabled = bool(baseline_cache)

    # ------------------------------------------------------------------ probes
    def probes_for(self, task: str) -> dict[str, Any]:
        """Fresh, unfitted probes for a dataset of ``task`` (module docstring)."""
        if task == "regression":
            kept = {n: _fresh(p) for n, p in self.probes.items() if _serves(p, "regression")}
            return kept or ({"ridge": RidgeProbe()} if self.probes else {})
        if task == "multilabel":
            return {
                n: _fresh(p, multilabel=True)
                for n, p in self.probes.items()
                if _serves(p, "multilabel")
            }
        return {n: _fresh(p) for n, p in self.probes.items()}

    def probe(self, name: str, task: str = "classification") -> Any:
        """A fresh probe ``name`` for a dataset of ``task`` (e.g. for model selection).

        Raises:
            ValueError: no probe of that name serves the task.
        """
        probes = self.probes_for(task)
        if name not in probes:
            raise ValueError(
                f"probe {name!r} is not among the configured probes {sorted(probes)}; expected "
                f"the name of one of eval.probes"
            )
        return probes[name]

    def check(self, datamodule: Any) -> None:
        """Fit the probes to ``datamodule``'s splits before any training (call it after
        ``datamodule.setup()``; the split sizes are known only then).

        A kNN probe (:class:`~graphssl.evaluation.knn_probe.KNNProbe`) needs ``k`` training rows.
        Where ``eval.probes.<name>.k`` exceeds the rows it will be fitted on (the smallest
        training split, after ``max_rows`` and ``knn_max_rows``), ``k`` becomes that number for
        this run, with one warning naming the key and both sizes, so a small graph (e.g.
        ``dataset=karate``: 17 training rows) runs with the default config instead of failing
        after training. The ``k`` used is logged with the probe's results (``probe/<name>/k``).
        """
        from graphssl.evaluation.knn_probe import KNNProbe

        task = str(getattr(datamodule, "task", "classification"))
        used = self.probes_for(task)
        sizes = [int(s.train.numel()) for s in datamodule.splits()]
        if not sizes:
            return
        for name, probe in list(self.probes.items()):
            if name not in used or not isinstance(probe, KNNProbe):
                continue
            rows = min(sizes)
            for cap in (self.max_rows, probe.max_rows):
                if cap is not None:
                    rows = min(rows, int(cap))
            if probe.k <= rows:
                continue
            if rows < 1:
                raise ValueError(
                    f"eval.probes.{name}: dataset {datamodule.name!r} has a split with no "
                    f"training rows, so the kNN probe cannot be fitted; expected at least one "
                    f"training row per split (or eval.probes.{name}=null to drop the probe)"
                )
            log.warning(
                "eval.probes.%s.k=%d is larger than the training split of %s (%d rows); "
                "the kNN probe uses k=%d in this run (set eval.probes.%s.k to choose)",
                name,
                probe.k,
                datamodule.name,
                rows,
                rows,
                name,
            )
            self.probes[name] = _fresh(probe, k=rows)

    # ------------------------------------------------------------------ stages
    def plan(self, model: nn.Module, datamodule: Any) -> ExtractionPlan:
        """How :meth:`extract` will extract (its mode and why)."""
        ex = self.extraction
        return plan_extraction(
            model,
            datamodule,
            ex["encoder_source"],
            mode=ex["mode"],
            mini_batch=bool(ex["mini_batch"]),
            memory_budget_gb=ex["memory_budget_gb"],
            chunk_size=ex["chunk_size"],
        )

    def extract(
        self, model: nn.Module, datamodule: Any, device: str = "cpu"
    ) -> tuple[Tensor, Tensor | None]:
        """Embeddings and labels of ``model`` on ``datamodule`` with these settings."""
        ex = self.extraction
        return extract_embeddings(
            model,
            datamodule,
            encoder_source=ex["encoder_source"],
            device=device,
            mini_batch=bool(ex["mini_batch"]),
            num_neighbors=ex["num_neighbors"],
            mode=ex["mode"],
            memory_budget_gb=ex["memory_budget_gb"],
            chunk_size=ex["chunk_size"],
        )

    def diagnose(self, z: Tensor) -> dict[str, float]:
        """The diagnostics suite and the extra diagnostics as ``diag/*`` (``{}`` when off)."""
        if not self.diagnostics_enabled:
            return {}
        out = run_diagnostics(z, reference=self.reference)
        for name, fn in self.extra_diagnostics.items():
            value = fn(z)
            if isinstance(value, Mapping):
                out.update({f"diag/{name}/{k}": float(v) for k, v in value.items()})
            else:
                out[f"diag/{name}"] = float(value)
        return out

    def probe_metrics(
        self, datamodule: Any, z: Tensor, y: Tensor | None, seed: int
    ) -> dict[str, float]:
        """Every probe on every split, then OGB's official metric where the dataset has one."""
        task = str(getattr(datamodule, "task", "classification"))
        splits = datamodule.splits()
        out = run_probes(z, y, splits, self.probes_for(task), max_rows=self.max_rows, seed=seed)
        out.update(self.ogb_metrics(datamodule, z, y, out))
        return out

    def ogb_metrics(
        self, datamodule: Any, z: Tensor, y: Tensor | None, probe_metrics: Mapping[str, float]
    ) -> dict[str, float]:
        """``probe/<p>/ogb_test_<metric>`` for a datamodule with ``ogb_evaluator()`` and
        ``ogb_metric`` (the OGB datasets); ``{}`` for any other.

        With one split (OGB's official one), a probe whose ``weight_decay`` was selected is
        refitted with that value only instead of its whole grid: the same selection, one fit.
        """
        make_evaluator = getattr(datamodule, "ogb_evaluator", None)
        if not callable(make_evaluator) or y is None:
            return {}
        metric = str(datamodule.ogb_metric)
        if metric not in OFFICIAL_METRICS:
            log.info(
                "OGB metric %r of %s is not fed from the probes (only %s)",
                metric,
                datamodule.name,
                OFFICIAL_METRICS,
            )
            return {}
        splits = datamodule.splits()
        probes = self.probes_for(str(getattr(datamodule, "task", "classification")))
        if not probes or not splits:
            return {}
        for name, probe in probes.items():
            chosen = probe_metrics.get(f"probe/{name}/weight_decay")
            params: dict[str, Any] = getattr(probe, "get_params", dict)()
            if len(splits) == 1 and chosen is not None and "weight_decay" in params:
                probes[name] = _fresh(probe, weight_decay=float(chosen))
        return official_metrics(z, y, splits, probes, make_evaluator(), metric)

    @staticmethod
    def classifier_metrics(
        model: nn.Module, z: Tensor, y: Tensor | None, datamodule: Any, device: str = "cpu"
    ) -> dict[str, float]:
        """Accuracy of a method's own classifier (``supervised/<split>_acc``), when it has
        one (``classifier_logits`` returning logits)."""
        classifier = getattr(model, "classifier_logits", None)
        if y is None or not callable(classifier):
            return {}
        with torch.no_grad():
            logits = classifier(z.to(device))
        if logits is None:
            return {}
        correct = (logits.argmax(1).cpu() == y).float()
        out: dict[str, float] = {}
        for part in ("train", "val", "test"):
            accs = [
                float(correct[getattr(s, part)].mean())
                for s in datamodule.splits()
                if getattr(s, part).numel()
            ]
            if accs:
                out[f"supervised/{part}_acc"] = sum(accs) / len(accs)
        return out

    def baseline(
        self,
        untrained: Callable[[], nn.Module],
        datamodule: Any,
        trained: Mapping[str, float],
        *,
        seed: int,
        device: str = "cpu",
        baseline_key: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> dict[str, float]:
        """The untrained-encoder baseline: ``untrained()`` builds the same method afresh after
        the generators are seeded with ``seed``; it is extracted, diagnosed and probed as the
        trained one, and the generators are restored afterwards, so the baseline never shifts
        the random stream of what the run does next.

        With ``cache_dir`` and ``baseline_key`` (plain values naming everything the caller
        knows determines the untrained encoder: the dataset's config, the method's config
        without its training-only keys, the evaluation settings; see
        :meth:`baseline_identity`), the baseline's own metrics are read from
        ``<cache_dir>/baseline/<key>.json`` when an identical baseline was computed before, and
        stored there otherwise (:class:`~graphssl.evaluation.baseline_cache.BaselineCache`).
        Either way the metrics are those a fresh computation gives.

        Returns:
            ``probe/<p>/baseline_<key>`` for every probe key of the trained encoder,
            ``probe/<p>/gain`` (:func:`gains`), ``diag_baseline/<name>`` and
            ``time/baseline_seconds``; ``{}`` when ``baseline`` is off.
        """
        metrics, _ = self._baseline(
            untrained, datamodule, trained, seed, device, baseline_key, cache_dir
        )
        return metrics

    def baseline_identity(
        self, datamodule: Any, baseline_key: Mapping[str, Any], *, seed: int, device: str
    ) -> dict[str, Any] | None:
        """What the baseline's cache key is made of: ``baseline_key`` (the caller's plain
        values), the seed, the device, this evaluation's extraction and probe settings, a digest
        of the data and splits, and the process's library versions, graphssl code digest and
        thread count (:func:`~graphssl.evaluation.baseline_cache.environment`); ``None`` when
        the data cannot be digested (then nothing is cached)."""
        digest = data_digest(datamodule)
        if digest is None:
            return None
        return {
            "caller": dict(baseline_key),
            "seed": int(seed),
            "device": str(device),
            "data": digest,
            "evaluation": {
                "extraction": dict(self.extraction),
                "max_rows": self.max_rows,
                "knn_max_rows": self.knn_max_rows,
                "diagnostics": self.diagnostics_enabled,
                "reference": self.reference,
                "extra_diagnostics": {
                    n: _describe(fn) for n, fn in sorted(self.extra_diagnostics.items())
                },
                "probes": {n: _describe(p) for n, p in sorted(self.probes.items())},
                "class": f"{type(self).__module__}.{type(self).__qualname__}",
            },
            "environment": environment(),
        }

    def _baseline(
        self,
        untrained: Callable[[], nn.Module],
        datamodule: Any,
        trained: Mapping[str, float],
        seed: int,
        device: str,
        baseline_key: Mapping[str, Any] | None,
        cache_dir: str | os.PathLike[str] | None,
    ) -> tuple[dict[str, float], dict[str, str]]:
        """:meth:`baseline`'s metrics and the cache tags (``{}`` without the cache)."""
        if not self.baseline_enabled:
            return {}, {}
        t0 = time.perf_counter()
        cache: BaselineCache | None = None
        identity: dict[str, Any] | None = None
        key = ""
        if self.baseline_cache_enabled and cache_dir is not None and baseline_key is not None:
            identity = self.baseline_identity(datamodule, baseline_key, seed=seed, device=device)
            if identity is not None:
                cache = BaselineCache(Path(cache_dir) / "baseline")
                key = cache.key(identity)
        own = cache.get(key) if cache is not None else None
        tags: dict[str, str] = {}
        if own is not None:
            tags[BASELINE_FROM] = key
            log.info("eval.baseline: read from the cache (%s)", key)
        else:
            own = self._fresh_baseline(untrained, datamodule, seed, device)
            if cache is not None and identity is not None:
                try:
                    cache.put(key, own, identity)
                    tags[BASELINE_KEY] = key
                except OSError as err:  # a read-only or full disk: the run goes on uncached
                    log.warning("eval.baseline_cache: could not store %s (%s)", key, err)
        out = dict(own)
        out.update(gains({**trained, **out}))
        out["time/baseline_seconds"] = time.perf_counter() - t0
        return out, tags

    def _fresh_baseline(
        self, untrained: Callable[[], nn.Module], datamodule: Any, seed: int, device: str
    ) -> dict[str, float]:
        """The baseline's own metrics (``diag_baseline/*``, ``probe/<p>/baseline_*``),
        computed."""
        rng = capture_rng()
        out: dict[str, float] = {}
        try:
            seed_everything(seed)
            fresh = untrained()
            z, y = self.extract(fresh, datamodule, device)
            del fresh
            diags = self.diagnose(z)
            out.update({f"diag_baseline/{k.split('/', 1)[1]}": v for k, v in diags.items()})
            probe_metrics = self.probe_metrics(datamodule, z, y, seed)
        finally:
            restore_rng(rng)
        for key, value in probe_metrics.items():
            if not key.startswith("probe/"):  # e.g. eval/max_rows: the trained run's already
                continue
            _, name, rest = key.split("/", 2)
            out[f"probe/{name}/baseline_{rest}"] = value
        return out

    def figures(
        self, z: Tensor, y: Tensor | None, *, seed: int, title: str | None = None
    ) -> dict[str, Any]:
        """``{artifact file: figure}``: the spectrum (on at most ``figure_max_rows`` seeded
        rows) and the projection of ``z``; ``{}`` when figures are off."""
        if not self.figures_enabled:
            return {}
        from graphssl.evaluation.plots import projection_figure, spectrum_figure

        return {
            "figures/spectrum.png": spectrum_figure(
                z, title=title, max_rows=self.figure_max_rows, seed=seed
            ),
            "figures/projection.png": projection_figure(z, y, seed=seed, title=title),
        }

    # ------------------------------------------------------------------ all of it
    def evaluate(
        self,
        model: nn.Module,
        datamodule: Any,
        *,
        seed: int,
        device: str = "cpu",
        untrained: Callable[[], nn.Module] | None = None,
        baseline_key: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        extracted: ShardedExtraction | None = None,
    ) -> EvaluationResult:
        """Extract, diagnose and probe ``model`` on ``datamodule``; then the baseline, when
        ``untrained`` builds one (methods whose class sets ``has_untrained_baseline = False``
        get none), from the cache in ``cache_dir`` when ``baseline_key`` is given
        (:meth:`baseline`).

        Every BLAS and OpenMP pool loaded by then runs with torch's thread count throughout
        (:func:`graphssl.threads.thread_budget`): the process's one budget, also for the
        libraries the probes load.

        ``extracted``: the embeddings the ranks of a multi-process fit extracted together
        (:func:`~graphssl.evaluation.extraction.extract_sharded`), used instead of extracting
        here; everything after extraction runs on this process.
        """
        with thread_budget():
            return self._evaluate(
                model, datamodule, seed, device, untrained, baseline_key, cache_dir, extracted
            )

    def _evaluate(
        self,
        model: nn.Module,
        datamodule: Any,
        seed: int,
        device: str,
        untrained: Callable[[], nn.Module] | None,
        baseline_key: Mapping[str, Any] | None,
        cache_dir: str | os.PathLike[str] | None,
        extracted: ShardedExtraction | None = None,
    ) -> EvaluationResult:
        if extracted is not None:
            plan, ranks = extracted.plan, extracted.ranks
            z, y, seconds = extracted.embeddings, extracted.labels, extracted.seconds
        else:
            plan, ranks = self.plan(model, datamodule), 1
            t0 = time.perf_counter()
            with stage(f"extraction ({plan.mode})"):
                z, y = self.extract(model, datamodule, device)
            seconds = time.perf_counter() - t0
        tags = {"extract/mode": plan.mode, "extract/reason": plan.reason}
        if ranks > 1:
            tags["extract/ranks"] = str(ranks)
        result = EvaluationResult(z, y, tags=tags)
        result.timings["time/extract_seconds"] = seconds
        t0 = time.perf_counter()
        with stage("diagnostics"):
            result.metrics.update(self.diagnose(z))
        result.timings["time/diagnostics_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        result.metrics.update(self.probe_metrics(datamodule, z, y, seed))
        result.metrics.update(self.classifier_metrics(model, z, y, datamodule, device))
        result.timings["time/probe_seconds"] = time.perf_counter() - t0
        if untrained is not None and self.baseline_enabled:
            if getattr(model, "has_untrained_baseline", True):
                with stage("untrained baseline"):
                    metrics, tags = self._baseline(
                        untrained, datamodule, result.metrics, seed, device, baseline_key, cache_dir
                    )
                result.metrics.update(metrics)
                result.tags.update(tags)
            else:
                log.info(
                    "eval.baseline: %s has no untrained-encoder baseline; skipped",
                    type(model).__name__,
                )
        return result

    def __repr__(self) -> str:
        return (
            f"Evaluation(extraction={self.extraction['mode']}, probes={sorted(self.probes)}, "
            f"diagnostics={self.diagnostics_enabled}, baseline={self.baseline_enabled}, "
            f"baseline_cache={self.baseline_cache_enabled})"
        )
