"""A seeded generator of large node-classification graphs (default: ogbn-products size).

:class:`SyntheticLargeDataModule` (``dataset=synthetic_large``) draws a graph whose size,
average degree and class count are configurable, with a homophilous edge structure, a
heavy-tailed degree distribution and features correlated with the classes:

* classes: ``y`` uniform over ``num_classes``;
* edges: ``num_nodes * avg_degree / 2`` distinct undirected edges (both directions stored, no
  self-loops). Each endpoint is drawn with probability proportional to a log-normal node
  weight (``degree_skew`` is its σ; ``0`` gives Poisson degrees); with probability
  ``homophily`` the second endpoint is drawn from the first one's class, otherwise from all
  nodes, so the edge homophily is about ``homophily + (1 - homophily) / num_classes``;
* features: ``x = μ_y + feature_noise · ε`` in float32, with class means
  ``μ_c ~ N(0, feature_signal² I)`` and ``ε ~ N(0, I)``.

Everything is vectorised torch, drawn from one generator seeded with ``graph_seed``; the
evaluation split is drawn from ``seed``, so changing the run's seed changes the split and
not the graph. The generated graph is cached in ``<cache_dir>/synthetic_large/`` under a name
derived from its parameters and memory-mapped on later runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from graphssl.data.node import NodeDataModule
from graphssl.utils import load_weights_only

__all__ = ["SyntheticLargeDataModule", "generate_large_graph"]

#: bump when the generator changes, so older cache files are not reused
GENERATOR_VERSION = 1
_CHUNK = 1 << 22


def _draw(cdf: Tensor, lo: Tensor, hi: Tensor, gen: torch.Generator) -> Tensor:
    """Positions ``i`` drawn with probability ∝ weight inside ``[lo, hi)`` of the cumulative
    weights ``cdf`` (``cdf[i]`` = total weight of positions ``<= i``)."""
    u = torch.rand(lo.shape, generator=gen, dtype=torch.float64)
    target = lo + u * (hi - lo)
    return torch.searchsorted(cdf, target, right=True).clamp_max(cdf.numel() - 1)


def generate_large_graph(
    num_nodes: int,
    avg_degree: float,
    num_classes: int,
    num_features: int,
    homophily: float = 0.8,
    feature_signal: float = 0.15,
    feature_noise: float = 1.0,
    degree_skew: float = 1.0,
    seed: int = 0,
) -> tuple[Data, int]:
    """Generate the graph described in the module docstring; returns it and its number of
    undirected edges."""
    n, c = int(num_nodes), int(num_classes)
    gen = torch.Generator().manual_seed(int(seed))
    y = torch.randint(c, (n,), generator=gen)
    weight = torch.exp(float(degree_skew) * torch.randn(n, generator=gen, dtype=torch.float64))
    order = torch.argsort(y, stable=True)
    cdf = torch.cumsum(weight[order], 0)
    cdf0 = torch.cat([cdf.new_zeros(1), cdf])
    counts = torch.bincount(y, minlength=c)
    starts = torch.cumsum(counts, 0) - counts
    total = cdf[-1]

    target = round(n * float(avg_degree) / 2)
    max_edges = n * (n - 1) // 2
    if target > max_edges:
        raise ValueError(
            f"avg_degree={avg_degree} needs {target} undirected edges but {n} nodes have at "
            f"most {max_edges}"
        )
    keys = torch.empty(0, dtype=torch.long)
    draw = int(target * 1.02) + 16
    for _ in range(8):  # top up until enough distinct edges (duplicates are rare)
        parts = []
        for start in range(0, draw, _CHUNK):
            m = min(_CHUNK, draw - start)
            zeros = torch.zeros(m, dtype=torch.float64)
            u = order[_draw(cdf, zeros, zeros + total, gen)]
            cls = y[u]
            same = torch.rand(m, generator=gen) < float(homophily)
            lo = torch.where(same, cdf0[starts[cls]], zeros)
            hi = torch.where(same, cdf0[starts[cls] + counts[cls]], zeros + total)
            v = order[_draw(cdf, lo, hi, gen)]
            a, b = torch.minimum(u, v), torch.maximum(u, v)
            keep = a != b
            parts.append(a[keep] * n + b[keep])
        keys = torch.unique(torch.cat([keys, *parts]))
        if keys.numel() >= target:
            break
        draw = int((target - keys.numel()) * 1.1) + 16
    if keys.numel() > target:
        pick = torch.randperm(keys.numel(), generator=gen)[:target]
        keys = keys[pick.sort().values]
    src, dst = keys // n, keys % n
    del keys
    edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    m_und = int(src.numel())
    del src, dst

    means = float(feature_signal) * torch.randn(c, int(num_features), generator=gen)
    x = torch.empty(n, int(num_features))
    for start in range(0, n, _CHUNK // 4):
        stop = min(n, start + _CHUNK // 4)
        noise = torch.randn(stop - start, int(num_features), generator=gen)
        x[start:stop] = noise.mul_(float(feature_noise)).add_(means[y[start:stop]])
    return Data(x=x, edge_index=edge_index, y=y, num_nodes=n), m_und


class SyntheticLargeDataModule(NodeDataModule):
    """A generated large graph (:func:`generate_large_graph`), cached on disk.

    Args:
        name: dataset name (default: ``"SyntheticLarge"``).
        num_nodes: nodes (default: ``2449029``, ogbn-products).
        avg_degree: mean node degree ``2|E|/|V|`` = stored (directed) edges per node
            (default: ``25.26``, ogbn-products' 61.9M directed edges).
        num_classes: classes (default: ``47``).
        num_features: feature dimension (default: ``100``).
        homophily: probability that an edge is drawn inside its first endpoint's class
            (default: ``0.8``).
        feature_signal: standard deviation of the class means (default: ``0.15``).
        feature_noise: standard deviation of the features around their class mean
            (default: ``1.0``).
        degree_skew: σ of the log-normal node weights (default: ``1.0``).
        graph_seed: seed of the graph, independent of ``seed`` (the split's) (default: ``0``).
        cache: store the generated graph in ``<cache_dir>/synthetic_large/`` and reuse it
            (default: ``True``).
        **kwargs: :class:`~graphssl.data.node.NodeDataModule` arguments (default split:
            seeded random, ``train_frac``/``val_frac``).
    """

    def __init__(
        self,
        name: str = "SyntheticLarge",
        num_nodes: int = 2_449_029,
        avg_degree: float = 25.26,
        num_classes: int = 47,
        num_features: int = 100,
        homophily: float = 0.8,
        feature_signal: float = 0.15,
        feature_noise: float = 1.0,
        degree_skew: float = 1.0,
        graph_seed: int = 0,
        cache: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("split", "random")
        super().__init__(name, **kwargs)
        if num_nodes < 2 or num_classes < 1 or num_features < 1:
            raise ValueError(
                f"need num_nodes >= 2, num_classes >= 1 and num_features >= 1, got "
                f"{num_nodes}, {num_classes} and {num_features}"
            )
        if not avg_degree > 0 or not math.isfinite(avg_degree):
            raise ValueError(f"avg_degree must be a positive number, got {avg_degree}")
        if not 0.0 <= homophily <= 1.0:
            raise ValueError(f"homophily must be a probability in [0, 1], got {homophily}")
        if feature_noise < 0 or feature_signal < 0 or degree_skew < 0:
            raise ValueError(
                f"feature_signal, feature_noise and degree_skew must be >= 0, got "
                f"{feature_signal}, {feature_noise} and {degree_skew}"
            )
        self.params: dict[str, Any] = {
            "num_nodes": int(num_nodes),
            "avg_degree": float(avg_degree),
            "num_classes": int(num_classes),
            "num_features": int(num_features),
            "homophily": float(homophily),
            "feature_signal": float(feature_signal),
            "feature_noise": float(feature_noise),
            "degree_skew": float(degree_skew),
            "seed": int(graph_seed),
        }
        self.cache = bool(cache)
        self._num_undirected: int | None = None

    @property
    def cache_file(self) -> Path:
        """Where the generated graph is stored (named after its parameters)."""
        blob = json.dumps({**self.params, "version": GENERATOR_VERSION}, sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
        p = self.params
        stem = f"n{p['num_nodes']}-d{p['avg_degree']:g}-c{p['num_classes']}-{digest}"
        return self.cache_dir / "synthetic_large" / f"{stem}.pt"

    def load(self) -> Data:
        path = self.cache_file
        if self.cache and path.is_file():
            stored = load_weights_only(path, "a generated graph (tensors)", mmap=True)
            self._num_undirected = int(stored.pop("num_undirected_edges"))
            return Data(**stored, num_nodes=self.params["num_nodes"])
        data, m = generate_large_graph(**self.params)
        self._num_undirected = m
        if self.cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            fields = {"x": data.x, "edge_index": data.edge_index, "y": data.y}
            torch.save({**fields, "num_undirected_edges": torch.tensor(m)}, tmp)
            os.replace(tmp, path)
        return data

    def graph_stats(self) -> dict[str, float]:
        """As :meth:`NodeDataModule.graph_stats`, from the generator's edge count (no pass
        over the edges) unless a ``corruption`` changed the graph."""
        self._require_setup()
        if self.corruption is not None or self._num_undirected is None:
            return super().graph_stats()
        n, m = float(self.params["num_nodes"]), float(self._num_undirected)
        return {"data/num_nodes": n, "data/num_edges": m, "data/avg_degree": m / n}
