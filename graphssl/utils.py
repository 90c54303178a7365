"""Small helpers every layer may use: seeding, generator states, run metadata, loading torch
files without running code, and the structural types of splits and probes (the training loop's
selection and the evaluation layer both take them, and neither imports the other)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import importlib.metadata
import os
import pickle
import platform
import random
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor


class SplitLike(Protocol):
    """A train/validation/test split given by row indices or boolean masks."""

    @property
    def train(self) -> Tensor: ...
    @property
    def val(self) -> Tensor: ...
    @property
    def test(self) -> Tensor: ...


class ProbeLike(Protocol):
    """Anything with a probe's ``evaluate`` (:class:`graphssl.evaluation.probe.Probe`)."""

    def evaluate(
        self,
        embeddings: Tensor,
        labels: Tensor | None,
        train_mask: Tensor,
        val_mask: Tensor,
        test_mask: Tensor,
    ) -> Mapping[str, Any]: ...


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's global generators."""
    version, state, gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()  # type: ignore[misc]
    out: dict[str, Any] = {
        "python": [version, list(state), gauss],
        "numpy": [
            np_name,
            torch.from_numpy(np.asarray(np_keys).copy()),
            int(np_pos),
            int(np_has_gauss),
            float(np_gauss),
        ],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(state: dict[str, Any]) -> None:
    """Restore what :func:`capture_rng` captured."""
    version, values, gauss = state["python"]
    random.setstate((version, tuple(values), gauss))
    name, keys, pos, has_gauss, gauss_np = state["numpy"]
    np.random.set_state((name, keys.numpy(), pos, has_gauss, gauss_np))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str:
    """The current git commit of ``cwd`` (with ``-dirty`` when modified), or ``"unknown"``."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    """Versions of Python and of the packages a result depends on."""
    from graphssl.package import distribution_version

    out = {"python": platform.python_version(), "graphssl": distribution_version()}
    for name in (
        "torch",
        "torch-geometric",
        "hydra-core",
        "mlflow",
        "numpy",
        "scikit-learn",
        "timm",
        "gensim",
    ):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def tensor_hash(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (dtype and shape included)."""
    h = hashlib.sha256()
    h.update(f"{t.dtype}:{tuple(t.shape)}".encode())
    h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class UnsafeFileError(ValueError):
    """A torch file that only full unpickling could read; graphssl refuses it, because
    unpickling runs whatever code the file names. The message names the file, what was expected
    and how to convert it into a code-free file."""

    def __init__(self, path: str | os.PathLike[str], expected: str, detail: str = "") -> None:
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"{path} was refused: it holds Python objects that only full unpickling could "
            f"rebuild{why}, and unpickling runs code named by the file, so graphssl never does "
            f"it. Expected "
            f"{expected}. Convert it once, in a session that trusts the file, into tensors only: "
            f"torch.save({{k: torch.as_tensor(v) for k, v in obj.items()}}, 'file.pt') (a dict "
            f"of tensors, read with weights_only=True) or numpy.savez('file.npz', **arrays)"
        )
        self.path = Path(path)


#: the global (``module.name``) or pickle opcode that torch's weights-only unpickler refused
_REFUSED = re.compile(
    r"(?:unsupported GLOBAL|Unsupported global: GLOBAL) ([\w.]+)|(Unsupported operand \d+)"
)


@contextlib.contextmanager
def allowed_globals(classes: list[Any]) -> Iterator[None]:
    """Let ``torch.load(weights_only=True)`` rebuild ``classes`` while the block runs.

    Unlike ``torch.serialization.safe_globals``, which removes its classes on exit even when
    they were allowed before (PyG allows ``Data`` at import), only the classes that were not
    allowed yet are added, and only those are removed afterwards.
    """
    added = [c for c in classes if c not in torch.serialization.get_safe_globals()]
    torch.serialization.add_safe_globals(added)
    try:
        yield
    finally:
        from torch import _weights_only_unpickler

        _weights_only_unpickler._remove_safe_globals(added)


def is_unsafe_pickle(err: BaseException) -> bool:
    """Whether ``err`` (from ``torch.load(weights_only=True)``) means the file is a pickle of
    objects the weights-only unpickler refuses, rather than a damaged or foreign file."""
    return isinstance(err, pickle.UnpicklingError) and "Weights only load failed" in str(err)


def load_weights_only(
    path: str | os.PathLike[str], expected: str, map_location: Any = "cpu", **kwargs: Any
) -> Any:
    """``torch.load(path, weights_only=True)``; a file that only full unpickling could read
    raises :class:`UnsafeFileError` (naming the file, ``expected`` and how to convert it).

    Other failures (a truncated, empty or foreign file) propagate unchanged for the caller to
    name.
    """
    try:
        return torch.load(path, map_location=map_location, weights_only=True, **kwargs)
    except pickle.UnpicklingError as err:
        if not is_unsafe_pickle(err):
            raise
        found = _REFUSED.search(str(err))
        detail = ""
        if found:
            detail = f"it names {found.group(1)}" if found.group(1) else found.group(2)
        raise UnsafeFileError(path, expected, detail) from None


#: glibc ``mallopt`` parameters (``malloc.h``) and their defaults
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
_ALLOCATOR_MODES = ("reuse", "system")
#: whether configure_allocator("reuse") applied its setting and restore_allocator has not run
_reuse_in_force = False


def check_allocator_mode(mode: str) -> None:
    """Refuse a ``cpu_allocator`` value other than ``"reuse"`` or ``"system"``."""
    if mode not in _ALLOCATOR_MODES:
        raise ValueError(
            f"cpu_allocator must be one of {', '.join(_ALLOCATOR_MODES)}, got {mode!r}: 'reuse' "
            "keeps freed memory in the process for the next tensors while training, 'system' "
            "leaves the C allocator as it is"
        )


def _glibc() -> Any:
    """The C library when it is glibc (whose ``mallopt`` parameters are meant), else ``None``."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not all(hasattr(libc, f) for f in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


def configure_allocator(mode: str) -> bool:
    """Set how the C allocator treats large freed blocks; ``True`` when a setting was applied.

    ``"reuse"``: on glibc, keep freed memory in the process (``mallopt(M_MMAP_MAX, 0)``,
    ``mallopt(M_TRIM_THRESHOLD, max)``). By default glibc maps every block above 32 MB on its own
    and unmaps it when freed, so each new activation tensor of that size page-faults its memory
    back in, zero-filled by the kernel: on a neighbour-sampled batch of a large graph that costs
    about four times the elementwise work itself (GraphMAE's products-size batch: 28 % less CPU
    with ``"reuse"``). The price: resident memory does not shrink after a peak, hence
    :func:`allocator`, which restores the defaults afterwards. Elsewhere than glibc (macOS, musl)
    nothing is changed. ``"system"``: leave the allocator as it is.

    Raises:
        ValueError: for a mode other than ``"reuse"`` or ``"system"``.
    """
    global _reuse_in_force
    check_allocator_mode(mode)
    libc = _glibc() if mode == "reuse" else None
    if libc is None:
        return False
    ok = libc.mallopt(_M_MMAP_MAX, 0) == 1
    applied = bool(ok and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1)
    _reuse_in_force = _reuse_in_force or applied
    return applied


def restore_allocator() -> None:
    """glibc's own treatment of large blocks again, and the freed memory returned to the system
    (``malloc_trim``); nothing elsewhere than glibc."""
    global _reuse_in_force
    _reuse_in_force = False
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
        libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
        libc.malloc_trim(0)


@contextlib.contextmanager
def allocator(mode: str) -> Iterator[bool]:
    """:func:`configure_allocator` ``(mode)`` for the block, :func:`restore_allocator` after it
    when a setting was applied (so what follows, evaluation on a whole graph's embeddings, gets
    its large blocks from the system and gives them back); yields whether one was."""
    applied = configure_allocator(mode)
    try:
        yield applied
    finally:
        if applied:
            restore_allocator()


@contextlib.contextmanager
def system_allocator() -> Iterator[bool]:
    """glibc's own treatment of large blocks for the block when ``"reuse"`` is in force, then
    ``"reuse"`` again; yields whether it was in force.

    For one-off work whose large temporaries would otherwise stay in the process for good under
    ``"reuse"`` (copying a graph into shared memory, sorting its edges once): freed memory held
    before the block and what the block allocates and frees go back to the system.
    """
    if not _reuse_in_force:
        yield False
        return
    restore_allocator()
    try:
        yield True
    finally:
        restore_allocator()  # what was freed in the block, back to the system
        configure_allocator("reuse")
