"""Full-batch L-BFGS for the probes' smooth, convex objectives.

The algorithm of ``torch.optim.LBFGS(lr=1, line_search_fn="strong_wolfe")`` — the same
iterates, the same memory rule (a pair is kept when ``yᵀs > 1e-10``, the oldest dropped once
``history_size`` are kept), the same initial step, the same stopping tests and the same
strong-Wolfe line search (torch's own) — with the inverse-Hessian product taken in the compact
form of Byrd, Nocedal and Schnabel (*Representations of quasi-Newton matrices and their use in
limited memory methods*, Math. Programming 63, 1994; Nocedal & Wright, *Numerical
Optimization*, eq. 7.24) instead of the two-loop recursion.

Both give the same direction in exact arithmetic. The two-loop recursion takes four small
vector operations per stored pair, each a Python-level call: with torch's default 100 pairs,
about 800 calls an iteration, which costs more than the objective itself on a probe's
training matrix (a few thousand rows of a few hundred features). The compact form keeps
``SᵀY`` and ``YᵀY`` up to date as pairs arrive and takes the product in six matrix-vector
products and two triangular solves of the stored-pair count. Rounding differs from the
two-loop recursion in the last bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeAlias

import torch
from torch import Tensor
from torch.optim.lbfgs import _strong_wolfe

__all__ = ["LBFGSResult", "Objective", "minimize_lbfgs"]

#: ``theta -> (loss, gradient)``: the loss a 0-d tensor, the gradient flat like ``theta``.
Objective: TypeAlias = Callable[[Tensor], tuple[Tensor, Tensor]]

#: a pair enters the memory only when its curvature ``yᵀs`` is above this (torch's rule)
_CURVATURE_EPS = 1e-10


class LBFGSResult(NamedTuple):
    """What :func:`minimize_lbfgs` returns."""

    theta: Tensor
    #: iterations taken
    n_iter: int
    #: objective evaluations, the first included
    n_evals: int
    #: stopped before using up the iteration or evaluation budget
    converged: bool


class _Memory:
    """The last ``size`` step/gradient-change pairs in a ring buffer, with their inner
    products ``s_i·y_j`` and ``y_i·y_j`` kept up to date, so that the inverse-Hessian product
    needs no loop over the pairs."""

    def __init__(self, n: int, size: int, like: Tensor) -> None:
        self.size = size
        self.s = like.new_empty(size, n)
        self.y = like.new_empty(size, n)
        self.sy = like.new_zeros(size, size)  # sy[a, b] = s_a · y_b, slots a, b
        self.yy = like.new_zeros(size, size)
        self.slots: list[int] = []  # oldest first

    def push(self, s: Tensor, y: Tensor) -> None:
        slot = self.slots.pop(0) if len(self.slots) == self.size else len(self.slots)
        self.slots.append(slot)
        self.s[slot] = s
        self.y[slot] = y
        used = len(self.slots)
        # the slots in use are 0..used-1 in buffer order (the ring only reuses slots)
        s_all, y_all = self.s[:used], self.y[:used]
        self.sy[:used, slot] = s_all @ y
        self.sy[slot, :used] = y_all @ s
        yy = y_all @ y
        self.yy[:used, slot] = yy
        self.yy[slot, :used] = yy

    def times_inverse_hessian(self, g: Tensor, gamma: float) -> Tensor:
        """``H g`` for the L-BFGS inverse-Hessian approximation with ``H₀ = gamma·I``:

        ``H g = γg + S p − γ Y u``, where ``u = R⁻¹ Sᵀg``, ``p = R⁻ᵀ((D + γYᵀY) u − γ Yᵀg)``,
        ``R`` the upper triangle of ``SᵀY`` and ``D`` its diagonal (pairs in the order they
        arrived).
        """
        used = len(self.slots)
        order = torch.tensor(self.slots, device=g.device)
        s_all, y_all = self.s[:used], self.y[:used]
        sg = (s_all @ g).index_select(0, order)
        yg = (y_all @ g).index_select(0, order)
        sy = self.sy[:used, :used].index_select(0, order).index_select(1, order)
        yy = self.yy[:used, :used].index_select(0, order).index_select(1, order)
        r = torch.triu(sy)
        u = torch.linalg.solve_triangular(r, sg.unsqueeze(1), upper=True)
        rhs = sy.diagonal().unsqueeze(1) * u + gamma * (yy @ u) - gamma * yg.unsqueeze(1)
        p = torch.linalg.solve_triangular(r.T, rhs, upper=False)
        # back to buffer order for the products with the stored rows
        p_slots = torch.empty_like(p).index_copy_(0, order, p).squeeze(1)
        u_slots = torch.empty_like(u).index_copy_(0, order, u).squeeze(1)
        return g * gamma + s_all.T @ p_slots - (y_all.T @ u_slots) * gamma


def minimize_lbfgs(
    objective: Objective,
    theta0: Tensor,
    max_iter: int,
    *,
    tolerance_grad: float = 1e-7,
    tolerance_change: float = 1e-9,
    history_size: int = 100,
) -> LBFGSResult:
    """Minimise ``objective`` from ``theta0`` as one ``torch.optim.LBFGS`` step would.

    ``max_iter`` bounds both the iterations and the objective evaluations (torch's
    ``max_eval=max_iter``). The run stops when every gradient entry is at most
    ``tolerance_grad`` in absolute value, when the directional derivative, the step or the
    change of the loss falls below ``tolerance_change``, or when the budget is used up.

    Args:
        objective: ``theta -> (loss, gradient)``; never modifies ``theta``.
        theta0: the flat start, not modified.
        max_iter: the iteration and evaluation budget (> 0).
        tolerance_grad, tolerance_change, history_size: as ``torch.optim.LBFGS``.
    """
    theta = theta0.clone()
    loss_t, grad = objective(theta)
    loss = float(loss_t)
    n_evals = 1
    if float(grad.abs().max()) <= tolerance_grad:
        return LBFGSResult(theta, 0, n_evals, n_evals < max_iter)

    def along(x: Tensor, t: float, d: Tensor) -> tuple[float, Tensor]:
        value, gradient = objective(torch.add(x, d, alpha=t))
        return float(value), gradient

    memory = _Memory(theta.numel(), history_size, theta)
    gamma = 1.0
    d = grad.neg()  # steepest descent first
    t = 1.0
    prev_grad = grad
    n_iter = 0
    while n_iter < max_iter:
        n_iter += 1
        if n_iter > 1:
            y = grad - prev_grad
            s = d * t
            ys = float(y.dot(s))
            if ys > _CURVATURE_EPS:
                memory.push(s, y)
                gamma = ys / float(y.dot(y))
            d = memory.times_inverse_hessian(grad, gamma).neg_() if memory.slots else grad * -gamma
        prev_grad, prev_loss = grad, loss
        t = min(1.0, 1.0 / float(grad.abs().sum())) if n_iter == 1 else 1.0
        gtd = float(grad.dot(d))
        if gtd > -tolerance_change:
            break
        loss, grad, t, ls_evals = _strong_wolfe(
            along, theta, t, d, loss, grad, gtd, max_ls=max_iter - n_evals
        )
        loss, t = float(loss), float(t)
        theta = torch.add(theta, d, alpha=t)
        n_evals += ls_evals
        if n_iter == max_iter or n_evals >= max_iter:
            break
        if float(grad.abs().max()) <= tolerance_grad:
            break
        if float((d * t).abs().max()) <= tolerance_change:
            break
        if abs(loss - prev_loss) < tolerance_change:
            break
    return LBFGSResult(theta, n_iter, n_evals, n_iter < max_iter and n_evals < max_iter)
