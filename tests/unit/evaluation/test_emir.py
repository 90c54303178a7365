"""EMIR (information sufficiency) tests.

The estimator is stochastic; every test fixes its seeds and states its tolerance. Data sizes are
chosen so the whole module runs in well under a minute on 2 CPU cores.

Known-answer notes used below:

* z-scored data, true MI of ``Z = U + N(0, s^2 I)`` is ``1/2 log(1 + 1/s^2)`` per dimension
  (0.347 for ``s = 1``). The conditional net starts with ``LayerNorm(u)`` (as the reference
  code), which discards the mean over u's features and its norm; for ``s = 1`` that costs about
  0.35 + 0.14 = 0.49 nats in total (our calculation), so the best reachable value is ~0.332/dim at
  ``d = 32`` (0.286 at d = 8); fitting and evaluating on the same rows adds a small positive bias.
  Hence d = 32 and a 0.05 tolerance (observed: 0.318).
* The tanh clamp caps ``I_S / d_Z`` at ``H(Z)/d_Z + 0.0811 ~= 1.50`` for z-scored Gaussian ``Z``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch
from torch import nn

from graphssl.evaluation.emir import (
    CONDITIONAL_ENTROPY_FLOOR_PER_DIM,
    GAUSSIAN_ENTROPY_PER_DIM,
    MIN_ROWS_PER_TARGET_DIM,
    ConditionalKernel,
    EMIRConfig,
    PairwiseEMIR,
    communities,
    cross_encoder_l2,
    cross_encoder_ranking,
    emir_reliability,
    fit_marginal,
    information_sufficiency,
    informativeness,
    pairwise_information_sufficiency,
    predictiveness_graph,
    zscore,
)


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    """The kernels here are tiny (d <= 32): one intra-op thread is faster and avoids OpenMP
    oversubscription on shared CI cores. The previous setting is restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


#: The reference code's protocol: fit and score all rows (no held-out split).
_AUTHORS = EMIRConfig(seed=0, held_out_estimate=False)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rotation(d: int, g: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
    return q


def _noisy_views(
    latent: torch.Tensor, sigmas: list[float], g: torch.Generator
) -> list[torch.Tensor]:
    """Each view: the latent in its own orthogonal basis plus isotropic noise of std sigma."""
    d = latent.shape[1]
    return [latent @ _rotation(d, g) + s * torch.randn(latent.shape, generator=g) for s in sigmas]


# ------------------------------------------------------------------ known answers


def test_independent_gives_zero() -> None:
    """U independent of Z -> |I_S| / d_Z < 0.05."""
    g = _gen(0)
    u, z = torch.randn(4000, 8, generator=g), torch.randn(4000, 8, generator=g)
    r = information_sufficiency(u, z, EMIRConfig(seed=0, held_out_estimate=False))
    assert abs(r.i_s_per_dim) < 0.05
    assert r.d_u == r.d_z == 8 and r.n_eval == 4000
    assert math.isclose(r.i_s, r.h_z - r.h_z_given_u)
    assert math.isclose(r.i_s_per_dim, r.i_s / 8)


def test_identical_is_large_but_capped_and_respects_floor() -> None:
    """U = Z -> 1.0 < I_S/d_Z < 1.55 (clamp cap), and H(Z|U)/d_Z >= -0.0811 (tanh floor)."""
    z = torch.randn(4000, 16, generator=_gen(1))
    r = information_sufficiency(z, z, EMIRConfig(n_epochs=40, seed=0, held_out_estimate=False))
    assert 1.0 < r.i_s_per_dim < 1.55
    assert r.h_z_given_u / r.d_z >= CONDITIONAL_ENTROPY_FLOOR_PER_DIM - 1e-6


def test_linear_gaussian_known_mi() -> None:
    """Z = U + N(0, I), d = 32 -> 1/2 log 2 = 0.347 nats/dim, tolerance 0.05 (see module doc)."""
    g = _gen(2)
    u = torch.randn(8000, 32, generator=g)
    z = u + torch.randn(8000, 32, generator=g)
    r = information_sufficiency(u, z, EMIRConfig(n_epochs=20, seed=0, held_out_estimate=False))
    assert abs(r.i_s_per_dim - 0.5 * math.log(2.0)) < 0.05


def test_marginal_entropy_of_standard_normal_from_above() -> None:
    """Marginal only on N(0, I_d): H(Z)/d -> 1/2 log(2 pi e) = 1.4189.

    The population cross-entropy is H + KL >= H; KL is estimated with the exact N(0, I) density as
    control variate on 200k fresh samples (MC std ~1e-4), tolerance [-1e-3, 0.02]. The training-set
    estimate may dip below H by O(1/N) (z-scoring, fitting on the same rows): [-0.005, 0.02].
    """
    d = 8
    z = torch.randn(4000, d, generator=_gen(3))
    config = EMIRConfig(seed=0, held_out_estimate=False)
    kernel = fit_marginal(z, config)
    fresh = torch.randn(200_000, d, generator=_gen(4))
    with torch.no_grad():
        log_p = kernel(fresh).double()
    log_phi = -0.5 * (fresh.double() ** 2).sum(1) - 0.5 * d * math.log(2 * math.pi)
    kl_per_dim = float((log_phi - log_p).mean()) / d
    assert -1e-3 < kl_per_dim < 0.02
    h_train = information_sufficiency(z, z, replace(config, n_epochs=0), marginal=kernel).h_z / d
    assert GAUSSIAN_ENTROPY_PER_DIM - 0.005 < h_train < GAUSSIAN_ENTROPY_PER_DIM + 0.02


def test_conditional_density_floor_is_deterministic() -> None:
    """-log p(z|u)/d_Z >= 1/2 log(2 pi) - 1 = -0.0811 for any parameters (std >= 1/e), with
    equality at the tightest kernel centred on z."""
    assert math.isclose(CONDITIONAL_ENTROPY_FLOOR_PER_DIM, -0.0811, abs_tol=1e-4)
    torch.manual_seed(5)
    d_u, d_z, k = 3, 5, 4
    kernel = ConditionalKernel(d_u, d_z, k)
    u, z = torch.randn(256, d_u), torch.randn(256, d_z)
    with torch.no_grad():
        for p in kernel.parameters():
            p.mul_(50.0)  # extreme outputs: tanh saturates both ways
        assert bool((-kernel(u, z) / d_z >= CONDITIONAL_ENTROPY_FLOOR_PER_DIM - 1e-6).all())
        last = kernel.net[-1]
        assert isinstance(last, torch.nn.Linear)
        last.weight.zero_()
        z0 = torch.randn(d_z)
        bias = torch.cat([torch.zeros(1), z0, torch.full((d_z,), 50.0)]).repeat(k)
        last.bias.copy_(bias)
        nll = -kernel(u, z0.expand(256, d_z)) / d_z
    torch.testing.assert_close(
        nll, torch.full_like(nll, CONDITIONAL_ENTROPY_FLOOR_PER_DIM), atol=1e-5, rtol=0
    )


def test_held_out_and_early_stopping_options() -> None:
    """Held-out evaluation uses the seeded 20 % split; early stopping stops and stays finite."""
    g = _gen(11)
    u = torch.randn(500, 3, generator=g)
    z = u + torch.randn(500, 3, generator=g)
    held = information_sufficiency(u, z, EMIRConfig(held_out=True, n_epochs=3, seed=0))
    assert held.n_eval == 100 and math.isfinite(held.i_s)
    early = EMIRConfig(
        stopping_criterion="early_stopping", eps=1.0, n_epochs=50, seed=0, held_out_estimate=False
    )
    result = information_sufficiency(u, z, early)
    # |relative change| < 1 at the 2nd epoch -> stop: identical to a 2-epoch run
    two_epochs = information_sufficiency(
        u, z, replace(early, stopping_criterion="max_epochs", n_epochs=2)
    )
    assert result.i_s == two_epochs.i_s and result.n_eval == 500


# ------------------------------------------------------------------ aggregation and graph


def test_informativeness_ranks_noisy_views_in_noise_order() -> None:
    """5 noisy copies ``latent + s * noise`` with s = (0.1, 0.3, 0.6, 1.0, 3.0): the true median
    MI/dim is (0.50, 0.43, 0.40, 0.27, 0.04); with the default config the estimates are far lower
    (under-fitted at N = 2000) but must be strictly decreasing in s."""
    g = _gen(6)
    latent = torch.randn(2000, 8, generator=g)
    sigmas = [0.1, 0.3, 0.6, 1.0, 3.0]
    views = {
        f"v{i}": latent + s * torch.randn(latent.shape, generator=g) for i, s in enumerate(sigmas)
    }
    names, matrix = pairwise_information_sufficiency(views, _AUTHORS, progress=False)
    assert names == list(views)
    assert matrix.shape == (5, 5) and bool(matrix.diagonal().isnan().all())
    scores = informativeness(matrix, names)
    values = [scores[f"v{i}"] for i in range(5)]
    assert all(a > b for a, b in itertools.pairwise(values)), values


def test_louvain_finds_two_planted_groups() -> None:
    """Two independent latents, 3 noisy views each (noise std 0.3) -> two communities."""
    g = _gen(7)
    views: dict[str, torch.Tensor] = {}
    for group in ("a", "b"):
        latent = torch.randn(1000, 8, generator=g)
        for i, v in enumerate(_noisy_views(latent, [0.3, 0.3, 0.3], g)):
            views[f"{group}{i}"] = v
    names, matrix = pairwise_information_sufficiency(views, _AUTHORS, progress=False)
    graph = predictiveness_graph(matrix, names)
    assert graph.number_of_nodes() == 6 and graph.number_of_edges() == 30
    assert not any(u == v for u, v in graph.edges)
    found = communities(graph, resolution=1.1, seed=0)
    assert found == [{"a0", "a1", "a2"}, {"b0", "b1", "b2"}]


def test_pairwise_entry_matches_single_estimate() -> None:
    """The matrix reuses one marginal per target; the values equal a standalone estimate."""
    g = _gen(8)
    a = torch.randn(300, 3, generator=g)
    emb = {"a": a, "b": a + 0.5 * torch.randn(300, 3, generator=g)}
    config = EMIRConfig(n_epochs=2, n_epochs_marg=2, seed=3)
    names, matrix = pairwise_information_sufficiency(emb, config, progress=False)
    single = information_sufficiency(emb["a"], emb["b"], config)
    assert names == ["a", "b"]
    assert math.isclose(float(matrix[0, 1]), single.i_s_per_dim, rel_tol=1e-6, abs_tol=1e-9)


@pytest.mark.slow  # starts worker processes
def test_worker_processes_give_the_same_matrix() -> None:
    """n_jobs=2 computes target columns in spawned workers; every pair is seeded alone, so the
    matrix equals the one-process matrix (up to float rounding of a different thread count)."""
    g = _gen(9)
    a = torch.randn(200, 3, generator=g)
    emb = {
        "a": a,
        "b": a + 0.5 * torch.randn(200, 3, generator=g),
        "c": torch.randn(200, 4, generator=g),
    }
    serial_cfg = EMIRConfig(n_epochs=2, n_epochs_marg=1, seed=1)
    seen: list[tuple[str, str]] = []
    names, serial = pairwise_information_sufficiency(emb, serial_cfg, progress=False)
    _, parallel = pairwise_information_sufficiency(
        emb,
        EMIRConfig(n_epochs=2, n_epochs_marg=1, seed=1, n_jobs=2),
        progress=False,
        on_pair=lambda u, z, r, s: seen.append((u, z)),
    )
    assert sorted(seen) == sorted((u, z) for u in names for z in names if u != z)
    off = ~torch.eye(3, dtype=torch.bool)
    assert torch.allclose(serial[off], parallel[off], atol=1e-6)
    assert torch.isnan(parallel.diagonal()).all()


def _mixed_family() -> dict[str, torch.Tensor]:
    """Four embedders of different widths (the stacked net pads d_U), some related."""
    g = _gen(12)
    a = torch.randn(400, 4, generator=g)
    return {
        "a": a,
        "b": a @ torch.randn(4, 6, generator=g) + 0.5 * torch.randn(400, 6, generator=g),
        "c": torch.randn(400, 3, generator=g),
        "d": torch.cat([a, torch.randn(400, 1, generator=g)], dim=1),
    }


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"held_out_estimate": False},
        {"stopping_criterion": "early_stopping", "eps": 0.05, "n_epochs": 8},
    ],
    ids=["held-out-split", "all-rows", "early-stopping"],
)
def test_vectorised_matrix_equals_one_pair_at_a_time(options: dict[str, object]) -> None:
    """All sources of a target in one stacked net: each source starts from the parameters its
    own pair's net starts from, sees the same minibatches and its own gradient, so both
    matrices (in-sample and held-out) agree with the one-pair path to float32 rounding (< 1e-4;
    observed ~1e-8). Early stopping is per source."""
    emb = _mixed_family()
    base = EMIRConfig(**{"n_epochs": 3, "n_epochs_marg": 2, "seed": 2, **options})  # type: ignore[arg-type]
    one = pairwise_information_sufficiency(emb, replace(base, vectorize=False), progress=False)
    vec = pairwise_information_sufficiency(emb, replace(base, vectorize=True), progress=False)
    off = ~torch.eye(4, dtype=torch.bool)
    assert bool(one.matrix_in_sample[off].isfinite().all())
    torch.testing.assert_close(
        vec.matrix_in_sample, one.matrix_in_sample, atol=1e-4, rtol=0, equal_nan=True
    )
    torch.testing.assert_close(
        vec.matrix_held_out, one.matrix_held_out, atol=1e-4, rtol=0, equal_nan=True
    )
    assert (vec.n_fit, vec.n_held_out) == (one.n_fit, one.n_held_out)


def test_early_stopping_is_per_source_in_the_stacked_net() -> None:
    """A source whose criterion fires early keeps that epoch's parameters while the others
    train on: its entry equals a one-pair fit stopped at the same epoch, not a full-length fit."""
    emb = _mixed_family()
    early = EMIRConfig(
        n_epochs=6, n_epochs_marg=1, seed=0, stopping_criterion="early_stopping", eps=0.005
    )
    vec = pairwise_information_sufficiency(emb, replace(early, vectorize=True), progress=False)
    one = pairwise_information_sufficiency(emb, replace(early, vectorize=False), progress=False)
    full = pairwise_information_sufficiency(
        emb, replace(early, stopping_criterion="max_epochs"), progress=False
    )
    off = ~torch.eye(4, dtype=torch.bool)
    torch.testing.assert_close(
        vec.matrix_in_sample, one.matrix_in_sample, atol=1e-4, rtol=0, equal_nan=True
    )
    stopped = (one.matrix_in_sample - full.matrix_in_sample)[off].abs() > 1e-3
    assert bool(stopped.any()) and not bool(stopped.all())  # some stop early, some run on


def test_pairwise_returns_in_sample_and_held_out_from_one_fit() -> None:
    """Default: fit on 80 % of the rows, score those (in-sample) and the other 20 % (held-out);
    the object unpacks as (names, matrix) and carries both informativeness figures."""
    emb = _mixed_family()
    config = EMIRConfig(n_epochs=2, n_epochs_marg=1, seed=1)
    result = pairwise_information_sufficiency(emb, config, progress=False)
    assert isinstance(result, PairwiseEMIR)
    names, matrix = result
    assert names == list(emb) and matrix is result.matrix_in_sample
    assert (result.n_rows, result.n_fit, result.n_held_out) == (400, 320, 80)
    off = ~torch.eye(4, dtype=torch.bool)
    assert bool(result.matrix_held_out[off].isfinite().all())
    assert bool(result.matrix_held_out.diagonal().isnan().all())
    assert not torch.allclose(result.matrix_in_sample[off], result.matrix_held_out[off])
    assert result.informativeness == informativeness(result.matrix_in_sample, names)
    assert result.informativeness_held_out == informativeness(result.matrix_held_out, names)
    single = information_sufficiency(emb["a"], emb["b"], config)
    assert math.isclose(float(matrix[0, 1]), single.i_s_per_dim, rel_tol=1e-6, abs_tol=1e-9)
    assert math.isclose(
        float(result.matrix_held_out[0, 1]), single.i_s_per_dim_held_out, rel_tol=1e-6, abs_tol=1e-9
    )
    assert (single.n_eval, single.n_held_out, single.n_in_sample) == (320, 80, 320)
    # held_out=True: the same fit, the held-out figure made primary
    primary = pairwise_information_sufficiency(emb, replace(config, held_out=True), progress=False)
    assert primary.matrix is primary.matrix_held_out
    torch.testing.assert_close(primary.matrix_in_sample, result.matrix_in_sample, equal_nan=True)
    # the reference protocol: all rows, no held-out figure
    authors = pairwise_information_sufficiency(
        emb, replace(config, held_out_estimate=False), progress=False
    )
    assert authors.n_fit == 400 and authors.n_held_out == 0
    assert bool(authors.matrix_held_out.isnan().all())
    assert all(math.isnan(v) for v in authors.informativeness_held_out.values())


def test_reliability_caveat_below_the_rows_per_dimension_threshold() -> None:
    """No caveat from MIN_ROWS_PER_TARGET_DIM rows per mean target dimension and 10 embedders;
    below either, one message naming the numbers and the remedy."""
    dims = [64, 128]  # mean 96
    enough = math.ceil(MIN_ROWS_PER_TARGET_DIM * 96)
    assert emir_reliability(enough, dims, 10) is None
    few_rows = emir_reliability(enough - 1, dims, 10)
    assert few_rows is not None and "rows per dimension" in few_rows
    assert f"{enough - 1} rows" in few_rows and "held_out" in few_rows
    few_models = emir_reliability(enough, dims, 4)
    assert few_models is not None and "4 embedders" in few_models
    assert "rows per dimension" not in few_models
    both = emir_reliability(2708, 512, 4)
    assert both is not None and "rows per dimension" in both and "4 embedders" in both
    with pytest.raises(ValueError, match="positive"):
        emir_reliability(0, dims, 3)


def test_informativeness_median_skips_diagonal_and_nan() -> None:
    nan = float("nan")
    m = torch.tensor(
        [[nan, 1.0, 2.0, 4.0], [0.5, nan, nan, 0.1], [3.0, 3.0, 5.0, 1.0], [nan, nan, nan, nan]],
        dtype=torch.float64,
    )
    scores = informativeness(m, ["a", "b", "c", "d"])
    assert scores["a"] == 2.0
    assert math.isclose(scores["b"], 0.3)  # even count: mean of the two middle values
    assert scores["c"] == 3.0  # the diagonal 5.0 is ignored
    assert math.isnan(scores["d"])
    graph = predictiveness_graph(m, ["a", "b", "c", "d"])
    assert graph.number_of_edges() == 8
    assert graph.nodes["a"]["informativeness"] == 2.0
    with pytest.raises(ValueError, match=r"expected \(3, 3\)"):
        informativeness(m, ["a", "b", "c"])


# ------------------------------------------------------------------ cross-encoder baseline


def test_cross_encoder_l2_identity_vs_independent_and_ranking() -> None:
    """Per-dim test L2 of z-scored targets: ~1 when unpredictable, near 0 when U = Z; the
    median-over-references ranking of noisy views follows the noise (lower = better)."""
    g = _gen(9)
    u, z = torch.randn(1000, 4, generator=g), torch.randn(1000, 4, generator=g)
    independent = cross_encoder_l2(u, z, epochs=5, seed=0, per_dim=True)
    identical = cross_encoder_l2(u, u, epochs=5, seed=0, per_dim=True)
    assert 0.8 < independent < 1.3
    assert identical < 0.2
    latent = torch.randn(1000, 4, generator=g)
    views = {f"v{i}": v for i, v in enumerate(_noisy_views(latent, [0.1, 0.5, 1.0, 2.0], g))}
    scores = cross_encoder_ranking(views, epochs=3, seed=0, progress=False)
    values = [scores[f"v{i}"] for i in range(4)]
    assert all(a < b for a, b in itertools.pairwise(values)), values


# ------------------------------------------------------------------ validation


def test_row_mismatch_names_embedders_and_counts() -> None:
    emb = {"small": torch.randn(90, 3), "big": torch.randn(100, 3)}
    with pytest.raises(ValueError, match=r"'small': 90.*'big': 100"):
        pairwise_information_sufficiency(emb, progress=False)
    with pytest.raises(ValueError, match="u has 90 rows but z has 100"):
        information_sufficiency(emb["small"], emb["big"])
    with pytest.raises(ValueError, match=r"'small': 90"):
        cross_encoder_ranking(emb, progress=False)


def test_nan_rows_rejected() -> None:
    x = torch.randn(50, 3)
    x[7, 1] = float("nan")
    with pytest.raises(ValueError, match="1 of 50 rows with NaN"):
        pairwise_information_sufficiency({"a": x, "b": torch.randn(50, 3)}, progress=False)
    with pytest.raises(ValueError, match="NaN"):
        information_sufficiency(torch.randn(50, 2), x)


def test_zscore_drops_constant_dimensions() -> None:
    x = torch.cat([torch.randn(20, 2, generator=_gen(10)), torch.full((20, 1), 3.0)], dim=1)
    with pytest.warns(UserWarning, match="dropped 1 of 3"):
        zs, dropped = zscore(x)
    assert dropped == 1 and zs.shape == (20, 2)
    torch.testing.assert_close(zs.mean(0), torch.zeros(2, dtype=zs.dtype), atol=1e-12, rtol=0)
    torch.testing.assert_close(zs.std(0), torch.ones(2, dtype=zs.dtype), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="all 1 dimensions"):
        zscore(torch.ones(5, 1))


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        EMIRConfig(batch_size=0)
    with pytest.raises(ValueError, match=r"n_jobs.*-1.*got 0"):
        EMIRConfig(n_jobs=0)
    with pytest.raises(ValueError, match="average"):
        EMIRConfig(average="mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vectorize must be a boolean"):
        EMIRConfig(vectorize="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cpu_allocator must be 'reuse' or 'system', got 'fast'"):
        EMIRConfig(cpu_allocator="fast")  # type: ignore[arg-type]


def test_principal_components_match_a_float64_svd() -> None:
    from graphssl.evaluation.emir.inputs import principal_components

    g = _gen(3)
    x = torch.randn(400, 12, generator=g) @ torch.diag(torch.linspace(3.0, 0.1, 12))
    x = x @ _rotation(12, g) + 5.0
    scores = principal_components(x, 4)
    assert scores.shape == (400, 4) and scores.dtype == torch.float32
    centred = (x - x.mean(0)).double()
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    expected = centred @ vh[:4].T
    for j in range(4):  # each component up to its sign
        a, b = scores[:, j].double(), expected[:, j]
        assert min((a - b).abs().max(), (a + b).abs().max()) < 1e-4
    torch.testing.assert_close(scores.double().var(dim=0) * 399, s[:4] ** 2, rtol=1e-4, atol=0)
    assert torch.equal(principal_components(x, 12), x)  # no wider than k: unchanged
    assert torch.equal(principal_components(x, 4), scores)  # deterministic, signs included
    with pytest.raises(ValueError, match="k=0"):
        principal_components(x, 0)


def test_compare_max_dims_projects_the_wide_embedders_only() -> None:
    from graphssl.evaluation.emir.compare import compare_embeddings

    g = _gen(4)
    latent = torch.randn(300, 3, generator=g)
    wide = torch.cat([latent, 0.1 * torch.randn(300, 37, generator=g)], dim=1) @ _rotation(40, g)
    narrow = latent + 0.5 * torch.randn(300, 3, generator=g)
    config = EMIRConfig(seed=0, n_epochs=2, n_epochs_marg=2, n_jobs=1)
    result = compare_embeddings(
        {"wide": wide, "narrow": narrow},
        emir=config,
        cross_encoder={"enabled": False},
        max_dims=5,
        progress=False,
    )
    assert result.original_dims == {"wide": 40}
    assert result.metrics()["emir/original_dim/wide"] == 40.0
    assert all(math.isfinite(v) for v in result.informativeness.values())


def test_column_cost_counts_the_multiply_adds_of_every_source_net() -> None:
    from graphssl.evaluation.emir.pairwise import _column_cost

    dims = [5, 12, 9]
    config = EMIRConfig(cond_modes=3, ff_layers=2)
    for j, d_z in enumerate(dims):
        nets = [ConditionalKernel(d_u, d_z, 3, ff_layers=2) for i, d_u in enumerate(dims) if i != j]
        macs = sum(m.weight.numel() for net in nets for m in net.net if isinstance(m, nn.Linear))
        assert _column_cost(j, dims, config) == macs
    # the widest target is the most expensive column, the one scheduled first
    assert max(range(3), key=lambda j: _column_cost(j, dims, config)) == 1
