"""The run summary a task prints at its end: the headline metrics in a short plain-text table."""

from __future__ import annotations

import math
import sys

import torch

__all__ = ["peak_gpu_gb", "peak_rss_gb", "reset_peak_gpu", "summary_table"]

#: metric keys the summary table shows besides the probes' headline values
_SUMMARY_KEYS = (
    "diag/rankme",
    "diag/effective_rank",
    "diag/alpha_req",
    "diag/stable_rank",
    "diag/nesum",
    "diag/coherence",
    "diag/self_cluster",
    "select/best_epoch",
    "select/best_val_acc",
    "supervised/test_acc",
    "train/final_loss",
    "train/epochs",
    "time/train_seconds",
    "time/probe_seconds",
    "time/total_seconds",
    "time/batches_per_second",
    "mem/peak_rss_gb",
    "mem/peak_gpu_gb",
)
_PROBE_KEYS = (
    "val_acc",
    "test_acc",
    "test_acc_std",
    "val_ap",
    "test_ap",
    "test_mae",
    "weight_decay",
    "baseline_test_acc",
    "baseline_test_ap",
    "baseline_test_mae",
    "gain",
    "ogb_test_acc",
    "ogb_test_rocauc",
)


def _number(v: float) -> str:
    """A whole number as one (``261``), anything else with four decimals (``0.8180``)."""
    return str(int(v)) if math.isfinite(v) and float(v).is_integer() else f"{v:.4f}"


def summary_table(metrics: dict[str, float], header: str) -> str:
    """A short plain-text table of the headline metrics."""
    rows = [
        (k, v)
        for k, v in metrics.items()
        if k.startswith("probe/") and k.rsplit("/", 1)[-1] in _PROBE_KEYS
    ]
    rows += [(k, v) for k, v in metrics.items() if k in _SUMMARY_KEYS]
    width = max([len(k) for k, _ in rows] + [len(header)])
    lines = [header, "-" * (width + 14)]
    lines += [f"{k:<{width}}  {_number(v):>12}" for k, v in rows]
    return "\n".join(lines)


def peak_rss_gb() -> float:
    """Peak resident memory of this process in GiB (``ru_maxrss``; ``nan`` where the
    ``resource`` module does not exist, e.g. on Windows)."""
    try:
        import resource
    except ImportError:
        return math.nan
    scale = 2**30 if sys.platform == "darwin" else 2**20  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def _cuda(device: str | torch.device) -> torch.device | None:
    """``device`` as a CUDA device with its index (the current one for ``cuda``); ``None`` for
    another device, or where CUDA is unavailable."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)


def reset_peak_gpu(device: str | torch.device) -> None:
    """Start :func:`peak_gpu_gb`'s count afresh on a CUDA ``device`` (a job of a sweep that runs
    in the process of an earlier one measures its own peak); nothing off CUDA."""
    if (dev := _cuda(device)) is not None:
        torch.cuda.reset_peak_memory_stats(dev)


def peak_gpu_gb(device: str | torch.device) -> float | None:
    """Peak memory of tensors torch allocated on a CUDA ``device`` since
    :func:`reset_peak_gpu`, in GiB (``torch.cuda.max_memory_allocated``: what the tensors
    held, not the caching allocator's reserve); ``None`` off CUDA."""
    if (dev := _cuda(device)) is None:
        return None
    return torch.cuda.max_memory_allocated(dev) / 2**30
