"""``trainer.compile=true``: the method's encoders run through ``torch.compile`` while training.

Each module of :meth:`~graphssl.methods.base.SSLMethod.encoders` is compiled in place
(``nn.Module.compile``), so parameter names, checkpoints and ``state_dict`` keys stay those of
the eager module; the losses, augmentations and heads outside the encoders stay eager. After
training the encoders are eager again: extraction and probes run in eval mode on other shapes,
which would compile anew for no gain.

On CPU, TorchInductor generates C++ and builds it with a C++ compiler (``$CXX``, else ``g++``
or ``clang++`` on ``PATH``); without one every compiled step would fail, so the trainer checks
for it before training (:func:`compile_problem`). On CUDA it generates Triton kernels and needs
the ``triton`` package.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import torch
from torch import nn

__all__ = ["CXX_CANDIDATES", "compile_encoders", "compile_problem", "restore_eager"]

#: C++ compilers TorchInductor's CPU backend looks for when ``$CXX`` is unset
CXX_CANDIDATES: tuple[str, ...] = ("g++", "clang++")


def _cxx() -> str | None:
    """The C++ compiler TorchInductor would run on CPU, or ``None`` when none is found."""
    named = os.environ.get("CXX")
    if named:
        return shutil.which(named)
    for candidate in CXX_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def compile_problem(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot train on ``device`` here, as a paragraph naming what is
    missing and what to do; ``None`` when nothing is known to be missing."""
    head = "trainer.compile=true cannot run here: "
    tail = " Set trainer.compile=false to train eagerly (the same results, without compiling)."
    if not hasattr(torch, "compile") or sys.version_info >= (3, 14):
        return (
            f"{head}torch {torch.__version__} on Python {sys.version.split()[0]} has no "
            f"usable torch.compile (TorchDynamo supports the Python versions of its release)."
            f"{tail}"
        )
    if device.type == "cpu" and _cxx() is None:
        cxx = os.environ.get("CXX")
        what = f"$CXX={cxx!r} is not on PATH" if cxx else "no C++ compiler (g++ or clang++) is"
        return (
            f"{head}{what} found. On CPU, TorchInductor turns each compiled graph into C++ "
            f"and builds it with a C++ compiler, so every compiled step would fail; install "
            f"one (e.g. `apt-get install g++`) or point $CXX at it.{tail}"
        )
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return (
            f"{head}the `triton` package is not installed. On CUDA, TorchInductor generates "
            f"Triton kernels; install the triton build that matches torch {torch.__version__}."
            f"{tail}"
        )
    return None


def compile_encoders(encoders: dict[str, nn.Module]) -> list[nn.Module]:
    """Compile each distinct module of ``encoders`` in place; returns them (for
    :func:`restore_eager`). Shapes that change between steps (dropped edges) are compiled
    once more and then traced with dynamic sizes, as ``torch.compile`` does by default."""
    compiled: list[nn.Module] = []
    for module in encoders.values():
        if any(module is seen for seen in compiled):
            continue
        module.compile()
        compiled.append(module)
    return compiled


def restore_eager(modules: list[nn.Module]) -> None:
    """Undo :func:`compile_encoders`: the modules run eagerly again."""
    for module in modules:
        module._compiled_call_impl = None
