"""DeepWalk/node2vec (gradient-free) and the sub-encoder choice of GraphDINO."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch_geometric.data import Data

from graphssl.data.node import SBMDataModule
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.methods.deepwalk import DeepWalk
from graphssl.methods.graph_dino import GraphDINO
from graphssl.models.encoders import GCNEncoder
from graphssl.training.trainer import Trainer
from graphssl.utils import seed_everything


@pytest.fixture(scope="module")
def sbm() -> SBMDataModule:
    dm = SBMDataModule(num_blocks=2, block_size=100, p_in=0.1, p_out=0.01, seed=0)
    dm.setup()
    return dm


def small_deepwalk(**kwargs: Any) -> DeepWalk:
    defaults = {"embedding_dim": 32, "walk_length": 20, "walks_per_node": 10, "window": 5}
    return DeepWalk(**{**defaults, **kwargs})


def probe(z: torch.Tensor, dm: SBMDataModule) -> float:
    split = dm.splits()[0]
    y = dm.labels
    assert y is not None
    res = LogRegProbe(weight_decay=[1e-2, 1e-4]).evaluate(z, y, split.train, split.val, split.test)
    return float(res["test_acc"])


def test_deepwalk_separates_two_communities(sbm: SBMDataModule) -> None:
    method = small_deepwalk()
    assert method.configure_optimizer() is None and not method.supports_mini_batch
    result = Trainer(epochs=5, progress=False).fit(method, sbm)
    assert len(result.epochs) == 1  # one summary "epoch": the gradient-free fit
    assert result.epochs[0].metrics["num_walks"] == 200 * 10
    z, _ = extract_embeddings(method, sbm)
    assert z.shape == (200, 32) and torch.isfinite(z).all()
    assert probe(z, sbm) > 0.9


def test_deepwalk_is_reproducible(sbm: SBMDataModule) -> None:
    def once() -> torch.Tensor:
        method = small_deepwalk(seed=3)
        Trainer(progress=False).fit(method, sbm)
        return extract_embeddings(method, sbm)[0]

    assert torch.equal(once(), once())


def test_deepwalk_cache_reuses_the_fit_of_the_same_graph_only(
    sbm: SBMDataModule, tmp_path: Path
) -> None:
    def fit(data: Data, **kwargs: int) -> tuple[torch.Tensor, dict[str, float]]:
        method = small_deepwalk(**{"seed": 3, **kwargs}, cache_dir=str(tmp_path))
        stats = method.fit_without_gradients(data, epochs=1)
        assert stats is not None
        return method.encoder.weight.clone(), stats

    data = sbm.data
    first, s1 = fit(data)
    assert s1["cache_hit"] == 0.0 and len(list(tmp_path.glob("*.pt"))) == 1
    again, s2 = fit(data)
    assert s2["cache_hit"] == 1.0 and torch.equal(first, again)
    assert s2["loss"] == s1["loss"] and s2["num_walks"] == s1["num_walks"]
    # the uncached fit with the same seed is the same table: the cache changes nothing
    assert torch.equal(first, small_deepwalk_fit(data, seed=3))
    # another graph, another seed, or another hyperparameter is another entry
    fewer = data.clone()
    fewer.edge_index = data.edge_index[:, : data.edge_index.size(1) // 2]
    assert fit(fewer)[1]["cache_hit"] == 0.0
    assert fit(data, seed=4)[1]["cache_hit"] == 0.0
    assert fit(data, window=3)[1]["cache_hit"] == 0.0
    assert len(list(tmp_path.glob("*.pt"))) == 4
    # several gensim threads are not reproducible: never cached
    assert fit(data, workers=2)[1]["cache_hit"] == 0.0
    assert len(list(tmp_path.glob("*.pt"))) == 4


def small_deepwalk_fit(data: Data, **kwargs: int) -> torch.Tensor:
    method = small_deepwalk(**kwargs)
    method.fit_without_gradients(data, epochs=1)
    return method.encoder.weight.clone()


def test_node2vec_runs_and_encoder_source_works(sbm: SBMDataModule) -> None:
    method = small_deepwalk(p=0.5, q=2.0)
    Trainer(progress=False).fit(method, sbm)
    z_auto, _ = extract_embeddings(method, sbm)
    z_enc, _ = extract_embeddings(method, sbm, encoder_source="encoder")
    assert torch.equal(z_auto, z_enc)
    assert probe(z_auto, sbm) > 0.8
    # mini-batch extraction: rows batch.n_id (auto) and node ids put in x by prepare() (encoder)
    z_mb, _ = extract_embeddings(method, sbm, mini_batch=True, num_neighbors=[2])
    z_mb_enc, _ = extract_embeddings(
        method, sbm, encoder_source="encoder", mini_batch=True, num_neighbors=[2]
    )
    assert torch.equal(z_mb, z_auto) and torch.equal(z_mb_enc, z_auto)


def test_deepwalk_before_fit_and_state_dict(sbm: SBMDataModule) -> None:
    method = small_deepwalk()
    with pytest.raises(RuntimeError, match="not fitted"):
        extract_embeddings(method, sbm)
    with pytest.raises(RuntimeError, match="without gradients"):
        method.loss(sbm.data)
    Trainer(progress=False).fit(method, sbm)
    fresh = small_deepwalk()
    fresh.load_state_dict(method.state_dict())  # the table's size comes from the state
    assert torch.equal(extract_embeddings(fresh, sbm)[0], extract_embeddings(method, sbm)[0])


def test_graph_dino_teacher_and_student_differ(sbm: SBMDataModule) -> None:
    seed_everything(0)
    method = GraphDINO(
        GCNEncoder(sbm.num_features, 32, 2),
        optimizer=_adam,
        num_prototypes=64,
        head_hidden=64,
        bottleneck=16,
        momentum=0.9,
    )
    assert set(method.encoders()) == {"teacher", "student"}
    Trainer(epochs=5, progress=False).fit(method, sbm)
    z_auto, _ = extract_embeddings(method, sbm)
    z_teacher, _ = extract_embeddings(method, sbm, encoder_source="teacher")
    z_student, _ = extract_embeddings(method, sbm, encoder_source="student")
    assert torch.equal(z_auto, z_teacher), "forward() evaluates with the teacher"
    assert z_student.shape == z_teacher.shape == (200, 32)
    assert not torch.allclose(z_student, z_teacher)
    assert probe(z_teacher, sbm) > 0.5 and probe(z_student, sbm) > 0.5


def _adam(params: object) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)  # type: ignore[arg-type]
