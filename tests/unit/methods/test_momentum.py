"""The momentum (online/target) methods: BGRL, AFGRL, BYOL, GraphDINO and DINO.

Each trains a few optimizer steps with a fixed seed on a small graph or image batch, once with
its own EMA hook and once with a reference hook written here the way every method used to spell
it out (its own target modules, BYOL's cosine momentum, parameters averaged, buffers copied);
losses and every tensor of the state dict must agree bit for bit. The state-dict keys are pinned
so that checkpoints written before the shared momentum base still load.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.afgrl import AFGRL
from graphssl.methods.base import SSLMethod
from graphssl.methods.bgrl import BGRL
from graphssl.methods.byol import BYOL
from graphssl.methods.dino import DINO
from graphssl.methods.graph_dino import GraphDINO
from graphssl.methods.momentum import MomentumMethod
from graphssl.models.encode import encode
from graphssl.models.encoders import GCNEncoder

MOMENTUM_METHODS = ["bgrl", "afgrl", "byol", "graph_dino", "dino"]
#: the names of each method's online and target encoders in ``encoders()``
ONLINE_TARGET = {
    "bgrl": ("online", "target"),
    "afgrl": ("online", "target"),
    "byol": ("online", "target"),
    "graph_dino": ("student", "teacher"),
    "dino": ("student", "teacher"),
}
STEPS = 3
MAX_STEPS = 5


class TinyConv(nn.Module):
    """A small image backbone ``[B, 3, H, W] → [B, 4]`` with BatchNorm buffers."""

    out_channels = 4

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out


def _adam(params: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-2)


def _gcn() -> GCNEncoder:
    return GCNEncoder(8, 16, num_layers=2, norm="batch_norm")


def build(name: str) -> SSLMethod:
    """``name`` with small heads, its weights drawn from seed 0."""
    torch.manual_seed(0)
    if name == "bgrl":
        return BGRL(_gcn(), _adam, predictor_hidden=16, reinit_target=True)
    if name == "afgrl":
        return AFGRL(_gcn(), _adam, predictor_hidden=16, num_clusters=3, num_kmeans=2)
    if name == "graph_dino":
        return GraphDINO(_gcn(), _adam, num_prototypes=32, head_hidden=16, bottleneck=8)
    if name == "byol":
        return BYOL(TinyConv(), _adam, projection_dim=8, projection_hidden=16, predictor_hidden=16)
    if name == "dino":
        return DINO(
            TinyConv(),
            _adam,
            out_dim=32,
            hidden_dim=16,
            bottleneck_dim=8,
            teacher_temp=0.06,
            warmup_teacher_temp=0.03,
            teacher_temp_warmup=0.5,
        )
    raise KeyError(name)


def batches(name: str) -> list[Any]:
    """``STEPS`` training batches: a 30-node graph, or two 8×8 views (+ a 4×4 crop for DINO)."""
    gen = torch.Generator().manual_seed(1)
    if name in ("bgrl", "afgrl", "graph_dino"):
        x = torch.randn(30, 8, generator=gen)
        edge_index = torch.randint(30, (2, 90), generator=gen)
        return [Data(x=x, edge_index=edge_index) for _ in range(STEPS)]
    out = []
    for _ in range(STEPS):
        views = [torch.randn(6, 3, 8, 8, generator=gen) for _ in range(2)]
        if name == "dino":
            views.append(torch.randn(6, 3, 4, 4, generator=gen))
        out.append((*views, torch.zeros(6, dtype=torch.long)))
    return out


def train(method: SSLMethod, name: str, after_step: Callable[[int], None]) -> list[Tensor]:
    """``STEPS`` optimizer steps with seed 2; ``after_step(step)`` runs after each one."""
    torch.manual_seed(2)
    optimizer = method.configure_optimizer()
    assert optimizer is not None
    method.train()
    losses = []
    for step, batch in enumerate(batches(name), start=1):
        out = method.loss(batch)
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        after_step(step)
        losses.append(out["loss"].detach())
    return losses


# ------------------------------------------------------------------ the reference hooks
@torch.no_grad()
def reference_ema(target: nn.Module, online: nn.Module, base: float, step: int) -> None:
    """The EMA update as each method wrote it: BYOL's cosine momentum, buffers copied."""
    m = 1.0 - (1.0 - base) * (math.cos(math.pi * step / MAX_STEPS) + 1) / 2
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.mul_(m).add_(o.detach(), alpha=1.0 - m)
    for tb, ob in zip(target.buffers(), online.buffers(), strict=True):
        tb.copy_(ob)


def reference_hook(method: Any, name: str) -> Callable[[int], None]:
    """The method's former ``on_after_optimizer_step``, spelled out per method."""

    def after_step(step: int) -> None:
        if name in ("bgrl", "afgrl"):
            reference_ema(method.target, method.online, method.momentum, step)
        elif name == "byol":
            reference_ema(method.target_backbone, method.backbone, method.momentum, step)
            reference_ema(method.target_projector, method.projector, method.momentum, step)
        elif name == "graph_dino":
            reference_ema(method.teacher, method.student, method.momentum, step)
            reference_ema(method.teacher_head, method.student_head, method.momentum, step)
            if method._batch_center is not None:
                method.center.mul_(method.center_momentum).add_(
                    method._batch_center, alpha=1 - method.center_momentum
                )
                method._batch_center = None
        elif name == "dino":
            method._progress = step / MAX_STEPS
            reference_ema(method.teacher, method.student, method.momentum, step)
            reference_ema(method.teacher_head, method.student_head, method.momentum, step)

    return after_step


def fingerprint(losses: list[Tensor], method: nn.Module) -> str:
    """sha256 over the losses and every state tensor (names, dtypes and bytes)."""
    digest = hashlib.sha256()
    for loss in losses:
        digest.update(loss.numpy().tobytes())
    for key, value in method.state_dict().items():
        digest.update(key.encode())
        digest.update(str(value.dtype).encode())
        digest.update(value.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("name", MOMENTUM_METHODS)
def test_training_matches_the_reference_bit_for_bit(name: str) -> None:
    method = build(name)
    losses = train(method, name, lambda step: method.on_after_optimizer_step(step, MAX_STEPS))
    reference = build(name)
    reference_losses = train(reference, name, reference_hook(reference, name))
    for got, want in zip(losses, reference_losses, strict=True):
        assert torch.equal(got, want), f"{name}: loss {got.item()!r} != {want.item()!r}"
    state, want_state = method.state_dict(), reference.state_dict()
    assert list(state) == list(want_state)
    for key in state:
        assert torch.equal(state[key], want_state[key]), f"{name}: {key} differs"
    assert fingerprint(losses, method) == fingerprint(reference_losses, reference)
    # the EMA moved the target away from its initial copy, and it is not the online network
    fresh = build(name)
    online, target = (method.encoders()[k] for k in ONLINE_TARGET[name])
    initial_target = fresh.encoders()[ONLINE_TARGET[name][1]]
    assert not all(
        torch.equal(a, b)
        for a, b in zip(target.parameters(), initial_target.parameters(), strict=True)
    )
    assert not all(
        torch.equal(a, b) for a, b in zip(online.parameters(), target.parameters(), strict=True)
    )


#: the state-dict layout checkpoints were written with: (top-level name, number of keys), in
#: order; each target module's keys mirror those of the online module it follows
STATE_LAYOUT = {
    "bgrl": [("online", 10), ("target", 10), ("predictor", 10)],
    "afgrl": [("online", 10), ("target", 10), ("predictor", 10)],
    "byol": [
        ("backbone", 7),
        ("projector", 9),
        ("predictor", 9),
        ("target_backbone", 7),
        ("target_projector", 9),
    ],
    "graph_dino": [
        ("center", 1),
        ("student", 10),
        ("student_head", 17),
        ("teacher", 10),
        ("teacher_head", 17),
    ],
    "dino": [
        ("center", 1),
        ("student", 7),
        ("student_head", 8),
        ("teacher", 7),
        ("teacher_head", 8),
    ],
}
#: (target, online) module pairs whose keys mirror each other
MIRRORED = {
    "bgrl": [("target", "online")],
    "afgrl": [("target", "online")],
    "byol": [("target_backbone", "backbone"), ("target_projector", "projector")],
    "graph_dino": [("teacher", "student"), ("teacher_head", "student_head")],
    "dino": [("teacher", "student"), ("teacher_head", "student_head")],
}


def _layout(keys: list[str]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for key in keys:
        head = key.split(".")[0]
        if out and out[-1][0] == head:
            out[-1] = (head, out[-1][1] + 1)
        else:
            out.append((head, 1))
    return out


def _under(keys: list[str], prefix: str) -> list[str]:
    return [k[len(prefix) + 1 :] for k in keys if k.startswith(prefix + ".")]


@pytest.mark.parametrize("name", MOMENTUM_METHODS)
def test_checkpoint_keys_are_unchanged_and_resume(name: str, tmp_path: Path) -> None:
    method = build(name)
    train(method, name, lambda step: method.on_after_optimizer_step(step, MAX_STEPS))
    keys = list(method.state_dict())
    assert _layout(keys) == STATE_LAYOUT[name]
    for target, online in MIRRORED[name]:
        assert _under(keys, target) == _under(keys, online) != []

    # a checkpoint written by the trainer (torch.save of the state dict) loads strictly into a
    # freshly built method, which then embeds exactly as the trained one
    path = tmp_path / "model.pt"
    torch.save({"model": method.state_dict()}, path)
    resumed = build(name)
    resumed.load_state_dict(torch.load(path, weights_only=True)["model"], strict=True)
    method.eval()
    resumed.eval()
    batch = batches(name)[0]
    with torch.no_grad():
        assert torch.equal(resumed(batch), method(batch))
        for key, module in method.encoders().items():
            assert torch.equal(encode(resumed.encoders()[key], batch), encode(module, batch))


@pytest.mark.parametrize("name", MOMENTUM_METHODS)
def test_the_base_builds_frozen_targets_and_names_the_encoders(name: str) -> None:
    method = build(name)
    assert isinstance(method, MomentumMethod)
    online_role, target_role = ONLINE_TARGET[name]
    assert method.roles == (online_role, target_role)
    named = method.encoders()
    assert method.evaluated_encoder is named[method.evaluated_role]
    assert named[online_role] is not named[target_role]
    # the targets are frozen copies that the optimizer never sees
    trainable = {id(p) for p in method.trainable_parameters()}
    for target, online in method.momentum_pairs():
        assert all(not p.requires_grad for p in target.parameters())
        assert trainable.isdisjoint(id(p) for p in target.parameters())
        assert {id(p) for p in online.parameters() if p.requires_grad} <= trainable
        if name != "bgrl":  # BGRL here re-draws its target (reinit_target=True)
            assert all(
                torch.equal(t, o)
                for t, o in zip(target.state_dict().values(), online.state_dict().values())
            )
    # forward() embeds with the evaluated encoder, which auto extraction may run on its own
    method.eval()
    batch = batches(name)[0]
    with torch.no_grad():
        assert torch.equal(method(batch), encode(method.evaluated_encoder, batch))
    if method.forward_encoder is not None:
        assert method.forward_encoder == method.evaluated_role
    # BYOL's schedule: the base momentum at the start, 1 at the end
    assert method.momentum_at(0, 10) == method.momentum
    assert method.momentum_at(10, 10) == 1.0


@pytest.mark.parametrize("name", MOMENTUM_METHODS)
def test_a_momentum_outside_the_unit_interval_is_refused(name: str) -> None:
    method = build(name)
    cls, encoder = type(method), method.encoders()[ONLINE_TARGET[name][0]]
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\], got 1.5"):
        cls(encoder, _adam, momentum=1.5)


class _Linear(MomentumMethod):
    """A user's own momentum method: an online linear map regressing its EMA target."""

    target: nn.Module

    def __init__(self, build_target: bool = True) -> None:
        super().__init__(_adam, momentum=0.5)
        self.online = nn.Linear(3, 2)
        if build_target:
            self.add_target("target", follows="online")

    def loss(self, batch: Tensor) -> dict[str, Tensor]:
        with torch.no_grad():
            target = self.target(batch)
        return {"loss": (self.online(batch) - target - 1).pow(2).mean()}

    def forward(self, batch: Tensor) -> Tensor:
        out: Tensor = self.online(batch)
        return out


def test_a_new_method_gets_the_target_schedule_and_update_from_the_base() -> None:
    torch.manual_seed(0)
    method = _Linear()
    assert list(method.state_dict()) == [
        "online.weight",
        "online.bias",
        "target.weight",
        "target.bias",
    ]
    assert set(method.encoders()) == {"online", "target", "encoder"}
    optimizer = method.configure_optimizer()
    assert optimizer is not None
    before = method.target.weight.detach().clone()
    method.loss(torch.randn(4, 3))["loss"].backward()
    optimizer.step()
    method.on_after_optimizer_step(1, 2)  # cosine schedule at the middle: (0.5 + 1) / 2
    m = 0.75
    assert torch.allclose(method.target.weight, m * before + (1 - m) * method.online.weight)

    with pytest.raises(RuntimeError, match="add_target"):
        _Linear(build_target=False).encoders()
    with pytest.raises(TypeError, match="not a module"):
        _Linear().add_target("other", follows="momentum")

    class _Misnamed(_Linear):
        evaluated_role = "teacher"

    with pytest.raises(ValueError, match=r"evaluated_role='teacher' is not one of"):
        _Misnamed()
