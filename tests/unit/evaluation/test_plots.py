"""The figures of an embedding matrix: the projection's principal coordinates, and the figures
drawn on a thread of their own."""

from __future__ import annotations

from collections.abc import Callable
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


# ---------------------------------------------------------------- figures on a thread of their own
def _draws(z: torch.Tensor, y: torch.Tensor) -> dict[str, Callable[[], Any]]:
    spectrum, projection = plots.spectrum_data(z), plots.projection_data(z, y)
    return {
        "figures/spectrum.png": lambda: plots.draw_spectrum(spectrum, title="t"),
        "figures/projection.png": lambda: plots.draw_projection(projection, title="t"),
    }


def test_background_figures_are_the_pngs_drawn_in_the_caller() -> None:
    z = torch.randn(300, 16, generator=torch.Generator().manual_seed(1))
    y = torch.arange(300) % 3
    pngs = plots.BackgroundFigures(lambda: _draws(z, y)).result()
    assert list(pngs) == ["figures/spectrum.png", "figures/projection.png"]
    for name, draw in _draws(z, y).items():
        assert pngs[name] == plots.png_bytes(draw())
        assert pngs[name].startswith(b"\x89PNG")


def test_background_figures_raise_the_error_of_a_drawing_or_of_their_numbers() -> None:
    error = ValueError("no figure")

    def fail() -> Any:
        raise error

    drawn = plots.BackgroundFigures(lambda: {"figures/a.png": fail})
    for _ in range(2):  # each time it is asked (a store outage retries the logging)
        with pytest.raises(ValueError) as info:
            drawn.result()
        assert info.value is error
    assert drawn.seconds >= 0
    numbers = plots.BackgroundFigures(fail)  # raised on the caller's thread: kept for result()
    with pytest.raises(ValueError) as info:
        numbers.result()
    assert info.value is error


def test_figures_off_start_no_thread_and_draw_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a figure was drawn with eval.figures=false")

    for name in ("spectrum_data", "projection_data", "draw_spectrum", "draw_projection"):
        monkeypatch.setattr(plots, name, refused)
    monkeypatch.setattr(plots, "BackgroundFigures", refused)
    z = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    off = Evaluation(probes={}, figures=False, baseline=False)
    assert off.start_figures(z, None, seed=0) is None
    assert off.figures(z, None, seed=0) == {}
    on = Evaluation(probes={}, figures=True, baseline=False)
    with pytest.raises(AssertionError, match="was drawn"):
        on.start_figures(z, None, seed=0)  # the same checks see a drawing when figures are on
