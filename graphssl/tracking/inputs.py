"""The inputs of the compare and report tasks, read from MLflow as plain records.

:func:`load_embedders` selects runs (by experiment, sweep parent, run ids and a search filter),
downloads each one's ``embeddings.pt`` and returns them as
:class:`~graphssl.evaluation.emir.compare.Embedder` records, with the ``.pt`` files given by path
after them; :func:`compare_experiment` is the experiment a compare run goes to.
:func:`select_report_runs` is the selection of a report, with the error a user can act on when it
is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from graphssl.evaluation.correlation import metric_safe
from graphssl.evaluation.emir.compare import Embedder
from graphssl.tracking import artifacts
from graphssl.tracking.artifacts import RunRecord
from graphssl.tracking.embeddings import download_embeddings, load_payload
from graphssl.tracking.store import TrackingStore

__all__ = ["compare_experiment", "load_embedders", "select_report_runs", "unique_names"]


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
