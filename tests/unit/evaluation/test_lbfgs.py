"""graphssl's L-BFGS against torch.optim.LBFGS, whose algorithm it follows, and its compact
inverse-Hessian product against the two-loop recursion it replaces."""

from __future__ import annotations

import pytest
import torch

from graphssl.evaluation.lbfgs import _Memory, minimize_lbfgs
from graphssl.evaluation.logreg_probe import _design, _softmax_objective


def _problem(lam: float, n: int = 300, d: int = 20, classes: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = (x[:, :classes] + 0.8 * torch.randn(n, classes, generator=g, dtype=torch.float64)).argmax(1)
    xt = _design(x, x.mean(0), x.std(0))
    theta0 = torch.zeros((d + 1) * classes, dtype=torch.float64)
    return _softmax_objective(xt, y, classes, lam), theta0


def _torch_lbfgs(objective, theta0, max_iter, history_size=100, tolerance_grad=1e-7):
    theta = theta0.clone()
    optimizer = torch.optim.LBFGS(
        [theta],
        lr=1,
        max_iter=max_iter,
        max_eval=max_iter,
        tolerance_grad=tolerance_grad,
        history_size=history_size,
        line_search_fn="strong_wolfe",
    )

    def closure():
        loss, grad = objective(theta)
        theta.grad = grad
        return loss

    with torch.no_grad():
        optimizer.step(closure)
    state = optimizer.state[theta]
    return theta.detach(), int(state["n_iter"]), int(state["func_evals"])


@pytest.mark.parametrize("history_size", [100, 3])
def test_same_iterates_as_torch_lbfgs(history_size: int) -> None:
    # history 3 fills the memory within a few iterations, so the ring buffer wraps many times
    objective, theta0 = _problem(lam=1e-2)
    for budget in (1, 2, 7, 40):
        ours = minimize_lbfgs(objective, theta0, budget, history_size=history_size)
        theirs, n_iter, n_evals = _torch_lbfgs(objective, theta0, budget, history_size)
        assert (ours.n_iter, ours.n_evals) == (n_iter, n_evals), budget
        torch.testing.assert_close(ours.theta, theirs, rtol=1e-9, atol=1e-12)


def test_converges_where_torch_does_and_reports_it() -> None:
    objective, theta0 = _problem(lam=1e-1)
    ours = minimize_lbfgs(objective, theta0, 500, tolerance_grad=1e-8)
    theirs, n_iter, _ = _torch_lbfgs(objective, theta0, 500, tolerance_grad=1e-8)
    assert ours.converged and ours.n_iter == n_iter < 500
    _, grad = objective(ours.theta)
    # it stops on the gradient or, as torch does, once the loss changes by under 1e-9
    assert float(grad.abs().max()) <= 1e-5
    torch.testing.assert_close(ours.theta, theirs, rtol=1e-8, atol=1e-10)


def test_budget_used_up_is_not_converged() -> None:
    objective, theta0 = _problem(lam=0.0)
    result = minimize_lbfgs(objective, theta0, 3)
    assert result.n_iter <= 3 and not result.converged
    loss0, _ = objective(theta0)
    loss, _ = objective(result.theta)
    assert float(loss) < float(loss0)


def test_optimal_start_takes_no_iteration() -> None:
    objective, theta0 = _problem(lam=1e-1)
    solution = minimize_lbfgs(objective, theta0, 500, tolerance_grad=1e-9).theta
    again = minimize_lbfgs(objective, solution, 500, tolerance_grad=1e-4)
    assert again.n_iter == 0 and again.n_evals == 1 and again.converged
    assert torch.equal(again.theta, solution)
    assert again.theta is not solution  # the start is never modified in place


def _two_loop(pairs: list[tuple[torch.Tensor, torch.Tensor]], g: torch.Tensor, gamma: float):
    """``H g`` by the textbook two-loop recursion (Nocedal & Wright, Algorithm 7.4)."""
    q = g.clone()
    alphas = []
    for s, y in reversed(pairs):
        alpha = float(s @ q) / float(y @ s)
        alphas.append(alpha)
        q -= alpha * y
    r = gamma * q
    for (s, y), alpha in zip(pairs, reversed(alphas), strict=True):
        beta = float(y @ r) / float(y @ s)
        r += (alpha - beta) * s
    return r


@pytest.mark.parametrize(("size", "pushes"), [(5, 3), (5, 5), (5, 12)])
def test_compact_product_equals_the_two_loop_recursion(size: int, pushes: int) -> None:
    g = torch.Generator().manual_seed(1)
    n = 30
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    hessian = a @ a.T + n * torch.eye(n, dtype=torch.float64)  # positive definite: yᵀs > 0
    memory = _Memory(n, size, hessian)
    pairs = []
    for _ in range(pushes):
        s = torch.randn(n, generator=g, dtype=torch.float64)
        y = hessian @ s
        memory.push(s, y)
        pairs = [*pairs, (s, y)][-size:]
    grad = torch.randn(n, generator=g, dtype=torch.float64)
    gamma = float(pairs[-1][0] @ pairs[-1][1]) / float(pairs[-1][1] @ pairs[-1][1])
    torch.testing.assert_close(
        memory.times_inverse_hessian(grad, gamma), _two_loop(pairs, grad, gamma)
    )
