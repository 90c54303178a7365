"""The inputs of the compare and report tasks, read from MLflow as plain records.

:func:`load_embedders` selects runs (by experiment, sweep parent, run ids and a search filter),
downloads each one's ``embeddings.pt`` and returns them as
:class:`~graphssl.evaluation.emir.compare.Embedder` records, with the ``.pt`` files given by path
after them; :func:`compare_experiment` is the experiment a compare run goes to.
:func:`select_report_runs` is the selection of a report, with the error a user can act on when it
is empty; :func:`select_leaderboard_runs` that of a leaderboard (also by run ids).
:func:`newest_sweep_parent`, :func:`newest_named_run` and :func:`zoo_members` find the runs of
the EMIR studies (a model zoo trained as a sweep, the members a comparison read).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from graphssl.evaluation.correlation import metric_safe
from graphssl.evaluation.emir.compare import CompareResult, Embedder
from graphssl.evaluation.emir.study import ZooMember
from graphssl.tracking import artifacts
from graphssl.tracking.artifacts import RunRecord
from graphssl.tracking.embeddings import download_embeddings, load_payload
from graphssl.tracking.store import TrackingStore

__all__ = [
    "compare_experiment",
    "load_embedders",
    "newest_named_run",
    "newest_sweep_parent",
    "select_leaderboard_runs",
    "select_report_runs",
    "unique_names",
    "zoo_members",
]


def unique_names(records: Sequence[RunRecord]) -> list[str]:
    """Each run's name (usable in a metric key), with a short run id where names collide."""
    base = [metric_safe(r.run_name or r.run_id[:8]) for r in records]
    return [f"{b}-{r.run_id[:8]}" if base.count(b) > 1 else b for b, r in zip(base, records)]


def load_embedders(
    store: TrackingStore,
    dest: Path,
    *,
    experiment_name: str | None = None,
    parent_run_id: str | None = None,
    run_ids: Sequence[str] = (),
    filter_string: str | None = None,
    files: Sequence[str] = (),
    downstream: str = "probe/logreg/test_acc",
) -> tuple[list[Embedder], list[RunRecord]]:
    """The selected runs' embeddings (downloaded into ``dest``), then those of ``files``.

    Each run's embedder carries the run's ``downstream`` metric when it logged one. A file is
    named after its stem (its folder's name for ``embeddings.pt``), numbered when that name is
    taken.

    Raises:
        ValueError: nothing selected (no selector given, or no run matches).
        FileNotFoundError: a selected run has no ``embeddings.pt``.
    """
    embedders: list[Embedder] = []
    records: list[RunRecord] = []
    if experiment_name or parent_run_id or run_ids:
        records = artifacts.select_runs(
            store,
            experiment=experiment_name,
            parent_run_id=parent_run_id,
            run_ids=list(run_ids),
            filter_string=filter_string,
        )
        if not records:
            raise ValueError(
                f"no runs selected (experiment_name={experiment_name!r}, "
                f"parent_run_id={parent_run_id!r}, filter={filter_string!r} in "
                f"{store.tracking_uri}); expected FINISHED graphssl runs with embeddings.pt"
            )
        for name, rec in zip(unique_names(records), records):
            path = download_embeddings(store, rec, dest)
            z, ids = load_payload(path, source=f"run {rec.run_id}")
            embedders.append(
                Embedder(name, z, ids, f"run {rec.run_id}", rec.run_id, rec.metrics.get(downstream))
            )
    elif not files:
        raise ValueError(
            "no runs selected: give experiment_name=<name>, parent_run_id=<id>, "
            "run_ids=[...] or embedding_files=[...]"
        )
    stems = [
        metric_safe(Path(f).stem if Path(f).stem != "embeddings" else Path(f).parent.name)
        for f in files
    ]
    taken = {e.name for e in embedders}
    for i, (f, stem) in enumerate(zip(files, stems)):
        name = stem if stems.count(stem) == 1 and stem not in taken else f"{stem}-{i}"
        z, ids = load_payload(f)
        embedders.append(Embedder(name, z, ids, f))
    return embedders, records


def compare_experiment(
    store: TrackingStore,
    default: str,
    *,
    experiment_name: str | None = None,
    parent_run_id: str | None = None,
    run_ids: Sequence[str] = (),
) -> str:
    """The experiment a compare run goes to: the inputs' one when it can be found (the named
    experiment, the parent's, the first run id's), else ``default``."""
    if experiment_name and artifacts.experiment_id_of(store, experiment_name):
        return experiment_name
    anchor = parent_run_id or next(iter(run_ids), None)
    if anchor:
        try:
            run = artifacts.get_run(store, anchor)
            return artifacts.experiment_name_of(store, run.experiment_id)
        except LookupError:
            pass  # the selection fails later, inside the compare run, with the full message
    return default


def select_report_runs(
    store: TrackingStore,
    *,
    experiment_name: str | None,
    parent_run_id: str | None,
    filter_string: str | None = None,
    statuses: Sequence[str] = ("FINISHED",),
) -> list[RunRecord]:
    """The runs a report correlates: an experiment's or a sweep parent's children.

    Raises:
        ValueError: no run matches (the message names the selection and the store).
    """
    runs = artifacts.select_runs(
        store,
        experiment=experiment_name,
        parent_run_id=parent_run_id,
        filter_string=filter_string,
        statuses=tuple(statuses),
    )
    if not runs:
        raise ValueError(
            f"no runs selected (experiment_name={experiment_name!r}, "
            f"parent_run_id={parent_run_id!r}, filter={filter_string!r}) in {store.tracking_uri}"
        )
    return runs


def select_leaderboard_runs(
    store: TrackingStore,
    *,
    experiment_name: str | None,
    parent_run_id: str | None = None,
    run_ids: Sequence[str] = (),
    filter_string: str | None = None,
    statuses: Sequence[str] = ("FINISHED",),
) -> list[RunRecord]:
    """The runs a leaderboard ranks: an experiment's, a sweep parent's children, or the runs
    ``run_ids``, narrowed by ``filter_string``; summary runs (sweep parents, reports) are never
    among them.

    Raises:
        ValueError: no run matches, or the experiment, parent or a run id is unknown (the
            message names the selection and the store).
    """
    if run_ids and filter_string:
        raise ValueError(
            f"filter={filter_string!r} applies to an experiment or a sweep parent; with "
            f"run_ids={list(run_ids)!r} give no filter"
        )
    if run_ids:
        experiment_name = parent_run_id = None
    try:
        runs = artifacts.select_runs(
            store,
            experiment=experiment_name,
            parent_run_id=parent_run_id,
            run_ids=list(run_ids),
            filter_string=filter_string,
            statuses=tuple(statuses),
        )
    except LookupError as err:
        raise ValueError(str(err).strip("'\"")) from None
    if not runs:
        raise ValueError(
            f"no runs match the leaderboard's selection (experiment_name={experiment_name!r}, "
            f"parent_run_id={parent_run_id!r}, filter={filter_string!r}, statuses="
            f"{list(statuses)}) in {store.tracking_uri}; expected finished training runs"
        )
    return runs


def newest_sweep_parent(
    store: TrackingStore, experiment: str, skip_tag: str = "graphssl.study"
) -> RunRecord | None:
    """The newest sweep parent a Hydra multirun created in ``experiment`` (runs tagged
    ``skip_tag``, e.g. a study's own summary run, are skipped), or ``None``."""
    exp_id = artifacts.experiment_id_of(store, experiment)
    if exp_id is None:
        return None
    runs = store.client.search_runs(
        [exp_id],
        filter_string=f"tags.`{artifacts.ROLE_TAG}` = 'sweep'",
        order_by=["attributes.start_time DESC"],
        max_results=1000,
    )
    for run in runs:
        tags = run.data.tags
        if "graphssl.sweep_dir" in tags and skip_tag not in tags:
            return artifacts.get_run(store, run.info.run_id)
    return None


def newest_named_run(
    store: TrackingStore, experiment: str, name: str, params: Mapping[str, str]
) -> RunRecord | None:
    """The newest FINISHED run called ``name`` in ``experiment`` whose params include
    ``params``, or ``None``."""
    if artifacts.experiment_id_of(store, experiment) is None:
        return None
    runs = artifacts.select_runs(
        store, experiment=experiment, filter_string=f"attributes.run_name = '{name}'"
    )
    runs = [r for r in runs if all(r.params.get(k) == v for k, v in params.items())]
    return runs[-1] if runs else None


def _width(shape: str | None) -> int | None:
    """The width of an ``embeddings.shape`` tag (``20000x512`` → 512)."""
    try:
        return int(str(shape).rsplit("x", 1)[-1])
    except ValueError:
        return None


def zoo_members(
    store: TrackingStore,
    result: CompareResult,
    supervised: str = "supervised/test_acc",
    probe: str = "probe/logreg/test_acc",
) -> list[ZooMember]:
    """The members the compare run ``result.run_id`` read, in its order, with their
    ``supervised`` and ``probe`` scores.

    The compare run tags every input ``graphssl.compare.input.<i> = <name>=run <run id>``; the
    member runs hold the architecture, the epochs and the embedding width.

    Raises:
        RuntimeError: the compare run does not say which run an embedder is.
    """
    tags = artifacts.get_run(store, result.run_id).tags
    run_of: dict[str, str] = {}
    for i in range(len(result.names)):
        name, _, source = tags.get(f"graphssl.compare.input.{i}", "").partition("=")
        if source.startswith("run "):
            run_of[name] = source.removeprefix("run ")
    out = []
    for name in result.names:
        if name not in run_of:
            raise RuntimeError(f"compare run {result.run_id} does not say which run {name} is")
        run = artifacts.get_run(store, run_of[name])
        dim = _width(run.tags.get("embeddings.shape")) or result.original_dims.get(name, 0)
        out.append(
            ZooMember(
                name=name,
                label=run.run_name.split("[", 1)[0],
                run_id=run.run_id,
                architecture=run.params.get("encoder.name", "?"),
                epochs=int(run.params.get("trainer.epochs", -1)),
                dim=int(dim),
                supervised=float(run.metrics.get(supervised, math.nan)),
                probe=float(run.metrics.get(probe, math.nan)),
            )
        )
    return out
