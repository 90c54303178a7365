"""KNIFE estimate of ``I_S(U -> Z) = H(Z) - H(Z|U)`` between two embedders (nats).

Darrin et al., *When is an Embedding Model More Promising than Another?*, NeurIPS 2024
(https://arxiv.org/abs/2406.07640), estimator from KNIFE (Pichler et al., ICML 2022,
https://arxiv.org/abs/2202.06618). Reference code: ``ills-montreal/emir``
(``emir/estimators/knife_estimator.py``, ``kernels/gaussian_kernel.py``,
``kernels/feed_forward.py``).

Both entropies are cross-entropy estimates: a diagonal Gaussian mixture fitted to ``z``
(:class:`MarginalKernel`) and a Gaussian mixture whose weights, means and scales are produced from
``u`` by a small feed-forward net (:class:`ConditionalKernel`), both trained by maximum likelihood
on z-scored embeddings and evaluated on the training samples (the in-sample figure, as the
reference code) and, by default, also on a seeded held-out part of the rows (the held-out figure
of the same fitted kernels).

Known limitation: the scale clamp ``s = exp(tanh(l))`` bounds every component's std to
``[1/e, e]``, so ``H(Z|U) / d_Z >= 1/2 log(2 pi) - 1 = -0.0811`` and ``I_S / d_Z`` is capped at
about 1.5 nats for z-scored targets, whatever ``U`` is.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation.emir.config import EMIRConfig, EMIRResult
from graphssl.evaluation.emir.inputs import check_pair, zscore
from graphssl.evaluation.emir.training import EVAL_BATCH, adam, build_seeded, shuffled_batches

__all__ = [
    "ConditionalKernel",
    "MarginalKernel",
    "fit_conditional",
    "fit_marginal",
    "information_sufficiency",
    "information_sufficiency_prepared",
    "make_result",
    "marginal_entropies",
    "mean_nll_marginal",
    "prepare",
    "split_rows",
    "take_rows",
    "train_marginal",
]

_LOG_EPS = 1e-8  # added inside log|s| as the reference code does


def _mixture_logpdf(
    z: Tensor, log_w: Tensor, mu: Tensor, raw_scale: Tensor, use_tanh: bool
) -> Tensor:
    """Log-density of a diagonal Gaussian mixture parametrised by precision scales.

    Any leading dimensions broadcast (the stacked conditional net adds one for the sources).

    Args:
        z: ``[..., B, d]`` points.
        log_w: ``[..., B or 1, K]`` log mixture weights.
        mu: ``[..., B or 1, K, d]`` means.
        raw_scale: ``[..., B or 1, K, d]`` ``l``, with ``s = exp(tanh(l))`` (or ``exp(l)``).
        use_tanh: apply the tanh clamp.

    Returns:
        ``[..., B]`` ``log p(z)``.
    """
    log_s = torch.tanh(raw_scale) if use_tanh else raw_scale
    s = log_s.exp()
    y = s * (z.unsqueeze(-2) - mu)  # [..., B, K, d]
    quad = (y * y).sum(dim=-1)  # [B, K]
    # The reference takes log(|s| + 1e-8). Under the tanh clamp s >= 1/e, where the 1e-8 is below
    # half an ulp of s in float32 (s + 1e-8 == s), so log|s| = tanh(l) up to rounding.
    log_det = log_s.sum(dim=-1) if use_tanh else torch.log(s.abs() + _LOG_EPS).sum(dim=-1)
    d = z.shape[-1]
    return torch.logsumexp(log_w + log_det - 0.5 * quad, dim=-1) - 0.5 * d * math.log(2 * math.pi)


class MarginalKernel(nn.Module):
    """KNIFE marginal ``p(z)``: diagonal Gaussian mixture (EMIR ``GaussianMargKernel``).

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
    """KNIFE conditional ``p(z|u)`` (EMIR ``GaussianCondKernel``).

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


def split_rows(n: int, config: EMIRConfig) -> tuple[Tensor | None, Tensor | None]:
    """``(fit_idx, held_out_idx)``: a seeded random split when ``config.splits_rows``;
    ``(None, None)`` (fit and score all rows, as the reference code) otherwise."""
    if not config.splits_rows:
        return None, None
    n_eval = round(n * config.held_out_fraction)
    if n_eval < 1 or n - n_eval < 1:
        raise ValueError(
            f"held_out_fraction={config.held_out_fraction} of {n} rows leaves an empty part; "
            "use more rows or held_out=False, held_out_estimate=False"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(config.seed))
    return perm[n_eval:], perm[:n_eval]


def take_rows(x: Tensor, idx: Tensor | None) -> Tensor:
    return x if idx is None else x[idx.to(x.device)]


@torch.no_grad()
def mean_nll_marginal(kernel: MarginalKernel, z: Tensor) -> float:
    total = 0.0
    for start in range(0, z.shape[0], EVAL_BATCH):
        total += float(-kernel(z[start : start + EVAL_BATCH]).double().sum())
    return total / z.shape[0]


@torch.no_grad()
def _mean_nll_conditional(kernel: ConditionalKernel, u: Tensor, z: Tensor) -> float:
    total = 0.0
    for start in range(0, z.shape[0], EVAL_BATCH):
        sl = slice(start, start + EVAL_BATCH)
        total += float(-kernel(u[sl], z[sl]).double().sum())
    return total / z.shape[0]


def train_marginal(z: Tensor, config: EMIRConfig) -> MarginalKernel:
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

    kernel = build_seeded(config.seed, build).to(config.device)
    optimizer = adam(kernel.parameters(), config.margin_lr)
    generator = torch.Generator().manual_seed(config.seed)
    kernel.train()
    for _ in range(config.n_epochs_marg):
        for (z_batch,) in shuffled_batches([z], config.batch_size, generator):
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
    kernel = build_seeded(
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
    optimizer = adam(kernel.parameters(), config.lr)
    generator = torch.Generator().manual_seed(config.seed + 1)
    kernel.train()
    previous: float | None = None
    calm_epochs = 0
    for _ in range(config.n_epochs):
        epoch_loss = torch.zeros((), dtype=torch.float64, device=z.device)
        for u_batch, z_batch in shuffled_batches([u, z], config.batch_size, generator):
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


def prepare(x: Tensor, name: str, config: EMIRConfig) -> tuple[Tensor, int]:
    standardized, dropped = zscore(x, name=name)
    return standardized.to(device=config.device, dtype=torch.float32), dropped


def fit_marginal(z: Tensor, config: EMIRConfig | None = None) -> MarginalKernel:
    """Fit the marginal ``p(z)`` of a target once, to reuse for every source.

    Args:
        z: ``[N, d_Z]`` raw target embeddings (z-scored here exactly as in
            :func:`information_sufficiency`).
        config: estimator settings (default: :class:`EMIRConfig` ``()``).

    Returns:
        A frozen :class:`MarginalKernel` on ``config.device``, trained on the training rows of
        the (seeded) split that :func:`information_sufficiency` uses with the same config.
    """
    config = config or EMIRConfig()
    zs, _ = prepare(z, "z", config)
    train_idx, _ = split_rows(zs.shape[0], config)
    return train_marginal(take_rows(zs, train_idx), config)


def fit_conditional(
    u: Tensor,
    z: Tensor,
    config: EMIRConfig | None = None,
    marginal: MarginalKernel | None = None,
) -> ConditionalKernel:
    """Fit the conditional ``p(z|u)`` on z-scored ``(u, z)``.

    The marginal is only needed for ``config.stopping_criterion == "early_stopping"`` (the
    criterion is relative to ``H(Z)``); it is fitted then unless given.

    Returns:
        The trained :class:`ConditionalKernel` (eval mode) on ``config.device``.
    """
    config = config or EMIRConfig()
    check_pair(as_float_matrix(u, name="u"), as_float_matrix(z, name="z"))
    us, _ = prepare(u, "u", config)
    zs, _ = prepare(z, "z", config)
    train_idx, _ = split_rows(zs.shape[0], config)
    h_z = float("nan")
    if config.stopping_criterion == "early_stopping":
        if marginal is None:
            marginal = train_marginal(take_rows(zs, train_idx), config)
        h_z = primary_h_z(marginal_entropies(marginal, zs, config), config)
    return _train_conditional(take_rows(us, train_idx), take_rows(zs, train_idx), h_z, config)


def marginal_entropies(
    marginal: MarginalKernel, zs: Tensor, config: EMIRConfig
) -> tuple[float, float]:
    """``(H(Z) on the fitting rows, H(Z) on the held-out rows)``; NaN for the second when the
    rows are not split."""
    train_idx, eval_idx = split_rows(zs.shape[0], config)
    h_in = mean_nll_marginal(marginal, take_rows(zs, train_idx))
    h_out = math.nan if eval_idx is None else mean_nll_marginal(marginal, take_rows(zs, eval_idx))
    return h_in, h_out


def primary_h_z(h_z: tuple[float, float], config: EMIRConfig) -> float:
    """The ``H(Z)`` the early-stopping criterion is relative to: the primary figure's."""
    return h_z[1] if config.held_out else h_z[0]


def make_result(
    h_z: tuple[float, float],
    h_z_given_u: tuple[float, float],
    n_rows: tuple[int, int],
    dims: tuple[int, int],
    dropped: tuple[int, int],
    config: EMIRConfig,
) -> EMIRResult:
    """:class:`EMIRResult` from ``(in-sample, held-out)`` entropies and row counts,
    ``dims = (d_U, d_Z)`` and ``dropped = (dropped_u, dropped_z)``."""
    d_z = dims[1]
    i_in, i_out = h_z[0] - h_z_given_u[0], h_z[1] - h_z_given_u[1]
    k = 1 if config.held_out else 0
    return EMIRResult(
        h_z=h_z[k],
        h_z_given_u=h_z_given_u[k],
        i_s=(i_in, i_out)[k],
        i_s_per_dim=(i_in, i_out)[k] / d_z,
        d_u=dims[0],
        d_z=d_z,
        dropped_u=dropped[0],
        dropped_z=dropped[1],
        n_eval=n_rows[k],
        h_z_held_out=h_z[1],
        h_z_given_u_held_out=h_z_given_u[1],
        i_s_held_out=i_out,
        i_s_per_dim_held_out=i_out / d_z,
        n_held_out=n_rows[1],
        i_s_per_dim_in_sample=i_in / d_z,
        n_in_sample=n_rows[0],
    )


def information_sufficiency_prepared(
    us: Tensor,
    zs: Tensor,
    h_z: tuple[float, float],
    config: EMIRConfig,
    dropped_u: int,
    dropped_z: int,
) -> EMIRResult:
    """One pair on z-scored float32 inputs; ``h_z`` from :func:`marginal_entropies`."""
    train_idx, eval_idx = split_rows(zs.shape[0], config)
    u_fit, z_fit = take_rows(us, train_idx), take_rows(zs, train_idx)
    conditional = _train_conditional(u_fit, z_fit, primary_h_z(h_z, config), config)
    h_in = _mean_nll_conditional(conditional, u_fit, z_fit)
    h_out, n_out = math.nan, 0
    if eval_idx is not None:
        z_out = take_rows(zs, eval_idx)
        h_out = _mean_nll_conditional(conditional, take_rows(us, eval_idx), z_out)
        n_out = int(z_out.shape[0])
    return make_result(
        h_z,
        (h_in, h_out),
        (int(z_fit.shape[0]), n_out),
        (int(us.shape[1]), int(zs.shape[1])),
        (dropped_u, dropped_z),
        config,
    )


def information_sufficiency(
    u: Tensor,
    z: Tensor,
    config: EMIRConfig | None = None,
    marginal: MarginalKernel | None = None,
) -> EMIRResult:
    """Estimate ``I_S(U -> Z) = H(Z) - H(Z|U)`` in nats.

    Both embeddings are z-scored per dimension (zero-variance dimensions dropped), the marginal
    is fitted (or ``marginal`` reused), the conditional is fitted with the marginal frozen, and
    both cross-entropies are averaged over the fitting rows (the in-sample figure) and, when
    ``config.splits_rows``, over the held-out rows too (the ``*_held_out`` fields).

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
    check_pair(as_float_matrix(u, name="u"), as_float_matrix(z, name="z"))
    us, dropped_u = prepare(u, "u", config)
    zs, dropped_z = prepare(z, "z", config)
    train_idx, _ = split_rows(zs.shape[0], config)
    if marginal is None:
        marginal = train_marginal(take_rows(zs, train_idx), config)
    elif marginal.dim != zs.shape[1]:
        raise ValueError(
            f"marginal was fitted on {marginal.dim} dimensions but z has {zs.shape[1]} after "
            "dropping constant ones; fit it with fit_marginal(z, config)"
        )
    h_z = marginal_entropies(marginal, zs, config)
    return information_sufficiency_prepared(us, zs, h_z, config, dropped_u, dropped_z)
