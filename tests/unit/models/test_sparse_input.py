"""Sparse input features: the sparse first layer against the dense one (outputs, gradients,
a few training steps), and the CSR forms that augmentations derive."""

from __future__ import annotations

import copy

import pytest
import torch
from torch_geometric.data import Data

from graphssl.data.embedded import embedded_path, load_embedded
from graphssl.data.sampler import make_neighbor_loader
from graphssl.methods.dgi import DGI, shuffle_nodes
from graphssl.methods.grace import GRACE
from graphssl.models.augment import DropNodes, MaskFeatures, edge_and_feature
from graphssl.models.encode import encode_layerwise, layerwise_reason
from graphssl.models.encoders import (
    GATEncoder,
    GCNEncoder,
    GINEncoder,
    MLPEncoder,
    SAGEEncoder,
    seed_embeddings,
)
from graphssl.models.sparse_input import (
    DENSITY_THRESHOLD,
    MIN_FEATURES,
    SparseInputLinear,
    check_mode,
    known_sparse_form,
    sparse_form,
)

ENCODERS = [GCNEncoder, SAGEEncoder, GATEncoder, GINEncoder, MLPEncoder]


def _sparse_graph(n: int = 200, f: int = 300, density: float = 0.02, seed: int = 0) -> Data:
    """A graph with binary bag-of-words-like features, ``density`` of them non-zero."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, f, generator=g) < density).float()
    edge_index = torch.randint(0, n, (2, 8 * n), generator=g)
    return Data(x=x, edge_index=edge_index)


def _pair(cls: type, **kwargs: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same encoder twice: dense first layer, sparse first layer (same weights)."""
    torch.manual_seed(0)
    dense = cls(300, 16, num_layers=2, sparse_input="false", **kwargs)
    sparse = cls(300, 16, num_layers=2, sparse_input="true", **kwargs)
    sparse.load_state_dict(dense.state_dict())
    return dense, sparse


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.clone() for k, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("cls", ENCODERS)
def test_sparse_first_layer_matches_dense(cls: type) -> None:
    data = _sparse_graph()
    dense, sparse = _pair(cls)
    out_dense = dense(data.x, data.edge_index)
    out_sparse = sparse(data.x, data.edge_index)
    torch.testing.assert_close(out_sparse, out_dense, rtol=1e-5, atol=1e-6)
    weights = torch.randn_like(out_dense)
    (out_dense * weights).sum().backward()
    (out_sparse * weights).sum().backward()
    g_dense, g_sparse = _grads(dense), _grads(sparse)
    assert g_dense.keys() == g_sparse.keys() and g_dense
    # float32 rounding relative to the gradients' scale: a bias before batch norm has a zero
    # gradient in exact arithmetic, so its rounding noise is judged against the others
    scale = max(float(g.abs().max()) for g in g_dense.values())
    for name, grad in g_dense.items():
        torch.testing.assert_close(g_sparse[name], grad, rtol=1e-4, atol=1e-6 * scale, msg=name)
    assert not data.x.requires_grad and data.x.grad is None


@pytest.mark.parametrize("cls", [GCNEncoder, GATEncoder, MLPEncoder])
def test_first_linear_map_multiplies_the_csr_form(cls: type, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # the sparse product is what runs (not a dense product that happens to agree)
    calls: list[torch.layout] = []
    real = torch.sparse.mm

    def spy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        calls.append(a.layout)
        return real(a, b)

    monkeypatch.setattr(torch.sparse, "mm", spy)
    _, sparse = _pair(cls)
    data = _sparse_graph()
    sparse(data.x, data.edge_index)
    assert torch.sparse_csr in calls


def test_auto_mode_follows_the_density_threshold() -> None:
    sparse_x = _sparse_graph(density=DENSITY_THRESHOLD / 4).x
    dense_x = torch.rand(50, 40) + 0.1
    assert sparse_form(sparse_x, "auto") is not None
    assert sparse_form(dense_x, "auto") is None
    assert sparse_form(dense_x, "true") is not None
    assert sparse_form(sparse_x, "false") is None
    assert sparse_form(sparse_x.clone().requires_grad_(), "true") is None  # its grad is needed
    narrow = _sparse_graph(f=MIN_FEATURES - 1, density=DENSITY_THRESHOLD / 4).x
    assert sparse_form(narrow, "auto") is None  # narrow inputs multiply faster densely
    assert sparse_form(narrow, "true") is not None


def test_cached_form_follows_in_place_changes() -> None:
    x = _sparse_graph().x
    first = sparse_form(x, "auto")
    assert first is not None and sparse_form(x, "auto") is first  # converted once
    x[0, 0] = 5.0
    again = sparse_form(x, "auto")
    assert again is not first
    torch.testing.assert_close(again.to_dense(), x)  # type: ignore[union-attr]


def test_mode_accepts_yaml_booleans_and_rejects_others() -> None:
    assert check_mode(True) == "true" and check_mode(False) == "false"
    with pytest.raises(ValueError, match="sparse_input must be one of"):
        check_mode("sometimes")


def test_false_mode_keeps_pyg_linear_and_deepcopy_keeps_the_sparse_one() -> None:
    dense, sparse = _pair(GCNEncoder)
    assert not isinstance(dense.gnn.convs[0].lin, SparseInputLinear)
    assert isinstance(copy.deepcopy(sparse).gnn.convs[0].lin, SparseInputLinear)


@pytest.mark.parametrize(
    "augment",
    [MaskFeatures(0.4), DropNodes(0.3), shuffle_nodes],
    ids=["mask_features", "drop_nodes", "shuffle_nodes"],
)
def test_augmentations_derive_the_csr_form_of_their_output(augment: object) -> None:
    data = _sparse_graph()
    assert sparse_form(data.x, "auto") is not None
    torch.manual_seed(1)
    x_out = shuffle_nodes(data.x) if augment is shuffle_nodes else augment(data).x  # type: ignore[operator]
    known = known_sparse_form(x_out)  # derived from the input's, not converted afresh
    assert known is not None
    torch.testing.assert_close(known.to_dense(), x_out)


def _cora() -> Data:
    path = embedded_path("Cora")
    assert path is not None, "the package ships Cora (graphssl/data/_embedded)"
    return load_embedded(path)


def _train_losses(method: torch.nn.Module, data: Data, steps: int = 4) -> list[float]:
    torch.manual_seed(0)
    opt = torch.optim.Adam(method.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = method.loss(data)["loss"]  # type: ignore[operator]
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("method", ["grace", "dgi"])
def test_training_losses_match_dense_on_cora(method: str) -> None:
    data = _cora()
    runs = []
    for mode in ("false", "true"):
        torch.manual_seed(0)
        encoder = GCNEncoder(
            data.num_features, 32, num_layers=2 if method == "grace" else 1, sparse_input=mode
        )
        if method == "grace":
            model: torch.nn.Module = GRACE(
                encoder, augment1=edge_and_feature(0.2, 0.3), augment2=edge_and_feature(0.4, 0.4)
            )
        else:
            model = DGI(encoder)
        runs.append(_train_losses(model, data))
    dense, sparse = runs
    torch.testing.assert_close(torch.tensor(sparse), torch.tensor(dense), rtol=1e-5, atol=0)


@pytest.mark.parametrize("cls", ENCODERS)
def test_mini_batches_and_layerwise_inference_match_dense(cls: type) -> None:
    # sampled batches (trimmed layers, sliced features) and layer-wise inference over chunks
    data = _sparse_graph()
    dense, sparse = _pair(cls)
    dense.eval(), sparse.eval()
    with torch.no_grad():
        for batch in make_neighbor_loader(data, [4, 3], batch_size=50):
            torch.testing.assert_close(
                seed_embeddings(sparse, batch), seed_embeddings(dense, batch), rtol=1e-5, atol=1e-6
            )
        if layerwise_reason(dense) is None:
            torch.testing.assert_close(
                encode_layerwise(sparse, data, chunk_nodes=64),
                encode_layerwise(dense, data, chunk_nodes=64),
                rtol=1e-5,
                atol=1e-6,
            )
