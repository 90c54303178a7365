"""Diagnostics of the user's own (``eval.diagnostics.extra``): built from config by Hydra as
partial functions, logged as ``diag/<name>`` or ``diag/<name>/<key>`` beside the suite."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import Tensor

from graphssl.evaluation import Evaluation


def top_share(z: Tensor, k: int = 1) -> float:
    """Share of the squared singular values in the top ``k``."""
    s = torch.linalg.svdvals(z.double()).pow(2)
    return float(s[:k].sum() / s.sum())


def norms(z: Tensor) -> dict[str, float]:
    n = z.norm(dim=1)
    return {"min": float(n.min()), "max": float(n.max())}


def _evaluation(diagnostics: dict[str, Any]) -> Evaluation:
    cfg = OmegaConf.create(
        {"_target_": "graphssl.evaluation.Evaluation", "diagnostics": diagnostics}
    )
    evaluation = instantiate(cfg)
    assert isinstance(evaluation, Evaluation)
    return evaluation


def test_extra_diagnostics_from_config_are_logged_beside_the_suite() -> None:
    z = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    evaluation = _evaluation(
        {
            "extra": {
                "top2": {"_target_": f"{__name__}.top_share", "_partial_": True, "k": 2},
                "norms": {"_target_": f"{__name__}.norms", "_partial_": True},
                "removed": None,  # eval.diagnostics.extra.<name>=null leaves one out
            }
        }
    )
    out = evaluation.diagnose(z)
    assert out["diag/top2"] == pytest.approx(top_share(z, k=2))
    assert out["diag/top2"] != pytest.approx(top_share(z, k=1))  # the config's k reached it
    n = z.norm(dim=1)
    assert out["diag/norms/min"] == pytest.approx(float(n.min()))
    assert out["diag/norms/max"] == pytest.approx(float(n.max()))
    assert not any(k.startswith("diag/removed") for k in out)
    assert "diag/rankme" in out  # the suite too


def test_extra_diagnostics_are_off_with_the_suite() -> None:
    evaluation = _evaluation(
        {
            "enabled": False,
            "extra": {"top": {"_target_": f"{__name__}.top_share", "_partial_": True}},
        }
    )
    assert evaluation.diagnose(torch.randn(20, 4)) == {}


def test_an_extra_diagnostic_that_is_not_a_function_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match=r"eval\.diagnostics\.extra\.top is a float.*_partial_"):
        Evaluation(diagnostics={"extra": {"top": 0.5}})
