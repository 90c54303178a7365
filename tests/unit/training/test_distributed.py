"""One model on several processes equals one process on the global batch.

Each supported method trains 3 optimizer steps in float64 twice: on one rank with batch ``B``
(inside a process group of one, so both runs take the same sharded batches) and on two ranks
with ``B / 2`` each (rank 0 here, rank 1 spawned by :func:`graphssl.training.distributed.launch`);
per-step losses and final parameters agree to 1e-6, and the two ranks hold identical weights
(momentum targets, DINO's centre and synchronised BatchNorm statistics included). The views are
drawn from one seeded table over the whole dataset and looked up by global node / graph / image
id, so a row's augmentation does not depend on which rank holds it; node neighbourhoods are
sampled whole (``num_neighbors=[-1, -1]``) and the encoders aggregate by mean, so a seed's
embedding does not depend on which other seeds share its batch. A variant of GRACE that gathers
the other ranks' negatives without gradient must then differ (the check can fail).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from torch_geometric.data import Data

from graphssl.data.base import DataModule, Split
from graphssl.data.graph import SyntheticGraphsDataModule
from graphssl.data.node import InMemoryNodeDataModule
from graphssl.methods import collective
from graphssl.methods.base import SSLMethod
from graphssl.methods.bgrl import BGRL
from graphssl.methods.byol import BYOL
from graphssl.methods.cca_ssg import CCASSG
from graphssl.methods.dgi import DGI, _corrupted
from graphssl.methods.dino import DINO
from graphssl.methods.grace import GRACE
from graphssl.methods.graph_dino import GraphDINO
from graphssl.methods.graphcl import GraphCL
from graphssl.methods.graphmae import GraphMAE
from graphssl.methods.infograph import InfoGraph
from graphssl.methods.losses import dgi_bce_terms, info_nce
from graphssl.methods.simclr import SimCLR
from graphssl.methods.supervised import Supervised
from graphssl.models.encode import encode
from graphssl.models.encoders import GINEncoder, SAGEEncoder
from graphssl.training import batches, distributed
from graphssl.training.distributed.batchnorm import swap_batchnorm
from graphssl.training.trainer import Callback, Trainer

NODES, FEATURES, GRAPHS, IMAGES = 24, 5, 12, 24
#: global batch of every run: nodes, graphs, images per optimizer step
GLOBAL_BATCH = {"node": 8, "graph": 4, "image": 8}
STEPS = 3
TOL = 1e-6


# ---------------------------------------------------------------------------- keyed views
class KeyedNodeMask:
    """Feature masking whose mask is row ``n_id`` of a table drawn for this call: a node gets
    the same view whichever rank samples it."""

    def __init__(self, seed: int, p: float = 0.3) -> None:
        self.seed, self.p, self.calls = seed, p, 0

    def __call__(self, batch: Data) -> Data:
        g = torch.Generator().manual_seed(self.seed * 1000 + self.calls)
        self.calls += 1
        table = (torch.rand(NODES, FEATURES, generator=g, dtype=torch.float64) >= self.p).double()
        out = batch.clone()
        out.x = batch.x * table[batch.n_id]
        return out


class KeyedGraphMask:
    """GraphCL-style batch view: each node's features masked by a table keyed by (graph id,
    node position within its graph)."""

    def __init__(self, seed: int, p: float = 0.3) -> None:
        self.seed, self.p, self.calls = seed, p, 0

    def __call__(self, batch: Any) -> Any:
        g = torch.Generator().manual_seed(self.seed * 1000 + self.calls)
        self.calls += 1
        table = torch.rand(GRAPHS, 64, FEATURES, generator=g, dtype=torch.float64) >= self.p
        position = torch.arange(batch.num_nodes) - batch.ptr[batch.batch]
        out = batch.clone()
        out.x = batch.x * table[batch.gid[batch.batch], position].double()
        return out


class KeyedShuffle:
    """DGI's corruption keyed by global node id: node ``i`` gets the features of node
    ``perm[i]`` of the whole graph, ``perm`` drawn for this call. The corruption sees a batch's
    features only (``corruption(x, edge_index)``), so each row is found in the graph by its
    values (every node's random features are distinct)."""

    def __init__(self, seed: int) -> None:
        self.seed, self.calls, self.x = seed, 0, _graph().x
        self.ids = {tuple(row.tolist()): i for i, row in enumerate(self.x)}

    def __call__(self, x: Tensor, edge_index: Tensor) -> Tensor:
        g = torch.Generator().manual_seed(self.seed * 1000 + self.calls)
        self.calls += 1
        perm = torch.randperm(NODES, generator=g)
        rows = torch.tensor([self.ids[tuple(row.tolist())] for row in x])
        return self.x[perm[rows]]


class KeyedGraphMAE(GraphMAE):
    """GraphMAE whose masked nodes are those a table drawn for this step marks, keyed by global
    node id (each row found in the graph by its values, as :class:`KeyedShuffle` does): a node
    is masked or not whichever batch holds it. All masked nodes get the ``[MASK]`` token."""

    def __init__(self, seed: int) -> None:
        super().__init__(_sage(), _sgd(), mask_rate=0.5, replace_rate=0.0)
        self.seed, self.calls = seed, 0
        self.ids = {tuple(row.tolist()): i for i, row in enumerate(_graph().x)}

    def mask_features(self, x: Tensor, num_seeds: int | None = None) -> tuple[Tensor, Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1000 + self.calls)
        self.calls += 1
        table = torch.rand(NODES, generator=g) < self.mask_rate
        rows = torch.tensor([self.ids[tuple(row.tolist())] for row in x])
        masked = table[rows].nonzero().view(-1)  # ascending: the masked seeds first
        out = x.clone()
        out[masked] = self.mask_token.to(x.dtype).expand(masked.numel(), -1)
        return out, masked


def _dgi() -> DGI:
    method = DGI(_sage(), _sgd())
    method.corruption = KeyedShuffle(10)  # type: ignore[assignment]
    return method


# ---------------------------------------------------------------------------- data
def _graph() -> Data:
    g = torch.Generator().manual_seed(0)
    edges = torch.randint(0, NODES, (2, 90), generator=g)
    return Data(x=torch.randn(NODES, FEATURES, generator=g, dtype=torch.float64), edge_index=edges)


def _node_data() -> InMemoryNodeDataModule:
    dm = InMemoryNodeDataModule(_graph(), seed=0)
    dm.setup()
    return dm


def _graph_data(batch: int) -> SyntheticGraphsDataModule:
    dm = SyntheticGraphsDataModule(
        num_graphs=GRAPHS, num_features=FEATURES, batch_size=batch, split="random", seed=0
    )
    dm.setup()
    for i, g in enumerate(dm.graphs):
        g.gid, g.x = torch.tensor([i]), g.x.double()
    return dm


class _Views(Dataset[tuple[Tensor, ...]]):
    """Two (or four, with local crops) fixed views per image, drawn once from a seed."""

    def __init__(self, crops: int) -> None:
        g = torch.Generator().manual_seed(3)
        self.views = [
            torch.randn(IMAGES, 3, 4, 4, generator=g, dtype=torch.float64) for _ in range(2)
        ] + [torch.randn(IMAGES, 3, 2, 2, generator=g, dtype=torch.float64) for _ in range(crops)]

    def __len__(self) -> int:
        return IMAGES

    def __getitem__(self, i: int) -> tuple[Tensor, ...]:
        return (*(v[i] for v in self.views), torch.tensor(i % 3))


class _ImageData(DataModule):
    """Images as fixed views, batches from a DataLoader (sharded by the trainer)."""

    is_graph_level = True

    def __init__(self, batch_size: int, crops: int = 0) -> None:
        super().__init__("views", seed=0)
        self.batch_size, self.crops = batch_size, crops

    def _setup(self) -> None: ...

    @property
    def data(self) -> Data:
        raise AttributeError("no graph")

    @property
    def num_classes(self) -> int:
        return 1

    def splits(self) -> list[Split]:
        return []

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(_Views(self.crops), batch_size=self.batch_size, shuffle=True)


class _TinyBackbone(nn.Module):
    """Images ``[B, 3, H, W]`` → ``[B, 6]``: mean over pixels, then a linear layer."""

    out_channels = 6

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 6)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.linear(x.mean(dim=(2, 3)))
        return out


# ---------------------------------------------------------------------------- methods
class DetachedGRACE(GRACE):
    """GRACE with the common mistake: the other ranks' rows gathered without gradient (only
    this rank's own rows carry one), so their negatives push nothing back to their ranks."""

    def loss(self, batch: Data) -> dict[str, Tensor]:
        n = int(batch.batch_size)
        z1 = self.projector(encode(self.encoder, self.augment1(batch), seeds_only=True)[:n])
        z2 = self.projector(encode(self.encoder, self.augment2(batch), seeds_only=True)[:n])
        return {"loss": info_nce(_gather_detached(z1), _gather_detached(z2), self.tau)}


class DetachedSummaryDGI(DGI):
    """DGI with the common mistake for a batch statistic: the summary summed over ranks
    without gradient, so no rank's summary term pushes anything back to the other ranks."""

    def loss(self, batch: Data) -> dict[str, Tensor]:
        n = int(batch.batch_size)
        pos = encode(self.encoder, batch, seeds_only=True)[:n]
        neg = encode(self.encoder, _corrupted(batch, self.corruption), seeds_only=True)[:n]
        stats = torch.cat([pos.sum(dim=0), pos.new_full((1,), float(n))])
        total = stats.detach().clone()
        dist.all_reduce(total)
        stats = stats + (total - stats).detach()  # the global value, this rank's gradient only
        ws = self.weight @ torch.sigmoid(stats[:-1] / stats[-1])
        terms = dgi_bce_terms(pos @ ws + self.bias, neg @ ws + self.bias)
        return {"loss": collective.global_mean(terms)}


def _detached_summary_dgi() -> DGI:
    torch.manual_seed(0)
    method = DetachedSummaryDGI(_sage(), _sgd())
    method.corruption = KeyedShuffle(10)  # type: ignore[assignment]
    return method


def _global_mean_check() -> dict[str, float]:
    """:func:`global_mean` of a rank-dependent number of values ``θ·x``: its value, and the
    gradient of ``θ`` as the trainer averages it over ranks."""
    world, me = collective.world_size(), collective.rank()
    x = torch.arange(1.0, 6.0, dtype=torch.float64)  # 1..5 in all
    mine = x if world == 1 else (x[:3] if me == 0 else x[3:])
    theta = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    value = collective.global_mean(theta * mine)
    value.backward()
    assert theta.grad is not None
    grad = collective.all_reduce_mean(theta.grad)
    # the count known beforehand: no collective, the value is this rank's share
    theta.grad = None
    share = collective.global_mean(theta * mine, count=5.0)
    share.backward()
    share_grad = collective.all_reduce_mean(theta.grad)
    return {
        "value": float(value),
        "grad": float(grad),
        "share": float(share),
        "share_grad": float(share_grad),
    }


def _far_rows() -> Tensor:
    """6 float32 rows of 3 channels, each channel's mean 10^4 times its spread."""
    g = torch.Generator().manual_seed(1)
    return (1e4 + torch.randn(6, 3, generator=g, dtype=torch.float64)).float()


def _batchnorm_check() -> dict[str, Tensor]:
    """A :class:`GatheredBatchNorm` over 4-D inputs (``momentum=None``: the cumulative running
    averages), rank 0 holding 4 of the 6 images and rank 1 the other 2: every image's output
    and input gradient (of the global mean of a per-image loss), and the running statistics
    after two steps."""
    world, me = collective.world_size(), collective.rank()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, 2, 2, generator=g, dtype=torch.float64)
    c = torch.randn(3, 2, 2, generator=g, dtype=torch.float64)
    rows = slice(None) if world == 1 else (slice(0, 4) if me == 0 else slice(4, 6))
    bn = distributed.GatheredBatchNorm(3, momentum=None).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.5, 0.5, -1.0]))
        bn.bias.copy_(torch.tensor([0.1, 0.2, 0.3]))
    outs, grads = [], []
    for step in range(2):
        mine = (x[rows] * (step + 1)).requires_grad_()
        out = bn(mine)
        collective.global_mean((out * c).sum(dim=(1, 2, 3))).backward()
        assert mine.grad is not None
        outs.append(out.detach())
        grads.append(mine.grad / world)  # each rank's gradient carries the world's factor
    # float32 rows whose mean is 10^4 times their spread: the ranks' statistics are combined
    # without cancellation, so the output is one process's to float32 rounding
    bn32 = distributed.GatheredBatchNorm(3).train()
    far = _far_rows()[rows]
    return {
        "out": torch.cat(outs),
        "grad": torch.cat(grads),
        "running_mean": bn.running_mean.clone(),
        "running_var": bn.running_var.clone(),
        "far": bn32(far).detach(),
    }


def _batchnorm_views_check() -> dict[str, Tensor]:
    """Two views of this rank's rows (3 on rank 0, 2 on rank 1) through one
    :meth:`GatheredBatchNorm.start_views` and, with the same weights, through one call each:
    the outputs, the inputs' gradients and the running statistics of both."""
    world, me = collective.world_size(), collective.rank()
    g = torch.Generator().manual_seed(3)
    views = [torch.randn(5, 4, generator=g, dtype=torch.float64) + k for k in range(2)]
    c = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    rows = slice(None) if world == 1 else (slice(0, 3) if me == 0 else slice(3, 5))
    results: dict[str, Tensor] = {}
    for how in ("views", "calls"):
        bn = distributed.GatheredBatchNorm(4).double()
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([1.5, 0.5, -1.0, 2.0]))
        xs = [v[rows].clone().requires_grad_() for v in views]
        outs = bn.start_views(xs)() if how == "views" else [bn(x) for x in xs]
        per_row = (outs[0] * c[0][rows] + outs[1] * c[1][rows]).sum(dim=1)
        collective.global_mean(per_row).backward()
        results[f"{how}_out"] = torch.cat([o.detach() for o in outs])
        # each rank's gradient carries the world's factor
        results[f"{how}_grad"] = torch.cat([x.grad / world for x in xs if x.grad is not None])
        results[f"{how}_running"] = torch.cat([bn.running_mean, bn.running_var])
    return results


def _gather_detached(z: Tensor) -> Tensor:
    parts = [torch.empty_like(z) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, z.detach().contiguous())
    parts[dist.get_rank()] = z
    return torch.cat(parts)


def _sgd() -> Callable[..., torch.optim.Optimizer]:
    return functools.partial(torch.optim.SGD, lr=0.2, momentum=0.5)


def _sage(layers: int = 2) -> SAGEEncoder:
    return SAGEEncoder(FEATURES, 8, num_layers=layers)


#: name -> (kind, builder); every builder draws its weights after torch.manual_seed(0)
BUILDERS: dict[str, tuple[str, Callable[[], SSLMethod]]] = {
    "dgi": ("node", _dgi),
    "grace": ("node", lambda: GRACE(_sage(), _sgd(), KeyedNodeMask(1), KeyedNodeMask(2), 4)),
    "cca_ssg": ("node", lambda: CCASSG(_sage(), _sgd(), KeyedNodeMask(3))),
    "bgrl": (
        "node",
        lambda: BGRL(_sage(), _sgd(), KeyedNodeMask(4), KeyedNodeMask(5), 16, momentum=0.9),
    ),
    "graph_dino": (
        "node",
        lambda: GraphDINO(
            _sage(), _sgd(), KeyedNodeMask(6), KeyedNodeMask(7), 16, 16, 4, momentum=0.9
        ),
    ),
    "graphcl": (
        "graph",
        lambda: GraphCL(
            GINEncoder(FEATURES, 8, num_layers=2), _sgd(), KeyedGraphMask(8), KeyedGraphMask(9)
        ),
    ),
    "infograph": ("graph", lambda: InfoGraph(GINEncoder(FEATURES, 8, num_layers=2), _sgd())),
    "simclr": ("image", lambda: SimCLR(_TinyBackbone(), _sgd(), 4, 8)),
    "byol": ("image", lambda: BYOL(_TinyBackbone(), _sgd(), 4, 8, 8, momentum=0.9)),
    "dino": (
        "image",
        lambda: DINO(_TinyBackbone(), _sgd(), 16, 8, 4, momentum=0.9, norm_last_layer=False),
    ),
    "supervised": ("image", lambda: Supervised(_TinyBackbone(), _sgd(), num_classes=3)),
    "graphmae": ("node", lambda: KeyedGraphMAE(11)),
    "grace_detached": (
        "node",
        lambda: DetachedGRACE(_sage(), _sgd(), KeyedNodeMask(1), KeyedNodeMask(2), 4),
    ),
    "dgi_detached_summary": ("node", _detached_summary_dgi),
}
SUPPORTED = [name for name in BUILDERS if name not in ("grace_detached", "dgi_detached_summary")]
#: every neighbour, one hop per encoder layer, and GraphMAE's decoder hop
FANOUTS = {"graphmae": [-1, -1, -1]}


class _StepLosses(Callback):
    """Each step's loss as the trainer sees it (on several ranks, the global value)."""

    def __init__(self, losses: list[float]) -> None:
        self.losses = losses

    def on_train_batch_end(
        self, trainer: Trainer, method: Any, values: dict[str, float], batch_idx: int
    ) -> None:
        assert batch_idx == len(self.losses)
        self.losses.append(values["loss"])


def _fit(name: str, world: int, steps: int = STEPS) -> dict[str, Any]:
    """Train ``name`` for ``steps`` steps on this rank; its per-step losses and final state."""
    kind, build = BUILDERS[name]
    per_rank = GLOBAL_BATCH[kind] // world
    torch.manual_seed(0)
    method = build().double()
    dm: DataModule
    if kind == "node":
        dm = _node_data()
    elif kind == "graph":
        dm = _graph_data(per_rank)
    else:
        dm = _ImageData(per_rank, crops=2 if name == "dino" else 0)
    losses: list[float] = []
    trainer = Trainer(
        epochs=1,
        mini_batch=kind == "node",
        num_neighbors=FANOUTS.get(name, [-1, -1]),
        batch_size=per_rank,
        limit_batches=steps,
        devices=world,
        progress=False,
        log_every=None,
        memory_budget_gb=None,
        callbacks=[_StepLosses(losses)],
    )
    trainer.fit(method, dm)
    assert trainer.global_step == steps
    state = {k: v.detach().clone() for k, v in method.state_dict().items()}
    return {"losses": losses, "state": state}


@contextmanager
def _counting_collectives() -> Iterator[list[str]]:
    """The names of the ``torch.distributed`` collectives called inside, in order."""
    calls: list[str] = []
    names = ("all_reduce", "all_gather", "broadcast", "broadcast_object_list", "barrier")
    originals = {name: getattr(dist, name) for name in names}

    def counted(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return originals[name](*args, **kwargs)

        return call

    for name in names:
        setattr(dist, name, counted(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)


def _collective_counts() -> dict[str, int]:
    """How many times a rank waits for the others: in a DGI step (the difference between
    fits of 2 and 1 steps) and in a :class:`GatheredBatchNorm`'s forward and backward."""
    world = collective.world_size()
    counts = {}
    for name in ("dgi", "grace", "graph_dino", "graphmae", "cca_ssg", "bgrl"):
        with _counting_collectives() as one_step:
            _fit(name, world, steps=1)
        with _counting_collectives() as two_steps:
            _fit(name, world, steps=2)
        counts[f"{name}_step"] = len(two_steps) - len(one_step)
    bn = distributed.GatheredBatchNorm(4).double()
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    with _counting_collectives() as batchnorm:
        bn(x).square().sum().backward()
    return counts | {"batchnorm": len(batchnorm)}


def _dgi_backward_order() -> list[str]:
    """A DGI step's backward on this rank, in order: where its summary's gradient starts its
    sum over ranks, where the corrupted branch's backward ends (the gradient reaches the
    corrupted features) and where the sum is collected."""
    events: list[str] = []
    torch.manual_seed(0)
    method = _dgi().double()
    shuffle = method.corruption

    def corruption(x: Tensor, edge_index: Tensor) -> Tensor:
        out = shuffle(x, edge_index).requires_grad_()
        out.register_hook(lambda grad: events.append("corrupted branch done"))
        return out

    method.corruption = corruption  # type: ignore[assignment]
    start, wait = collective._GradientSum.start, collective._GradientSum.wait

    def logged(name: str, call: Callable[..., Tensor]) -> Callable[..., Tensor]:
        def run(self: Any, *args: Any) -> Tensor:
            events.append(name)
            return call(self, *args)

        return run

    world, me = collective.world_size(), collective.rank()
    loader = _node_data().neighbor_loader([-1, -1], 8, shuffle=False)
    (batch,) = distributed.neighbor_batches(loader, [torch.arange(8).chunk(world)[me]])
    collective._GradientSum.start = logged("sum started", start)  # type: ignore[method-assign]
    collective._GradientSum.wait = logged("sum collected", wait)  # type: ignore[method-assign]
    try:
        method.loss(batch)["loss"].backward()
    finally:
        collective._GradientSum.start, collective._GradientSum.wait = start, wait  # type: ignore[method-assign]
    return events


def _fit_all(world: int) -> dict[str, dict[str, Any]]:
    checks = {
        "global_mean": _global_mean_check(),
        "batchnorm": _batchnorm_check(),
        "batchnorm_views": _batchnorm_views_check(),
        "collectives": _collective_counts(),
        "dgi_backward": _dgi_backward_order(),
    }
    return {name: _fit(name, world) for name in BUILDERS} | checks


def _rank_worker(rank: int, out: str) -> Callable[[], None]:
    """Rank 1 of the two-rank run: the same fits, its states saved for the comparison."""
    return lambda: torch.save(_fit_all(2), Path(out) / f"rank{rank}.pt")


@contextmanager
def _group_of_one() -> Iterator[None]:
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    torch.set_num_threads(1)
    with _group_of_one():
        one = _fit_all(1)
    folder = tmp_path_factory.mktemp("ranks")
    two = distributed.launch(
        lambda: _fit_all(2), _rank_worker, (str(folder),), 2, timeout_s=120, threads=1
    )
    other = torch.load(folder / "rank1.pt", weights_only=True)
    return {"one": one, "two": two, "rank1": other}


def _max_diff(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].numel())


@pytest.mark.parametrize("name", SUPPORTED)
def test_two_ranks_equal_one_rank_on_the_global_batch(runs: dict[str, Any], name: str) -> None:
    one, two, rank1 = runs["one"][name], runs["two"][name], runs["rank1"][name]
    assert len(one["losses"]) == len(two["losses"]) == STEPS
    assert two["losses"] == pytest.approx(one["losses"], abs=TOL, rel=0)
    assert rank1["losses"] == pytest.approx(two["losses"], abs=TOL, rel=0)
    assert _max_diff(one["state"], two["state"]) < TOL
    # every rank holds the same model: weights, EMA targets, centres, BatchNorm statistics
    assert _max_diff(two["state"], rank1["state"]) < TOL
    # the weights moved, so the equality above is not that of two untouched models
    torch.manual_seed(0)
    initial = BUILDERS[name][1]().double().state_dict()
    assert _max_diff(initial, one["state"]) > 1e-4


def test_negatives_gathered_without_gradient_fail_the_equivalence(runs: dict[str, Any]) -> None:
    one, two = runs["one"]["grace_detached"], runs["two"]["grace_detached"]
    # the forward is the same global loss at the first step ...
    assert two["losses"][0] == pytest.approx(one["losses"][0], abs=TOL)
    # ... but half the gradient is lost, so the weights part
    assert _max_diff(one["state"], two["state"]) > 1e-4


def test_a_summary_summed_without_gradient_fails_the_equivalence(runs: dict[str, Any]) -> None:
    one, two = runs["one"]["dgi_detached_summary"], runs["two"]["dgi_detached_summary"]
    assert two["losses"][0] == pytest.approx(one["losses"][0], abs=TOL)
    assert _max_diff(one["state"], two["state"]) > 1e-4


def test_global_mean_is_the_mean_over_ranks_whatever_each_holds(runs: dict[str, Any]) -> None:
    """Rank 0 holds 3 values, rank 1 holds 2: every rank's loss is the mean of all 5, and the
    gradients averaged over ranks are the gradient of that mean."""
    expected = {"value": 2.0 * 3.0, "grad": 3.0}  # mean of 2·(1..5); d/dθ mean(θ·x) = mean(x)
    one, two, rank1 = (runs[k]["global_mean"] for k in ("one", "two", "rank1"))
    for result in (one, two, rank1):
        assert {k: result[k] for k in expected} == pytest.approx(expected, abs=1e-12)
        assert result["share_grad"] == pytest.approx(3.0, abs=1e-12)
    # with the count given, each rank's value is its share (2·(1+2+3)·2/5 and 2·(4+5)·2/5),
    # whose mean over the ranks is the global mean
    assert one["share"] == pytest.approx(6.0, abs=1e-12)
    assert (two["share"], rank1["share"]) == pytest.approx((4.8, 7.2), abs=1e-12)
    assert (two["share"] + rank1["share"]) / 2 == pytest.approx(6.0, abs=1e-12)


def test_a_step_waits_for_the_other_ranks_as_few_times_as_it_must(runs: dict[str, Any]) -> None:
    """DGI: the summary's sums and their gradient, then the gradients with the step's values (its
    loss mean needs no collective); GRACE: both views' row counts and rows in one gather, the
    column sums of its inter-view block and their gradient, their gradient, the gradients;
    GraphDINO: its heads' two BatchNorm layers, each with both views' statistics at once
    (forward and backward for the student, forward for the teacher: 6), the teacher's sums for
    the centre and the gradients, and no rows; GraphMAE: its masked seeds' count (summed while
    it encodes) and the gradients; CCA-SSG: its views' statistics (every rank computes the same
    loss from them, so their gradient needs no exchange) and the gradients; BGRL: its rows'
    count, its predictor's BatchNorm statistics of both views at once and their gradient, the
    gradients; BatchNorm: its statistics, then their gradient."""
    steps = (
        "dgi_step",
        "grace_step",
        "graph_dino_step",
        "graphmae_step",
        "cca_ssg_step",
        "bgrl_step",
        "batchnorm",
    )
    assert runs["one"]["collectives"] == dict.fromkeys(steps, 0)
    for result in (runs["two"]["collectives"], runs["rank1"]["collectives"]):
        assert result == dict(zip(steps, (3, 6, 8, 2, 2, 4, 2), strict=True))


def test_dgi_sums_its_summary_gradient_while_the_corrupted_branch_backpropagates(
    runs: dict[str, Any],
) -> None:
    """The sum over ranks of the summary's gradient starts before the corrupted graph's encoder
    backpropagates and is collected after: the ranks exchange it while they work."""
    assert runs["one"]["dgi_backward"] == ["corrupted branch done"]  # no group: no sum
    overlapped = ["sum started", "corrupted branch done", "sum collected"]
    assert runs["two"]["dgi_backward"] == runs["rank1"]["dgi_backward"] == overlapped


def test_rows_gathered_together_must_have_the_same_rows_and_dtype() -> None:
    a, b = torch.zeros(3, 2), torch.zeros(3, 4, 5)
    first, second = collective.gather_rows(a, b)
    assert first is a and second is b  # no group: the inputs themselves
    with pytest.raises(ValueError, match=r"same rows, dtype and device.*\(3, 2\).*\(4, 2\)"):
        collective.gather_rows(a, torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"torch\.int64"):
        collective.gather_rows(a, torch.zeros(3, 2, dtype=torch.long))


def test_batchnorm_over_ranks_equals_one_process_on_the_global_batch(
    runs: dict[str, Any],
) -> None:
    """4-D inputs split 4 / 2 between the ranks: each image's output and input gradient, and
    the running statistics, are those of one process normalising all 6."""
    one, two, rank1 = runs["one"]["batchnorm"], runs["two"]["batchnorm"], runs["rank1"]["batchnorm"]
    steps = [slice(0, 6), slice(6, 12)]  # one process: both steps' 6 images
    for key in ("out", "grad"):
        mine0 = torch.cat([one[key][s][:4] for s in steps])
        mine1 = torch.cat([one[key][s][4:] for s in steps])
        assert torch.allclose(two[key], mine0, atol=1e-12), key
        assert torch.allclose(rank1[key], mine1, atol=1e-12), key
    for key in ("running_mean", "running_var"):
        assert torch.allclose(two[key], one[key], atol=1e-12), key
        assert torch.allclose(rank1[key], one[key], atol=1e-12), key
    assert not torch.allclose(one["running_var"], torch.ones(3, dtype=torch.float64))
    far = nn.BatchNorm1d(3)(_far_rows()).detach()  # torch's own BatchNorm
    assert torch.allclose(one["far"], far, atol=2e-3)
    assert torch.allclose(torch.cat([two["far"], rank1["far"]]), one["far"], atol=2e-3)
    assert float(one["far"].std()) > 0.5  # normalised, not collapsed by rounding


def test_batchnorm_views_in_one_exchange_equal_one_call_each(runs: dict[str, Any]) -> None:
    """Two views normalised with one exchange give each view's own global statistics: the
    outputs, input gradients and running statistics of one call per view, on every rank;
    and on two ranks those of one process holding all the rows."""
    for result in (runs[k]["batchnorm_views"] for k in ("one", "two", "rank1")):
        for key in ("out", "grad", "running"):
            assert torch.allclose(result[f"views_{key}"], result[f"calls_{key}"], atol=1e-12)
    one, two, rank1 = (runs[k]["batchnorm_views"] for k in ("one", "two", "rank1"))
    halves = [slice(0, 3), slice(5, 8)], [slice(3, 5), slice(8, 10)]
    for result, parts in zip((two, rank1), halves, strict=True):
        for key in ("views_out", "views_grad"):
            expected = torch.cat([one[key][p] for p in parts])
            assert torch.allclose(result[key], expected, atol=1e-12), key
        assert torch.allclose(result["views_running"], one["views_running"], atol=1e-12)


def test_graphmae_losses_depend_on_the_other_seeds_without_the_decoder_hop(
    graphmae_errors: list[Tensor],
) -> None:
    """Why several processes sample GraphMAE's decoder hop: with the same masks and one hop per
    encoder layer, the seeds' reconstruction errors differ between one batch of 8 seeds and its
    two halves, as two processes would hold them; with the decoder's hop sampled they agree."""
    recorded = graphmae_errors
    torch.manual_seed(0)
    method = KeyedGraphMAE(12).double().eval()
    seeds = torch.arange(8)
    gaps = []
    for fanout in ([-1, -1], [-1, -1, -1]):
        loader = _node_data().neighbor_loader(fanout, 8, shuffle=False)
        errors = []
        for parts in ([seeds], [seeds[:4], seeds[4:]]):
            recorded.clear()
            for part in parts:
                method.calls = 0  # the same mask table for every batch
                (batch,) = distributed.neighbor_batches(loader, [part])
                method.loss(batch)
            errors.append(torch.cat(recorded))
        whole, halves = errors
        assert whole.shape == halves.shape and whole.numel() > 0  # the same masked seeds
        gaps.append(float((whole - halves).abs().max()))
    assert gaps[0] > 1e-3 and gaps[1] < 1e-12


def test_graphmae_in_a_process_group_refuses_batches_without_the_decoder_hop() -> None:
    torch.manual_seed(0)
    method = KeyedGraphMAE(13).double()
    trainer = Trainer(epochs=1, mini_batch=True, num_neighbors=[-1, -1], batch_size=8)
    with _group_of_one(), pytest.raises(ValueError, match=r"samples 2 hop\(s\), but KeyedGraphMAE"):
        trainer.fit(method, _node_data())
    assert trainer.global_step == 0


def test_a_process_group_samples_the_decoder_hops_by_default() -> None:
    """``trainer.num_neighbors=null``: one hop per encoder layer in one process, and GraphMAE's
    decoder hop too in a process group."""
    torch.manual_seed(0)
    mae = KeyedGraphMAE(14)
    assert batches.default_fanout(mae) == [10, 10]
    assert batches.default_fanout(mae, decoder=True) == [10, 10, 10]
    assert batches.default_fanout(_dgi(), decoder=True) == [10, 10]
    alone = next(iter(batches.EpochBatches(True, 8)(_node_data(), mae, 0)))
    with _group_of_one():
        grouped = next(iter(batches.EpochBatches(True, 8)(_node_data(), mae, 0)))
    assert len(alone.num_sampled_nodes) == 3 and len(grouped.num_sampled_nodes) == 4


def test_gather_rows_without_a_group_is_the_identity() -> None:
    z = torch.randn(3, 2, requires_grad=True)
    assert collective.gather_rows(z) is z and collective.world_size() == 1
    assert collective.rank() == 0


def test_shards_cover_every_item_once_per_epoch() -> None:
    for count, batch, world in ((24, 4, 2), (25, 4, 2), (7, 3, 3), (5, 1, 4)):
        parts = [distributed.node_seed_batches(count, batch, 11, world, r) for r in range(world)]
        steps = {len(p) for p in parts}
        assert len(steps) == 1  # every rank runs the same number of steps
        seen = torch.cat([torch.cat(p) for p in parts])
        assert set(seen.tolist()) == set(range(count))
        assert len(seen) - count < world  # only a last batch shorter than the ranks is padded
        sampler = distributed.ShardedBatchSampler(count, batch, world, 0, seed=11)
        assert len(list(sampler)) == len(sampler) == steps.pop()


def test_threads_per_rank_stay_within_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    for devices in (1, 2, 3, 8):
        threads = distributed.threads_per_rank(devices)
        assert threads >= 1 and (devices * threads <= cores or threads == 1)
    assert distributed.threads_per_rank(1, requested=1) == 1


# ---------------------------------------------------------------------------- the train task
CONF = Path(__file__).resolve().parents[3] / "conf"


class DyingGRACE(GRACE):
    """GRACE whose rank 1 is killed (SIGKILL, no chance to clean up) at its second step."""

    steps = 0

    def loss(self, batch: Data) -> dict[str, Tensor]:
        self.steps += 1
        if collective.rank() == 1 and self.steps == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().loss(batch)


class StuckGRACE(GRACE):
    """GRACE whose rank 1 stops answering (sleeps) at its second step."""

    steps = 0

    def loss(self, batch: Data) -> dict[str, Tensor]:
        self.steps += 1
        if collective.rank() == 1 and self.steps == 2:
            time.sleep(3600)
        return super().loss(batch)


class TerminatedGRACE(GRACE):
    """GRACE that sends SIGTERM to its own process at the second step, on every rank (as a
    scheduler cancelling a job signals all its processes)."""

    steps = 0

    def loss(self, batch: Data) -> dict[str, Tensor]:
        self.steps += 1
        if self.steps == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().loss(batch)


class TerminatedOnceGRACE(GRACE):
    """GRACE that sends SIGTERM to rank 0 at its second step, unless the file named by
    ``$GRAPHSSL_TEST_SIGNALLED`` exists (it creates it): a job interrupted once."""

    steps = 0

    def loss(self, batch: Data) -> dict[str, Tensor]:
        self.steps += 1
        marker = Path(os.environ["GRAPHSSL_TEST_SIGNALLED"])
        if self.steps == 2 and collective.rank() == 0 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGTERM)
        return super().loss(batch)


def _train_cfg(outputs_dir: Path, *overrides: str, model: str = "grace") -> Any:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="train",
            overrides=[
                "dataset=sbm",
                f"model={model}",
                "encoder=sage",
                "encoder.hidden_channels=16",
                *(["model.projection_dim=8"] if model == "grace" else []),
                "trainer.mini_batch=true",
                "trainer.batch_size=32",
                "trainer.devices=2",
                "trainer.epochs=2",
                "trainer.progress=false",
                "num_threads=1",
                "eval.figures=false",
                "eval.baseline=false",
                "logger.log_embeddings=false",
                "logger.log_model=false",
                f"paths.outputs_dir={outputs_dir}",
                *overrides,
            ],
        )


def _only_run(outputs_dir: Path) -> Any:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    return run


def test_train_task_on_two_processes_logs_one_finished_run(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tasks.train import train

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # mini-batch extraction: the two processes share the nodes out before their group closes
    metrics = train(_train_cfg(outputs_dir, "eval.extraction.mode=mini_batch"))
    assert metrics["dist/world_size"] == 2.0 and metrics["train/epochs"] == 2.0
    run = _only_run(outputs_dir)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["dist/world_size"] == 2.0
    assert run.data.tags["dist/backend"] == "gloo"
    assert run.data.tags["extract/mode"] == "mini_batch"
    assert run.data.tags["extract/ranks"] == "2"
    assert run.data.params["trainer.devices"] == "2"
    assert any(k.startswith("probe/") for k in run.data.metrics)


@pytest.mark.slow  # processes killed or stalled mid-run
def test_a_rank_that_dies_fails_the_run_naming_it(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tasks.train import train

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # the collective timeout is the hang guard; the peer's closed sockets end the fit before it
    cfg = _train_cfg(outputs_dir, f"model._target_={__name__}.DyingGRACE", "trainer.epochs=5")
    with pytest.raises(
        distributed.RankFailedError, match=r"rank 1 \(pid \d+\) was killed by SIGKILL"
    ):
        train(cfg)
    run = _only_run(outputs_dir)
    assert run.info.status == "FAILED"
    assert "rank 1" in run.data.tags["error"] and "SIGKILL" in run.data.tags["error"]


@pytest.mark.slow  # processes killed or stalled mid-run
def test_a_rank_that_hangs_fails_the_run_after_the_collective_timeout(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tasks.train import train

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _train_cfg(
        outputs_dir,
        f"model._target_={__name__}.StuckGRACE",
        "trainer.epochs=5",
        "trainer.dist_timeout_s=5",
    )
    with pytest.raises(distributed.RankFailedError, match=r"rank\(s\) 1 were still running"):
        train(cfg)
    run = _only_run(outputs_dir)
    assert run.info.status == "FAILED" and "dist_timeout_s=5" in run.data.tags["error"]


@pytest.mark.slow  # processes signalled mid-run
def test_sigterm_stops_every_rank_after_the_same_epoch_and_kills_the_run(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tasks.train import train
    from graphssl.training.trainer import TrainingInterrupted

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _train_cfg(outputs_dir, f"model._target_={__name__}.TerminatedGRACE", "trainer.epochs=5")
    # rank 0 decides: the spawned rank ignores its SIGTERM and stops with rank 0 after the first
    # epoch (messages count epochs from 1)
    with pytest.raises(TrainingInterrupted, match="SIGTERM: training stopped after epoch 1"):
        train(cfg)
    run = _only_run(outputs_dir)
    assert run.info.status == "KILLED"


@pytest.mark.slow  # a process signalled mid-run, then resumed
def test_an_interrupted_multi_process_run_resumes_from_rank_0s_checkpoint(
    outputs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tasks.train import train
    from graphssl.training.trainer import TrainingInterrupted

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("GRAPHSSL_TEST_SIGNALLED", str(tmp_path / "signalled"))
    overrides = (
        f"model._target_={__name__}.TerminatedOnceGRACE",
        "trainer.epochs=3",
        "trainer.checkpoint_every=1",
    )
    with pytest.raises(TrainingInterrupted, match="after epoch 1; checkpoint written"):
        train(_train_cfg(outputs_dir, *overrides))
    killed = _only_run(outputs_dir)
    assert killed.info.status == "KILLED"
    (checkpoint,) = (outputs_dir / "checkpoints").rglob("last.pt")  # rank 0's only
    state = torch.load(checkpoint, weights_only=True)
    assert state["epoch"] == 0 and not any("replaced" in k for k in state["model"])

    metrics = train(_train_cfg(outputs_dir, *overrides, "resume=true"))
    run = _only_run(outputs_dir)  # the same run, continued on both ranks
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"
    assert metrics["train/epochs"] == 3.0 and metrics["dist/world_size"] == 2.0


#: the scheduler variables a test of the config checks clears, so that it runs as one process
SCHEDULER_VARS = (
    "SLURM_PROCID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SUBMITIT_LOCAL_GLOBALID",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def test_configs_that_cannot_run_on_several_processes_are_refused(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tasks.components import prepare_train_config
    from graphssl.tasks.validate import ConfigError

    for var in SCHEDULER_VARS:
        monkeypatch.delenv(var, raising=False)
    full_batch = _train_cfg(outputs_dir, "trainer.mini_batch=false")
    with pytest.raises(ConfigError, match=r"trainer\.devices=2.*trainer\.mini_batch=true"):
        prepare_train_config(full_batch)
    walks = _train_cfg(outputs_dir, model="deepwalk")
    with pytest.raises(ConfigError, match=r"DeepWalk.*random walks.*trainer\.devices=1"):
        prepare_train_config(walks)
    inexact = _train_cfg(outputs_dir, model="afgrl")
    with pytest.raises(
        ConfigError, match=r"AFGRL does not train on several processes: its positives are"
    ):
        prepare_train_config(inexact)
    # several machines: one rank per task of a SLURM step, which this process is not
    with pytest.raises(
        ConfigError,
        match=r"trainer\.num_nodes=2 trains one model on 2 machines.*not a task of such a step"
        r".*hydra\.launcher\.nodes=2 hydra\.launcher\.tasks_per_node=2",
    ):
        prepare_train_config(_train_cfg(outputs_dir, "trainer.num_nodes=2"))
    # GraphMAE's decoder hop must be sampled: given or left to the default
    short = _train_cfg(outputs_dir, "trainer.num_neighbors=[5,5]", model="graphmae")
    with pytest.raises(
        ConfigError,
        match=r"trainer\.num_neighbors=\[5, 5\] samples 2 hop\(s\), but GraphMAE on 2 processes "
        r"needs 3.*its decoder \(1\).*expected e\.g\. \[5, 5, 5\], or null",
    ):
        prepare_train_config(short)
    one_hop = _train_cfg(outputs_dir, "trainer.num_neighbors=[5]", model="graphmae")
    with pytest.raises(ConfigError, match=r"samples 1 hop\(s\).*needs 3.*e\.g\. \[10, 10, 10\]"):
        prepare_train_config(one_hop)
    for fanout in ("[5,5,5]", "null"):
        mae = _train_cfg(outputs_dir, f"trainer.num_neighbors={fanout}", model="graphmae")
        assert prepare_train_config(mae).trainer.devices == 2
    # one process may sample the decoder's hop or not, and nothing more
    for fanout in ("[5,5]", "[5,5,5]"):
        mae = _train_cfg(
            outputs_dir, "trainer.devices=1", f"trainer.num_neighbors={fanout}", model="graphmae"
        )
        assert prepare_train_config(mae).trainer.devices == 1
    deep = _train_cfg(
        outputs_dir, "trainer.devices=1", "trainer.num_neighbors=[5,5,5,5]", model="graphmae"
    )
    with pytest.raises(ConfigError, match=r"samples 4 hop\(s\).*or 3 to also sample the decoder"):
        prepare_train_config(deep)
    assert prepare_train_config(_train_cfg(outputs_dir)).trainer.devices == 2


def test_a_job_step_whose_tasks_do_not_match_the_ranks_is_refused(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tasks.components import prepare_train_config
    from graphssl.tasks.validate import ConfigError

    for var in SCHEDULER_VARS:
        monkeypatch.delenv(var, raising=False)
    step = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "3", "SLURM_JOB_ID": "7"}
    for key, value in step.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS", raising=False)
    with pytest.raises(
        ConfigError,
        match=r"SLURM job step runs 3 tasks, but trainer\.devices=2 x trainer\.num_nodes=1 = 2"
        r".*hydra\.launcher\.nodes=1 hydra\.launcher\.tasks_per_node=2",
    ):
        prepare_train_config(_train_cfg(outputs_dir))
    # a step of several tasks running one-process jobs would train one model per task
    with pytest.raises(ConfigError, match=r"runs 3 tasks, but trainer\.devices=1"):
        prepare_train_config(_train_cfg(outputs_dir, "trainer.devices=1"))
    monkeypatch.setenv("SLURM_NTASKS", "4")
    cfg = prepare_train_config(_train_cfg(outputs_dir, "trainer.num_nodes=2"))
    assert cfg.trainer.num_nodes == 2


def test_spawned_ranks_adopt_rank_0s_shared_sampler_index(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch_geometric.typing
    from hydra.utils import instantiate

    from graphssl.data import sampler
    from graphssl.tasks import devices
    from graphssl.tasks.components import build_datamodule, build_method, prepare_train_config

    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SPARSE", False)
    for var in SCHEDULER_VARS:
        monkeypatch.delenv(var, raising=False)
    cfg = prepare_train_config(_train_cfg(outputs_dir))
    dm = build_datamodule(cfg)
    dm.setup()
    method = build_method(cfg, dm)
    trainer = instantiate(cfg.trainer, callbacks=[], checkpoint_every=None)
    handed: dict[str, Any] = {}

    def spawn(main: Callable[[], Any], worker: Callable[..., Any], args: Any, *a: Any, **k: Any):
        handed.update(worker=worker, args=args)
        return "rank 0's result"

    monkeypatch.setattr(distributed, "launch", spawn)
    assert devices.fit_on_devices(cfg, trainer, method, dm) == "rank 0's result"
    index = handed["args"][-1]
    assert isinstance(index, sampler.SamplerIndex) and index is dm.sampler_index()
    assert index.row.is_shared() and index.colptr.is_shared()
    graph = handed["args"][1]  # moved to shared memory before the index was built from it
    assert graph is dm.data and graph.x.is_shared() and graph.edge_index.is_shared()

    # rank 1, as a spawned process builds it, converts nothing: it samples from rank 0's index
    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("a spawned rank converted the graph to CSC")

    monkeypatch.setattr(sampler, "build_sampler_index", no_conversion)
    fit = handed["worker"](1, *handed["args"])
    rank_dm = fit.args[2]
    assert isinstance(rank_dm, DataModule) and rank_dm is not dm
    assert rank_dm.sampler_index() is index
    # it trains under the C allocator of the config, as rank 0's train task does
    from graphssl import utils

    during: list[bool] = []
    monkeypatch.setattr(fit.args[0], "fit", lambda *a: during.append(utils._reuse_in_force))
    fit()
    assert during == [True] and not utils._reuse_in_force
    loader = rank_dm.neighbor_loader([5, 5], 16, shuffle=False)
    rank_sampler = loader.node_sampler  # type: ignore[attr-defined]
    assert rank_sampler.row.data_ptr() == index.row.data_ptr()
    assert rank_sampler.colptr.data_ptr() == index.colptr.data_ptr()
    # full-batch training samples no neighbours: no index is built for it
    full = instantiate(cfg.trainer, mini_batch=False, callbacks=[], checkpoint_every=None)
    assert devices.shared_sampler_index(full, dm) is None


def test_spawned_ranks_never_import_the_tracking_store() -> None:
    # what a spawned rank imports: torch's spawn entry, then the worker's module
    code = (
        "import sys, torch.multiprocessing.spawn, graphssl.tasks.devices; "
        "bad = sorted(m for m in sys.modules if m.startswith(('mlflow', 'graphssl.tracking'))); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    env = {**os.environ, "PYTHONPATH": str(CONF.parent), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_batchnorm_swaps_back_with_the_same_parameters() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Sequential(nn.BatchNorm2d(2)))
    weight, stats = model[1].weight, model[2][0].running_mean
    swap_batchnorm(model, distributed.GatheredBatchNorm)
    assert isinstance(model[1], distributed.GatheredBatchNorm)
    assert isinstance(model[2][0], distributed.GatheredBatchNorm)
    assert model[1].weight is weight and model[2][0].running_mean is stats
    x = torch.randn(5, 3)
    plain = nn.BatchNorm1d(4)
    plain.load_state_dict(model[1].state_dict())
    assert torch.equal(model[1](model[0](x)), plain(model[0](x)))  # one process: plain BN
    distributed.revert_sync_batchnorm(model)
    assert type(model[1]) is nn.BatchNorm1d and type(model[2][0]) is nn.BatchNorm2d
    assert model[1].weight is weight and model[2][0].running_mean is stats
    assert set(model.state_dict()) == {
        "0.weight",
        "0.bias",
        *(f"1.{k}" for k in plain.state_dict()),
        *(f"2.0.{k}" for k in plain.state_dict()),
    }


def _sleeping_worker(rank: int) -> Callable[[], None]:
    return lambda: time.sleep(3600)


def _rank_pids(parent: int) -> list[int]:
    """The spawned ranks of process ``parent`` (children running torch's spawn entry)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"multiprocessing.spawn" in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow  # a process killed mid-run
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_spawned_ranks_die_with_rank_0() -> None:
    code = (
        "from graphssl.training import distributed; import test_distributed as t; "
        "distributed.launch(lambda: (print('ready', flush=True), t.time.sleep(3600)), "
        "t._sleeping_worker, (), 2, threads=1)"
    )
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{CONF.parent}{os.pathsep}{here}", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        (rank1,) = _rank_pids(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    # the kernel kills the orphaned rank (PR_SET_PDEATHSIG); polled, 60 s only as a hang guard
    for _ in range(600):
        if not Path(f"/proc/{rank1}").exists() or "Z" in _state(rank1):
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{rank1}").exists() or "Z" in _state(rank1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
