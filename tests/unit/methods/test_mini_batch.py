"""Mini-batch training of every node-level method on a generated graph of a few thousand nodes:
the loss is finite and falls, and it only touches the batch's seed rows (so an all-pairs loss
costs ``batch_size²``, not ``n²``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch import Tensor

from graphssl.methods.graphmae import GraphMAE
from graphssl.models.encoders import GCNEncoder
from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"
BATCH_SIZE = 128

#: each node-level method, and the loss function of its module whose inputs are the rows the
#: loss reads (their first dimension must be the number of seed nodes)
LOSS_FUNCTIONS = {
    "dgi": "dgi_bce",
    "grace": "info_nce",
    "bgrl": "bootstrap_cosine",
    "afgrl": "afgrl_positives",
    "graphmae": "scaled_cosine_error_terms",
    "cca_ssg": "cca_ssg_loss",
    "graph_dino": "dino_cross_entropy_terms",
}
#: the per-node heads after the encoder, which must see the seed rows only
HEADS = {
    "grace": ["projector"],
    "bgrl": ["predictor"],
    "afgrl": ["predictor"],
    "graph_dino": ["student_head", "teacher_head"],
}


def sbm_config(model: str, *extra: str) -> Any:
    """``model`` on a 2,000-node, 4-community SBM, mini-batches of 128 seeds, [5, 5] fanout."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                f"model={model}",
                "dataset=sbm",
                "dataset.num_blocks=4",
                "dataset.block_size=500",
                "dataset.p_in=0.02",
                "dataset.p_out=0.002",
                "encoder.hidden_channels=32",
                "encoder.num_layers=2",
                "trainer.mini_batch=true",
                f"trainer.batch_size={BATCH_SIZE}",
                "trainer.num_neighbors=[5,5]",
                "trainer.patience=null",
                "trainer.progress=false",
                *extra,
            ],
        )
    return resolve_config(cfg)


@pytest.mark.parametrize("model", sorted(LOSS_FUNCTIONS))
def test_mini_batch_loss_is_finite_and_falls(model: str) -> None:
    cfg = sbm_config(model, "trainer.epochs=6")
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    assert method.supports_mini_batch
    losses = instantiate(cfg.trainer).fit(method, dm).losses
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses)
    first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
    assert last < first, f"{model}: mini-batch loss did not fall ({first:.4f} -> {last:.4f})"


def _first_dims(value: Any) -> list[int]:
    """The first dimension of every tensor in ``value`` (a tensor or a sequence of them)."""
    if isinstance(value, Tensor):
        return [value.size(0)] if value.dim() else []
    if isinstance(value, (list, tuple)):
        return [d for v in value for d in _first_dims(v)]
    return []


@pytest.mark.parametrize("model", sorted(LOSS_FUNCTIONS))
def test_mini_batch_loss_reads_seed_rows_only(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = sbm_config(model)
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    batch = next(iter(dm.neighbor_loader([5, 5], BATCH_SIZE, shuffle=True)))
    assert batch.batch_size == BATCH_SIZE < batch.num_nodes  # the loss has other rows to misuse

    module = __import__(type(method).__module__, fromlist=["_"])
    name = LOSS_FUNCTIONS[model]
    real: Callable[..., Any] = getattr(module, name)
    rows: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        rows.extend(d for a in args[:2] for d in _first_dims(a))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    head_rows: list[int] = []
    for head in HEADS.get(model, []):  # its first layer, however the head is called
        first = next(m for m in getattr(method, head).modules() if isinstance(m, torch.nn.Linear))
        first.register_forward_pre_hook(lambda _m, args: head_rows.append(args[0].size(0)))
    method.train()
    out = method.loss(batch)
    assert torch.isfinite(out["loss"])
    assert rows, f"{model}: {name} was not called"
    assert set(head_rows) <= {BATCH_SIZE} and len(head_rows) >= len(HEADS.get(model, []))
    if model == "graphmae":  # the masked seed nodes, at mask_rate of the seeds
        assert set(rows) == {max(1, int(method.mask_rate * BATCH_SIZE))}
    else:  # GRACE: the similarity matrices are batch_size x batch_size
        assert set(rows) == {BATCH_SIZE}, f"{model}: {name} saw rows {sorted(set(rows))}"


def test_grace_similarity_is_batch_size_squared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every matrix product in GRACE's mini-batch loss is at most batch_size x batch_size."""
    cfg = sbm_config("grace")
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    batch = next(iter(dm.neighbor_loader([5, 5], BATCH_SIZE, shuffle=True)))
    import graphssl.methods.losses as losses

    shapes: list[tuple[int, ...]] = []
    real_exp = torch.exp

    def exp(t: Tensor) -> Tensor:
        shapes.append(tuple(t.shape))
        return real_exp(t)

    monkeypatch.setattr(losses.torch, "exp", exp)
    method.loss(batch)["loss"].backward()
    assert shapes and set(shapes) == {(BATCH_SIZE, BATCH_SIZE)}


def test_graphmae_masks_seeds_and_other_nodes_at_the_rate() -> None:
    torch.manual_seed(0)
    method = GraphMAE(GCNEncoder(8, 16, 2), mask_rate=0.5, replace_rate=0.2)
    with torch.no_grad():
        method.mask_token.fill_(7.0)
    x = torch.randn(100, 8)
    out, masked = method.mask_features(x, num_seeds=30)
    assert masked.unique().numel() == masked.numel() == 15 + 35
    assert (masked[:15] < 30).all() and (masked[15:] >= 30).all()  # seeds first
    is_token = (out == 7.0).all(dim=1)
    assert int(is_token.sum()) == 50 - 10  # 10 of the 50 masked get other nodes' features
    assert not is_token[~torch.isin(torch.arange(100), masked)].any()
    # a single seed is still masked
    _, masked = method.mask_features(x, num_seeds=1)
    assert int((masked < 1).sum()) == 1


@pytest.mark.parametrize("encoder", ["gcn", "sage", "gat"])
def test_graphmae_trimmed_loss_equals_the_whole_batch(encoder: str) -> None:
    """On a sampled batch GraphMAE's encoder computes only the rows within one hop of the seeds
    and its GAT decoder only the seeds; the loss is the one of the untrimmed batch."""
    cfg = sbm_config("graphmae", f"encoder={encoder}", "encoder.hidden_channels=32")
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    method.feat_drop = 0.0
    method.decoder.dropout = 0.0
    batch = next(iter(dm.neighbor_loader([5, 5], BATCH_SIZE, shuffle=True)))
    whole = batch.clone()
    del whole.num_sampled_nodes, whole.num_sampled_edges  # no counts: every row computed
    rows: list[int] = []
    method.decoder.register_forward_hook(lambda _m, _a, out: rows.append(out.size(0)))
    method.train()
    torch.manual_seed(1)
    trimmed = method.loss(batch)["loss"]
    torch.manual_seed(1)
    full = method.loss(whole)["loss"]
    assert rows == [BATCH_SIZE, batch.num_nodes]  # the decoder wrote the seeds alone
    torch.testing.assert_close(trimmed, full, atol=1e-5, rtol=1e-5)


class _MaskedByNodeId(GraphMAE):
    """GraphMAE whose masked rows are the nodes ``table`` marks, looked up by the global node id
    of each row (``ids``), so that a node is masked or not whichever batch holds it."""

    table: Tensor
    ids: Tensor

    def mask_features(self, x: Tensor, num_seeds: int | None = None) -> tuple[Tensor, Tensor]:
        masked = self.table[self.ids].nonzero().view(-1)  # ascending: the masked seeds first
        out = x.clone()
        out[masked] = self.mask_token.to(x.dtype).expand(masked.numel(), -1)
        return out, masked


@pytest.mark.parametrize("encoder", ["sage", "gat"])
def test_graphmae_with_the_decoder_hop_sampled_rebuilds_seeds_as_the_whole_graph(
    encoder: str, graphmae_errors: list[Tensor]
) -> None:
    """With every neighbour sampled and one hop more than the encoder's layers, each masked seed's
    error is the one it has in a full-graph step with the same masks (so it does not depend on
    the other seeds of its batch); with one hop per encoder layer it is not."""
    cfg = sbm_config("graphmae", f"encoder={encoder}", "encoder.hidden_channels=16")
    seed_everything(0)
    dm = build_datamodule(cfg)
    built = build_method(cfg, dm)
    method = _MaskedByNodeId(built.encoder, mask_rate=0.5, replace_rate=0.0).double().eval()
    data = dm.data.clone()
    data.x = data.x.double()
    method.table = torch.rand(data.num_nodes, generator=torch.Generator().manual_seed(3)) < 0.5
    terms = graphmae_errors
    method.ids = torch.arange(data.num_nodes)
    with torch.no_grad():
        method.loss(data)
    whole = dict(zip(method.table.nonzero().view(-1).tolist(), terms.pop().tolist(), strict=True))

    def seed_errors(fanout: list[int]) -> dict[int, float]:
        batch = next(iter(dm.neighbor_loader(fanout, 64, shuffle=False)))
        batch.x = batch.x.double()
        method.ids = batch.n_id
        with torch.no_grad():
            method.loss(batch)
        masked_seeds = method.table[batch.n_id[:64]].nonzero().view(-1)
        return dict(zip(batch.n_id[masked_seeds].tolist(), terms.pop().tolist(), strict=True))

    exact = seed_errors([-1, -1, -1])
    assert len(exact) > 10
    assert exact == pytest.approx({n: whole[n] for n in exact}, abs=1e-9)
    short = seed_errors([-1, -1])
    assert max(abs(short[n] - whole[n]) for n in short) > 1e-4
