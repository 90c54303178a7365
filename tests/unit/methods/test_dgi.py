"""DGI's corruption is an argument: the default is the feature-row shuffle DGI always used, a
user's own function plugs in from the config, and a corruption that is not callable or returns
the wrong shapes fails with a message naming it."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import Tensor
from torch_geometric.data import Data

from graphssl.methods.dgi import DGI, _corrupted, shuffle_features, sigmoid_mean_readout
from graphssl.methods.losses import dgi_bce
from graphssl.models.encode import encode
from graphssl.models.encoders import GCNEncoder
from graphssl.tasks.components import build_datamodule, build_method, resolve_config

CONF = Path(__file__).resolve().parents[3] / "conf"


def _adam(params: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-2)


def graph() -> Data:
    gen = torch.Generator().manual_seed(1)
    return Data(
        x=torch.randn(30, 8, generator=gen), edge_index=torch.randint(30, (2, 90), generator=gen)
    )


def dgi(**kwargs: Any) -> DGI:
    torch.manual_seed(0)
    return DGI(GCNEncoder(8, 16, 2), _adam, **kwargs)


def reference_loss(method: DGI, data: Data, negative: Data) -> Tensor:
    """DGI's loss as written before the corruption became an argument, on a given negative."""
    pos = encode(method.encoder, data, seeds_only=True)
    neg = encode(method.encoder, negative, seeds_only=True)
    ws = method.weight @ sigmoid_mean_readout(pos)
    return dgi_bce(pos @ ws + method.bias, neg @ ws + method.bias)


def train(method: DGI, data: Data, steps: int = 3) -> list[Tensor]:
    torch.manual_seed(2)
    optimizer = method.configure_optimizer()
    assert optimizer is not None
    losses = []
    for _ in range(steps):
        loss = method.loss(data)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


def test_default_corruption_is_the_feature_row_shuffle() -> None:
    data = graph()
    method = dgi()
    assert method.corruption is shuffle_features
    torch.manual_seed(5)
    got = method.loss(data)["loss"]
    torch.manual_seed(5)
    perm = torch.randperm(30)  # the permutation the row shuffle draws first
    want = reference_loss(method, data, Data(x=data.x[perm], edge_index=data.edge_index))
    assert torch.equal(got, want)

    # the config's default (a partial of shuffle_features) trains exactly as the default
    from_config = dgi(corruption=functools.partial(shuffle_features))
    assert all(
        torch.equal(a, b) for a, b in zip(train(from_config, data), train(dgi(), data), strict=True)
    )


def test_config_default_and_a_users_own_corruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_corruptions.py").write_text(
        textwrap.dedent(
            """
            import torch

            def reverse_edges(x, edge_index):
                return torch.flip(x, dims=[1]), edge_index.flip(0)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    def built(*overrides: str) -> DGI:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = resolve_config(
                compose(config_name="train", overrides=["model=dgi", "dataset=sbm", *overrides])
            )
        method = build_method(cfg, build_datamodule(cfg))
        assert isinstance(method, DGI)
        return method

    default = built()
    assert isinstance(default.corruption, functools.partial)
    assert default.corruption.func is shuffle_features
    own = built("model.corruption._target_=my_corruptions.reverse_edges")
    assert getattr(own.corruption, "func", None).__name__ == "reverse_edges"  # type: ignore[union-attr]

    data = graph()
    method = dgi(corruption=own.corruption)
    got = method.loss(data)["loss"]
    negative = Data(x=torch.flip(data.x, dims=[1]), edge_index=data.edge_index.flip(0))
    assert torch.equal(got, reference_loss(method, data, negative))
    assert not torch.equal(got, dgi().loss(data)["loss"])

    # a value that is not a function fails when the config is instantiated, naming the fix
    with pytest.raises(
        InstantiationException, match=r"corruption must be callable.*int 3.*_partial_"
    ):
        instantiate(
            {"_target_": "graphssl.methods.dgi.DGI", "corruption": 3},
            encoder=GCNEncoder(8, 16, 2),
        )


def _too_few_rows(x: Tensor, edge_index: Tensor) -> Tensor:
    return x[:-1]


def _a_list(x: Tensor, edge_index: Tensor) -> list[Tensor]:
    return [x, edge_index]


def _float_edges(x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
    return x, edge_index.float()


def _edge_out_of_range(x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
    return x, edge_index + x.size(0)


def test_a_corruption_with_the_wrong_output_is_refused() -> None:
    data = graph()
    with pytest.raises(
        ValueError,
        match=r"'_too_few_rows' returned features of shape \(29, 8\), expected \(30, 8\)",
    ):
        dgi(corruption=_too_few_rows).loss(data)
    with pytest.raises(TypeError, match="'_a_list' returned list; expected"):
        dgi(corruption=_a_list).loss(data)
    with pytest.raises(ValueError, match=r"'_float_edges' returned edge_index .* torch.float32"):
        dgi(corruption=_float_edges).loss(data)
    with pytest.raises(ValueError, match=r"'_edge_out_of_range'.*node ids in \[0, 30\)"):
        dgi(corruption=_edge_out_of_range).loss(data)
    with pytest.raises(TypeError, match="corruption must be callable"):
        dgi(corruption="shuffle_features")


def _drop_every_other_edge(x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
    return x, edge_index[:, ::2]


def test_new_edges_drop_the_edge_attributes_that_described_the_old_ones() -> None:
    data = graph()
    data.edge_weight = torch.rand(90)
    data.batch_size = 10  # a NeighborLoader batch: seed rows first, per-hop counts
    data.num_sampled_nodes, data.num_sampled_edges = [10, 20], [90, 0]
    kept = _corrupted(data, shuffle_features)
    assert torch.equal(kept.edge_weight, data.edge_weight) and kept.num_sampled_edges == [90, 0]
    new = _corrupted(data, _drop_every_other_edge)
    assert new.edge_index.shape == (2, 45) and new.batch_size == 10
    for key in ("edge_weight", "num_sampled_nodes", "num_sampled_edges"):
        assert key not in new and key in data  # the input batch is left as it was
    method = dgi(corruption=_drop_every_other_edge)
    loss = method.loss(data)["loss"]
    assert torch.isfinite(loss)
