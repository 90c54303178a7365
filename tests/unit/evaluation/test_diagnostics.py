"""Tests of graphssl.evaluation.diagnostics: known answers (definitions and test vectors),
agreement with a naive NumPy implementation written from ``np.linalg.svd``, and input checks."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.linalg
import torch

from graphssl.evaluation.diagnostics import (
    HIGHER_IS_BETTER,
    Method,
    alpha_req,
    coherence,
    condition_number,
    effective_rank,
    embedding_diagnostics,
    mean_cosine,
    mean_norm,
    metrics,
    nesum,
    rankme,
    rankme_normalized,
    self_cluster,
    spectral,
    stable_rank,
)

KEYS = {
    "rankme",
    "rankme_normalized",
    "effective_rank",
    "alpha_req",
    "nesum",
    "stable_rank",
    "condition_number",
    "coherence",
    "self_cluster",
    "selfcluster_zero_rows",
    "mean_cosine",
    "mean_norm",
}

PM1 = [[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]]
OUTLIER = [[1.0, 2.0]] + [[1.0, 1.0]] * 19


def t64(rows: object) -> torch.Tensor:
    return torch.as_tensor(np.asarray(rows, dtype=np.float64))


def close(a: float, b: float, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    if math.isnan(b):
        return math.isnan(a)
    if math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


# ------------------------------------------------------------------------------------------
# naive reference: every metric from its own np.linalg.svd, straight from its definition
# ------------------------------------------------------------------------------------------


def naive_directions(x: np.ndarray) -> dict[str, float]:
    """Mean cosine over ordered pairs i != j of the non-zero rows, from the N × N matrix."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1)
    u = x[norms > 0] / norms[norms > 0, None]
    m = u.shape[0]
    cos = u @ u.T
    mean_cos = float((cos.sum() - np.trace(cos)) / (m * (m - 1))) if m >= 2 else math.nan
    return {"mean_cosine": mean_cos, "mean_norm": float(norms.mean())}


def naive(x: np.ndarray) -> dict[str, float]:
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    k = min(n, d)
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    tol = max(n, d) * np.finfo(np.float64).eps * s[0]
    s = np.where(s > tol, s, 0.0)
    sc = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
    sc = np.where(sc > tol, sc, 0.0)
    r, r_c = int((s > 0).sum()), int((sc > 0).sum())

    def rme(sv: np.ndarray, eps: float = 0.0) -> float:
        if sv.sum() == 0:
            return 0.0
        p = sv / sv.sum() + eps
        p = p[p > 0]
        return float(np.exp(-(p * np.log(p)).sum()))

    lo, hi = 11, min(100, r_c)
    if hi - lo + 1 >= 3:
        i = np.arange(lo, hi + 1, dtype=np.float64)
        a = np.stack([-np.log(i), np.ones_like(i)], axis=1)
        w = 1.0 / i
        y = np.log(sc[lo - 1 : hi] ** 2)
        alpha = float(np.linalg.solve(a.T @ (a * w[:, None]), a.T @ (w * y))[0])
    else:
        alpha = math.nan
    if s[0] == 0:
        cond, coh = math.nan, math.nan
    else:
        cond = math.inf if s[k - 1] == 0 else float(s[0] / s[k - 1])
        mu_u = n / r * float((u[:, :r] ** 2).sum(axis=1).max())
        mu_v = d / r * float((vt[:r].T ** 2).sum(axis=1).max())
        coh = max(mu_u, mu_v)
    norms = np.linalg.norm(x, axis=1)
    wm = x[norms > 0] / norms[norms > 0, None]
    m = wm.shape[0]
    if m >= 2 and d >= 2:
        q = float(((wm @ wm.T) ** 2).sum())  # the N × N definition
        sclu = (q - m - m * (m - 1) / d) / (m * m - m - m * (m - 1) / d)
    else:
        sclu = math.nan
    return {
        **naive_directions(x),
        "rankme": rme(s),
        "rankme_normalized": rme(s) / k,
        "effective_rank": rme(sc),
        "alpha_req": alpha,
        "nesum": 0.0 if sc[0] == 0 else float((sc**2).sum() / sc[0] ** 2),
        "stable_rank": 0.0 if s[0] == 0 else float((x**2).sum() / s[0] ** 2),
        "condition_number": cond,
        "coherence": coh,
        "self_cluster": sclu,
        "selfcluster_zero_rows": float((norms == 0).sum()),
    }


#: promised agreement with an exact float64 SVD: 1e-4 relative, 1e-3 for condition number,
#: coherence and alpha-ReQ
SPEC_REL = {k: 1e-4 for k in KEYS} | {
    "condition_number": 1e-3,
    "coherence": 1e-3,
    "alpha_req": 1e-3,
}


def assert_matches(got: dict[str, float], want: dict[str, float], rel: dict[str, float]) -> None:
    for key in KEYS:
        assert close(got[key], want[key], rel=rel[key], abs_=1e-9), (key, got[key], want[key])


def low_rank(n: int, d: int, r: int, seed: int, offset: float = 0.0) -> np.ndarray:
    g = np.random.default_rng(seed)
    return g.standard_normal((n, r)) @ g.standard_normal((r, d)) + offset


def random_matrices() -> dict[str, np.ndarray]:
    g = np.random.default_rng(1)
    return {
        "tall": g.standard_normal((300, 40)) * np.linspace(3.0, 0.2, 40),
        "wide": g.standard_normal((30, 80)),
        "square": g.standard_normal((64, 64)),
        "rank_deficient_tall": low_rank(300, 60, 30, seed=2),
        "rank_deficient_wide": low_rank(40, 90, 12, seed=3),
        "offset_mean": g.standard_normal((400, 24)) + 5.0,
        "zero_rows": np.vstack([g.standard_normal((150, 20)), np.zeros((3, 20))]),
    }


MATS = random_matrices()


# ------------------------------------------------------------------------------------------
# known-answer test vectors
# ------------------------------------------------------------------------------------------

TABLE = {
    # name: (matrix, rankme, stable rank, κ, NESum, μ_U, μ_V, SelfCluster)
    "pm1": (PM1, 2.0, 2.0, 1.0, 2.0, 1.0, 1.0, -1 / 3),
    "eye4": (np.eye(4), 4.0, 4.0, 1.0, 3.0, 1.0, 1.0, -1 / 3),
    "diag321": (np.diag([3.0, 2.0, 1.0]), 2.749459, 14 / 9, 3.0, 4 / 3, 1.0, 1.0, -0.5),
    "ones42": (np.ones((4, 2)), 1.0, 1.0, math.inf, 0.0, 1.0, 1.0, 1.0),
    "outer": (np.outer([1, 2, 3, 4], [1, 1, 1]), 1.0, 1.0, math.inf, 1.0, 32 / 15, 1.0, 1.0),
    "zeros": (np.zeros((5, 3)), 0.0, 0.0, math.nan, 0.0, math.nan, math.nan, math.nan),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_spec_table(name: str) -> None:
    rows, rm, sr, kappa, ne, mu_u, mu_v, sc = TABLE[name]
    x = t64(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zeros: dropped rows
        assert close(rankme(x), rm, rel=1e-6)
        assert close(stable_rank(x), sr, rel=1e-9)
        assert close(condition_number(x), kappa, rel=1e-9)
        assert close(nesum(x), ne, rel=1e-9)
        assert close(coherence(x, side="U"), mu_u, rel=1e-9)
        assert close(coherence(x, side="V"), mu_v, rel=1e-9)
        assert close(self_cluster(x), sc, rel=1e-9)
        for method in ("auto", "svd"):
            got = embedding_diagnostics(x, method=method)
            assert close(got["rankme"], rm, rel=1e-6)
            assert close(got["coherence"], max(mu_u, mu_v), rel=1e-9)


def test_rankme_values() -> None:
    assert rankme(t64(np.diag([3.0, 2.0, 1.0]))) == pytest.approx(
        math.exp(0.5 * math.log(2) + math.log(3) / 3 + math.log(6) / 6), rel=1e-12
    )
    assert rankme(t64(np.eye(7))) == pytest.approx(7.0)
    assert rankme(t64(np.eye(6)), center=True) == pytest.approx(5.0)
    assert rankme(t64(np.ones((4, 2))), center=True) == 0.0
    assert rankme(t64(np.outer(np.arange(1.0, 9.0), np.linspace(-1, 2, 5)))) == pytest.approx(1.0)
    # eps biases upwards, as the published implementations do
    x = t64(MATS["tall"])
    biased = rankme(x, eps=1e-7)
    s = np.linalg.svd(MATS["tall"], compute_uv=False)
    p = s / s.sum() + 1e-7
    assert biased == pytest.approx(float(np.exp(-(p * np.log(p)).sum())), rel=1e-10)
    assert biased > rankme(x)


def test_rankme_normalized_and_effective_rank() -> None:
    assert rankme_normalized(t64(np.diag([3.0, 2.0, 1.0]))) == pytest.approx(2.749459 / 3, 1e-6)
    assert rankme_normalized(t64(np.eye(4)), center=True) == pytest.approx(1.0)
    assert rankme_normalized(t64(np.zeros((3, 3)))) == 0.0
    assert effective_rank(t64(np.eye(4))) == pytest.approx(3.0)
    assert effective_rank(t64(np.ones((4, 2)))) == 0.0
    assert effective_rank(t64(np.full((5, 3), 0.1))) == 0.0  # constant: no variance
    constant = t64(np.ones((50, 1)) * np.array([[0.37, 1.23, -5.1]]))  # means not exact
    assert effective_rank(constant) == 0.0
    assert nesum(constant) == 0.0
    x = t64(MATS["offset_mean"])
    assert effective_rank(x) == pytest.approx(rankme(x, center=True), rel=1e-12)
    assert effective_rank(x) != pytest.approx(rankme(x), rel=1e-3)


def test_stable_rank_and_nesum_values() -> None:
    assert stable_rank(t64(np.eye(5))) == pytest.approx(5.0)
    assert nesum(t64(np.eye(5))) == pytest.approx(4.0)
    assert nesum(t64(np.diag([3.0, 2.0, 1.0]))) == pytest.approx(4 / 3)
    x = t64(MATS["tall"])
    assert nesum(x) == pytest.approx(stable_rank(x - x.mean(dim=0)), rel=1e-10)


def test_condition_number_options() -> None:
    d321 = t64(np.diag([3.0, 2.0, 1.0]))
    assert condition_number(d321, reciprocal=True) == pytest.approx(1 / 3)
    assert condition_number(t64(np.ones((2, 2)))) == math.inf
    assert condition_number(t64(np.ones((2, 2))), reciprocal=True) == 0.0
    outer = t64(np.outer([1, 2, 3, 4], [1, 1, 1]))
    assert condition_number(outer, sigma_min="nonzero") == pytest.approx(1.0)
    assert math.isnan(condition_number(t64(np.zeros((3, 2))), reciprocal=True))


def test_coherence_values() -> None:
    x = t64(OUTLIER)
    assert coherence(x, side="U") == pytest.approx(10.0)
    assert coherence(x, side="V") == pytest.approx(1.0)
    assert coherence(x) == pytest.approx(10.0)
    assert coherence(t64(np.eye(6))) == pytest.approx(1.0)
    assert coherence(t64(np.ones((2, 2)))) == pytest.approx(1.0)
    assert coherence(t64(np.outer([1, 2, 3, 4], [1, 1, 1])), side="U") == pytest.approx(4 * 16 / 30)


def test_self_cluster_values() -> None:
    assert self_cluster(t64(PM1)) == pytest.approx(-1 / 3)
    assert self_cluster(t64(np.eye(3))) == pytest.approx(-0.5)
    assert self_cluster(t64(np.eye(5)[:3])) == pytest.approx(-0.25)  # 3 orthonormal rows, d=5
    signed = np.vstack([np.eye(3), -np.eye(3)])
    assert self_cluster(t64(signed)) == pytest.approx(-0.2)
    assert self_cluster(t64(np.ones((7, 4)))) == pytest.approx(1.0)
    assert self_cluster(t64([[1.0, 0.0], [-1.0, 0.0], [2.0, 0.0]])) == pytest.approx(1.0)
    assert math.isnan(self_cluster(t64([[1.0, 2.0, 3.0]])))  # n < 2
    assert math.isnan(self_cluster(t64([[1.0], [2.0]])))  # d < 2


def test_self_cluster_drops_zero_rows_with_warning() -> None:
    x = MATS["zero_rows"]
    with pytest.warns(RuntimeWarning, match="dropped 3 of 153 all-zero"):
        value = self_cluster(t64(x))
    assert value == pytest.approx(self_cluster(t64(x[:150])), rel=1e-12)
    with pytest.warns(RuntimeWarning, match="dropped 3 of 153"):
        got = embedding_diagnostics(t64(x))
    assert got["selfcluster_zero_rows"] == 3.0
    assert got["self_cluster"] == pytest.approx(value, rel=1e-12)


def test_self_cluster_center() -> None:
    x = MATS["offset_mean"]
    assert self_cluster(t64(x), center=True) == pytest.approx(
        naive(x - x.mean(axis=0))["self_cluster"], rel=1e-9, abs=1e-12
    )
    assert self_cluster(t64(x)) > 0.5 > abs(self_cluster(t64(x), center=True))


# ------------------------------------------------------------------------------------------
# alpha-ReQ
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a", [0.5, 1.0, 2.0])
def test_alpha_req_exact_power_law(a: float) -> None:
    h = scipy.linalg.hadamard(256).astype(np.float64)
    q = h[:, 1:201] / 16.0  # orthonormal, zero-mean columns
    i = np.arange(1, 201, dtype=np.float64)
    x = t64(q * i ** (-a / 2))
    assert alpha_req(x) == pytest.approx(a, abs=1e-8)
    assert alpha_req(x, weighted=False) == pytest.approx(a, abs=1e-8)
    assert alpha_req(x, fit_range=(3, 150)) == pytest.approx(a, abs=1e-8)
    assert alpha_req(x, center=False) == pytest.approx(a, abs=1e-8)
    if a == 1.0:
        assert nesum(x) == pytest.approx(5.878031, abs=1e-6)  # Σ_{i ≤ 200} 1/i
        # the authors' code fits an exponential decay instead: 1.454
        assert alpha_req(x, reference=True) == pytest.approx(1.454, abs=1e-3)


def test_alpha_req_reptrix_value() -> None:
    torch.manual_seed(0)
    x = torch.randn(1000, 1024)
    assert alpha_req(x) == pytest.approx(0.148936, abs=1e-4)
    # REPTRIX's old window, ranks 6..100 (reusing the decomposition: a 1000 × 1024 SVD is slow)
    spectrum = spectral.analyze(x, centered=True).centered
    assert spectrum is not None
    assert metrics.alpha_from(spectrum, (6, 100), True) == pytest.approx(0.12024, abs=1e-4)


def test_alpha_req_too_few_points_is_nan() -> None:
    assert math.isnan(alpha_req(t64(np.random.default_rng(0).standard_normal((50, 12)))))
    assert math.isnan(alpha_req(t64(np.zeros((20, 30)))))
    # window clipped to the numerical rank: rank 12 leaves ranks 11..12, fewer than 3
    assert math.isnan(alpha_req(t64(low_rank(200, 50, 12, seed=0))))


# ------------------------------------------------------------------------------------------
# Gaussian expectations
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gaussian_suite() -> dict[str, float]:
    x = np.random.default_rng(0).standard_normal((10000, 100))
    return embedding_diagnostics(torch.from_numpy(x))


def test_gaussian_expectations(gaussian_suite: dict[str, float]) -> None:
    got = gaussian_suite
    assert got["rankme"] == pytest.approx(99.87, abs=0.03)
    assert got["rankme_normalized"] == pytest.approx(0.9987, abs=3e-4)
    assert got["stable_rank"] == pytest.approx(82.3, abs=1.0)
    assert got["nesum"] == pytest.approx(82.3, abs=1.0)
    assert got["condition_number"] == pytest.approx(1.22, abs=0.02)
    assert 1.3 < got["coherence"] < 2.0
    assert abs(got["self_cluster"]) < 1e-3
    assert got["selfcluster_zero_rows"] == 0.0


# ------------------------------------------------------------------------------------------
# agreement with the naive implementation, and between entry points
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MATS))
@pytest.mark.parametrize("method", ["auto", "svd"])
def test_suite_matches_naive(name: str, method: Method) -> None:
    x = MATS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = embedding_diagnostics(torch.from_numpy(x), method=method)
    assert set(got) == KEYS
    assert_matches(got, naive(x), SPEC_REL)


@pytest.mark.parametrize("name", sorted(MATS))
def test_functions_match_suite(name: str) -> None:
    x = torch.from_numpy(MATS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        suite = embedding_diagnostics(x)
        single = {
            "rankme": rankme(x),
            "rankme_normalized": rankme_normalized(x),
            "effective_rank": effective_rank(x),
            "alpha_req": alpha_req(x),
            "nesum": nesum(x),
            "stable_rank": stable_rank(x),
            "condition_number": condition_number(x),
            "coherence": coherence(x),
            "self_cluster": self_cluster(x),
            "mean_cosine": mean_cosine(x),
            "mean_norm": mean_norm(x),
        }
    for key, value in single.items():
        assert close(suite[key], value, rel=1e-10, abs_=1e-12), (key, suite[key], value)


def test_float32_input_fast_leverage_is_exact() -> None:
    """Float32 data use float32 products for the leverage scores, verified in float64."""
    g = np.random.default_rng(4)
    x = (g.standard_normal((3000, 48)) * np.linspace(4.0, 0.5, 48)).astype(np.float32)
    x[1234] *= 6.0  # one high-leverage row
    want = naive(x.astype(np.float64))
    got = embedding_diagnostics(torch.from_numpy(x))
    assert_matches(got, want, SPEC_REL)
    assert got["coherence"] == pytest.approx(want["coherence"], rel=1e-9)
    # equal leverage everywhere: every row is a candidate, the float64 fallback runs
    h = (scipy.linalg.hadamard(256)[:, :16] / 16.0).astype(np.float32)
    assert coherence(torch.from_numpy(h)) == pytest.approx(1.0, rel=1e-9)


def test_chunking_and_torch_path_do_not_change_results(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.from_numpy(MATS["zero_rows"]).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = embedding_diagnostics(x)
        small = embedding_diagnostics(x, chunk_size=7)
        monkeypatch.setattr(spectral, "_NUMPY_PASS", False)  # the path GPU tensors take
        torch_path = embedding_diagnostics(x, chunk_size=16)
    tight = {k: 1e-9 for k in KEYS}
    assert_matches(small, ref, tight)
    assert_matches(torch_path, ref, tight)


def test_ill_conditioned_uses_safety_net() -> None:
    """σ₁/σ_k ≈ 1e9: the Gram route would lose σ_k entirely; the QR/SVD route recovers it."""
    g = np.random.default_rng(5)
    n, d = 400, 20
    q, _ = np.linalg.qr(g.standard_normal((n, d)))
    v, _ = np.linalg.qr(g.standard_normal((d, d)))
    x = (q * np.logspace(0, -9, d)) @ v.T
    want = naive(x)
    assert want["condition_number"] == pytest.approx(1e9, rel=1e-3)
    assert spectral.analyze(torch.from_numpy(x), plain=True).plain.exact  # type: ignore[union-attr]
    assert condition_number(torch.from_numpy(x)) == pytest.approx(
        want["condition_number"], rel=1e-3
    )
    assert_matches(embedding_diagnostics(torch.from_numpy(x)), want, SPEC_REL)
    # below the threshold (κ = 1e5) the Gram route itself is accurate enough
    y = (q * np.logspace(0, -5, d)) @ v.T
    assert not spectral.analyze(torch.from_numpy(y), plain=True).plain.exact  # type: ignore[union-attr]
    assert_matches(embedding_diagnostics(torch.from_numpy(y)), naive(y), SPEC_REL)


def test_safety_net_qr_over_row_chunks() -> None:
    """The QR route factors tall matrices a chunk at a time (no float64 copy of float32 input);
    the spectra agree with one QR and with the naive SVD."""
    g = np.random.default_rng(8)
    n, d = 3000, 24
    q, _ = np.linalg.qr(g.standard_normal((n, d)))
    v, _ = np.linalg.qr(g.standard_normal((d, d)))
    x = ((q * np.logspace(0, -9, d)) @ v.T + 0.01).astype(np.float32)  # κ ≈ 1e7 in float32
    want = naive(x.astype(np.float64))
    xt = torch.from_numpy(x)
    chunked = spectral.analyze(xt, plain=True, centered=True, chunk_size=256)
    one = spectral.analyze(xt, plain=True, centered=True)
    assert chunked.plain is not None and chunked.plain.exact
    for a, b in ((chunked.plain, one.plain), (chunked.centered, one.centered)):
        assert a is not None and b is not None
        torch.testing.assert_close(a.sigma, b.sigma, rtol=1e-9, atol=1e-9 * float(b.sigma[0]))
    assert_matches(embedding_diagnostics(xt, chunk_size=256), want, SPEC_REL)


def test_safety_net_per_spectrum() -> None:
    """Rank-deficient centered matrix (collinear rows + offset), full-rank raw matrix."""
    g = np.random.default_rng(6)
    x = low_rank(500, 30, 10, seed=6) + g.standard_normal(30) * 3.0
    x = np.hstack([x, np.full((500, 1), 2.0)])  # constant column: X_c loses a rank, X does not
    a = spectral.analyze(torch.from_numpy(x), plain=True, centered=True)
    assert a.plain is not None and a.centered is not None
    assert a.centered.exact and a.centered.rank == 10
    want = naive(x)
    got = embedding_diagnostics(torch.from_numpy(x))
    assert_matches(got, want, SPEC_REL)
    assert stable_rank(torch.from_numpy(x)) == pytest.approx(got["stable_rank"], rel=1e-12)
    assert nesum(torch.from_numpy(x)) == pytest.approx(got["nesum"], rel=1e-12)


def test_input_types_accepted() -> None:
    x = MATS["tall"]
    want = embedding_diagnostics(torch.from_numpy(x))
    assert_matches(embedding_diagnostics(x), want, {k: 1e-12 for k in KEYS})  # numpy array
    half = torch.from_numpy(x).to(torch.bfloat16)
    got = embedding_diagnostics(half)
    assert_matches(got, naive(half.double().numpy()), SPEC_REL)
    assert isinstance(rankme(torch.from_numpy(x).half()), float)


def test_higher_is_better_covers_every_key() -> None:
    assert set(HIGHER_IS_BETTER) == KEYS
    assert HIGHER_IS_BETTER["rankme"] is True
    assert HIGHER_IS_BETTER["coherence"] is None


# ------------------------------------------------------------------------------------------
# reference (google-research) mode
# ------------------------------------------------------------------------------------------


def test_reference_mode_on_zeros() -> None:
    x = torch.zeros(16, 4)
    want = {
        "rankme": 1.0,
        "coherence": 4.0,
        "condition_number": 0.0,
        "alpha_req": 0.0,
        "stable_rank": 0.0,
        "nesum": 4.0,
        "self_cluster": 1.0,
    }
    got = embedding_diagnostics(x, reference=True)
    assert set(got) == KEYS
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    assert rankme(x, reference=True) == pytest.approx(1.0, abs=1e-6)
    assert coherence(x, reference=True) == pytest.approx(4.0)
    assert condition_number(x, reference=True) == 0.0
    assert alpha_req(x, reference=True) == pytest.approx(0.0, abs=1e-9)
    assert stable_rank(x, reference=True) == 0.0
    assert nesum(x, reference=True) == pytest.approx(4.0)
    assert self_cluster(x, reference=True) == pytest.approx(1.0)


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (2, 1), (2, 2), (13, 12), (200, 1)])
def test_degenerate_shapes(shape: tuple[int, int]) -> None:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = embedding_diagnostics(x)
        assert_matches(got, embedding_diagnostics(x, method="svd"), {k: 1e-9 for k in KEYS})
        assert_matches(got, naive(x.numpy()), SPEC_REL)
        reference = embedding_diagnostics(x, reference=True)
    assert set(reference) == KEYS
    if min(shape) == 1:
        assert math.isnan(got["self_cluster"]) and math.isnan(reference["self_cluster"])


def test_reference_mode_matches_gr_formulas() -> None:
    d321 = t64(np.diag([3.0, 2.0, 1.0]))
    assert condition_number(d321, reference=True) == pytest.approx(1 / 3)
    x = MATS["tall"]
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    p = s / np.sum(s + 1e-12) + 1e-12
    got = embedding_diagnostics(torch.from_numpy(x), reference=True)
    assert got["rankme"] == pytest.approx(float(np.exp(-np.sum(p * np.log(p)))), rel=1e-12)
    assert got["stable_rank"] == pytest.approx(float((x**2).sum() / (s[0] ** 2 + 1e-12)))
    assert got["coherence"] == pytest.approx(float((u**2).sum(axis=1).max() * 300 / 40))
    w = (x + 1e-12) / np.linalg.norm(x + 1e-12, axis=1)[:, None]
    e = 300 + 300 * 299 / 40
    sc = (float(((w @ w.T) ** 2).sum()) - e) / (300 * 300 - e)
    assert got["self_cluster"] == pytest.approx(sc, rel=1e-9)
    ev = np.linalg.eigvalsh(np.cov(x.T)) + 1e-12
    assert got["nesum"] == pytest.approx(float((ev / ev[-1]).sum()), rel=1e-12)


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------


def test_nan_rows_raise_with_count() -> None:
    x = torch.randn(10, 4, dtype=torch.float64)
    x[2, 1] = float("nan")
    x[7, 0] = float("inf")
    with pytest.raises(ValueError, match="2 of 10 rows"):
        rankme(x)
    with pytest.raises(ValueError, match="2 of 10 rows"):
        embedding_diagnostics(x)


def test_drop_rows_policy() -> None:
    clean = torch.from_numpy(MATS["tall"])
    dirty = torch.cat([clean[:5], torch.full((2, 40), float("nan")), clean[5:]])
    with pytest.warns(RuntimeWarning, match="dropped 2 of 302"):
        got = embedding_diagnostics(dirty, nan_policy="drop_rows")
    assert_matches(got, embedding_diagnostics(clean), {k: 1e-12 for k in KEYS})
    with pytest.warns(RuntimeWarning, match="dropped 2"):
        assert stable_rank(dirty, nan_policy="drop_rows") == pytest.approx(stable_rank(clean))


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (torch.ones(5), ValueError, "2-D"),
        (torch.ones(2, 3, 4), ValueError, "2-D"),
        (torch.ones(4, 3, dtype=torch.int64), TypeError, "floating dtype"),
        ([[1.0, 2.0]], TypeError, "torch.Tensor or numpy array"),
        (torch.ones(0, 3), ValueError, "at least one row"),
    ],
)
def test_bad_input(value: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        embedding_diagnostics(value)  # type: ignore[arg-type]
    with pytest.raises(error, match=match):
        coherence(value)  # type: ignore[arg-type]


def test_bad_options() -> None:
    x = torch.randn(20, 3)
    with pytest.raises(ValueError, match="nan_policy"):
        rankme(x, nan_policy="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fit_range"):
        alpha_req(x, fit_range=(0, 10))
    with pytest.raises(ValueError, match="fit_range"):
        alpha_req(x, fit_range=(20, 10))
    with pytest.raises(ValueError, match="side"):
        coherence(x, side="W")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sigma_min"):
        condition_number(x, sigma_min="smallest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_size"):
        embedding_diagnostics(x, chunk_size=0)
    with pytest.raises(ValueError, match="method"):
        embedding_diagnostics(x, method="gram")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# directional collapse: mean cosine and mean norm
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MATS))
def test_mean_cosine_matches_naive_pairwise(name: str) -> None:
    x = MATS[name]
    want = naive_directions(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero_rows: dropped rows
        got = mean_cosine(torch.from_numpy(x), chunk_size=17)
        suite = embedding_diagnostics(torch.from_numpy(x))
    assert got == pytest.approx(want["mean_cosine"], rel=1e-10, abs=1e-10)
    assert suite["mean_cosine"] == pytest.approx(want["mean_cosine"], rel=1e-10, abs=1e-10)
    assert mean_norm(x) == pytest.approx(want["mean_norm"], rel=1e-12)
    assert suite["mean_norm"] == pytest.approx(want["mean_norm"], rel=1e-12)


def test_mean_cosine_known_answers() -> None:
    g = np.random.default_rng(7)
    row = g.standard_normal(16)
    assert mean_cosine(np.tile(row, (50, 1))) == pytest.approx(1.0, abs=1e-12)
    scaled = np.outer(np.linspace(0.1, 9.0, 40), row)  # one direction, different norms
    assert mean_cosine(scaled) == pytest.approx(1.0, abs=1e-12)
    assert mean_cosine(np.vstack([row, -row])) == pytest.approx(-1.0, abs=1e-12)
    assert mean_cosine(t64(PM1)) == pytest.approx(-1 / 3, abs=1e-12)  # 4 rows summing to 0
    isotropic = g.standard_normal((4000, 64))
    assert abs(mean_cosine(isotropic)) < 1e-3
    shifted = isotropic + 3.0  # every row pushed towards (1, ..., 1): directional collapse
    assert mean_cosine(shifted) > 0.8
    assert effective_rank(shifted) > 60  # which the centered rank does not see
    assert mean_norm(t64([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]])) == pytest.approx(7 / 3)
    f32 = isotropic.astype(np.float32) + 3.0
    assert mean_cosine(f32) == pytest.approx(naive_directions(f32)["mean_cosine"], rel=1e-10)


def test_mean_cosine_zero_rows_dropped_not_nan() -> None:
    x = MATS["zero_rows"]
    with pytest.warns(RuntimeWarning, match="mean_cosine: dropped 3 of 153 all-zero"):
        value = mean_cosine(x)
    assert value == pytest.approx(mean_cosine(x[:150]), rel=1e-12)
    with pytest.warns(RuntimeWarning, match="self_cluster and mean_cosine: dropped 3 of 153"):
        got = embedding_diagnostics(x)
    assert got["mean_cosine"] == pytest.approx(value, rel=1e-12)
    assert got["mean_norm"] == pytest.approx(np.linalg.norm(x, axis=1).mean(), rel=1e-12)
    with pytest.warns(RuntimeWarning, match="dropped 5 of 5"):
        assert math.isnan(mean_cosine(np.zeros((5, 3))))  # no direction left: NaN, warned
    assert mean_norm(np.zeros((5, 3))) == 0.0
    assert math.isnan(mean_cosine(np.ones((1, 3))))  # a single row has no pair


def test_mean_cosine_input_checks() -> None:
    bad = np.ones((10, 3))
    bad[[2, 5]] = np.nan
    with pytest.raises(ValueError, match="2 of 10 rows"):
        mean_cosine(bad)
    with pytest.warns(RuntimeWarning, match="dropped 2 of 10"):
        assert mean_cosine(bad, nan_policy="drop_rows") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="chunk_size"):
        mean_norm(bad, chunk_size=0)
