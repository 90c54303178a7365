"""The figures of an embedding matrix: the projection's principal coordinates; none drawn when
figures are off."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from graphssl.evaluation import Evaluation, plots
from graphssl.evaluation.plots import principal_coordinates, projection_figure


def _svd_coordinates(z: torch.Tensor, k: int) -> torch.Tensor:
    """``z @ V[:, :k]`` of the thin SVD: what the projection computed before."""
    _, _, vh = torch.linalg.svd(z, full_matrices=False)
    return z @ vh[:k].T


def _sign_aligned(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``b`` with each column's sign flipped where it points against ``a``'s."""
    return b * torch.sign((a * b).sum(0))


def _centred(m: int, d: int, seed: int) -> torch.Tensor:
    """Random ``[m, d]`` rows with well-separated leading variances, centred, float64."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.linspace(3.0, 0.1, d, dtype=torch.float64)
    z = torch.randn(m, d, generator=gen, dtype=torch.float64) * scale
    return z - z.mean(0, keepdim=True)


@pytest.mark.parametrize(("m", "d"), [(500, 64), (40, 200), (64, 64)])
def test_principal_coordinates_are_the_svd_ones_up_to_sign(m: int, d: int) -> None:
    z = _centred(m, d, seed=m + d)
    ours = principal_coordinates(z, 2)
    svd = _svd_coordinates(z, 2)
    assert ours.shape == (m, 2)
    torch.testing.assert_close(ours, _sign_aligned(ours, svd), rtol=1e-9, atol=1e-9)
    # the sign rule: each column's entry of largest magnitude is positive
    top = ours.abs().argmax(0)
    assert bool((ours[top, torch.arange(2)] > 0).all())


def test_the_projection_figure_draws_the_principal_coordinates() -> None:
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(300, 32, generator=gen) * torch.linspace(2.0, 0.1, 32)
    y = torch.arange(300) % 4
    fig = projection_figure(z, y, max_points=200, seed=3)
    drawn = torch.as_tensor(fig.axes[0].collections[0].get_offsets().data)
    rows = torch.randperm(300, generator=torch.Generator().manual_seed(3))[:200]
    sampled = z[rows].double()
    svd = _svd_coordinates(sampled - sampled.mean(0, keepdim=True), 2)
    torch.testing.assert_close(drawn, _sign_aligned(drawn, svd), rtol=1e-6, atol=1e-8)


def test_figures_off_draw_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a figure was drawn")

    monkeypatch.setattr(plots, "spectrum_figure", refused)
    monkeypatch.setattr(plots, "projection_figure", refused)
    z = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    assert Evaluation(probes={}, figures=False).figures(z, None, seed=0) == {}
    with pytest.raises(AssertionError, match="was drawn"):  # the same check sees figures on
        Evaluation(probes={}, figures=True).figures(z, None, seed=0)
