"""Known answers for the pieces of CCA-SSG, GraphMAE, AFGRL and GraphDINO (no training)."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from graphssl.methods.afgrl import afgrl_positives, kmeans
from graphssl.methods.cca_ssg import (
    cca_ssg_loss,
    cca_ssg_loss_from_sums,
    cca_ssg_statistics,
    standardize,
)
from graphssl.methods.graphmae import GraphMAE, scaled_cosine_error
from graphssl.methods.losses import dino_cross_entropy
from graphssl.models.encoders import GCNEncoder
from graphssl.models.heads import DINOHead
from graphssl.training.schedules import CosineLR, cosine_lr_factor


def test_cca_ssg_loss_known_answers() -> None:
    torch.manual_seed(0)
    z = standardize(torch.randn(500, 4))
    loss, inv, dec = cca_ssg_loss(z, z, lambd=0.5)
    # identical views: invariance = -sum of variances (N-1)/N per column
    assert math.isclose(inv.item(), -4 * 499 / 500, rel_tol=1e-5)
    c = z.t() @ z / 500
    assert math.isclose(dec.item(), 2 * (torch.eye(4) - c).pow(2).sum().item(), rel_tol=1e-5)
    assert math.isclose(loss.item(), inv.item() + 0.5 * dec.item(), rel_tol=1e-6)
    # standardized columns: zero mean, unit (unbiased) std
    assert torch.allclose(z.mean(0), torch.zeros(4), atol=1e-6)
    assert torch.allclose(z.std(0), torch.ones(4), atol=1e-4)


@pytest.mark.parametrize("parts", [[13], [4, 9], [0, 5, 8], [3, 3, 3, 4]])
def test_cca_ssg_loss_from_every_process_sums_equals_the_loss_on_all_rows(
    parts: list[int],
) -> None:
    """Rows split between processes unevenly (one with none): the loss from the summed
    statistics and its gradient equal those of the loss on all rows, even with column means
    far from zero against their spread."""
    torch.manual_seed(0)
    h1 = (torch.randn(13, 6, dtype=torch.float64) * 0.5 + 40).requires_grad_()
    h2 = (torch.randn(13, 6, dtype=torch.float64) + h1.detach()).requires_grad_()
    expected = cca_ssg_loss(standardize(h1), standardize(h2), lambd=0.1)
    grads = torch.autograd.grad(expected[0], (h1, h2))
    pairs = zip(h1.split(parts), h2.split(parts), strict=True)
    sums = sum(cca_ssg_statistics(a, b, r, len(parts)) for r, (a, b) in enumerate(pairs))
    got = cca_ssg_loss_from_sums(sums, 6, len(parts), lambd=0.1)
    assert torch.stack(got).tolist() == pytest.approx(torch.stack(expected).tolist(), abs=1e-9)
    for g, e in zip(torch.autograd.grad(got[0], (h1, h2)), grads, strict=True):
        assert torch.allclose(g, e, atol=1e-9)


def test_scaled_cosine_error() -> None:
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert scaled_cosine_error(2 * x, x, gamma=3).item() == 0.0
    # orthogonal rows: (1 - 0)^γ = 1; opposite rows: 2^γ
    assert math.isclose(scaled_cosine_error(x.flip(1), x, gamma=2).item(), 1.0)
    assert math.isclose(scaled_cosine_error(-x, x, gamma=2).item(), 4.0)
    assert cosine_lr_factor(0, 10) == 1.0 and abs(cosine_lr_factor(10, 10)) < 1e-12
    assert math.isclose(cosine_lr_factor(5, 10), 0.5)


def test_graphmae_masking_counts_and_lr_schedule() -> None:
    torch.manual_seed(0)
    enc = GCNEncoder(8, 16, 2)
    method = GraphMAE(
        enc,
        optimizer=lambda p: torch.optim.Adam(p, lr=0.1),
        mask_rate=0.5,
        replace_rate=0.2,
        scheduler=CosineLR,
    )
    with torch.no_grad():
        method.mask_token.fill_(7.0)
    x = torch.randn(100, 8)
    out, masked = method.mask_features(x)
    assert masked.numel() == 50 and masked.unique().numel() == 50
    is_token = (out == 7.0).all(dim=1)
    assert int(is_token.sum()) == 40  # 50 masked, 10 of them replaced by other nodes' features
    unmasked = torch.ones(100, dtype=torch.bool)
    unmasked[masked] = False
    assert torch.equal(out[unmasked], x[unmasked])
    opt = method.configure_optimizer()
    assert opt is not None
    schedule = method.configure_scheduler(opt, 10)
    assert schedule is not None
    for _ in range(5):
        opt.step()
        schedule.step()
    assert math.isclose(opt.param_groups[0]["lr"], 0.05)


def test_kmeans_finds_two_blobs() -> None:
    torch.manual_seed(0)
    x = torch.cat([torch.randn(50, 2) * 0.1, torch.randn(50, 2) * 0.1 + 5])
    labels = kmeans(x, 2, iters=20)
    assert labels[:50].unique().numel() == 1 and labels[50:].unique().numel() == 1
    assert labels[0] != labels[50]
    assert kmeans(x, 500).max() < 100  # clusters capped at the number of rows


def test_afgrl_positives_local_and_global() -> None:
    # 4 nodes: 0 and 1 are adjacent and close; 2 is close to 0 but not adjacent and in another
    # cluster (num_clusters = N puts every node alone); 3 is far away
    emb = torch.tensor([[1.0, 0.0], [0.99, 0.1], [0.98, -0.1], [-1.0, 0.0]])
    edge_index = torch.tensor([[0, 1], [1, 0]])
    pairs = afgrl_positives(emb, emb, edge_index, top_k=3, num_clusters=4, num_kmeans=1)
    got = {tuple(p) for p in pairs.t().tolist()}
    assert {(0, 0), (1, 1), (2, 2), (3, 3), (0, 1), (1, 0)} <= got
    assert (0, 2) not in got and (2, 0) not in got
    # one cluster for everything: every kNN candidate becomes a (global) positive
    pairs = afgrl_positives(emb, emb, edge_index, top_k=3, num_clusters=1, num_kmeans=1)
    assert pairs.size(1) == 4 * 3


def test_dino_loss_and_head() -> None:
    torch.manual_seed(0)
    head = DINOHead(8, 16, 4, num_prototypes=10)
    scores = head(torch.randn(5, 8))
    assert scores.shape == (5, 10) and scores.abs().max() <= 1 + 1e-6
    s1, s2 = torch.randn(5, 10), torch.randn(5, 10)
    q1, q2 = F.softmax(torch.randn(5, 10), -1), F.softmax(torch.randn(5, 10), -1)
    expected = 0.5 * (
        -(q1 * F.log_softmax(s2 / 0.1, -1)).sum(-1).mean()
        - (q2 * F.log_softmax(s1 / 0.1, -1)).sum(-1).mean()
    )
    assert torch.allclose(dino_cross_entropy([s1, s2], [q1, q2], 0.1), expected)


def test_gat_attention_dropout_is_separate_from_feature_dropout() -> None:
    """GraphMAE's GAT: feature dropout 0.2, attention dropout 0.1 (PyG's GAT ties them)."""
    from graphssl.models.encoders import GATEncoder

    tied = GATEncoder(8, 16, num_layers=2, heads=4, dropout=0.2)
    assert [conv.dropout for conv in tied.gnn.convs] == [0.2, 0.2]
    split = GATEncoder(8, 16, num_layers=2, heads=4, dropout=0.2, attn_dropout=0.1)
    assert [conv.dropout for conv in split.gnn.convs] == [0.1, 0.1]
    assert split.gnn.dropout.p == 0.2  # between layers, unchanged
    x, edge_index = torch.randn(6, 8), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    off = GATEncoder(8, 16, num_layers=2, heads=4, dropout=0.0, attn_dropout=0.0).train()
    assert torch.equal(off(x, edge_index), off(x, edge_index))  # nothing random left
    method = GraphMAE(GATEncoder(8, 16, heads=4), attn_drop=0.1)
    assert method.decoder.dropout == 0.1
    try:
        GATEncoder(8, 16, attn_dropout=1.0)
    except ValueError as err:
        assert "attn_dropout" in str(err) and "1.0" in str(err)
    else:  # pragma: no cover - the check above must raise
        raise AssertionError("attn_dropout=1.0 was accepted")


def test_gat_dgl_initialisation() -> None:
    """init="dgl": Xavier-normal with the ReLU gain (DGL's GATConv), ~1.4x PyG's Glorot std."""
    from graphssl.models.encoders import GATEncoder

    torch.manual_seed(0)
    pyg = GATEncoder(256, 256, num_layers=2, heads=4)
    dgl = GATEncoder(256, 256, num_layers=2, heads=4, init="dgl")
    w_pyg, w_dgl = pyg.gnn.convs[0].lin.weight, dgl.gnn.convs[0].lin.weight
    expected = math.sqrt(2.0) * math.sqrt(2.0 / (256 + 256))  # gain * sqrt(2 / (fan_in + fan_out))
    assert abs(w_dgl.std().item() - expected) < 0.05 * expected
    assert w_dgl.std().item() > 1.3 * w_pyg.std().item()
    assert torch.count_nonzero(dgl.gnn.convs[0].bias) == 0
    method = GraphMAE(GATEncoder(8, 16, heads=4, init="dgl"), decoder_init="dgl")
    assert method.encoder.init == "dgl"
    for bad in (lambda: GATEncoder(8, 16, init="kaiming"), lambda: GraphMAE(pyg, decoder_init="x")):
        try:
            bad()
        except ValueError as err:
            assert "'pyg' or 'dgl'" in str(err)
        else:  # pragma: no cover - must raise
            raise AssertionError("a bad init was accepted")


def test_gcn_out_channels_narrows_the_last_layer() -> None:
    """GRACE's encoder: 2·D wide in the first layer, D in the last (``out_channels``)."""
    from graphssl.methods.grace import GRACE

    enc = GCNEncoder(8, 256, num_layers=2, out_channels=128, act="relu", act_last=True)
    assert enc.out_channels == 128
    assert [tuple(c.lin.weight.shape) for c in enc.gnn.convs] == [(256, 8), (128, 256)]
    x, edge_index = torch.randn(6, 8), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    z = enc(x, edge_index)
    assert z.shape == (6, 128) and bool((z >= 0).all())  # ReLU after the last layer too
    assert GRACE(enc).projector.net[0].in_features == 128
    assert GCNEncoder(8, 64, num_layers=2).out_channels == 64  # default: hidden_channels
    try:
        GCNEncoder(8, 64, out_channels=0)
    except ValueError as err:
        assert "out_channels" in str(err) and "0" in str(err)
    else:  # pragma: no cover - must raise
        raise AssertionError("out_channels=0 was accepted")


def test_cosine_lr_with_warmup_follows_the_bgrl_reference_scheduler() -> None:
    """BGRL's CosineDecayScheduler: lr·step/warmup, then a cosine from lr to 0."""
    from graphssl.methods.bgrl import BGRL

    max_steps, warmup = 100, 10
    for step in (0, 5, 10, 55, 100):
        if step < warmup:
            expected = step / warmup
        else:
            expected = (1 + math.cos(math.pi * (step - warmup) / (max_steps - warmup))) / 2
        assert math.isclose(cosine_lr_factor(step, max_steps, warmup), expected, abs_tol=1e-12)
    method = BGRL(
        GCNEncoder(8, 16), torch.optim.AdamW, scheduler=functools.partial(CosineLR, warmup=0.1)
    )
    opt = method.configure_optimizer()
    assert opt is not None
    schedule = method.configure_scheduler(opt, max_steps)
    assert schedule is not None and opt.param_groups[0]["lr"] == 0.0  # step 0 of the warm-up

    def advance_to(step: int) -> None:
        while schedule.last_epoch < step:
            opt.step()
            schedule.step()

    advance_to(5)
    assert math.isclose(opt.param_groups[0]["lr"], 1e-3 * 0.5)  # AdamW's default lr 1e-3
    advance_to(100)
    assert opt.param_groups[0]["lr"] < 1e-12
    plain = BGRL(GCNEncoder(8, 16), torch.optim.AdamW)
    no_schedule = plain.configure_optimizer()
    assert no_schedule is not None and no_schedule.param_groups[0]["lr"] == 1e-3
    assert plain.configure_scheduler(no_schedule, max_steps) is None
    for bad in (lambda: CosineLR(opt, max_steps, warmup=-0.1), lambda: CosineLR(opt, 10, 1.0)):
        try:
            bad()
        except ValueError as err:
            assert "warm" in str(err)
        else:  # pragma: no cover - must raise
            raise AssertionError("a bad warm-up was accepted")


def test_bgrl_reference_options() -> None:
    """BGRL's reference: BN + PReLU after every GCN layer, a predictor without BatchNorm, and a
    target encoder initialised afresh rather than copied."""
    from graphssl.methods.bgrl import BGRL

    torch.manual_seed(0)
    enc = GCNEncoder(8, 32, num_layers=2, out_channels=16, norm="batch_norm", norm_last=True)
    x, edge_index = torch.randn(40, 8), torch.randint(40, (2, 120))
    enc.train()
    z = enc(x, edge_index)
    # batch norm on the output layer: every column has batch mean ~0 before the PReLU (which
    # keeps positives), so each column has both signs
    assert z.shape == (40, 16) and bool(((z > 0).any(0) & (z < 0).any(0)).all())
    plain = GCNEncoder(8, 32, num_layers=2, out_channels=16, norm="batch_norm")
    assert isinstance(plain.out_norm, torch.nn.Identity)
    try:
        GCNEncoder(8, 32, norm_last=True)
    except ValueError as err:
        assert "norm_last" in str(err) and "norm=None" in str(err)
    else:  # pragma: no cover - must raise
        raise AssertionError("norm_last without a norm was accepted")

    copied = BGRL(enc, torch.optim.AdamW)
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in copied.predictor.modules())
    for o, t in zip(copied.online.parameters(), copied.target.parameters(), strict=True):
        assert torch.equal(o, t)
    ref = BGRL(enc, torch.optim.AdamW, predictor_batch_norm=False, reinit_target=True)
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in ref.predictor.modules())
    weights = [
        (o, t) for o, t in zip(ref.online.parameters(), ref.target.parameters()) if o.dim() == 2
    ]
    assert weights and all(not torch.equal(o, t) for o, t in weights)
    assert all(not t.requires_grad for t in ref.target.parameters())
