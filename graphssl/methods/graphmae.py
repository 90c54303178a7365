"""GraphMAE: masked graph autoencoder with feature reconstruction."""

from __future__ import annotations

import copy
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GATConv, GCNConv

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.collective import PendingCount, global_mean
from graphssl.models.encode import encode
from graphssl.models.encoders import GNNEncoder, dgl_gat_init_, sampled_hops


def scaled_cosine_error_terms(x_rec: Tensor, x: Tensor, gamma: float = 2.0) -> Tensor:
    """Each row's term ``(1 - cos(x_rec_i, x_i))^γ`` of :func:`scaled_cosine_error`, ``(M,)``."""
    cos = (F.normalize(x_rec, dim=-1) * F.normalize(x, dim=-1)).sum(dim=-1)
    return (1 - cos).pow(gamma)


def scaled_cosine_error(x_rec: Tensor, x: Tensor, gamma: float = 2.0) -> Tensor:
    """GraphMAE's scaled cosine error ``mean_i (1 - cos(x_rec_i, x_i))^γ``; x_rec, x: ``(M, F)``.

    ``γ >= 1`` down-weights rows that are already well reconstructed.
    """
    return scaled_cosine_error_terms(x_rec, x, gamma).mean()


def _in_channels(encoder: nn.Module) -> int:
    """The input feature size of a graphssl encoder (its PyG model's ``in_channels``)."""
    size = getattr(encoder, "in_channels", None)
    if size is None:
        size = getattr(getattr(encoder, "gnn", None), "in_channels", None)
    if not isinstance(size, int) or size <= 0:
        raise ValueError(
            f"GraphMAE needs the encoder's input size to build the [MASK] token and the decoder, "
            f"got in_channels={size!r} from {type(encoder).__name__}; set encoder.in_channels "
            f"(the pipeline fills in -1 from the dataset)"
        )
    return size


class GraphMAE(SSLMethod):
    """GraphMAE (Hou et al., KDD 2022, https://arxiv.org/abs/2205.10803).

    A fraction ``mask_rate`` of the nodes get their features replaced: most by a learnable
    ``[MASK]`` token, a fraction ``replace_rate`` of them by the features of random nodes. The
    encoder embeds the corrupted graph; a bias-free linear map feeds a one-layer GNN decoder,
    after re-masking (zeroing) the masked nodes' codes so they must be rebuilt from their
    neighbours. The loss is the scaled cosine error (:func:`scaled_cosine_error`) between
    reconstructed and original features of the masked nodes. Evaluation uses the encoder on the
    clean graph.

    In mini-batches (``NeighborLoader``), nodes are masked over the whole sampled subgraph, the
    seed nodes and the other sampled nodes each at ``mask_rate``, and the loss covers the masked
    seed nodes only (the other sampled nodes lack part of their neighbourhood). The decoder
    rebuilds a seed from its neighbours' codes: with one fanout per encoder layer those codes
    see one hop less than the seeds' own; a batch that samples one hop more
    (:attr:`decoder_hops`, e.g. ``num_neighbors=[10, 10, 10]`` for a two-layer encoder) encodes
    them from their whole sampled neighbourhood, so that a seed's loss does not depend on the
    other seeds of its batch. Several processes (``trainer.devices > 1``) sample that hop.

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to ``(N, D)`` (the paper: GAT, 4 heads).
        optimizer: partial optimizer constructor.
        mask_rate: fraction of nodes masked per step (default: ``0.5``).
        replace_rate: fraction of the masked nodes given random nodes' features instead of the
            token (default: ``0.05``).
        gamma: exponent ``γ`` of the scaled cosine error (default: ``3.0``).
        decoder: ``"gat"`` (one attention head) or ``"gcn"``, one layer (default: ``"gat"``).
        scheduler: partial learning-rate scheduler constructor; the paper's code anneals every
            learning rate along ``(1 + cos(π t / T)) / 2`` over the training steps
            (:class:`~graphssl.training.schedules.CosineLR`) (default: ``None``, a constant
            learning rate).
        feat_drop: dropout on the encoder's input (the corrupted features) and on the decoder's
            input during training, the paper's ``in_drop`` at the first and the decoding layer;
            the encoder's own ``dropout`` covers the layers between (default: ``0.0``).
        attn_drop: attention dropout of the GAT decoder, the paper's ``attn_drop`` (the GAT
            encoder's is ``encoder.attn_dropout``) (default: ``0.0``).
        decoder_init: ``"pyg"`` or ``"dgl"`` initialisation of the GAT decoder, as
            ``GATEncoder(init=...)`` (default: ``"pyg"``).
    """

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        mask_rate: float = 0.5,
        replace_rate: float = 0.05,
        gamma: float = 3.0,
        decoder: Literal["gat", "gcn"] = "gat",
        scheduler: SchedulerFactory | None = None,
        feat_drop: float = 0.0,
        attn_drop: float = 0.0,
        decoder_init: str = "pyg",
    ) -> None:
        super().__init__(optimizer, scheduler)
        if not 0.0 < mask_rate < 1.0:
            raise ValueError(f"mask_rate must be in (0, 1), got {mask_rate}")
        if not 0.0 <= replace_rate < 1.0:
            raise ValueError(f"replace_rate must be in [0, 1), got {replace_rate}")
        if gamma < 1.0:
            raise ValueError(f"gamma must be >= 1 (the scaled cosine error), got {gamma}")
        self.encoder = encoder
        in_dim = _in_channels(encoder)
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.mask_token = nn.Parameter(torch.zeros(1, in_dim))
        self.encoder_to_decoder = nn.Linear(dim, dim, bias=False)
        self.decoder: nn.Module
        if decoder == "gat":
            if not 0.0 <= attn_drop < 1.0:
                raise ValueError(f"attn_drop must be in [0, 1), got {attn_drop}")
            self.decoder = GATConv(dim, in_dim, heads=1, dropout=attn_drop)
            if decoder_init == "dgl":
                dgl_gat_init_(self.decoder)
            elif decoder_init != "pyg":
                raise ValueError(f"decoder_init must be 'pyg' or 'dgl', got {decoder_init!r}")
        elif decoder == "gcn":
            self.decoder = GCNConv(dim, in_dim)
        else:
            raise ValueError(f"decoder must be 'gat' or 'gcn', got {decoder!r}")
        self.mask_rate = mask_rate
        self.replace_rate = replace_rate
        self.gamma = gamma
        if not 0.0 <= feat_drop < 1.0:
            raise ValueError(f"feat_drop must be in [0, 1), got {feat_drop}")
        self.feat_drop = feat_drop

    forward_encoder = "encoder"  # forward() is encode(self.encoder, batch)
    # the masked seeds' errors, averaged over processes; exact once the decoder's hop is sampled
    supports_distributed = True
    decoder_hops = 1

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)

    def head_width(self) -> int:
        return int(self.encoder_to_decoder.out_features + self.mask_token.size(1))

    def full_batch_activation_bytes(self, num_nodes: int, num_edges: int) -> int:
        # the decoder gathers one message of the feature size per edge (self-loops included):
        # the messages, their attention-weighted copies and their gradient
        messages = 3 * (num_edges + num_nodes) * self.mask_token.size(1) * self.itemsize()
        return super().full_batch_activation_bytes(num_nodes, num_edges) + messages

    def mask_features(self, x: Tensor, num_seeds: int | None = None) -> tuple[Tensor, Tensor]:
        """Corrupt ``x`` ``(N, F)``; returns the encoder input and the masked node indices.

        With ``num_seeds`` (a mini-batch whose first ``num_seeds`` rows are its seed nodes),
        the seeds and the other rows are masked at ``mask_rate`` each, at least one seed, and
        the masked seeds come first among the returned indices.
        """
        n = x.size(0)
        if num_seeds is None or num_seeds >= n:
            num_mask = max(1, int(self.mask_rate * n))
            masked = torch.randperm(n, device=x.device)[:num_mask]
            order = masked
        else:
            seeds = torch.randperm(num_seeds, device=x.device)
            rest = num_seeds + torch.randperm(n - num_seeds, device=x.device)
            num_seed_mask = max(1, int(self.mask_rate * num_seeds))
            num_rest_mask = int(self.mask_rate * (n - num_seeds))
            masked = torch.cat([seeds[:num_seed_mask], rest[:num_rest_mask]])
            num_mask = masked.numel()
            # which masked nodes get noise is drawn independently of the seeds-first order
            order = masked[torch.randperm(num_mask, device=x.device)]
        num_noise = int(self.replace_rate * num_mask)
        token_nodes, noise_nodes = order[num_noise:], order[:num_noise]
        out = x.clone()
        out[token_nodes] = self.mask_token.to(x.dtype).expand(token_nodes.numel(), -1)
        if num_noise:
            out[noise_nodes] = x[torch.randperm(n, device=x.device)[:num_noise]]
        return out, masked

    def loss(self, batch: Data) -> dict[str, Tensor]:
        num_seeds = getattr(batch, "batch_size", None)
        x_masked, masked = self.mask_features(batch.x, num_seeds)
        # the loss covers the masked seed nodes only in mini-batches
        loss_nodes = masked if num_seeds is None else masked[masked < num_seeds]
        # their number over every process, summed while this process encodes and decodes
        count = PendingCount(loss_nodes.numel(), batch.x.device)
        corrupted = copy.copy(batch)
        corrupted.x = F.dropout(x_masked, self.feat_drop, self.training)
        hops = sampled_hops(batch) if num_seeds is not None else None
        if (
            hops is not None
            and isinstance(self.encoder, GNNEncoder)
            and isinstance(self.decoder, GATConv)
        ):
            # The GAT decoder reconstructs the seeds from their one-hop neighbours, so the
            # encoder computes the rows within one hop of the seeds and the decoder the seeds
            # alone: the seeds' reconstructions are those of the whole batch, for less work.
            # (A GCN decoder's normalisation reads every batch node's degree: whole batch.)
            nodes, edges = hops
            h = self.encoder(
                corrupted.x,
                corrupted.edge_index,
                getattr(corrupted, "edge_weight", None),
                nodes,
                edges,
                output_hops=1,
            )
            code = self.encoder_to_decoder(h).index_fill(0, masked[masked < h.size(0)], 0.0)
            code = F.dropout(code, self.feat_drop, self.training)
            seeds = int(num_seeds)  # type: ignore[arg-type]
            into_seeds = batch.edge_index[:, : edges[0]]
            recon = self.decoder((code, code[:seeds]), into_seeds, size=(code.size(0), seeds))
        else:
            code = self.encoder_to_decoder(encode(self.encoder, corrupted))
            code = code.index_fill(0, masked, 0.0)  # re-mask
            recon = self.decoder(F.dropout(code, self.feat_drop, self.training), batch.edge_index)
        x_rec, x = recon[loss_nodes], batch.x[loss_nodes]
        # the mean over every process's masked seeds (one process: scaled_cosine_error)
        terms = scaled_cosine_error_terms(x_rec, x, self.gamma)
        return {"loss": global_mean(terms, count=count.wait())}
