"""Model selection on a validation probe: which epochs are measured, which weights are kept,
patience, the test split never looked at, the global generators left alone, checkpoint state."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from graphssl.data.base import Split
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.training.callbacks.selection import ProbeSelection
from graphssl.training.checkpoint import load_checkpoint, save_checkpoint

N, C = 240, 3


def labels() -> Tensor:
    return torch.arange(N) % C


def split() -> Split:
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    return Split(train=perm[:120], val=perm[120:180], test=perm[180:])


class Blend(nn.Module):
    """Embeddings = signal · one-hot(label) + fixed noise: the probe's accuracy grows with
    ``signal``, which the tests set by hand to play a training run."""

    def __init__(self) -> None:
        super().__init__()
        self.signal = nn.Parameter(torch.tensor(0.0), requires_grad=False)
        g = torch.Generator().manual_seed(0)
        self.register_buffer("noise", torch.randn(N, 8, generator=g))

    def forward(self) -> Tensor:
        onehot = torch.nn.functional.one_hot(labels(), 8).float()
        return self.signal * onehot + self.noise


def embed(model: nn.Module) -> Tensor:
    return model()


def selection(**kwargs: Any) -> ProbeSelection:
    kwargs.setdefault("every", 1)
    return ProbeSelection(embed, KNNProbe(k=5), labels(), [split()], **kwargs)


def play(sel: ProbeSelection, model: Blend, signals: list[float]) -> list[float]:
    """One "epoch" per signal value; returns the measured scores."""
    scores = []
    for epoch, s in enumerate(signals):
        with torch.no_grad():
            model.signal.fill_(s)
        step = sel.step(model, epoch, len(signals) - 1)
        if step is not None:
            scores.append(step.score)
        if sel.should_stop:
            break
    return scores


def test_due_every_k_and_at_the_last_epoch() -> None:
    sel = selection(every=3)
    assert [e for e in range(8) if sel.due(e, last_epoch=7)] == [2, 5, 7]
    assert [e for e in range(6) if sel.due(e, last_epoch=5)] == [2, 5]


def test_keeps_and_restores_the_weights_of_the_best_validation_score() -> None:
    sel, model = selection(), Blend()
    scores = play(sel, model, [0.0, 0.5, 3.0, 1.0, 0.2])
    assert len(scores) == 5 and scores[2] == max(scores) and scores[2] > scores[0] + 0.3
    assert sel.best_epoch == 2 and sel.best_score == scores[2]
    assert [e for e, _ in sel.history] == [0, 1, 2, 3, 4]
    assert float(model.signal) == pytest.approx(0.2)
    assert sel.restore_best(model)
    assert float(model.signal) == pytest.approx(3.0)
    assert sel.seconds > 0


def test_a_copy_is_kept_not_a_reference_to_the_live_weights() -> None:
    sel, model = selection(), Blend()
    play(sel, model, [3.0])
    with torch.no_grad():
        model.signal.fill_(-1.0)
    assert sel.best_state is not None and float(sel.best_state["signal"]) == pytest.approx(3.0)


def test_patience_counts_measurements_without_improvement() -> None:
    sel, model = selection(patience=2), Blend()
    scores = play(sel, model, [3.0, 0.0, 0.0, 0.0, 3.0])
    assert len(scores) == 3 and sel.should_stop and sel.best_epoch == 0


def test_min_delta_and_mode_min() -> None:
    sel = selection(min_delta=0.7)  # from chance (~0.33), accuracy cannot rise by 0.7
    play(sel, Blend(), [0.0, 3.0])
    assert sel.best_epoch == 0
    worst = selection(mode="min")  # e.g. an error metric; here: keeps the lowest accuracy
    play(worst, Blend(), [3.0, 0.0])
    assert worst.best_epoch == 1


def test_a_nan_score_never_counts_as_best() -> None:
    sel = selection()
    sel.measure = lambda model: math.nan  # type: ignore[method-assign]
    play(sel, Blend(), [1.0, 2.0])
    assert sel.best_state is None and not sel.restore_best(Blend()) and sel.bad_measurements == 2


class RandomProbe:
    """A probe that draws from the global generator and records which rows it sees."""

    def __init__(self) -> None:
        self.seen: list[tuple[Tensor, Tensor]] = []

    def evaluate(self, z: Tensor, y: Tensor, train: Tensor, val: Tensor, test: Tensor) -> dict:
        self.seen.append((train, val))
        return {"val_acc": float(torch.rand(())), "test_acc": float(torch.rand(()))}


def test_measuring_leaves_the_global_generators_alone() -> None:
    probe = RandomProbe()
    sel = ProbeSelection(embed, probe, labels(), [split()], every=1)
    torch.manual_seed(7)
    sel.measure(Blend())
    after = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(after, torch.rand(3))
    train, val = probe.seen[0]
    assert torch.equal(val, split().val) and torch.equal(train, split().train)


def test_several_splits_average_their_validation_scores() -> None:
    s1, s2 = split(), Split(train=split().val, val=split().train, test=split().test)
    sel = ProbeSelection(embed, KNNProbe(k=5), labels(), [s1, s2], every=1)
    one = [ProbeSelection(embed, KNNProbe(k=5), labels(), [s], every=1) for s in (s1, s2)]
    model = Blend()
    with torch.no_grad():
        model.signal.fill_(0.7)
    expected = (one[0].measure(model) + one[1].measure(model)) / 2
    assert sel.measure(model) == pytest.approx(expected)


def test_k_folds_warn_that_the_choice_sees_every_label(caplog) -> None:
    folds = [
        Split(train=torch.cat([f[:k], f[k + 1 :]]).flatten(), val=f[k][:5], test=f[k][5:])
        for f in [torch.arange(N).view(4, -1)]
        for k in range(4)
    ]
    with caplog.at_level("WARNING", logger="graphssl.training.callbacks.selection"):
        ProbeSelection(embed, KNNProbe(k=5), labels(), folds, every=1)
    assert "k-fold test accuracy is optimistic" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="graphssl.training.callbacks.selection"):
        ProbeSelection(embed, KNNProbe(k=5), labels(), [split(), split()], every=1)
    assert caplog.text == ""  # the same split twice: no test row is fitted on


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every": 0}, "callbacks.selection.every must be a positive integer or null, got 0"),
        ({"every": True}, "callbacks.selection.every must be a positive integer or null, got True"),
        ({"patience": 0}, "callbacks.selection.patience must be >= 1 or null, got 0"),
        ({"mode": "best"}, "callbacks.selection.mode must be 'max' or 'min', got 'best'"),
        ({"min_delta": -0.1}, "callbacks.selection.min_delta must be >= 0, got -0.1"),
        ({"metric": "test_acc"}, "leaks the test split"),
    ],
)
def test_bad_settings_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        selection(**kwargs)


def test_unknown_metric_lists_what_the_probe_reports() -> None:
    with pytest.raises(ValueError, match=r"'val_auc' is not among the probe's outputs \[.*val_acc"):
        selection(metric="val_auc").measure(Blend())


def test_state_survives_a_checkpoint(tmp_path) -> None:
    sel, model = selection(), Blend()
    play(sel, model, [0.0, 3.0, 1.0])
    payload = {"config_hash": "h", "selection": sel.state_dict()}
    path = save_checkpoint(tmp_path / "last.pt", payload)
    again = selection()
    again.load_state_dict(load_checkpoint(path, "h")["selection"])
    assert (again.best_epoch, again.best_score, again.history) == (
        sel.best_epoch,
        sel.best_score,
        sel.history,
    )
    assert again.restore_best(model) and float(model.signal) == pytest.approx(3.0)
