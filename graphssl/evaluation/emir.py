"""EMIR: information sufficiency between embedders and embedder informativeness.

Darrin et al., *When is an Embedding Model More Promising than Another?*, NeurIPS 2024
(https://arxiv.org/abs/2406.07640), estimator from KNIFE (Pichler et al., ICML 2022,
https://arxiv.org/abs/2202.06618). Reference code: ``ills-montreal/emir``
(``emir/estimators/knife_estimator.py``, ``kernels/gaussian_kernel.py``,
``kernels/feed_forward.py``).

For two embedders of the same N inputs, ``U`` ``[N, d_U]`` (source) and ``Z`` ``[N, d_Z]``
(target)::

    I_S(U -> Z) = H(Z) - H(Z | U)          (nats; asymmetric)

where both entropies are KNIFE cross-entropy estimates: a diagonal Gaussian mixture fitted to ``z``
(:class:`MarginalKernel`) and a Gaussian mixture whose weights, means and scales are produced from
``u`` by a small feed-forward net (:class:`ConditionalKernel`), both trained by maximum likelihood
and evaluated on the training samples (spec ``metrics-spec.md`` §10). Pairs are turned into a model
score by :func:`informativeness` (median over reference targets of ``I_S(U -> Z) / d_Z``;
higher is better), and into a predictiveness graph whose Louvain communities group embedders that
carry the same information (:func:`predictiveness_graph`, :func:`communities`).
:func:`cross_encoder_l2` is the reconstruction-error baseline of the EMIR rebuttal (lower is
better).

Known limitation (spec §10.5): the scale clamp ``s = exp(tanh(l))`` bounds every component's
std to ``[1/e, e]``, so ``H(Z|U) / d_Z >= 1/2 log(2 pi) - 1 = -0.0811`` and ``I_S / d_Z`` is
capped at about 1.5 nats for z-scored targets, whatever ``U`` is.
"""

from __future__ import annotations

import copy
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import networkx as nx
import numpy as np
import torch
from networkx.algorithms.community import louvain_communities
from torch import Tensor, nn
from tqdm.auto import tqdm

from graphssl.evaluation._checks import as_float_matrix

__all__ = [
    "ConditionalKernel",
    "EMIRConfig",
    "EMIRResult",
    "MarginalKernel",
    "communities",
    "cross_encoder_l2",
    "cross_encoder_ranking",
    "fit_conditional",
    "fit_marginal",
    "information_sufficiency",
    "informativeness",
    "pairwise_cross_encoder_l2",
    "pairwise_information_sufficiency",
    "predictiveness_graph",
    "zscore",
]

#: ``-log p(z|u) / d_Z`` can never go below this (std >= 1/e under the tanh clamp, §10.5).
CONDITIONAL_ENTROPY_FLOOR_PER_DIM: float = 0.5 * math.log(2.0 * math.pi) - 1.0
#: Differential entropy per dimension of a standard normal, ``1/2 log(2 pi e)``.
GAUSSIAN_ENTROPY_PER_DIM: float = 0.5 * math.log(2.0 * math.pi * math.e)

_EVAL_BATCH = 4096  # evaluation only; does not change any value
_LOG_EPS = 1e-8  # added inside log|s| as the reference code does


# --------------------------------------------------------------------------------------------
# Configuration and result
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EMIRConfig:
    """Hyperparameters of the KNIFE-based ``I_S`` estimator (defaults: ``KNIFEArgs``, spec §10.6).

    Args:
        batch_size: minibatch size for both kernels (default: ``64``).
        marg_modes: mixture components of the marginal ``p(z)`` (default: ``8``).
        cond_modes: mixture components of the conditional ``p(z|u)`` (default: ``8``).
        ff_layers: ``[LayerNorm -> Linear -> ReLU]`` blocks before the output layer of the
            conditional net (default: ``2``, i.e. 3 Linear layers).
        ff_dim_hidden: hidden width of the conditional net; ``0`` means ``d_Z`` (default: ``0``).
        lr: Adam learning rate of the conditional kernel (default: ``1e-3``).
        margin_lr: Adam learning rate of the marginal kernel (default: ``1e-3``).
        n_epochs: epochs of the conditional kernel (default: ``10``).
        n_epochs_marg: epochs of the marginal kernel (default: ``5``).
        use_tanh: scale ``s = exp(tanh(l))`` (std in ``[1/e, e]``) instead of ``exp(l)``
            (default: ``True``).
        optimize_mu: learn ``marg_modes`` marginal means; if ``False`` the marginal uses
            ``batch_size`` fixed means drawn from the data (KDE-like variant) (default: ``True``,
            as in every EMIR config).
        average: ``"var"`` learns the mixture weights of the marginal, ``"fixed"`` keeps them
            uniform (default: ``"var"``).
        init_std: std of the random initialisation of means and log-scales (default: ``0.01``).
        stopping_criterion: ``"max_epochs"`` or ``"early_stopping"`` for the conditional kernel
            (default: ``"max_epochs"``).
        eps: early stop when ``|(L_t - L_{t-1}) / H(Z)| < eps`` ... (default: ``1e-3``).
        n_epochs_stop: ... for this many consecutive epochs (default: ``1``).
        held_out: evaluate both entropies on a held-out part instead of the training samples
            (default: ``False``, as the reference code).
        held_out_fraction: size of the held-out part when ``held_out`` (default: ``0.2``).
        seed: seeds initialisation, shuffling and the held-out split (default: ``0``).
        device: where the kernels are trained (default: ``"cpu"``).
        n_jobs: worker processes of :func:`pairwise_information_sufficiency`, one target column
            at a time each, ``cpu_count // n_jobs`` torch threads per worker; ``-1`` means one
            per CPU core. The kernels train on minibatches of 64, where one single-threaded
            process per core beats one process with many threads (benchmarks/bench_emir.py).
            Every pair is seeded on its own, so the matrix does not depend on it
            (default: ``1``, in this process).
    """

    batch_size: int = 64
    marg_modes: int = 8
    cond_modes: int = 8
    ff_layers: int = 2
    ff_dim_hidden: int = 0
    lr: float = 1e-3
    margin_lr: float = 1e-3
    n_epochs: int = 10
    n_epochs_marg: int = 5
    use_tanh: bool = True
    optimize_mu: bool = True
    average: Literal["var", "fixed"] = "var"
    init_std: float = 0.01
    stopping_criterion: Literal["max_epochs", "early_stopping"] = "max_epochs"
    eps: float = 1e-3
    n_epochs_stop: int = 1
    held_out: bool = False
    held_out_fraction: float = 0.2
    seed: int = 0
    device: str = "cpu"
    n_jobs: int = 1

    def __post_init__(self) -> None:
        if (
            not isinstance(self.n_jobs, int)
            or isinstance(self.n_jobs, bool)
            or (self.n_jobs < 1 and self.n_jobs != -1)
        ):
            raise ValueError(
                f"EMIRConfig.n_jobs must be a positive integer or -1 (all cores), got "
                f"{self.n_jobs!r}"
            )
        for name in ("batch_size", "marg_modes", "cond_modes", "n_epochs_stop"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EMIRConfig.{name} must be a positive integer, got {value!r}")
        for name in ("ff_layers", "ff_dim_hidden", "n_epochs", "n_epochs_marg"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"EMIRConfig.{name} must be a non-negative integer, got {value!r}")
        if self.average not in ("var", "fixed"):
            raise ValueError(f"EMIRConfig.average must be 'var' or 'fixed', got {self.average!r}")
        if self.stopping_criterion not in ("max_epochs", "early_stopping"):
            raise ValueError(
                "EMIRConfig.stopping_criterion must be 'max_epochs' or 'early_stopping', got "
                f"{self.stopping_criterion!r}"
            )
        if not 0.0 < self.held_out_fraction < 1.0:
            raise ValueError(
                f"EMIRConfig.held_out_fraction must be in (0, 1), got {self.held_out_fraction!r}"
            )
        if self.lr <= 0 or self.margin_lr <= 0:
            raise ValueError(
                f"EMIRConfig learning rates must be positive, got lr={self.lr!r}, "
                f"margin_lr={self.margin_lr!r}"
            )


@dataclass(frozen=True)
class EMIRResult:
    """Outcome of one ``I_S(U -> Z)`` estimate (entropies in nats).

    Attributes:
        h_z: marginal cross-entropy estimate ``H(Z)``.
        h_z_given_u: conditional cross-entropy estimate ``H(Z|U)``.
        i_s: ``h_z - h_z_given_u``.
        i_s_per_dim: ``i_s / d_z`` (the quantity EMIR aggregates).
        d_u: dimensions of ``U`` used (after dropping zero-variance ones).
        d_z: dimensions of ``Z`` used (after dropping zero-variance ones).
        dropped_u: zero-variance dimensions dropped from ``U``.
        dropped_z: zero-variance dimensions dropped from ``Z``.
        n_eval: samples the entropies were averaged over.
    """

    h_z: float
    h_z_given_u: float
    i_s: float
    i_s_per_dim: float
    d_u: int
    d_z: int
    dropped_u: int = 0
    dropped_z: int = 0
    n_eval: int = 0


# --------------------------------------------------------------------------------------------
# Preprocessing and validation
# --------------------------------------------------------------------------------------------


def zscore(
    embeddings: Tensor, eps: float = 1e-8, *, name: str = "embeddings"
) -> tuple[Tensor, int]:
    """Standardise every dimension (spec §10.2): ``(E - mean) / (std + eps)``, unbiased std.

    Dimensions whose values are all equal carry no information and would divide by ``eps``
    only; they are dropped, and how many is returned (and warned about).

    Args:
        embeddings: ``[N, D]`` matrix, ``N >= 2``, finite.
        eps: added to the std (default: ``1e-8``).
        name: how the matrix is called in messages.

    Returns:
        ``(Z, n_dropped)`` with ``Z`` float64 of shape ``[N, D - n_dropped]``.

    Raises:
        ValueError: for fewer than two rows, non-finite rows, or when every dimension is constant.
    """
    x = as_float_matrix(embeddings, name=name)
    if x.shape[0] < 2:
        raise ValueError(
            f"{name} has {x.shape[0]} row; z-scoring needs at least 2 rows (unbiased std)"
        )
    constant = x.amax(dim=0) == x.amin(dim=0)
    n_dropped = int(constant.sum())
    if n_dropped == x.shape[1]:
        raise ValueError(
            f"all {x.shape[1]} dimensions of {name} are constant; nothing to estimate from"
        )
    if n_dropped:
        warnings.warn(
            f"{name}: dropped {n_dropped} of {x.shape[1]} zero-variance dimensions before "
            "z-scoring",
            stacklevel=2,
        )
        x = x[:, ~constant]
    x = (x - x.mean(dim=0)) / (x.std(dim=0) + eps)
    return x, n_dropped


def _validate_embeddings(
    embeddings: Mapping[str, Tensor], *, minimum: int = 2
) -> dict[str, Tensor]:
    """Check names, shapes and row counts of a ``{name: [N, d_name]}`` mapping."""
    if not isinstance(embeddings, Mapping):
        raise TypeError(
            f"embeddings must be a mapping {{name: [N, D] tensor}}, got {type(embeddings).__name__}"
        )
    if len(embeddings) < minimum:
        raise ValueError(
            f"need at least {minimum} embedders to compare, got {len(embeddings)}: "
            f"{sorted(map(str, embeddings))}"
        )
    out: dict[str, Tensor] = {}
    for key, value in embeddings.items():
        if not isinstance(key, str):
            raise TypeError(f"embedder names must be strings, got {key!r}")
        out[key] = as_float_matrix(value, name=f"embeddings[{key!r}]")
    rows = {key: int(value.shape[0]) for key, value in out.items()}
    if len(set(rows.values())) > 1:
        raise ValueError(
            f"embedders have different numbers of rows: {rows}; every embedder must embed the "
            "same N inputs in the same order (one row per input)"
        )
    return out


def _check_pair(u: Tensor, z: Tensor, u_name: str = "u", z_name: str = "z") -> None:
    if u.shape[0] != z.shape[0]:
        raise ValueError(
            f"{u_name} has {u.shape[0]} rows but {z_name} has {z.shape[0]}; expected the "
            "embeddings of the same N inputs, one row per input in the same order"
        )


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


def _mixture_logpdf(
    z: Tensor, log_w: Tensor, mu: Tensor, raw_scale: Tensor, use_tanh: bool
) -> Tensor:
    """Log-density of a diagonal Gaussian mixture parametrised by precision scales.

    Args:
        z: ``[B, d]`` points.
        log_w: ``[B or 1, K]`` log mixture weights.
        mu: ``[B or 1, K, d]`` means.
        raw_scale: ``[B or 1, K, d]`` ``l``, with ``s = exp(tanh(l))`` (or ``exp(l)``).
        use_tanh: apply the tanh clamp.

    Returns:
        ``[B]`` ``log p(z)``.
    """
    log_s = torch.tanh(raw_scale) if use_tanh else raw_scale
    s = log_s.exp()
    y = s * (z.unsqueeze(1) - mu)  # [B, K, d]
    quad = (y * y).sum(dim=-1)  # [B, K]
    # The reference takes log(|s| + 1e-8). Under the tanh clamp s >= 1/e, where the 1e-8 is below
    # half an ulp of s in float32 (s + 1e-8 == s), so log|s| = tanh(l) up to rounding.
    log_det = log_s.sum(dim=-1) if use_tanh else torch.log(s.abs() + _LOG_EPS).sum(dim=-1)
    d = z.shape[-1]
    return torch.logsumexp(log_w + log_det - 0.5 * quad, dim=-1) - 0.5 * d * math.log(2 * math.pi)


class MarginalKernel(nn.Module):
    """KNIFE marginal ``p(z)``: diagonal Gaussian mixture (EMIR ``GaussianMargKernel``, §10.3).

    ``log p(z) = -(d/2) log 2pi``
    ``+ logsumexp_m [log w_m + sum_j log s_mj - 1/2 sum_j (s_mj (z_j - a_mj))^2]``
    with ``w = softmax(logits)``, ``s = exp(tanh(l))``.

    Args:
        dim: ``d_Z``.
        n_modes: number of components (default: ``8``).
        optimize_mu: learn the means; if ``False`` they are fixed (``init_means`` required).
        average: ``"var"`` learns the weights, ``"fixed"`` keeps them uniform (default: ``"var"``).
        use_tanh: tanh clamp of the log-scales (default: ``True``).
        init_std: std of the random init of means and log-scales (default: ``0.01``).
        init_means: optional ``[n_modes, dim]`` initial means.
    """

    def __init__(
        self,
        dim: int,
        n_modes: int = 8,
        *,
        optimize_mu: bool = True,
        average: str = "var",
        use_tanh: bool = True,
        init_std: float = 0.01,
        init_means: Tensor | None = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.n_modes = n_modes
        self.use_tanh = use_tanh
        if init_means is None:
            if not optimize_mu:
                raise ValueError("MarginalKernel(optimize_mu=False) needs init_means [K, d]")
            init_means = init_std * torch.randn(n_modes, dim)
        if tuple(init_means.shape) != (n_modes, dim):
            raise ValueError(
                f"init_means has shape {tuple(init_means.shape)}; expected ({n_modes}, {dim})"
            )
        self.means = nn.Parameter(init_means.float().clone(), requires_grad=optimize_mu)
        self.raw_scale = nn.Parameter(init_std * torch.randn(1, n_modes, dim))
        self.logits = nn.Parameter(torch.ones(1, n_modes), requires_grad=average == "var")

    def forward(self, z: Tensor) -> Tensor:
        """``[B, d]`` -> ``[B]`` ``log p(z)``."""
        log_w = torch.log_softmax(self.logits, dim=-1)
        return _mixture_logpdf(z, log_w, self.means.unsqueeze(0), self.raw_scale, self.use_tanh)


class ConditionalKernel(nn.Module):
    """KNIFE conditional ``p(z|u)`` (EMIR ``GaussianCondKernel``, §10.4).

    A feed-forward net maps ``u`` to ``K`` triples (mixture logit, mean ``mu_k(u)``, log-scale
    ``l_k(u)``); the density has the form of :class:`MarginalKernel`. Net: ``ff_layers`` x
    ``[LayerNorm(in) -> Linear(in, h) -> ReLU]`` then ``Linear(h, K (2 d_Z + 1))``.

    Args:
        dim_u: ``d_U``.
        dim_z: ``d_Z``.
        n_modes: ``K`` (default: ``8``).
        ff_layers: hidden blocks (default: ``2``).
        hidden: hidden width; ``0`` means ``dim_z`` (default: ``0``).
        use_tanh: tanh clamp of the log-scales (default: ``True``).
    """

    def __init__(
        self,
        dim_u: int,
        dim_z: int,
        n_modes: int = 8,
        *,
        ff_layers: int = 2,
        hidden: int = 0,
        use_tanh: bool = True,
    ) -> None:
        super().__init__()
        self.dim_u = dim_u
        self.dim_z = dim_z
        self.n_modes = n_modes
        self.use_tanh = use_tanh
        width = hidden if hidden > 0 else dim_z
        layers: list[nn.Module] = []
        d_in = dim_u
        for _ in range(ff_layers):
            layers += [nn.LayerNorm(d_in), nn.Linear(d_in, width), nn.ReLU()]
            d_in = width
        layers.append(nn.Linear(d_in, n_modes * (2 * dim_z + 1)))
        self.net = nn.Sequential(*layers)

    def forward(self, u: Tensor, z: Tensor) -> Tensor:
        """``u`` ``[B, d_U]``, ``z`` ``[B, d_Z]`` -> ``[B]`` ``log p(z|u)``."""
        out = self.net(u).view(u.shape[0], self.n_modes, 2 * self.dim_z + 1)
        logits, mu, raw_scale = out.split([1, self.dim_z, self.dim_z], dim=-1)
        log_w = torch.log_softmax(logits.squeeze(-1), dim=-1)
        return _mixture_logpdf(z, log_w, mu, raw_scale, self.use_tanh)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


_T = TypeVar("_T")


def _build_seeded(seed: int, build: Callable[[], _T]) -> _T:
    """Run ``build()`` with the CPU generator seeded, leaving the global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return build()


def _adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam over the trainable parameters; the fused kernel (same update rule, fewer ops per
    step) where this PyTorch build offers it for the parameters' device."""
    trainable = [p for p in params if p.requires_grad]
    try:
        return torch.optim.Adam(trainable, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(trainable, lr=lr)


def _shuffled_batches(
    tensors: Sequence[Tensor], batch_size: int, generator: torch.Generator
) -> Iterator[list[Tensor]]:
    """One epoch of shuffled minibatches (last one may be smaller, like ``DataLoader``).

    The rows are permuted once per epoch (one gather), then cut into contiguous slices.
    """
    n = tensors[0].shape[0]
    perm = torch.randperm(n, generator=generator).to(tensors[0].device)
    shuffled = [t[perm] for t in tensors]
    for start in range(0, n, batch_size):
        yield [t[start : start + batch_size] for t in shuffled]


def _split(n: int, config: EMIRConfig) -> tuple[Tensor | None, Tensor | None]:
    """``(train_idx, eval_idx)``; ``None`` means all rows (the default, as the reference code),
    a seeded random split when ``config.held_out``."""
    if not config.held_out:
        return None, None
    n_eval = round(n * config.held_out_fraction)
    if n_eval < 1 or n - n_eval < 1:
        raise ValueError(
            f"held_out_fraction={config.held_out_fraction} of {n} rows leaves an empty part; "
            "use more rows or held_out=False"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(config.seed))
    return perm[n_eval:], perm[:n_eval]


def _take(x: Tensor, idx: Tensor | None) -> Tensor:
    return x if idx is None else x[idx.to(x.device)]


@torch.no_grad()
def _mean_nll_marginal(kernel: MarginalKernel, z: Tensor) -> float:
    total = 0.0
    for start in range(0, z.shape[0], _EVAL_BATCH):
        total += float(-kernel(z[start : start + _EVAL_BATCH]).double().sum())
    return total / z.shape[0]


@torch.no_grad()
def _mean_nll_conditional(kernel: ConditionalKernel, u: Tensor, z: Tensor) -> float:
    total = 0.0
    for start in range(0, z.shape[0], _EVAL_BATCH):
        sl = slice(start, start + _EVAL_BATCH)
        total += float(-kernel(u[sl], z[sl]).double().sum())
    return total / z.shape[0]


def _train_marginal(z: Tensor, config: EMIRConfig) -> MarginalKernel:
    """Fit a :class:`MarginalKernel` to already z-scored float32 ``z`` on ``config.device``."""
    n, d = z.shape

    def build() -> MarginalKernel:
        init_means = None
        if not config.optimize_mu:
            pick = torch.randperm(n)[: config.batch_size]
            init_means = z[pick].detach().cpu().float()
        k = config.marg_modes if config.optimize_mu else int(min(config.batch_size, n))
        return MarginalKernel(
            d,
            k,
            optimize_mu=config.optimize_mu,
            average=config.average,
            use_tanh=config.use_tanh,
            init_std=config.init_std,
            init_means=init_means,
        )

    kernel = _build_seeded(config.seed, build).to(config.device)
    optimizer = _adam(kernel.parameters(), config.margin_lr)
    generator = torch.Generator().manual_seed(config.seed)
    kernel.train()
    for _ in range(config.n_epochs_marg):
        for (z_batch,) in _shuffled_batches([z], config.batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            loss = -kernel(z_batch).mean()
            loss.backward()
            optimizer.step()
    kernel.eval()
    kernel.requires_grad_(False)
    return kernel


def _train_conditional(u: Tensor, z: Tensor, h_z: float, config: EMIRConfig) -> ConditionalKernel:
    """Fit a :class:`ConditionalKernel` to z-scored float32 ``(u, z)``; ``h_z`` for early stop."""
    n = z.shape[0]
    kernel = _build_seeded(
        config.seed + 1,
        lambda: ConditionalKernel(
            u.shape[1],
            z.shape[1],
            config.cond_modes,
            ff_layers=config.ff_layers,
            hidden=config.ff_dim_hidden,
            use_tanh=config.use_tanh,
        ),
    ).to(config.device)
    optimizer = _adam(kernel.parameters(), config.lr)
    generator = torch.Generator().manual_seed(config.seed + 1)
    kernel.train()
    previous: float | None = None
    calm_epochs = 0
    for _ in range(config.n_epochs):
        epoch_loss = torch.zeros((), dtype=torch.float64, device=z.device)
        for u_batch, z_batch in _shuffled_batches([u, z], config.batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            loss = -kernel(u_batch, z_batch).mean()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.detach().double() * z_batch.shape[0]
        if config.stopping_criterion == "early_stopping":
            current = float(epoch_loss) / n
            if previous is not None and abs((current - previous) / (h_z + 1e-8)) < config.eps:
                calm_epochs += 1
                if calm_epochs >= config.n_epochs_stop:
                    break
            else:
                calm_epochs = 0
            previous = current
    kernel.eval()
    return kernel


def _prepare(x: Tensor, name: str, config: EMIRConfig) -> tuple[Tensor, int]:
    standardized, dropped = zscore(x, name=name)
    return standardized.to(device=config.device, dtype=torch.float32), dropped


def fit_marginal(z: Tensor, config: EMIRConfig | None = None) -> MarginalKernel:
    """Fit the marginal ``p(z)`` of a target once, to reuse for every source (spec §10.3).

    Args:
        z: ``[N, d_Z]`` raw target embeddings (z-scored here exactly as in
            :func:`information_sufficiency`).
        config: estimator settings (default: :class:`EMIRConfig` ``()``).

    Returns:
        A frozen :class:`MarginalKernel` on ``config.device``, trained on the training rows of
        the (seeded) split that :func:`information_sufficiency` uses with the same config.
    """
    config = config or EMIRConfig()
    zs, _ = _prepare(z, "z", config)
    train_idx, _ = _split(zs.shape[0], config)
    return _train_marginal(_take(zs, train_idx), config)


def fit_conditional(
    u: Tensor,
    z: Tensor,
    config: EMIRConfig | None = None,
    marginal: MarginalKernel | None = None,
) -> ConditionalKernel:
    """Fit the conditional ``p(z|u)`` on z-scored ``(u, z)`` (spec §10.4).

    The marginal is only needed for ``config.stopping_criterion == "early_stopping"`` (the
    criterion is relative to ``H(Z)``); it is fitted then unless given.

    Returns:
        The trained :class:`ConditionalKernel` (eval mode) on ``config.device``.
    """
    config = config or EMIRConfig()
    _check_pair(as_float_matrix(u, name="u"), as_float_matrix(z, name="z"))
    us, _ = _prepare(u, "u", config)
    zs, _ = _prepare(z, "z", config)
    train_idx, eval_idx = _split(zs.shape[0], config)
    h_z = float("nan")
    if config.stopping_criterion == "early_stopping":
        if marginal is None:
            marginal = _train_marginal(_take(zs, train_idx), config)
        h_z = _mean_nll_marginal(marginal, _take(zs, eval_idx))
    return _train_conditional(_take(us, train_idx), _take(zs, train_idx), h_z, config)


# --------------------------------------------------------------------------------------------
# Information sufficiency
# --------------------------------------------------------------------------------------------


def _information_sufficiency_prepared(
    us: Tensor,
    zs: Tensor,
    h_z: float,
    config: EMIRConfig,
    dropped_u: int,
    dropped_z: int,
) -> EMIRResult:
    train_idx, eval_idx = _split(zs.shape[0], config)
    conditional = _train_conditional(_take(us, train_idx), _take(zs, train_idx), h_z, config)
    z_eval = _take(zs, eval_idx)
    h_z_given_u = _mean_nll_conditional(conditional, _take(us, eval_idx), z_eval)
    i_s = h_z - h_z_given_u
    return EMIRResult(
        h_z=h_z,
        h_z_given_u=h_z_given_u,
        i_s=i_s,
        i_s_per_dim=i_s / zs.shape[1],
        d_u=int(us.shape[1]),
        d_z=int(zs.shape[1]),
        dropped_u=dropped_u,
        dropped_z=dropped_z,
        n_eval=int(z_eval.shape[0]),
    )


def information_sufficiency(
    u: Tensor,
    z: Tensor,
    config: EMIRConfig | None = None,
    marginal: MarginalKernel | None = None,
) -> EMIRResult:
    """Estimate ``I_S(U -> Z) = H(Z) - H(Z|U)`` in nats (spec §10.1-10.5).

    Both embeddings are z-scored per dimension (zero-variance dimensions dropped), the marginal
    is fitted (or ``marginal`` reused), the conditional is fitted with the marginal frozen, and
    both cross-entropies are averaged over the training rows (or the held-out rows when
    ``config.held_out``).

    Args:
        u: ``[N, d_U]`` source embeddings.
        z: ``[N, d_Z]`` target embeddings of the same N inputs, same order.
        config: estimator settings (default: :class:`EMIRConfig` ``()``).
        marginal: a kernel from :func:`fit_marginal` ``(z, config)`` to skip refitting it.

    Returns:
        :class:`EMIRResult`; ``i_s_per_dim = i_s / d_Z`` is what EMIR compares.

    Raises:
        ValueError: different row counts, non-finite rows, or a ``marginal`` of the wrong size.
    """
    config = config or EMIRConfig()
    _check_pair(as_float_matrix(u, name="u"), as_float_matrix(z, name="z"))
    us, dropped_u = _prepare(u, "u", config)
    zs, dropped_z = _prepare(z, "z", config)
    train_idx, eval_idx = _split(zs.shape[0], config)
    if marginal is None:
        marginal = _train_marginal(_take(zs, train_idx), config)
    elif marginal.dim != zs.shape[1]:
        raise ValueError(
            f"marginal was fitted on {marginal.dim} dimensions but z has {zs.shape[1]} after "
            "dropping constant ones; fit it with fit_marginal(z, config)"
        )
    h_z = _mean_nll_marginal(marginal, _take(zs, eval_idx))
    return _information_sufficiency_prepared(us, zs, h_z, config, dropped_u, dropped_z)


def _progress(items: Sequence[_T], enabled: bool, desc: str) -> Iterable[_T]:
    """``items`` wrapped in a tqdm bar when ``enabled`` and stderr is a terminal."""
    if not enabled:
        return items
    return tqdm(items, total=len(items), desc=desc, disable=not sys.stderr.isatty())


def _target_column(
    j: int,
    names: Sequence[str],
    prepared: Mapping[str, tuple[Tensor, int]],
    config: EMIRConfig,
) -> list[tuple[int, EMIRResult, float]]:
    """``I_S(U -> names[j])`` for every other source: the target's marginal is fitted once.

    Returns ``(source index, result, seconds)`` per source; the marginal's fitting time is
    charged to the first source.
    """
    zs, dropped_z = prepared[names[j]]
    train_idx, eval_idx = _split(zs.shape[0], config)
    t0 = time.perf_counter()
    marginal = _train_marginal(_take(zs, train_idx), config)  # once per target
    h_z = _mean_nll_marginal(marginal, _take(zs, eval_idx))
    out = []
    for i, source in enumerate(names):
        if i == j:
            continue
        us, dropped_u = prepared[source]
        result = _information_sufficiency_prepared(us, zs, h_z, config, dropped_u, dropped_z)
        out.append((i, result, time.perf_counter() - t0))
        t0 = time.perf_counter()
    return out


_WORKER: dict[str, object] = {}


def _init_worker(
    names: Sequence[str], prepared: Mapping[str, tuple[Tensor, int]], config: EMIRConfig
) -> None:
    threads = max(1, (os.cpu_count() or 1) // _n_jobs(config.n_jobs, len(names)))
    torch.set_num_threads(threads)
    _WORKER.update(names=list(names), prepared=dict(prepared), config=config)


def _worker_column(j: int) -> tuple[int, list[tuple[int, EMIRResult, float]]]:
    names, prepared, config = _WORKER["names"], _WORKER["prepared"], _WORKER["config"]
    return j, _target_column(j, names, prepared, config)  # type: ignore[arg-type]


def _n_jobs(n_jobs: int, n_targets: int) -> int:
    jobs = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    return max(1, min(jobs, n_targets))


def pairwise_information_sufficiency(
    embeddings: Mapping[str, Tensor],
    config: EMIRConfig | None = None,
    progress: bool = True,
    on_pair: Callable[[str, str, EMIRResult, float], None] | None = None,
) -> tuple[list[str], Tensor]:
    """``I_S(U -> Z) / d_Z`` for every ordered pair of embedders (spec §10.7).

    Each target's marginal is fitted once and reused for all sources. With
    ``config.n_jobs > 1`` the targets' columns are computed in that many worker processes
    (``spawn``); the values are the same as in one process, because every pair is seeded alone.

    Args:
        embeddings: ``{name: [N, d_name]}``, the same N inputs in the same order everywhere.
        config: estimator settings (default: :class:`EMIRConfig` ``()``).
        progress: show a tqdm bar over pairs (only when stderr is a terminal).
        on_pair: called as ``on_pair(source, target, result, seconds)`` for every pair, in
            this process, as results arrive (``seconds``: the pair's fit, plus the target's
            marginal for its first source).

    Returns:
        ``(names, matrix)``: ``matrix[i, j] = I_S(names[i] -> names[j]) / d_{names[j]}``,
        float64 ``[M, M]`` with a NaN diagonal (rows = sources, columns = targets).
    """
    config = config or EMIRConfig()
    checked = _validate_embeddings(embeddings)
    names = list(checked)
    prepared = {name: _prepare(x, f"embeddings[{name!r}]", config) for name, x in checked.items()}
    matrix = torch.full((len(names), len(names)), float("nan"), dtype=torch.float64)
    n_pairs = len(names) * (len(names) - 1)
    bar = tqdm(total=n_pairs, desc="EMIR pairs", disable=not (progress and sys.stderr.isatty()))

    def collect(j: int, column: list[tuple[int, EMIRResult, float]]) -> None:
        for i, result, seconds in column:
            matrix[i, j] = result.i_s_per_dim
            if on_pair is not None:
                on_pair(names[i], names[j], result, seconds)
            bar.update()

    jobs = _n_jobs(config.n_jobs, len(names))
    try:
        if jobs == 1 or str(config.device) != "cpu":
            for j in range(len(names)):
                collect(j, _target_column(j, names, prepared, config))
        else:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            import torch.multiprocessing as mp

            with ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=mp.get_context("spawn"),
                initializer=_init_worker,
                initargs=(names, prepared, config),
            ) as pool:
                futures = [pool.submit(_worker_column, j) for j in range(len(names))]
                for future in as_completed(futures):
                    collect(*future.result())
    finally:
        bar.close()
    return names, matrix


# --------------------------------------------------------------------------------------------
# Aggregation, graph, communities
# --------------------------------------------------------------------------------------------


def _as_square(matrix: Tensor | np.ndarray, names: Sequence[str]) -> np.ndarray:
    m = np.asarray(
        matrix.detach().cpu() if isinstance(matrix, Tensor) else matrix, dtype=np.float64
    )
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] != len(names):
        raise ValueError(
            f"matrix has shape {m.shape}; expected ({len(names)}, {len(names)}) for "
            f"{len(names)} names"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"names must be unique, got {list(names)}")
    return m


def informativeness(matrix: Tensor | np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """Median over reference targets ``Z != U`` of ``I_S(U -> Z) / d_Z`` (spec §10.7).

    Missing (NaN) pairs are skipped; the median of an even count averages the two middle values
    (pandas/NumPy convention). Higher means a more promising embedder.

    Args:
        matrix: ``[M, M]`` from :func:`pairwise_information_sufficiency` (rows = sources).
        names: the ``M`` embedder names, in matrix order.

    Returns:
        ``{name: score}``; NaN for an embedder without any finite pair.
    """
    m = _as_square(matrix, names)
    scores: dict[str, float] = {}
    for i, name in enumerate(names):
        row = np.delete(m[i], i)
        row = row[~np.isnan(row)]
        scores[name] = float(np.median(row)) if row.size else float("nan")
    return scores


def predictiveness_graph(
    matrix: Tensor | np.ndarray, names: Sequence[str], *, normalize: bool = False
) -> nx.DiGraph:
    """Directed predictiveness graph (spec §10.8): edge ``U -> Z`` per finite off-diagonal pair.

    Edge attribute ``"i_s_per_dim"`` holds the raw value; ``"weight"`` (used by Louvain) is the
    value clipped at 0 (negative ``I_S`` estimates mean "no information", and modularity needs
    non-negative weights), or, with ``normalize=True``, the min-max normalised value over
    off-diagonal pairs as in the EMIR molecule plot. Node attributes: ``"informativeness"``
    (median outgoing value) and ``"predictability"`` (median incoming value).

    Returns:
        ``networkx.DiGraph`` without self-loops.
    """
    m = _as_square(matrix, names)
    off = ~np.eye(len(names), dtype=bool) & ~np.isnan(m)
    if normalize and off.any():
        lo, hi = float(m[off].min()), float(m[off].max())
        weights = (m - lo) / (hi - lo) if hi > lo else np.ones_like(m)
    else:
        weights = np.clip(m, 0.0, None)
    graph = nx.DiGraph()
    out_scores = informativeness(m, names)
    in_scores = informativeness(m.T, names)
    for name in names:
        graph.add_node(name, informativeness=out_scores[name], predictability=in_scores[name])
    for i, source in enumerate(names):
        for j, target in enumerate(names):
            if off[i, j]:
                graph.add_edge(
                    source, target, weight=float(weights[i, j]), i_s_per_dim=float(m[i, j])
                )
    return graph


def communities(graph: nx.DiGraph, resolution: float = 1.1, seed: int = 0) -> list[set[str]]:
    """Louvain communities of a predictiveness graph (``networkx`` ``louvain_communities``).

    Args:
        graph: from :func:`predictiveness_graph`.
        resolution: modularity resolution (default: ``1.1``, EMIR NLP; the molecule notebook
            uses ``1.0``).
        seed: Louvain seed (default: ``0``).

    Returns:
        Communities sorted by their smallest name; every node is its own community when the graph
        has no positive weight.
    """
    total = sum(float(w) for _, _, w in graph.edges(data="weight", default=1.0))
    if total <= 0.0:
        found = [{node} for node in graph.nodes]
    else:
        found = [
            set(c)
            for c in louvain_communities(graph, weight="weight", resolution=resolution, seed=seed)
        ]
    return sorted(found, key=lambda c: min(c))


# --------------------------------------------------------------------------------------------
# Cross-encoder L2 baseline (spec §10.9)
# --------------------------------------------------------------------------------------------


def _cross_encoder(d_u: int, d_z: int, hidden: int) -> nn.Sequential:
    """``Linear(d_U, h)`` -> 2 x [``Linear(h, h)``, ReLU] -> ``Linear(h, d_Z)``."""
    return nn.Sequential(
        nn.Linear(d_u, hidden),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, d_z),
    )


@torch.no_grad()
def _summed_sq_error(model: nn.Module, u: Tensor, z: Tensor) -> float:
    total = 0.0
    for start in range(0, u.shape[0], _EVAL_BATCH):
        sl = slice(start, start + _EVAL_BATCH)
        total += float(((model(u[sl]) - z[sl]) ** 2).sum(dim=1).double().sum())
    return total / u.shape[0]


def _cross_encoder_prepared(
    u: Tensor,
    z: Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    hidden: int,
    seed: int,
    per_dim: bool,
) -> float:
    n = u.shape[0]
    n_train, n_val = int(0.8 * n), int(0.1 * n)
    if n_train < 1 or n_val < 1 or n - n_train - n_val < 1:
        raise ValueError(f"cross_encoder_l2 needs at least 10 rows for an 80/10/10 split, got {n}")
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=generator).to(u.device)
    tr, va, te = perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]
    model = _build_seeded(seed, lambda: _cross_encoder(u.shape[1], z.shape[1], hidden))
    model = model.to(u.device)
    optimizer = _adam(model.parameters(), lr)
    best_val, best_state = float("inf"), copy.deepcopy(model.state_dict())
    train = [u[tr], z[tr]]
    for _ in range(epochs):
        model.train()
        for u_batch, z_batch in _shuffled_batches(train, batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            loss = ((model(u_batch) - z_batch) ** 2).sum(dim=1).mean()
            loss.backward()
            optimizer.step()
        model.eval()
        val = _summed_sq_error(model, u[va], z[va])
        if val < best_val:
            best_val, best_state = val, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    model.eval()
    score = _summed_sq_error(model, u[te], z[te])
    return score / z.shape[1] if per_dim else score


def cross_encoder_l2(
    u: Tensor,
    z: Tensor,
    epochs: int = 5,
    seed: int = 0,
    *,
    batch_size: int = 32,
    lr: float = 1e-3,
    hidden: int = 256,
    per_dim: bool = False,
    device: str = "cpu",
) -> float:
    """Cross-encoder reconstruction error of ``Z`` from ``U`` (EMIR rebuttal baseline, §10.9).

    Both embeddings are z-scored (§10.2), rows split 80/10/10 at random (seeded), an MLP
    ``Linear(d_U, 256) -> 2 x [Linear(256, 256), ReLU] -> Linear(256, d_Z)`` is trained with Adam
    on the per-sample summed squared error, the epoch with the best validation error is kept, and
    its test error is returned. Lower is better.

    Args:
        u: ``[N, d_U]`` source embeddings.
        z: ``[N, d_Z]`` target embeddings of the same inputs.
        epochs: training epochs (default: ``5``; the slurm scripts used ``2``).
        seed: seeds split, init and shuffling (default: ``0``).
        batch_size: minibatch size (default: ``32``).
        lr: Adam learning rate (default: ``1e-3``).
        hidden: MLP width (default: ``256``).
        per_dim: divide the score by ``d_Z`` (default: ``False``).
        device: training device (default: ``"cpu"``).

    Returns:
        Test mean over samples of ``sum_j (z_hat_j - z_j)^2``.
    """
    _check_pair(as_float_matrix(u, name="u"), as_float_matrix(z, name="z"))
    us = zscore(u, name="u")[0].to(device=device, dtype=torch.float32)
    zs = zscore(z, name="z")[0].to(device=device, dtype=torch.float32)
    return _cross_encoder_prepared(
        us,
        zs,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        hidden=hidden,
        seed=seed,
        per_dim=per_dim,
    )


def pairwise_cross_encoder_l2(
    embeddings: Mapping[str, Tensor],
    epochs: int = 5,
    seed: int = 0,
    progress: bool = True,
    *,
    batch_size: int = 32,
    lr: float = 1e-3,
    hidden: int = 256,
    per_dim: bool = False,
    device: str = "cpu",
) -> tuple[list[str], Tensor]:
    """:func:`cross_encoder_l2` for every ordered pair (same arguments).

    Returns:
        ``(names, matrix)``: ``matrix[i, j]`` = test error of ``names[j]`` reconstructed from
        ``names[i]``, float64 ``[M, M]`` with a NaN diagonal.
    """
    checked = _validate_embeddings(embeddings)
    names = list(checked)
    prepared = {
        name: zscore(x, name=f"embeddings[{name!r}]")[0].to(device=device, dtype=torch.float32)
        for name, x in checked.items()
    }
    matrix = torch.full((len(names), len(names)), float("nan"), dtype=torch.float64)
    pairs = [(i, j) for i in range(len(names)) for j in range(len(names)) if i != j]
    for i, j in _progress(pairs, progress, "cross-encoder pairs"):
        matrix[i, j] = _cross_encoder_prepared(
            prepared[names[i]],
            prepared[names[j]],
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            hidden=hidden,
            seed=seed,
            per_dim=per_dim,
        )
    return names, matrix


def cross_encoder_ranking(
    embeddings: Mapping[str, Tensor],
    epochs: int = 5,
    seed: int = 0,
    progress: bool = True,
    *,
    batch_size: int = 32,
    lr: float = 1e-3,
    hidden: int = 256,
    per_dim: bool = False,
    device: str = "cpu",
) -> dict[str, float]:
    """Median over references ``Z != U`` of :func:`cross_encoder_l2` ``(U, Z)`` (lower = better).

    Arguments as :func:`cross_encoder_l2`; ``progress`` shows a tqdm bar on a terminal.

    Returns:
        ``{name: median test error of the references reconstructed from that embedder}``.
    """
    names, matrix = pairwise_cross_encoder_l2(
        embeddings,
        epochs,
        seed,
        progress,
        batch_size=batch_size,
        lr=lr,
        hidden=hidden,
        per_dim=per_dim,
        device=device,
    )
    return informativeness(matrix, names)
