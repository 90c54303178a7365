"""AFGRL: augmentation-free graph representation learning."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, linear_widths
from graphssl.methods.losses import bootstrap_cosine
from graphssl.methods.momentum import MomentumMethod
from graphssl.models.encode import encode
from graphssl.models.heads import MLPHead


@torch.no_grad()
def kmeans(x: Tensor, num_clusters: int, iters: int = 20) -> Tensor:
    """Lloyd's k-means on the rows of ``x`` ``(N, D)``; returns ``(N,)`` cluster ids.

    Centroids start at ``num_clusters`` distinct rows drawn with torch's global generator (so the
    result follows the run's seed); an emptied cluster keeps its previous centroid. ``num_clusters``
    is capped at ``N``. Stops early once the assignment no longer changes.
    """
    n = x.size(0)
    k = max(1, min(num_clusters, n))
    centroids = x[torch.randperm(n, device=x.device)[:k]].clone()
    assign = torch.zeros(n, dtype=torch.long, device=x.device)
    sq_norms = x.pow(2).sum(dim=1, keepdim=True)
    for it in range(max(1, iters)):
        dist = sq_norms - 2 * x @ centroids.t() + centroids.pow(2).sum(dim=1)
        new_assign = dist.argmin(dim=1)
        if it > 0 and torch.equal(new_assign, assign):
            break  # converged: the centroids would not move
        assign = new_assign
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).unsqueeze(1).to(x.dtype)
        centroids = torch.where(counts > 0, sums / counts.clamp_min(1), centroids)
    return assign


@torch.no_grad()
def afgrl_positives(
    online: Tensor,
    target: Tensor,
    edge_index: Tensor,
    top_k: int = 4,
    num_clusters: int = 100,
    num_kmeans: int = 5,
    kmeans_iters: int = 20,
) -> Tensor:
    """AFGRL's positive pairs ``(2, P)`` (anchor, positive) among ``N`` nodes.

    For every node ``i``, ``B_i`` are its ``top_k`` nearest nodes by cosine similarity of the
    online embedding of ``i`` to the target embeddings (``i`` itself always included). A
    candidate ``j ∈ B_i`` is kept when it is a *local* positive (``j = i`` or ``(i, j)`` is an
    edge of ``edge_index``) or a *global* one (``i`` and ``j`` share a k-means cluster of the
    target embeddings in at least one of ``num_kmeans`` runs).

    Args:
        online: ``(N, D)`` online embeddings (anchors).
        target: ``(N, D)`` target embeddings (candidates, clustered).
        edge_index: ``(2, E)`` edges among the ``N`` nodes (others are ignored).
    """
    n = online.size(0)
    a, t = F.normalize(online, dim=-1), F.normalize(target, dim=-1)
    sim = a @ t.t()
    sim.diagonal().add_(10.0)  # every node is its own nearest neighbour
    knn = sim.topk(min(top_k, n), dim=1).indices  # (N, k)
    anchor = torch.arange(n, device=online.device).unsqueeze(1).expand_as(knn)

    # local: the candidate is the node itself or one of its graph neighbours
    inside = (edge_index[0] < n) & (edge_index[1] < n)
    keys = torch.unique(edge_index[0, inside] * n + edge_index[1, inside])
    cand = anchor * n + knn
    if keys.numel():
        adjacent = keys[torch.searchsorted(keys, cand).clamp(max=keys.numel() - 1)] == cand
    else:
        adjacent = torch.zeros_like(knn, dtype=torch.bool)
    local = (knn == anchor) | adjacent

    # global: the candidate shares a k-means cluster with the node in some run
    glob = torch.zeros_like(local)
    for _ in range(num_kmeans):
        labels = kmeans(t, num_clusters, kmeans_iters)
        glob |= labels[knn] == labels.unsqueeze(1)
    keep = local | glob
    return torch.stack([anchor[keep], knn[keep]])


class AFGRL(MomentumMethod):
    """AFGRL (Lee et al., AAAI 2022, https://arxiv.org/abs/2112.02472).

    A BGRL-style online encoder + predictor and an EMA target encoder
    (:class:`~graphssl.methods.momentum.MomentumMethod`), but without augmentation:
    both encoders see the same graph, and the positives of a node are the nodes among its
    ``top_k`` nearest neighbours in target-embedding space that are also adjacent to it (local
    structure) or in the same k-means cluster (global semantics, :func:`afgrl_positives`). The
    loss is the symmetric bootstrap cosine loss over positive pairs. Evaluation uses the online
    encoder; ``encoders()`` names ``"online"`` (also ``"encoder"``) and ``"target"``.

    Full-batch, the nearest-neighbour search compares all ``n²`` pairs of nodes
    (:meth:`full_batch_loss_bytes`). In mini-batches it is batch-local: the neighbours, the
    edges and the k-means clusters are those of the batch's ``batch_size`` seed nodes, so a step
    costs ``batch_size²`` whatever the graph's size.

    Args:
        encoder: online GNN mapping ``(x, edge_index)`` to ``(N, D)``; the target is a copy.
        optimizer: partial optimizer constructor.
        predictor_hidden: hidden size of the predictor MLP (default: ``1024``).
        momentum: base EMA momentum of the target, annealed to 1 (default: ``0.9``).
        top_k: nearest neighbours searched per node (default: ``4``).
        num_clusters: k-means clusters (default: ``100``).
        num_kmeans: k-means runs whose cluster relations are OR-ed (default: ``5``).
        kmeans_iters: Lloyd iterations per run (default: ``20``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    target: nn.Module  # set by add_target
    not_distributed_because = (
        "its positives are each seed's nearest neighbours and k-means clusters among the "
        "target embeddings of the batch: on several processes each would search its own slice "
        "of the global batch only, and draw k-means initialisations of its own, so the step "
        "would not be the step of one process on the global batch"
    )

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        predictor_hidden: int = 1024,
        momentum: float = 0.9,
        top_k: int = 4,
        num_clusters: int = 100,
        num_kmeans: int = 5,
        kmeans_iters: int = 20,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler, momentum)
        for name, value in (
            ("top_k", top_k),
            ("num_clusters", num_clusters),
            ("num_kmeans", num_kmeans),
            ("kmeans_iters", kmeans_iters),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.online = encoder
        self.add_target("target", follows="online")
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.predictor = MLPHead(dim, predictor_hidden, dim, batch_norm=True)
        self.top_k = top_k
        self.num_clusters = num_clusters
        self.num_kmeans = num_kmeans
        self.kmeans_iters = kmeans_iters

    def full_batch_loss_bytes(self, num_nodes: int) -> int:
        # afgrl_positives' n x n similarity matrix (its row-wise top-k works in place)
        return num_nodes * num_nodes * self.itemsize()

    def head_width(self) -> int:
        widths = linear_widths(self.predictor)
        return sum(widths) + widths[0]  # the BatchNorm of the hidden layer

    forward_encoder = "online"  # forward() is encode(self.online, batch)

    def forward(self, batch: Data) -> Tensor:
        return encode(self.online, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        n = int(getattr(batch, "batch_size", batch.num_nodes))  # seeds only in mini-batches
        h = encode(self.online, batch, seeds_only=True)[:n]
        with torch.no_grad():
            t = encode(self.target, batch, seeds_only=True)[:n]
        pairs = afgrl_positives(
            h.detach(),
            t,
            batch.edge_index,
            self.top_k,
            self.num_clusters,
            self.num_kmeans,
            self.kmeans_iters,
        )
        p = self.predictor(h)
        i, j = pairs[0], pairs[1]
        loss = bootstrap_cosine(p[i], t[j]) + bootstrap_cosine(p[j], t[i])
        return {"loss": loss, "positives_per_node": torch.tensor(pairs.size(1) / max(n, 1))}
