"""Speed and agreement of the probes against scikit-learn, on ogbn-arxiv-sized synthetic data.

(a) ``LogRegProbe`` over its default weight-decay grid vs ``LogisticRegression(lbfgs)``
    fitting the same grid (``C = 1 / (λ · n_train)``, ``C = inf`` for λ = 0, same
    standardisation, warm start): total time and test accuracy at each λ.
(b) ``KNNProbe(weighting="uniform")`` vs ``KNeighborsClassifier(metric="cosine",
    algorithm="brute")``: time, fraction of identical predictions, and peak memory for two
    chunk sizes (it grows with ``chunk_size``, not with the number of queries).
(c) The cost of the default grid (``DEFAULT_WEIGHT_DECAYS``, 12 values from 100 to 0) against
    the earlier 6-value grid (``SPEC_WEIGHT_DECAYS``, 0.1 to 0), side by side on the same data:
    each grid warm-started (every value starts from the previous, stronger one's solution) and
    the default grid with every fit from zero; and the default probe, whose walk down the grid
    ends after ``DEFAULT_EARLY_STOP`` consecutive drops of validation accuracy: seconds, CPU
    seconds, L-BFGS iterations, the selected λ and test accuracy, and the ratios.
(d) ``KNNProbe`` with its float32 screening on faiss (``backend="faiss"``) vs chunked torch
    matmuls (``backend="torch"``), side by side: time, and whether the neighbours (indices and
    float64 similarities) are identical.
(e) The L-BFGS solver: the default grid walked with warm starts on the same training rows,
    (1) by ``torch.optim.LBFGS`` on the objective with the design matrix as ``[n, D + 1]``
    rows (the probe before), and (2) by :func:`graphssl.evaluation.lbfgs.minimize_lbfgs` on
    the transposed design matrix (the probe now): per λ the iterations, CPU seconds and test
    accuracy of both, and the CPU ratio. ``--embeddings PATH`` reads a run's stored
    ``embeddings.pt`` (e.g. GraphCL NCI1's 384 dimensions) with a seeded stratified 80/10/10
    split instead of the Gaussian mixture.
(f) ``--folds K`` with ``--embeddings``: the default probe (``LogRegProbe``, the whole grid,
    ``--selection``) on K seeded stratified folds of the stored rows, 10 % of each training part
    held out for validation, as the k-fold graph datasets evaluate: CPU seconds, selected λ and
    test accuracy per fold, with the solver as before (``torch.optim.LBFGS`` on
    ``[n, D + 1]`` rows) and as now, in one run.

Targets: logistic regression no slower than sklearn and within 0.3 accuracy points at every λ;
kNN at least 5x faster with identical predictions; the default grid within 1.5x the time of
the earlier one; (f) on GraphCL NCI1's 384 dimensions, 10 folds, at most 60 s.

Usage::

    python benchmarks/bench_probes.py                      # 90k train, 30k val, 48k test, D=128
    python benchmarks/bench_probes.py --only solver --embeddings RUN_ARTIFACTS/embeddings.pt
    python benchmarks/bench_probes.py --embeddings RUN_ARTIFACTS/embeddings.pt --folds 10
    python benchmarks/bench_probes.py --n-train 20000 --n-val 5000 --n-test 10000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation import logreg_probe as linear_probe
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import (
    DEFAULT_EARLY_STOP,
    DEFAULT_WEIGHT_DECAYS,
    SPEC_WEIGHT_DECAYS,
    LogRegProbe,
)


def gaussian_mixture(
    n: int, dim: int, n_classes: int, separation: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Unit-noise Gaussian clusters around random centres, with unequal class sizes and
    per-feature scales and offsets (so that standardisation matters)."""
    rng = np.random.default_rng(seed)
    centres = separation * rng.normal(size=(n_classes, dim)) / np.sqrt(dim)
    sizes = rng.dirichlet(np.full(n_classes, 2.0))
    y = rng.choice(n_classes, size=n, p=sizes)
    x = centres[y] + rng.normal(size=(n, dim))
    x = x * rng.uniform(0.2, 5.0, size=dim) + rng.normal(scale=3.0, size=dim)
    return x.astype(np.float32), y


def load_stored(path: Path) -> tuple[Tensor, Tensor]:
    """A run's stored ``embeddings.pt``: its embeddings and its labels as one column."""
    stored = torch.load(path, map_location="cpu", weights_only=True)
    return stored["embeddings"], stored["labels"].view(-1)


def stored_embeddings(path: Path, seed: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A run's ``embeddings.pt`` rows reordered into a stratified 80/10/10 split (training,
    validation, test rows in that order), and the training and validation counts."""
    from sklearn.model_selection import train_test_split

    embeddings, labels = load_stored(path)
    x, y = embeddings.to(torch.float64).numpy(), labels.numpy()
    rows = np.arange(len(y))
    train, rest = train_test_split(rows, train_size=0.8, stratify=y, random_state=seed)
    val, test = train_test_split(rest, train_size=0.5, stratify=y[rest], random_state=seed)
    order = np.r_[train, val, test]
    return x[order], y[order], len(train), len(val)


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timed_peak(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run ``fn``; return its result, wall seconds and peak resident-memory increase (MiB),
    sampled every 5 ms."""
    baseline, peak, done = _rss_bytes(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    peak[0] = max(peak[0], _rss_bytes())
    return result, seconds, (peak[0] - baseline) / 2**20


def bench_logreg(x: np.ndarray, y: np.ndarray, n_train: int, n_val: int) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    n = len(y)
    train, val, test = (
        np.arange(n_train),
        np.arange(n_train, n_train + n_val),
        np.arange(n_train + n_val, n),
    )
    grid = DEFAULT_WEIGHT_DECAYS
    print(
        f"\n(a) logistic regression, grid {grid}: train {n_train}, val {n_val}, test {len(test)}, "
        f"D={x.shape[1]}, C={len(np.unique(y))}"
    )

    # --- ours: the whole evaluate() call, recording the solution after every λ (bench-only).
    thetas: list[tuple[Tensor, int, bool]] = []
    original = linear_probe._minimize_lbfgs

    def recording(objective: Any, theta0: Tensor, max_iter: int) -> tuple[Tensor, int, bool]:
        out = original(objective, theta0, max_iter)
        thetas.append((out[0].clone(), out[1], out[2]))
        return out

    linear_probe._minimize_lbfgs = recording
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    probe = LogRegProbe(early_stop=None)  # every λ, to compare each with scikit-learn
    try:
        start = time.perf_counter()
        result = probe.evaluate(
            x_t, y_t, torch.from_numpy(train), torch.from_numpy(val), torch.from_numpy(test)
        )
        ours_s = time.perf_counter() - start
    finally:
        linear_probe._minimize_lbfgs = original
    d, c = x.shape[1], probe.classes_.numel()
    x_test = (x_t[test].double() - probe.mean_) / probe.scale_
    ours_acc = []
    for theta, _, _ in thetas:
        w = theta.view(d + 1, c)
        ours_acc.append(
            float(
                (probe.classes_[(x_test @ w[:-1] + w[-1]).argmax(1)] == y_t[test]).double().mean()
            )
        )

    # --- scikit-learn: same standardisation, same grid (strongest first), warm start.
    start = time.perf_counter()
    scaler = StandardScaler().fit(x[train].astype(np.float64))
    xs_train = scaler.transform(x[train].astype(np.float64))
    xs_test = scaler.transform(x[test].astype(np.float64))
    xs_val = scaler.transform(x[val].astype(np.float64))
    clf = LogisticRegression(solver="lbfgs", max_iter=5000, warm_start=True)
    sk_acc, sk_iter, sk_val = [], [], []
    for lam in grid:
        clf.set_params(C=np.inf if lam == 0 else 1.0 / (lam * n_train))
        clf.fit(xs_train, y[train])
        sk_iter.append(int(clf.n_iter_.max()))
        sk_val.append(float((clf.predict(xs_val) == y[val]).mean()))
        sk_acc.append(float((clf.predict(xs_test) == y[test]).mean()))
    sk_s = time.perf_counter() - start

    header = ("lambda", "ours iters", "sk iters", "ours test", "sk test", "|diff| pts")
    print("{:>8} {:>10} {:>8} {:>10} {:>8} {:>10}".format(*header))
    for lam, (_, it, conv), acc, sit, sacc in zip(grid, thetas, ours_acc, sk_iter, sk_acc):
        iters = f"{it}{'' if conv else '*'}"
        print(
            f"{lam:>8g} {iters:>10} {sit:>8d} {100 * acc:>10.2f} {100 * sacc:>8.2f} "
            f"{100 * abs(acc - sacc):>10.2f}"
        )
    diffs = [100 * abs(a - b) for a, b in zip(ours_acc, sk_acc)]
    print(
        f"ours: {ours_s:.1f} s (evaluate(), selected λ={result['weight_decay']:g}, "
        f"test_acc={100 * result['test_acc']:.2f}, converged={result['converged']})"
    )
    print(f"sklearn: {sk_s:.1f} s (scaler + grid fits + predictions)")
    print(f"time ratio sklearn/ours: {sk_s / ours_s:.2f}x")
    print(f"max |test acc diff| over the grid: {max(diffs):.2f} points")


def bench_grid(x: np.ndarray, y: np.ndarray, n_train: int, n_val: int) -> None:
    n = len(y)
    masks = [
        torch.arange(0, n_train),
        torch.arange(n_train, n_train + n_val),
        torch.arange(n_train + n_val, n),
    ]
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    print(
        f"\n(c) grid cost: train {n_train}, val {n_val}, D={x.shape[1]}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    # (label, grid, warm start, bias start, early stop): the first row is the probe as it was
    # before the grid reached 100 (its fits started from all-zero parameters); the last one
    # the default probe, whose walk down the grid ends after early_stop drops in a row
    runs = [
        ("earlier grid, warm, zero start", SPEC_WEIGHT_DECAYS, True, False, None),
        ("earlier grid, warm", SPEC_WEIGHT_DECAYS, True, True, None),
        ("default grid, warm", DEFAULT_WEIGHT_DECAYS, True, True, None),
        ("default grid, cold", DEFAULT_WEIGHT_DECAYS, False, True, None),
        (
            f"default, early stop {DEFAULT_EARLY_STOP}",
            DEFAULT_WEIGHT_DECAYS,
            True,
            True,
            DEFAULT_EARLY_STOP,
        ),
    ]
    original = linear_probe._minimize_lbfgs
    bias = linear_probe.initial_bias
    seconds: list[float] = []
    cpu: list[float] = []
    total_iters: list[int] = []
    print(
        f"{'':<32} {'seconds':>8} {'CPU s':>7} {'iters':>7} {'selected':>9} {'test acc':>9}"
        f"  iters per λ"
    )
    for label, grid, warm, bias_start, early_stop in runs:
        iters: list[int] = []

        def counting(
            objective: Any, theta0: Tensor, max_iter: int, iters: list[int] = iters
        ) -> tuple[Tensor, int, bool]:
            out = original(objective, theta0, max_iter)
            iters.append(out[1])
            return out

        linear_probe._minimize_lbfgs = counting
        if not bias_start:
            linear_probe.initial_bias = lambda t, n_out, multilabel: torch.zeros(  # type: ignore[assignment]
                n_out, dtype=torch.float64
            )
        try:
            probe = LogRegProbe(weight_decay=grid, warm_start=warm, early_stop=early_stop)
            start, start_cpu = time.perf_counter(), time.process_time()
            result = probe.evaluate(x_t, y_t, *masks)
            seconds.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        finally:
            linear_probe._minimize_lbfgs = original
            linear_probe.initial_bias = bias
        total_iters.append(sum(iters))
        print(
            f"{label:<32} {seconds[-1]:>8.1f} {cpu[-1]:>7.1f} {sum(iters):>7d} "
            f"{result['weight_decay']:>9g} {100 * result['test_acc']:>9.2f}  "
            + " ".join(f"{lam:g}:{it}" for lam, it in zip(grid, iters)),
            flush=True,
        )
    print(
        f"ratio default grid / earlier grid as before: {seconds[2] / seconds[0]:.2f}x "
        f"(target <= 1.5x); / earlier grid with the bias start: {seconds[2] / seconds[1]:.2f}x; "
        f"default cold / warm: {seconds[3] / seconds[2]:.2f}x; L-BFGS iterations default / "
        f"before: {total_iters[2] / total_iters[0]:.2f}x; early stop / whole default grid: "
        f"CPU {cpu[4] / cpu[2]:.2f}x, iterations {total_iters[4] / total_iters[2]:.2f}x; "
        f"load average after {os.getloadavg()[0]:.1f}"
    )


def _rows_objective(xa: Tensor, y: Tensor, n_classes: int, lam: float) -> Any:
    """The softmax objective as the probe computed it before: ``xa`` is ``[n, D + 1]``."""
    n, p = xa.shape
    target = torch.arange(n) * n_classes + y

    def objective(theta: Tensor) -> tuple[Tensor, Tensor]:
        w = theta.view(p, n_classes)
        z = xa @ w
        loss = -z.view(-1).index_select(0, target).sum()
        z_max = z.amax(dim=1, keepdim=True)
        prob = z.sub_(z_max).exp_()
        total = prob.sum(dim=1, keepdim=True)
        loss = (loss + z_max.sum() + total.log().sum()) / n
        prob.div_(total)
        prob.view(-1).index_add_(0, target, torch.full((n,), -1.0, dtype=xa.dtype))
        grad = (xa.T @ prob).div_(n)
        loss = loss + 0.5 * lam * (w[:-1] * w[:-1]).sum()
        grad[:-1].add_(w[:-1], alpha=lam)
        return loss, grad.view(-1)

    return objective


def _torch_lbfgs(objective: Any, theta0: Tensor, max_iter: int) -> tuple[Tensor, int]:
    theta = theta0.clone()
    optimizer = torch.optim.LBFGS(
        [theta],
        lr=1,
        max_iter=max_iter,
        max_eval=max_iter,
        tolerance_grad=linear_probe._GRAD_TOL,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        loss, grad = objective(theta)
        theta.grad = grad
        return loss

    with torch.no_grad():
        optimizer.step(closure)
    return theta.detach(), int(optimizer.state[theta]["n_iter"])


def bench_solver(x: np.ndarray, y: np.ndarray, n_train: int, n_val: int) -> None:
    from graphssl.evaluation.lbfgs import minimize_lbfgs
    from graphssl.evaluation.probe_inputs import encode_classes, standardization

    x_t = torch.from_numpy(x).to(torch.float64)
    train, test = slice(0, n_train), slice(n_train + n_val, len(y))
    mean, scale = standardization(x_t[train], True)
    xt = linear_probe._design(x_t[train], mean, scale)
    xa = xt.T.contiguous()
    classes, encoded = encode_classes(torch.from_numpy(y[train]))
    c = classes.numel()
    x_test = (x_t[test] - mean) / scale
    y_test = torch.from_numpy(y[test])
    start = xt.new_zeros(x.shape[1] + 1, c)
    start[-1] = linear_probe.initial_bias(encoded, c, False)
    print(
        f"\n(e) L-BFGS solver over the default grid, warm starts: train {n_train}, "
        f"D={x.shape[1]}, C={c}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'lambda':>8} {'before it':>9} {'CPU s':>6} {'test':>6} | "
        f"{'now it':>6} {'CPU s':>6} {'test':>6}"
    )

    def accuracy(theta: Tensor) -> float:
        w = theta.view(-1, c)
        return float((classes[(x_test @ w[:-1] + w[-1]).argmax(1)] == y_test).double().mean())

    theta_before = theta_now = start.view(-1)
    cpu_before = cpu_now = 0.0
    for lam in DEFAULT_WEIGHT_DECAYS:
        t0 = time.process_time()
        theta_before, it_before = _torch_lbfgs(
            _rows_objective(xa, encoded, c, lam), theta_before, 5000
        )
        t1 = time.process_time()
        result = minimize_lbfgs(
            linear_probe._softmax_objective(xt, encoded, c, lam),
            theta_now,
            5000,
            tolerance_grad=linear_probe._GRAD_TOL,
        )
        t2 = time.process_time()
        theta_now = result.theta
        cpu_before, cpu_now = cpu_before + t1 - t0, cpu_now + t2 - t1
        print(
            f"{lam:>8g} {it_before:>9d} {t1 - t0:>6.2f} {100 * accuracy(theta_before):>6.2f} | "
            f"{result.n_iter:>6d} {t2 - t1:>6.2f} {100 * accuracy(theta_now):>6.2f}",
            flush=True,
        )
    print(
        f"CPU before {cpu_before:.1f} s, now {cpu_now:.1f} s: {cpu_before / cpu_now:.2f}x; "
        f"load average after {os.getloadavg()[0]:.1f}"
    )


@contextlib.contextmanager
def solver_as_before() -> Iterator[None]:
    """The probe with its solver as before: ``torch.optim.LBFGS`` on the objective over
    ``[n, D + 1]`` rows (the transposed design matrix the probe builds, transposed back)."""
    objective, minimize = linear_probe._softmax_objective, linear_probe._minimize_lbfgs

    def rows(xt: Tensor, y: Tensor, n_classes: int, lam: float) -> Any:
        return _rows_objective(xt.T.contiguous(), y, n_classes, lam)

    def torch_lbfgs(obj: Any, theta0: Tensor, max_iter: int) -> tuple[Tensor, int, bool]:
        theta, n_iter = _torch_lbfgs(obj, theta0, max_iter)
        return theta, n_iter, n_iter < max_iter

    linear_probe._softmax_objective = rows  # type: ignore[assignment]
    linear_probe._minimize_lbfgs = torch_lbfgs  # type: ignore[assignment]
    try:
        yield
    finally:
        linear_probe._softmax_objective = objective
        linear_probe._minimize_lbfgs = minimize


def bench_folds(x: np.ndarray, y: np.ndarray, folds: int, selection: str, seed: int) -> None:
    from sklearn.model_selection import StratifiedKFold

    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    print(
        f"\n(f) LogRegProbe(selection={selection!r}), whole grid, {folds} folds of {len(y)} rows, "
        f"D={x.shape[1]}, load average {os.getloadavg()[0]:.1f}"
    )
    kfold = StratifiedKFold(folds, shuffle=True, random_state=seed)
    cpu = {"before": 0.0, "now": 0.0}
    accs: dict[str, list[float]] = {"before": [], "now": []}
    for k, (train, test) in enumerate(kfold.split(np.zeros(len(y)), y)):
        train = np.random.default_rng(seed + k).permutation(train)
        n_val = len(train) // 10
        fit, val = torch.as_tensor(train[n_val:]), torch.as_tensor(train[:n_val])
        line = f"fold {k}:"
        for label in ("before", "now"):
            probe = LogRegProbe(early_stop=None, selection=selection)  # type: ignore[arg-type]
            with solver_as_before() if label == "before" else contextlib.nullcontext():
                start = time.process_time()
                out = probe.evaluate(x_t, y_t, fit, val, torch.as_tensor(test))
                spent = time.process_time() - start
            cpu[label] += spent
            accs[label].append(out["test_acc"])
            line += (
                f"  {label} {spent:5.1f} CPU s, λ {out['weight_decay']:g}, "
                f"test {100 * out['test_acc']:.2f}"
            )
        print(line, flush=True)
    mean = {k: 100 * float(np.mean(v)) for k, v in accs.items()}
    print(
        f"probe over {folds} folds: before {cpu['before']:.1f} CPU s (test {mean['before']:.2f}), "
        f"now {cpu['now']:.1f} CPU s (test {mean['now']:.2f}): {cpu['before'] / cpu['now']:.2f}x; "
        f"load average after {os.getloadavg()[0]:.1f}"
    )


def bench_knn(
    x: np.ndarray, y: np.ndarray, n_train: int, n_query: int, k: int, chunk_sizes: list[int]
) -> None:
    from sklearn.neighbors import KNeighborsClassifier

    x_train, y_train = x[:n_train], y[:n_train]
    x_query = x[n_train : n_train + n_query]
    print(
        f"\n(b) kNN k={k} uniform, cosine: train {n_train} x query {len(x_query)}, D={x.shape[1]}"
    )
    x_train_t, y_train_t, x_query_t = map(torch.from_numpy, (x_train, y_train, x_query))
    ours: dict[int, tuple[np.ndarray, float, float]] = {}
    for chunk_size in chunk_sizes:
        probe = KNNProbe(k=k, chunk_size=chunk_size, weighting="uniform")

        def run(p: KNNProbe = probe) -> Tensor:
            return p.fit(x_train_t, y_train_t).predict(x_query_t)

        pred, seconds, peak = timed_peak(run)
        ours[chunk_size] = (pred.numpy(), seconds, peak)
        print(f"ours chunk_size={chunk_size:>5}: {seconds:6.1f} s, peak memory +{peak:7.0f} MiB")
    x64_train, x64_query = x_train.astype(np.float64), x_query.astype(np.float64)
    clf = KNeighborsClassifier(k, metric="cosine", algorithm="brute")
    sk_pred, sk_s, sk_peak = timed_peak(lambda: clf.fit(x64_train, y_train).predict(x64_query))
    print(f"sklearn (float64)     : {sk_s:6.1f} s, peak memory +{sk_peak:7.0f} MiB")
    for chunk_size, (pred, seconds, _) in ours.items():
        print(
            f"chunk_size={chunk_size}: speedup {sk_s / seconds:.1f}x, identical predictions "
            f"{np.mean(pred == sk_pred):.6f} ({int(np.sum(pred != sk_pred))} differ)"
        )


def bench_knn_backends(
    x: np.ndarray, y: np.ndarray, n_train: int, n_query: int, k: int, chunk_size: int
) -> None:
    from graphssl.neighbors import faiss_available

    print(
        f"\n(c) kNN k={k} exp, screening backend: train {n_train} x query {n_query}, "
        f"D={x.shape[1]}, chunk_size={chunk_size}"
    )
    if not faiss_available():
        print("faiss is not installed (pip install faiss-cpu): nothing to compare")
        return
    x_train_t, y_train_t = torch.from_numpy(x[:n_train]), torch.from_numpy(y[:n_train])
    x_query_t = torch.from_numpy(x[n_train : n_train + n_query])
    found: dict[str, tuple[Tensor, Tensor]] = {}
    seconds: dict[str, float] = {}
    for backend in ("torch", "faiss"):
        probe = KNNProbe(k=k, chunk_size=chunk_size, backend=backend)  # type: ignore[arg-type]

        def run(p: KNNProbe = probe) -> tuple[Tensor, Tensor]:
            return p.fit(x_train_t, y_train_t).kneighbors(x_query_t)

        found[backend], seconds[backend], peak = timed_peak(run)
        print(
            f"{backend:5s}: {seconds[backend]:6.1f} s, peak memory +{peak:7.0f} MiB "
            f"(load average {os.getloadavg()[0]:.1f})"
        )
    same = all(torch.equal(a, b) for a, b in zip(found["torch"], found["faiss"]))
    print(
        f"torch/faiss time ratio: {seconds['torch'] / seconds['faiss']:.2f}x; identical "
        f"neighbours and similarities: {same}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-train", type=int, default=90_000)
    parser.add_argument("--n-val", type=int, default=30_000)
    parser.add_argument("--n-test", type=int, default=48_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--classes", type=int, default=40)
    parser.add_argument(
        "--separation",
        type=float,
        default=3.0,
        help="scale of the class centres (sets the difficulty)",
    )
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--only",
        choices=["logreg", "knn", "grid", "knn-backends", "solver"],
        nargs="+",
        default=["logreg", "knn", "grid", "knn-backends", "solver"],
    )
    parser.add_argument(
        "--embeddings",
        type=Path,
        help="a run's stored embeddings.pt (embeddings and labels) for (e), split 80/10/10 "
        "stratified with --seed, instead of the Gaussian mixture",
    )
    parser.add_argument(
        "--folds",
        type=int,
        help="with --embeddings: the default probe on this many stratified folds of the stored "
        "rows, solver before and now (f)",
    )
    parser.add_argument("--selection", choices=["split", "cv"], default="split")
    args = parser.parse_args()

    if args.folds is not None:
        if args.embeddings is None:
            parser.error("--folds needs --embeddings")
        embeddings, labels = load_stored(args.embeddings)
        bench_folds(embeddings.numpy(), labels.numpy(), args.folds, args.selection, args.seed)
        return
    if args.embeddings is not None:
        x, y, args.n_train, args.n_val = stored_embeddings(args.embeddings, args.seed)
        args.only = ["solver"]
    else:
        n = args.n_train + args.n_val + args.n_test
        x, y = gaussian_mixture(n, args.dim, args.classes, args.separation, args.seed)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}"
    )
    if "logreg" in args.only:
        bench_logreg(x, y, args.n_train, args.n_val)
    if "grid" in args.only:
        bench_grid(x, y, args.n_train, args.n_val)
    # kNN queries are the test rows (ogbn-arxiv: 90,941 train x 48,603 test).
    order = np.r_[np.arange(args.n_train), np.arange(args.n_train + args.n_val, len(y))]
    if "solver" in args.only:
        bench_solver(x, y, args.n_train, args.n_val)
    if "knn" in args.only:
        bench_knn(x[order], y[order], args.n_train, args.n_test, args.k, args.chunk_sizes)
    if "knn-backends" in args.only:
        chunk = max(args.chunk_sizes)
        bench_knn_backends(x[order], y[order], args.n_train, args.n_test, args.k, chunk)


if __name__ == "__main__":
    main()
