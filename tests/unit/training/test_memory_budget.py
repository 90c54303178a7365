"""The full-batch memory budget: methods estimate one step's peak bytes, and the trainer refuses
a full-batch run above ``trainer.memory_budget_gb`` before any epoch, naming the fix."""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from graphssl.data.node import SBMDataModule
from graphssl.methods import losses
from graphssl.methods.afgrl import AFGRL
from graphssl.methods.base import SSLMethod
from graphssl.methods.bgrl import BGRL
from graphssl.methods.cca_ssg import CCASSG
from graphssl.methods.dgi import DGI
from graphssl.methods.grace import GRACE
from graphssl.methods.graph_dino import GraphDINO
from graphssl.methods.graphmae import GraphMAE
from graphssl.models.encoders import GCNEncoder
from graphssl.training.trainer import Callback, MemoryBudgetError, Trainer

ADAM = partial(torch.optim.Adam, lr=1e-3)
#: ogbn-products: nodes, directed edges, features
PRODUCTS = (2_449_029, 61_859_140, 100)


def gcn(in_channels: int = 16, hidden: int = 32, layers: int = 1) -> GCNEncoder:
    return GCNEncoder(in_channels, hidden, layers)


@pytest.fixture(scope="module")
def sbm() -> SBMDataModule:
    dm = SBMDataModule(num_blocks=2, block_size=100, seed=0)
    dm.setup()
    return dm


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_fit_start(self, trainer: Trainer, method: SSLMethod) -> None:
        self.events.append("fit_start")

    def on_epoch_end(self, trainer: Trainer, method: SSLMethod, result: Any) -> None:
        self.events.append("epoch")


def test_grace_full_batch_over_budget_is_refused_before_training(
    sbm: SBMDataModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    method = GRACE(gcn(), optimizer=ADAM)
    n = sbm.data.num_nodes

    def no_loss(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the loss ran: the budget check must come before training")

    monkeypatch.setattr(method, "loss", no_loss)
    recorder = Recorder()
    trainer = Trainer(epochs=2, memory_budget_gb=1e-4, callbacks=[recorder])
    with pytest.raises(MemoryBudgetError) as info:
        trainer.fit(method, sbm)
    message = str(info.value)
    need = method.full_batch_bytes(n, sbm.data.num_edges)
    for part in ("GRACE", f"{n:,} nodes", f"{need:,} bytes", "trainer.memory_budget_gb=0.0001"):
        assert part in message, (part, message)
    assert "trainer.mini_batch=true" in message
    assert recorder.events == [] and trainer.optimizer is None  # nothing started


def test_the_budget_applies_to_full_batch_only(sbm: SBMDataModule) -> None:
    torch.manual_seed(0)
    method = GRACE(gcn(), optimizer=ADAM)
    trainer = Trainer(epochs=1, memory_budget_gb=1e-4, mini_batch=True, batch_size=64)
    losses = trainer.fit(method, sbm).losses
    assert len(losses) == 1 and math.isfinite(losses[0])
    # with the check disabled, the same full-batch run trains
    result = Trainer(epochs=1, memory_budget_gb=None).fit(GRACE(gcn(), optimizer=ADAM), sbm)
    assert len(result.losses) == 1


def test_small_graphs_train_under_the_default_budget(sbm: SBMDataModule) -> None:
    assert Trainer().memory_budget_gb == 8.0
    for cls in (GRACE, AFGRL, DGI):
        result = Trainer(epochs=2).fit(cls(gcn(), optimizer=ADAM), sbm)
        assert len(result.losses) == 2 and all(math.isfinite(v) for v in result.losses)


def test_grace_above_the_dense_rows_takes_the_same_loss_in_blocks(
    sbm: SBMDataModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    method = GRACE(gcn(), optimizer=ADAM).double()
    data = sbm.data.clone()
    data.x = data.x.double()
    n = data.num_nodes
    torch.manual_seed(1)
    whole = method.loss(data)["loss"]
    dense_bytes = method.full_batch_loss_bytes(n)
    monkeypatch.setattr(losses, "INFO_NCE_DENSE_ROWS", n // 2)
    monkeypatch.setattr(losses, "INFO_NCE_BLOCK_ELEMENTS", 30 * n)
    assert losses.info_nce_block_rows(n) == 30
    torch.manual_seed(1)  # the same views
    blocks = method.loss(data)["loss"]
    torch.testing.assert_close(blocks, whole, rtol=1e-12, atol=1e-12)
    assert method.full_batch_loss_bytes(n) == 4 * 30 * n * 8 < dense_bytes


@pytest.mark.parametrize("budget", [0, -1.0])
def test_budget_must_be_positive(budget: float) -> None:
    with pytest.raises(ValueError, match=r"trainer\.memory_budget_gb must be > 0 or null"):
        Trainer(memory_budget_gb=budget)


def test_loss_estimates_are_quadratic_for_all_pair_losses_only() -> None:
    n = 10_000
    grace, afgrl = GRACE(gcn(), optimizer=ADAM), AFGRL(gcn(), optimizer=ADAM)
    # GRACE: several m x m float32 matrices up to 4096 nodes, blocks of rows above
    m = 4096
    assert 4 * m * m * 4 <= grace.full_batch_loss_bytes(m) <= 10 * m * m * 4
    assert grace.full_batch_loss_bytes(m) == 4 * grace.full_batch_loss_bytes(m // 2)
    assert grace.full_batch_loss_bytes(n) < grace.full_batch_loss_bytes(m) / 4
    # AFGRL: the n x n similarity of its nearest-neighbour search
    assert n * n * 4 <= afgrl.full_batch_loss_bytes(n) <= 2 * n * n * 4
    for cls in (DGI, BGRL, CCASSG, GraphDINO):
        assert cls(gcn(), optimizer=ADAM).full_batch_loss_bytes(n) == 0
    assert GraphMAE(gcn(), optimizer=ADAM).full_batch_loss_bytes(n) == 0


def test_activation_estimate_counts_passes_layers_and_edges() -> None:
    n, e = 1000, 5000
    one = DGI(gcn(16, 32, 1), optimizer=ADAM).full_batch_activation_bytes(n, e)
    two = DGI(gcn(16, 32, 2), optimizer=ADAM).full_batch_activation_bytes(n, e)
    # per pass: the features, 2 tensors of n x 32 per layer, 32 bytes per edge and self-loop
    assert one == 2 * (4 * n * (16 + 2 * 32) + 32 * (e + n))
    assert two - one == 2 * 4 * n * 2 * 32
    assert DGI(gcn(), optimizer=ADAM).full_batch_activation_bytes(2 * n, 2 * e) == 2 * one


class _HugeGraph:
    """A stand-in DataModule whose graph has products' size (the check reads only the sizes)."""

    name = "products-size"
    is_graph_level = False

    def __init__(self, num_nodes: int, num_edges: int) -> None:
        self.data = SimpleNamespace(num_nodes=num_nodes, num_edges=num_edges)

    def setup(self) -> None:
        pass


def test_dgi_full_batch_at_products_size_is_refused_by_the_default_budget() -> None:
    n, e, features = PRODUCTS
    method = DGI(gcn(features, 128, 1), optimizer=ADAM)
    need = method.full_batch_bytes(n, e)
    # a run at this size was killed at 12 GB resident (on top of its 2 GB graph): the estimate
    # is within a factor of 2 of that
    assert 6 * 2**30 < need < 24 * 2**30
    with pytest.raises(MemoryBudgetError, match=r"DGI full-batch training on 2,449,029 nodes"):
        Trainer().fit(method, _HugeGraph(n, e))  # type: ignore[arg-type]
    # at ogbn-arxiv size: AFGRL's n x n similarity is refused; GRACE's similarities come in
    # blocks of rows, so its step fits (slow on a CPU, but within the budget)
    arxiv = _HugeGraph(169_343, 2_315_598)
    with pytest.raises(MemoryBudgetError, match=r"AFGRL.*trainer\.mini_batch=true"):
        Trainer().fit(AFGRL(gcn(128, 128, 1), optimizer=ADAM), arxiv)  # type: ignore[arg-type]
    assert GRACE(gcn(128, 128, 1), optimizer=ADAM).full_batch_bytes(169_343, 2_315_598) < 2**31
