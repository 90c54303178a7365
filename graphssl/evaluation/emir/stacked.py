"""All sources of one target in one stacked conditional net: the vectorised pairwise path.

For a target ``Z`` and sources ``U_1 .. U_S``, the ``S`` conditional nets
(:class:`~graphssl.evaluation.emir.knife.ConditionalKernel`) differ only in their input width
``d_U``. They are stacked along a leading source axis: every source's input is zero-padded to the
widest ``d_U``, its first LayerNorm normalises over its own ``d_U`` dimensions only (a mask), and
each Linear layer is one batched matrix product over the source axis. Every source's parameters
are initialised exactly as the one-pair path initialises that pair's net (the same seed, then
padded), the minibatch order is the one-pair path's (one seeded permutation per epoch, shared by
all sources of a target, as every pair of the one-pair path draws the same one), the loss is the
sum of the per-source mean NLLs (so each source's gradient is its own pair's gradient), and Adam
is elementwise, so each source follows its own pair's trajectory; only the float32 rounding of
the batched products differs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from graphssl.evaluation.emir.config import EMIRConfig, EMIRResult
from graphssl.evaluation.emir.knife import (
    ConditionalKernel,
    _mixture_logpdf,
    make_result,
    primary_h_z,
    split_rows,
    take_rows,
)
from graphssl.evaluation.emir.training import EVAL_BATCH, adam, build_seeded

__all__ = ["StackedConditionalKernel", "information_sufficiency_stacked"]

_LN_EPS = 1e-5  # nn.LayerNorm's default, as in ConditionalKernel


class _StackedLinear(torch.autograd.Function):
    """``x @ weight + bias`` over a leading source axis: ``[S, B, i] @ [S, i, o] + [S, 1, o]``.

    Each of the three products (forward, input and weight gradients) is one matrix product per
    source written in place into one stacked tensor: on CPU a batched product of these shapes
    (a 64-row minibatch) runs below the throughput of the single products, which already reach
    the cores' peak. What stacking saves is everything else: one elementwise kernel, one
    optimizer step and one autograd graph for all sources.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        out = x.new_empty(x.shape[0], x.shape[1], weight.shape[2])
        for s in range(x.shape[0]):
            torch.addmm(bias[s], x[s], weight[s], out=out[s])
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = torch.empty_like(x)
            for s in range(x.shape[0]):
                torch.mm(grad[s], weight[s].t(), out=dx[s])
        if ctx.needs_input_grad[1]:
            dw = torch.empty_like(weight)
            for s in range(x.shape[0]):
                torch.mm(x[s].t(), grad[s], out=dw[s])
        if ctx.needs_input_grad[2]:
            db = grad.sum(dim=1, keepdim=True)
        return dx, dw, db


class StackedConditionalKernel(nn.Module):
    """``S`` :class:`ConditionalKernel` nets of one target stacked along a source axis.

    Built from per-source kernels with :meth:`from_kernels`. ``forward(u, z)`` takes the sources'
    inputs zero-padded to ``d_max``, ``u`` ``[S, B, d_max]``, and the shared target ``z``
    ``[B, d_Z]``, and returns ``[S, B]`` ``log p(z | u_s)``.

    Args:
        dims_u: ``d_U`` of every source.
        dim_z: ``d_Z``.
        n_modes: ``K``.
        ff_layers: hidden blocks.
        width: hidden width.
        use_tanh: tanh clamp of the log-scales.
    """

    def __init__(
        self,
        dims_u: Sequence[int],
        dim_z: int,
        n_modes: int,
        *,
        ff_layers: int,
        width: int,
        use_tanh: bool = True,
    ) -> None:
        super().__init__()
        self.dims_u = [int(d) for d in dims_u]
        self.d_max = max(self.dims_u)
        self.dim_z = dim_z
        self.n_modes = n_modes
        self.use_tanh = use_tanh
        n = len(self.dims_u)
        d_in = [self.d_max] + [width] * ff_layers
        self.ln_weight = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, 1, d)) for d in d_in[:ff_layers]]
        )
        self.ln_bias = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, 1, d)) for d in d_in[:ff_layers]]
        )
        self.weight = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, d_in[i], width)) for i in range(ff_layers)]
            + [nn.Parameter(torch.zeros(n, d_in[-1], n_modes * (2 * dim_z + 1)))]
        )
        self.bias = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, 1, width)) for _ in range(ff_layers)]
            + [nn.Parameter(torch.zeros(n, 1, n_modes * (2 * dim_z + 1)))]
        )
        mask = torch.zeros(n, 1, self.d_max)
        for s, d in enumerate(self.dims_u):
            mask[s, 0, :d] = 1.0
        self.padded = any(d < self.d_max for d in self.dims_u)
        self.mask: Tensor
        self.n_valid: Tensor
        self.register_buffer("mask", mask)
        self.register_buffer(
            "n_valid", torch.tensor(self.dims_u, dtype=torch.float32).view(n, 1, 1)
        )

    @classmethod
    def from_kernels(cls, kernels: Sequence[ConditionalKernel]) -> StackedConditionalKernel:
        """Stack per-source kernels of one target (same ``d_Z``, modes, depth and width)."""
        first = kernels[0]
        linears = [m for m in first.net if isinstance(m, nn.Linear)]
        stacked = cls(
            [k.dim_u for k in kernels],
            first.dim_z,
            first.n_modes,
            ff_layers=len(linears) - 1,
            width=linears[0].out_features,
            use_tanh=first.use_tanh,
        )
        with torch.no_grad():
            for s, kernel in enumerate(kernels):
                norms = [m for m in kernel.net if isinstance(m, nn.LayerNorm)]
                lins = [m for m in kernel.net if isinstance(m, nn.Linear)]
                for i, norm in enumerate(norms):
                    d = norm.normalized_shape[0]
                    stacked.ln_weight[i][s, 0, :d] = norm.weight
                    stacked.ln_bias[i][s, 0, :d] = norm.bias
                for i, lin in enumerate(lins):
                    stacked.weight[i][s, : lin.in_features] = lin.weight.t()
                    stacked.bias[i][s, 0] = lin.bias
        return stacked

    def _first_norm(self, u: Tensor) -> Tensor:
        """LayerNorm of each source over its own ``d_U`` dimensions (padding stays zero)."""
        if not self.padded:
            return F.layer_norm(u, (self.d_max,), eps=_LN_EPS) * self.ln_weight[0] + self.ln_bias[0]
        mean = u.sum(dim=-1, keepdim=True) / self.n_valid
        centred = (u - mean) * self.mask
        var = (centred * centred).sum(dim=-1, keepdim=True) / self.n_valid
        return centred * torch.rsqrt(var + _LN_EPS) * self.ln_weight[0] + self.ln_bias[0]

    def forward(self, u: Tensor, z: Tensor) -> Tensor:
        """``u`` ``[S, B, d_max]`` (zero-padded), ``z`` ``[B, d_Z]`` -> ``[S, B]``."""
        x = u
        n_hidden = len(self.ln_weight)
        for i in range(n_hidden):
            if i == 0:
                x = self._first_norm(x)
            else:
                x = (
                    F.layer_norm(x, (x.shape[-1],), eps=_LN_EPS) * self.ln_weight[i]
                    + (self.ln_bias[i])
                )
            x = torch.relu(_StackedLinear.apply(x, self.weight[i], self.bias[i]))
        out = _StackedLinear.apply(x, self.weight[-1], self.bias[-1])
        out = out.view(u.shape[0], u.shape[1], self.n_modes, 2 * self.dim_z + 1)
        logits, mu, raw_scale = out.split([1, self.dim_z, self.dim_z], dim=-1)
        log_w = torch.log_softmax(logits.squeeze(-1), dim=-1)
        return _mixture_logpdf(z, log_w, mu, raw_scale, self.use_tanh)


def _stack_inputs(us: Sequence[Tensor], d_max: int) -> Tensor:
    out = us[0].new_zeros(len(us), us[0].shape[0], d_max)
    for s, u in enumerate(us):
        out[s, :, : u.shape[1]] = u
    return out


@torch.no_grad()
def _mean_nll_stacked(kernel: StackedConditionalKernel, u: Tensor, z: Tensor) -> list[float]:
    """Per-source ``mean_i -log p(z_i | u_i)`` (float64 sums; the chunking changes nothing)."""
    total = torch.zeros(u.shape[0], dtype=torch.float64, device=z.device)
    step = max(1, EVAL_BATCH // u.shape[0])
    for start in range(0, z.shape[0], step):
        sl = slice(start, start + step)
        total -= kernel(u[:, sl], z[sl]).double().sum(dim=1)
    return (total / z.shape[0]).tolist()


def _train_stacked(
    us: Sequence[Tensor], z: Tensor, h_z: float, config: EMIRConfig
) -> StackedConditionalKernel:
    """Fit every source's conditional net at once; the per-source twin of ``_train_conditional``.

    Early stopping is per source: a source whose criterion fires keeps the parameters it had
    at that epoch (the others train on), exactly where its one-pair fit would have stopped.
    """
    n = z.shape[0]

    def build(d_u: int) -> ConditionalKernel:
        return ConditionalKernel(
            d_u,
            z.shape[1],
            config.cond_modes,
            ff_layers=config.ff_layers,
            hidden=config.ff_dim_hidden,
            use_tanh=config.use_tanh,
        )

    # each source's net built exactly as its one-pair fit builds it (same seed, same shapes)
    kernels = [build_seeded(config.seed + 1, partial(build, int(u.shape[1]))) for u in us]
    kernel = StackedConditionalKernel.from_kernels(kernels).to(config.device)
    u_all = _stack_inputs(us, kernel.d_max)
    optimizer = adam(kernel.parameters(), config.lr)
    generator = torch.Generator().manual_seed(config.seed + 1)
    n_src = len(us)
    previous: list[float | None] = [None] * n_src
    calm = [0] * n_src
    frozen: dict[int, list[Tensor]] = {}
    kernel.train()
    for _ in range(config.n_epochs):
        perm = torch.randperm(n, generator=generator).to(z.device)
        u_shuffled, z_shuffled = u_all[:, perm], z[perm]
        epoch_loss = torch.zeros(n_src, dtype=torch.float64, device=z.device)
        for start in range(0, n, config.batch_size):
            u_batch = u_shuffled[:, start : start + config.batch_size]
            z_batch = z_shuffled[start : start + config.batch_size]
            optimizer.zero_grad(set_to_none=True)
            nll = -kernel(u_batch, z_batch).mean(dim=1)  # [S], each source's own mean loss
            nll.sum().backward()
            optimizer.step()
            epoch_loss += nll.detach().double() * z_batch.shape[0]
        if config.stopping_criterion == "early_stopping":
            current = (epoch_loss / n).tolist()
            for s in range(n_src):
                if s in frozen:
                    continue
                prev = previous[s]
                if prev is not None and abs((current[s] - prev) / (h_z + 1e-8)) < config.eps:
                    calm[s] += 1
                    if calm[s] >= config.n_epochs_stop:
                        frozen[s] = [p[s].detach().clone() for p in kernel.parameters()]
                else:
                    calm[s] = 0
                previous[s] = current[s]
            if len(frozen) == n_src:
                break
    with torch.no_grad():
        for s, values in frozen.items():
            for p, v in zip(kernel.parameters(), values, strict=True):
                p[s] = v
    kernel.eval()
    kernel.requires_grad_(False)
    return kernel


def information_sufficiency_stacked(
    sources: Sequence[tuple[Tensor, int]],
    zs: Tensor,
    h_z: tuple[float, float],
    config: EMIRConfig,
    dropped_z: int,
) -> list[EMIRResult]:
    """``I_S(U_s -> Z)`` for every source at once, from one stacked fit.

    Args:
        sources: ``(z-scored float32 U_s, dropped_u)`` per source, rows aligned with ``zs``.
        zs: z-scored float32 target.
        h_z: ``(in-sample, held-out)`` marginal entropies (``marginal_entropies``).
        config: estimator settings.
        dropped_z: zero-variance dimensions dropped from the target.

    Returns:
        One :class:`EMIRResult` per source, in order; the same values as
        ``information_sufficiency_prepared`` pair by pair, up to float32 rounding.
    """
    train_idx, eval_idx = split_rows(zs.shape[0], config)
    z_fit = take_rows(zs, train_idx)
    us_fit = [take_rows(u, train_idx) for u, _ in sources]
    kernel = _train_stacked(us_fit, z_fit, primary_h_z(h_z, config), config)
    h_in = _mean_nll_stacked(kernel, _stack_inputs(us_fit, kernel.d_max), z_fit)
    h_out, n_out = [math.nan] * len(sources), 0
    if eval_idx is not None:
        z_out = take_rows(zs, eval_idx)
        u_out = _stack_inputs([take_rows(u, eval_idx) for u, _ in sources], kernel.d_max)
        h_out, n_out = _mean_nll_stacked(kernel, u_out, z_out), int(z_out.shape[0])
    return [
        make_result(
            h_z,
            (h_in[s], h_out[s]),
            (int(z_fit.shape[0]), n_out),
            (int(u.shape[1]), int(zs.shape[1])),
            (dropped_u, dropped_z),
            config,
        )
        for s, (u, dropped_u) in enumerate(sources)
    ]
