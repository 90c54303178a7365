"""Random walks and skip-gram node embeddings (DeepWalk and node2vec).

DeepWalk (Perozzi et al., KDD 2014, https://arxiv.org/abs/1403.6652) trains skip-gram on uniform
random walks; node2vec (Grover & Leskovec, KDD 2016, https://arxiv.org/abs/1607.00653) biases the
walks with a return parameter ``p`` and an in-out parameter ``q``. PyG's ``Node2Vec`` and
``torch_cluster.random_walk`` need pyg-lib / torch-cluster, which graphssl does not install
so :func:`random_walks` is a vectorised pure-PyTorch walker over CSR that advances
all walkers one step at a time; second-order steps use the rejection sampling of KnightKing
(Yang et al., SOSP 2019) that torch-cluster and pyg-lib also use. :func:`skipgram_embeddings`
trains skip-gram with negative sampling with gensim's ``Word2Vec``, as the reference DeepWalk
implementation does.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["random_walks", "skipgram_embeddings"]


def _check_graph(edge_index: Tensor, num_nodes: int) -> None:
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(
            f"edge_index must have shape [2, num_edges], got {tuple(edge_index.shape)}"
        )
    if edge_index.dtype != torch.long:
        raise ValueError(f"edge_index must be a long tensor, got {edge_index.dtype}")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    if edge_index.numel():
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"edge_index holds node indices in [{lo}, {hi}] but num_nodes is {num_nodes}; "
                "expected every index in [0, num_nodes)"
            )


def _csr(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """``rowptr`` [n + 1] and ``col`` [E], sorted by (row, col)."""
    key = torch.sort(edge_index[0] * num_nodes + edge_index[1]).values
    row, col = key // num_nodes, key % num_nodes
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=edge_index.device)
    torch.cumsum(torch.bincount(row, minlength=num_nodes), 0, out=rowptr[1:])
    return rowptr, col


def random_walks(
    edge_index: Tensor,
    num_nodes: int,
    walk_length: int,
    walks_per_node: int,
    p: float = 1.0,
    q: float = 1.0,
    seed: int = 0,
) -> Tensor:
    """Uniform (``p = q = 1``, DeepWalk) or node2vec-biased random walks from every node.

    Walks follow ``edge_index`` from source (row 0) to target (row 1); pass both directions of
    each edge for an undirected graph. Parallel edges make a neighbour proportionally more likely.
    After the uniform first step, a node2vec step from ``cur`` (previous node ``prev``) picks a
    neighbour ``x`` with weight ``1/p`` if ``x == prev``, ``1`` if ``(prev, x)`` is an edge and
    ``1/q`` otherwise; it is sampled exactly by rejection: propose a uniform neighbour, accept
    with probability ``weight / max(1/p, 1, 1/q)``, retry the rejected walkers.

    **Dead ends**: a walker at a node without out-edges (e.g. an isolated node) stays there, so
    every walk has exactly ``walk_length`` nodes and a walk from an isolated node ``v`` is
    ``[v, v, …, v]``.

    Args:
        edge_index: ``[2, E]`` long tensor; the walks run on its device.
        num_nodes: number of nodes ``n``.
        walk_length: nodes per walk, the start node included (``>= 1``).
        walks_per_node: walks started from each node (``>= 1``).
        p: node2vec return parameter (default: ``1.0``).
        q: node2vec in-out parameter; ``q < 1`` favours moving outward (default: ``1.0``).
        seed: seed of a private ``torch.Generator``; the same seed gives the same walks on the
            same device (default: ``0``).

    Returns:
        ``[n · walks_per_node, walk_length]`` long tensor; row ``r · n + v`` is the ``r``-th walk
        started at node ``v``.
    """
    _check_graph(edge_index, num_nodes)
    if walk_length < 1:
        raise ValueError(f"walk_length must be >= 1 (nodes per walk), got {walk_length}")
    if walks_per_node < 1:
        raise ValueError(f"walks_per_node must be >= 1, got {walks_per_node}")
    if not (0 < p < math.inf and 0 < q < math.inf):
        raise ValueError(f"node2vec parameters must be positive and finite, got p={p!r}, q={q!r}")

    device = edge_index.device
    generator = torch.Generator(device=device).manual_seed(int(seed))
    rowptr, col = _csr(edge_index, num_nodes)
    deg = rowptr[1:] - rowptr[:-1]
    num_edges = col.numel()

    start = torch.arange(num_nodes, device=device).repeat(walks_per_node)
    walks = torch.empty(start.numel(), walk_length, dtype=torch.long, device=device)
    walks[:, 0] = start
    if walk_length == 1 or start.numel() == 0:
        return walks
    if num_edges == 0:
        walks[:] = start[:, None]
        return walks

    # Plain ``tensor[index]`` indexing can be ~1000x slower than ``index_select`` on a loaded
    # multi-core CPU (measured: 24 ms vs 20 us for 30k indices), hence the explicit ops below.
    def propose(cur: Tensor) -> Tensor:
        """A uniform out-neighbour of each node in ``cur``; nodes without one map to themselves."""
        d = deg.index_select(0, cur)
        u = torch.rand(cur.numel(), generator=generator, device=device)
        off = torch.minimum((u * d).long(), (d - 1).clamp_(min=0))  # rounding may give u·d == d
        idx = (rowptr.index_select(0, cur) + off).clamp_(max=num_edges - 1)
        return torch.where(d > 0, col.index_select(0, idx), cur)

    max_deg = int(deg.max())
    num_halvings = max_deg.bit_length() + 1

    def has_edge(src: Tensor, dst: Tensor) -> Tensor:
        """Whether ``(src[i], dst[i])`` is an edge: bisection in the sorted row of ``src[i]``.

        (``torch.searchsorted`` over all edge keys measured ~300x slower here.)
        """
        lo = rowptr.index_select(0, src)
        end = rowptr.index_select(0, src + 1)
        hi = end.clone()
        for _ in range(num_halvings):  # first position in [lo, end) with col >= dst
            mid = (lo + hi) >> 1
            right = (lo < hi) & (col.index_select(0, mid.clamp(max=num_edges - 1)) < dst)
            lo = torch.where(right, mid + 1, lo)
            hi = torch.where(right, hi, mid)
        return (lo < end) & (col.index_select(0, lo.clamp(max=num_edges - 1)) == dst)

    biased = p != 1.0 or q != 1.0
    max_w = max(1.0 / p, 1.0, 1.0 / q)
    acc_return, acc_near, acc_far = 1.0 / p / max_w, 1.0 / max_w, 1.0 / q / max_w

    num_walks = start.numel()

    def second_order_step(prev: Tensor, cur: Tensor) -> Tensor:
        nxt = cur.clone()
        pending = torch.nonzero(deg.index_select(0, cur) > 0).flatten()
        while pending.numel():
            # Once few walkers are left, give each of them `reps` i.i.d. proposals at once and
            # keep its first accepted one: the same distribution as retrying one at a time, in
            # fewer (fixed-cost) iterations.
            num = pending.numel()
            reps = max(1, min(16, num_walks // num))
            rep = pending.repeat(reps)  # proposal j of walker i sits at j·num + i
            c, t = cur.index_select(0, rep), prev.index_select(0, rep)
            x = propose(c)
            near = has_edge(t, x)  # x is one hop from prev
            accept_prob = torch.where(x == t, acc_return, torch.where(near, acc_near, acc_far))
            u = torch.rand(rep.numel(), generator=generator, device=device)
            # A single neighbour is always taken (its normalised probability is 1).
            accept = ((u < accept_prob) | (deg.index_select(0, c) == 1)).view(reps, num)
            first = accept.byte().argmax(0, keepdim=True)  # first accepted proposal (if any)
            done = accept.any(0)
            chosen = x.view(reps, num).gather(0, first).squeeze(0)
            nxt.index_copy_(0, pending.masked_select(done), chosen.masked_select(done))
            pending = pending.masked_select(~done)
        return nxt

    prev, cur = start, start
    for step in range(1, walk_length):
        nxt = second_order_step(prev, cur) if biased and step > 1 else propose(cur)
        walks[:, step] = nxt
        prev, cur = cur, nxt
    return walks


def skipgram_embeddings(
    walks: Tensor,
    num_nodes: int,
    dim: int = 128,
    window: int = 10,
    epochs: int = 1,
    negative: int = 5,
    workers: int = 1,
    seed: int = 0,
    min_count: int = 0,
) -> Tensor:
    """Skip-gram with negative sampling on walks (gensim ``Word2Vec``, ``sg=1``, ``hs=0``).

    The vectors of :func:`skipgram_fit`, without its per-epoch losses.
    """
    vectors, _ = skipgram_fit(
        walks, num_nodes, dim, window, epochs, negative, workers, seed, min_count
    )
    return vectors


def skipgram_fit(
    walks: Tensor,
    num_nodes: int,
    dim: int = 128,
    window: int = 10,
    epochs: int = 1,
    negative: int = 5,
    workers: int = 1,
    seed: int = 0,
    min_count: int = 0,
) -> tuple[Tensor, list[float]]:
    """Skip-gram with negative sampling on walks (gensim ``Word2Vec``, ``sg=1``, ``hs=0``).

    Each walk is a sentence whose tokens are the node ids as strings. gensim's other settings
    keep their defaults (learning rate 0.025 → 0.0001, frequent-token subsampling ``1e-3``).

    Args:
        walks: ``[num_walks, walk_length]`` long tensor of node ids, e.g. from
            :func:`random_walks`.
        num_nodes: number of nodes ``n`` (rows of the output).
        dim: embedding size (default: ``128``).
        window: maximum distance between a node and a context node (default: ``10``).
        epochs: passes over the walks (default: ``1``).
        negative: negative samples per positive pair (default: ``5``).
        workers: gensim worker threads; only ``workers=1`` is reproducible, because thread
            scheduling changes the order of updates (default: ``1``).
        seed: seed of the initial vectors and of the negative sampling (default: ``0``).
        min_count: nodes occurring fewer times are ignored (default: ``0``, keep all).

    Returns:
        ``[n, dim]`` float32 tensor, row ``v`` is node ``v``'s vector (nodes that never occur in
        ``walks``, or occur fewer than ``min_count`` times, get **zero rows**), and the
        negative-sampling loss of every pass (gensim's ``compute_loss``), divided by the number
        of walk tokens so that it reads the same for any number of walks.
    """
    try:
        from gensim.models import Word2Vec
    except ImportError as err:  # pragma: no cover - gensim is a core dependency
        raise ImportError(
            "skipgram_embeddings needs the 'gensim' package (pip install gensim)"
        ) from err

    if walks.ndim != 2:
        raise ValueError(
            f"walks must be a 2-D [num_walks, walk_length] tensor, got {tuple(walks.shape)}"
        )
    if walks.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"walks must hold integer node ids, got {walks.dtype}")
    if walks.numel():
        lo, hi = int(walks.min()), int(walks.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"walks hold node ids in [{lo}, {hi}] but num_nodes is {num_nodes}; expected "
                "every id in [0, num_nodes)"
            )
    for name, value in (("dim", dim), ("window", window), ("epochs", epochs), ("workers", workers)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if negative < 1:
        raise ValueError(
            f"negative must be >= 1 (skip-gram with negative sampling, hs=0), got {negative}"
        )

    out = torch.zeros(num_nodes, dim, dtype=torch.float32)
    if walks.numel() == 0:
        return out, []
    losses = _EpochLosses()
    tokens = [str(v) for v in range(num_nodes)]  # one string object per node, shared by walks
    sentences = [[tokens[v] for v in walk] for walk in walks.cpu().tolist()]
    model = Word2Vec(
        sentences=sentences,
        vector_size=dim,
        window=window,
        min_count=min_count,
        sg=1,
        hs=0,
        negative=negative,
        workers=workers,
        seed=seed,
        epochs=epochs,
        compute_loss=True,
        callbacks=[losses],
    )
    if len(model.wv.index_to_key) == 0:
        return out, losses.per_epoch(walks.numel())
    index = torch.tensor([int(k) for k in model.wv.index_to_key], dtype=torch.long)
    out[index] = torch.from_numpy(model.wv.vectors.copy()).float()
    return out, losses.per_epoch(walks.numel())


class _EpochLosses:
    """gensim callback: the cumulative training loss at the end of every epoch."""

    def __init__(self) -> None:
        self.cumulative: list[float] = []

    def on_epoch_begin(self, model: Any) -> None: ...

    def on_epoch_end(self, model: Any) -> None:
        self.cumulative.append(float(model.get_latest_training_loss()))

    def on_train_begin(self, model: Any) -> None: ...

    def on_train_end(self, model: Any) -> None: ...

    def per_epoch(self, num_tokens: int) -> list[float]:
        """Loss of each epoch (differences of the cumulative loss) per walk token."""
        previous = [0.0, *self.cumulative[:-1]]
        return [(c - p) / max(num_tokens, 1) for c, p in zip(self.cumulative, previous)]
