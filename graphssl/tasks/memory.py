"""Memory exhaustion as one paragraph: the stage that ran out, the size asked and what to lower.

Running out of memory reaches Python in several shapes: ``MemoryError`` (Python's allocator,
NumPy's ``Unable to allocate 7.45 GiB for an array ...``), torch's CPU allocator
(``RuntimeError: [enforce fail at alloc_cpu.cpp] ... DefaultCPUAllocator: can't allocate memory:
you tried to allocate 8000000000 bytes``), CUDA's ``torch.cuda.OutOfMemoryError`` and a failed
``mmap`` (``OSError`` with ``ENOMEM``). :func:`memory_exhausted` recognises them and writes the
paragraph the console shows instead of a traceback.

The stage is where it was raised: an explicit :func:`stage` block around the code, or else the
frames of the traceback (the training loop, the evaluation's extraction, diagnostics or probes,
the dataset's loading).
"""

from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Iterator
from types import TracebackType

__all__ = ["MemoryExhaustedError", "memory_exhausted", "stage"]

#: attribute carrying the stage an exception was raised in (set by :func:`stage`)
STAGE_ATTR = "graphssl_stage"

#: what lowers the memory each stage needs
ADVICE = {
    "training": (
        "trainer.mini_batch=true (neighbour-sampled mini-batches instead of the whole graph "
        "at once), or a smaller trainer.batch_size"
    ),
    "extraction": (
        "trainer.mini_batch=true or eval.extraction.mode=layerwise (embeddings one layer at a "
        "time, in chunks), or a smaller trainer.batch_size"
    ),
    "probes": "eval.max_rows=<rows> (the probes on at most that many rows of each split)",
    "diagnostics": "eval.max_rows=<rows> (the diagnostics on at most that many rows)",
    "loading the dataset": "a smaller dataset, or a machine with more memory",
}
_DEFAULT_ADVICE = "trainer.mini_batch=true, a smaller trainer.batch_size, or eval.max_rows=<rows>"

#: (path fragment of a frame's file, function name or None, stage), outermost match wins
_FRAMES = (
    ("graphssl/training/", None, "training"),
    ("graphssl/evaluation/evaluator.py", "extract", "extraction"),
    ("graphssl/evaluation/extraction.py", None, "extraction"),
    ("graphssl/evaluation/evaluator.py", "diagnose", "diagnostics"),
    ("graphssl/evaluation/diagnostics/", None, "diagnostics"),
    ("graphssl/evaluation/evaluator.py", "probe_metrics", "probes"),
    ("graphssl/evaluation/", "probe", "probes"),
    ("graphssl/data/", None, "loading the dataset"),
)

_TORCH_CPU = re.compile(r"DefaultCPUAllocator: can't allocate memory", re.I)
_TORCH_BYTES = re.compile(r"tried to allocate (\d+) bytes", re.I)
_SIZE = re.compile(r"(?:allocate|Tried to allocate) (\d+(?:\.\d+)?\s*[KMGTP]?i?B)\b")


class MemoryExhaustedError(RuntimeError):
    """A stage ran out of memory; the message is the one paragraph shown to the user."""


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Name the stage of any exception raised inside (the innermost block wins)."""
    try:
        yield
    except BaseException as err:
        if getattr(err, STAGE_ATTR, None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(err, STAGE_ATTR, name)
        raise


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says that an allocation failed."""
    if isinstance(err, MemoryError):
        return True
    if type(err).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError
        return True
    if isinstance(err, RuntimeError) and _TORCH_CPU.search(str(err)):
        return True
    return isinstance(err, OSError) and err.errno == errno.ENOMEM


def size_asked(err: BaseException) -> str | None:
    """The allocation that failed, as the error says it (``7.45 GiB``), or ``None``."""
    text = str(err)
    found = _TORCH_BYTES.search(text)
    if found:
        return _human(int(found.group(1)))
    found = _SIZE.search(text)
    return found.group(1) if found else None


def _human(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.2f} {unit}"
        size /= 1024
    return f"{size:.2f} GiB"  # pragma: no cover


def stage_of(err: BaseException) -> str | None:
    """The stage ``err`` was raised in: a :func:`stage` block, else the traceback's frames."""
    named = getattr(err, STAGE_ATTR, None)
    if isinstance(named, str):
        return named
    tb: TracebackType | None = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        path = code.co_filename.replace("\\", "/")
        for fragment, function, name in _FRAMES:
            if fragment in path and (function is None or function in code.co_name):
                return name
        tb = tb.tb_next
    return None


def memory_exhausted(err: BaseException) -> str | None:
    """The one paragraph for an out-of-memory ``err`` (``None`` for any other error)."""
    if not is_out_of_memory(err):
        return None
    where = stage_of(err)
    size = size_asked(err)
    detail = " ".join(str(err).split())
    if len(detail) > 300:
        detail = detail[:300] + " ..."
    what = f"an allocation of {size}" if size else "an allocation"
    return (
        f"out of memory during {where or 'the run'}: {what} failed "
        f"({type(err).__name__}{': ' + detail if detail else ''}). "
        f"Lower what it needs: {ADVICE.get(where or '', _DEFAULT_ADVICE)}; "
        f"or give the process more memory."
    )
