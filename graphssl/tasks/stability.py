"""``graphssl-stability``: how many rows each diagnostic needs (Tsitsulin et al. 2023, Table 1).

Loads one or more embedding matrices — MLflow runs' ``embeddings.pt`` artifacts, ``.pt`` files,
or a generated matrix — runs :func:`graphssl.evaluation.stability.stability_study`, prints the
Table-1-shaped Markdown table and logs it to a new MLflow run tagged ``graphssl.role=stability``
(params ``stability.*``; metrics ``stability/<metric>/bounded``, ``stability/<metric>/b_<f>``
(NaN: never reached) and ``stability/<metric>/q_mean`` with the batch size as step).
Config: ``conf/stability.yaml``; :func:`run_stability` is the task the CLI calls::

    graphssl-stability                                       # generated 100k x 128 matrix
    graphssl-stability 'stability.sources=[run:<mlflow run id>, path/to/embeddings.pt]'
"""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from graphssl.evaluation.stability import (
    METRIC_LABELS,
    StabilityResult,
    generated_embeddings,
    markdown_table,
    stability_study,
)
from graphssl.tracking import artifacts
from graphssl.tracking.embeddings import download_embeddings, load_payload
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.store import TrackingStore

log = logging.getLogger(__name__)

ROLE = "stability"


def load_source(
    spec: str, generated: dict[str, Any], store: TrackingStore, tmp: Path
) -> tuple[str, torch.Tensor]:
    """``"generated"``, ``"run:<id>"`` (an MLflow run's ``embeddings.pt``) or a ``.pt`` path."""
    if spec == "generated":
        z = generated_embeddings(
            int(generated["num_rows"]),
            int(generated["dim"]),
            float(generated.get("decay", 0.5)),
            int(generated.get("seed", 0)),
        )
        return f"generated-{z.shape[0]}x{z.shape[1]}", z
    if spec.startswith("run:"):
        record = artifacts.get_run(store, spec[4:])
        path = download_embeddings(store, record, tmp)
        return f"{record.run_name or 'run'}-{record.run_id[:8]}", load_payload(path, source=spec)[0]
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(
            f"stability source {spec!r} is neither 'generated', "
            f"'run:<mlflow run id>' nor an existing .pt file"
        )
    return path.stem, load_payload(path)[0]


def result_metrics(result: StabilityResult) -> list[tuple[str, float, int]]:
    """MLflow points of a study (see the module docstring)."""
    points: list[tuple[str, float, int]] = []
    for row in result.table_rows():
        m = str(row["metric"])
        points.append((f"stability/{m}/bounded", float(row["bounded"]), 0))  # type: ignore[arg-type]
        for f in result.factors:
            b = row[f"{f:g}"]
            points.append((f"stability/{m}/b_{f:g}", math.nan if b is None else float(b), 0))  # type: ignore[arg-type]
        for b in result.batch_sizes:
            points.append((f"stability/{m}/q_mean", float(result.mean_ratio(m, b).mean()), b))
    return points


def run_stability(cfg: DictConfig) -> StabilityResult:
    """Load the sources, run the study, print and log the table; returns the result.

    Raises:
        ValueError: ``cfg`` has no ``stability`` node (not composed from conf/stability.yaml).
    """
    st = cfg.get("stability")
    if st is None:
        raise ValueError(
            "the stability task needs the 'stability' config node; compose conf/stability.yaml "
            "(the graphssl-stability command does)"
        )
    store = TrackingStore.from_config(cfg)
    with store.start_run(
        str(st.get("run_name", ROLE)), role=(ROLE, "graphssl-stability")
    ) as tracker:
        params = flatten({"stability": OmegaConf.to_container(st, resolve=True)})  # type: ignore[dict-item]
        tracker.log_params(params)
        generated = OmegaConf.to_container(st.generated, resolve=True)
        assert isinstance(generated, dict)
        with tempfile.TemporaryDirectory(prefix="graphssl-stability-") as tmp:
            sources = dict(
                load_source(str(s), generated, store, Path(tmp))  # type: ignore[arg-type]
                for s in st.sources
            )
        tracker.set_tags(
            {
                "graphssl.stability.sources": ", ".join(
                    f"{k} ({v.shape[0]}x{v.shape[1]})" for k, v in sources.items()
                )[:5000]
            }
        )
        result = stability_study(
            sources,
            batch_sizes=list(st.batch_sizes),
            repeats=int(st.repeats),
            seed=int(st.seed),
            metrics=list(st.metrics) if st.get("metrics") else None,
            reference=bool(st.reference),
            factors=[float(f) for f in st.factors],
        )
        table = markdown_table(result)
        header = (
            f"Stability of the diagnostics under row subsampling (Tsitsulin et al. 2023, Table 1): "
            f"{len(sources)} source(s), b in {result.batch_sizes}, {st.repeats} repeats; "
            f"cell = smallest b from which min(q̄, 1/q̄) >= factor; Bounded = share of "
            f"q <= 1."
        )
        tracker.log_points(result_metrics(result))
        tracker.log_text(f"{header}\n\n{table}\n", "stability_table.md")
        print(f"{header}\n\n{table}\n\n(MLflow run {tracker.run_id})")
    return result


__all__ = ["METRIC_LABELS", "load_source", "result_metrics", "run_stability"]
