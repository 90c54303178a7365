"""MLPHead on several views of one batch."""

from __future__ import annotations

import pytest
import torch

from graphssl.models.heads import MLPHead


@pytest.mark.parametrize("batch_norm", [True, False])
def test_views_equal_one_call_per_view_and_run_the_work_in_between(batch_norm: bool) -> None:
    torch.manual_seed(0)
    xs = [torch.randn(6, 5) + k for k in range(2)]
    heads = [MLPHead(5, 8, 3, batch_norm=batch_norm) for _ in range(2)]
    heads[1].load_state_dict(heads[0].state_dict())
    expected = [heads[0](x) for x in xs]
    calls: list[str] = []

    def meanwhile() -> str:
        calls.append("meanwhile")
        return "done"

    outs, extra = heads[1].views(xs, meanwhile)
    assert (extra, calls) == ("done", ["meanwhile"])
    assert len(outs) == 2
    for out, exp in zip(outs, expected, strict=True):
        assert torch.equal(out, exp)
    # the running statistics moved once per view, as after one call each
    for a, b in zip(heads[0].buffers(), heads[1].buffers(), strict=True):
        assert torch.equal(a, b)
    assert heads[1].views(xs)[1] is None


def test_views_normalise_each_view_with_its_own_statistics() -> None:
    head = MLPHead(4, 16, 4, batch_norm=True)
    x = torch.randn(10, 4)
    (a, b), _ = head.views([x, x * 100 + 50])
    # each view normalised on its own: the scaled view's output is not 100 times the other's
    assert torch.allclose(a, b, atol=1e-3)
