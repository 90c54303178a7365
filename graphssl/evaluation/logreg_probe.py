"""Linear probe: L2-regularised logistic regression on frozen embeddings.

The probe of the linear-evaluation protocol (e.g. Veličković et al., *Deep Graph Infomax*,
ICLR 2019, https://arxiv.org/abs/1809.10341; Hu et al., *Open Graph Benchmark*, NeurIPS 2020,
https://arxiv.org/abs/2005.00687 for the multilabel AP). Full-batch L-BFGS from a deterministic
start (zero weights) in float64, so the same embeddings always give the same numbers, and no
learning rate or epoch count to tune. The L2 strength is selected on the validation split
(``selection="split"``), or by stratified inner k-fold cross-validation on the training and
validation rows together (``selection="cv"``: the graph-classification presets, whose
validation part of a fold is too small to choose with; InfoGraph and GraphCL choose the
regulariser this way). float32 embeddings stay float32: only the training rows, and chunks
of the scored rows, are cast to float64.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation._deprecated import old_names
from graphssl.evaluation.grid_search import check_inner_folds, stratified_folds
from graphssl.evaluation.lbfgs import Objective, minimize_lbfgs
from graphssl.evaluation.probe import Probe, Task
from graphssl.evaluation.probe_inputs import (
    ArrayLike,
    encode_classes,
    float64_chunks,
    prepare_inputs,
    standardization,
    weight_decay_grid,
)

__all__ = [
    "DEFAULT_WEIGHT_DECAYS",
    "SELECTIONS",
    "SPEC_WEIGHT_DECAYS",
    "LogRegProbe",
    "average_precision",
    "initial_bias",
]

#: L2 strengths tried by :class:`LogRegProbe`, strongest first. The grid reaches 100
#: because with few labelled rows and hundreds of standardised dimensions (the public Planetoid
#: splits: 120–140 training nodes) validation picks values of 1–30 when it may; a grid stopping
#: at 0.1 is selected at its edge there, 1–3 points below. The earlier grid
#: ``(0.1, 0.01, 1e-3, 1e-4, 1e-5, 0)`` stays available as :data:`SPEC_WEIGHT_DECAYS`.
DEFAULT_WEIGHT_DECAYS: tuple[float, ...] = (
    1e2, 30.0, 10.0, 3.0, 1.0, 0.3, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 0.0
)  # fmt: skip
#: The narrower grid the probe used before (strongest 0.1), e.g. to reproduce earlier figures:
#: ``eval.probes.logreg.weight_decay=[0.1,0.01,0.001,0.0001,1e-05,0.0]``.
SPEC_WEIGHT_DECAYS: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 0.0)

#: L-BFGS stops once every gradient entry is at most this in absolute value: scikit-learn's
#: default ``tol`` for ``LogisticRegression(solver="lbfgs")``, on the same mean-loss objective
#: with standardised features. (torch's default, 1e-7, costs about three times as many
#: iterations for the same test accuracy to within 0.02 points on ogbn-arxiv-sized data; see
#: benchmarks/bench_probes.py.) L-BFGS also stops when the loss changes by less than 1e-9.
_GRAD_TOL = 1e-4

#: The suggested ``early_stop`` of :class:`LogRegProbe` for validation-split selection (the
#: default evaluation's, ``conf/eval/default.yaml``): the walk down the L2 grid ends after this
#: many consecutive values scoring below the best validation metric so far. The weak end of the
#: grid costs the most iterations (weaker L2, flatter objective). Re-probing the 40 node runs of
#: the quality table (DGI, GRACE, BGRL, CCA-SSG on Cora and CiteSeer) with it kept every
#: selected strength and test accuracy at 0.58–1.00× the probe's CPU time; with inner
#: cross-validation on small graph datasets the curve is noisier (MUTAG, PROTEINS: it changed
#: 10 of 20 runs' selections, test accuracy by up to 2.6 points), so the graph configs fit the
#: whole grid. ``benchmarks/probe_early_stop.py`` checks a store's runs.
DEFAULT_EARLY_STOP = 3

Selection: TypeAlias = Literal["split", "cv"]
#: How :class:`LogRegProbe` selects its L2 strength: on the validation split, or by inner
#: cross-validation on the training and validation rows together.
SELECTIONS: tuple[Selection, ...] = ("split", "cv")


# --------------------------------------------------------------------------------- metrics
def _binary_average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """sklearn ``average_precision_score`` for one task: sum_k (R_k - R_{k-1}) P_k over the
    distinct score thresholds in decreasing order (ties grouped, no interpolation)."""
    order = np.argsort(s, kind="mergesort")[::-1]
    s, y = s[order], y[order]
    last_of_group = np.r_[np.flatnonzero(np.diff(s)), y.size - 1]
    tps = np.cumsum(y)[last_of_group]
    fps = 1 + last_of_group - tps
    precision = tps / (tps + fps)
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def average_precision(y_true: Tensor | npt.ArrayLike, y_score: Tensor | npt.ArrayLike) -> float:
    """Multilabel average precision as OGB's ``Evaluator._eval_ap`` (Hu et al., 2020).

    For each task with at least one positive and one negative among its non-NaN labels, the
    sklearn-style average precision over the labelled rows; the mean over those tasks.

    Args:
        y_true: ``[N, T]`` (or ``[N]``) labels in {0, 1}, NaN for missing.
        y_score: scores of the same shape; only their order within a task matters.

    Raises:
        ValueError: on a shape mismatch, or when no task has both a positive and a negative.
    """
    t = np.asarray(y_true.detach().cpu() if isinstance(y_true, Tensor) else y_true, float)
    s = np.asarray(y_score.detach().cpu() if isinstance(y_score, Tensor) else y_score, float)
    if t.ndim == 1:
        t, s = t[:, None], s.reshape(-1, 1)
    if t.shape != s.shape or t.ndim != 2:
        raise ValueError(
            f"y_true has shape {t.shape} but y_score has shape {s.shape}; expected the same "
            f"[N, T] shape"
        )
    aps = []
    for task in range(t.shape[1]):
        labelled = ~np.isnan(t[:, task])
        yt = t[labelled, task]
        if (yt == 1).any() and (yt == 0).any():
            aps.append(_binary_average_precision(yt, s[labelled, task]))
    if not aps:
        raise ValueError(
            f"none of the {t.shape[1]} tasks has both a positive and a negative label among "
            f"its {t.shape[0]} rows (NaN labels ignored); average precision is undefined"
        )
    return float(np.mean(aps))


# ------------------------------------------------------------------------------ objectives
# The design matrix is kept transposed, ``xt = [X | 1]ᵀ`` of shape ``[D + 1, n]``, contiguous:
# with a handful of outputs both products of an evaluation (the logits and the gradient) read
# it row by row, 1.5–1.7× faster than with ``[n, D + 1]`` rows (the products are memory-bound:
# a probe's training matrix is megabytes, its weights a few columns).
def _softmax_objective(xt: Tensor, y: Tensor, n_classes: int, lam: float) -> Objective:
    """Mean cross-entropy of softmax(Wᵀ xt) + lam/2 ||W[:-1]||² and its gradient.

    ``xt`` is [D + 1, n]: the standardised training rows as columns, the last row ones (the
    unregularised bias row of W).
    """
    p, n = xt.shape
    target = y * n + torch.arange(n, device=xt.device)  # flat index of (y_i, i) in [C, n]

    def objective(theta: Tensor) -> tuple[Tensor, Tensor]:
        w = theta.view(p, n_classes)
        z = w.T @ xt  # [C, n] logits
        loss = -z.view(-1).index_select(0, target).sum()
        z_max = z.amax(dim=0, keepdim=True)
        prob = z.sub_(z_max).exp_()  # unnormalised softmax, in place of the logits
        total = prob.sum(dim=0, keepdim=True)
        loss = (loss + z_max.sum() + total.log().sum()) / n  # mean of logsumexp - z_y
        prob.div_(total)
        prob.view(-1).index_add_(
            0, target, torch.full((n,), -1.0, dtype=xt.dtype, device=xt.device)
        )
        grad = _times_transpose(xt, prob).div_(n)
        w_reg = w[:-1]
        loss = loss + 0.5 * lam * (w_reg * w_reg).sum()
        grad[:-1].add_(w_reg, alpha=lam)
        return loss, grad.view(-1)

    return objective


def _sigmoid_objective(xt: Tensor, y: Tensor, observed: Tensor, lam: float) -> Objective:
    """Mean binary cross-entropy over observed (row, task) entries + lam/2 ||W[:-1]||².

    ``xt`` is [D + 1, n] as in :func:`_softmax_objective`; ``y`` and ``observed`` are [n, T].
    """
    p = xt.shape[0]
    n_tasks = y.shape[1]
    weight = (observed.to(xt.dtype) / max(int(observed.sum()), 1)).T.contiguous()
    y0 = torch.where(observed, y, torch.zeros_like(y)).T.contiguous()

    def objective(theta: Tensor) -> tuple[Tensor, Tensor]:
        w = theta.view(p, n_tasks)
        z = w.T @ xt  # [T, n]
        loss = ((torch.nn.functional.softplus(z) - y0 * z) * weight).sum()
        grad = _times_transpose(xt, torch.sigmoid(z).sub_(y0).mul_(weight))
        w_reg = w[:-1]
        loss = loss + 0.5 * lam * (w_reg * w_reg).sum()
        grad[:-1].add_(w_reg, alpha=lam)
        return loss, grad.view(-1)

    return objective


def _times_transpose(xt: Tensor, r: Tensor) -> Tensor:
    """``xt @ r.T`` as a contiguous [D + 1, C], ``r`` [C, n]: for one or two outputs
    ``(r @ xt.T).T`` reads ``xt`` faster (BLAS's matrix-vector kernels), for more the product
    as written."""
    if r.shape[0] <= 2:
        return (r @ xt.T).T.contiguous()
    return xt @ r.T


def _minimize_lbfgs(
    objective: Objective, theta0: Tensor, max_iter: int
) -> tuple[Tensor, int, bool]:
    """Full-batch L-BFGS from ``theta0`` (strong-Wolfe line search, ``lr=1``, 100 pairs of
    memory; :func:`graphssl.evaluation.lbfgs.minimize_lbfgs`).

    Returns the solution, the number of iterations and whether it stopped before using up the
    iteration or evaluation budget.
    """
    result = minimize_lbfgs(objective, theta0, max_iter, tolerance_grad=_GRAD_TOL)
    return result.theta, result.n_iter, result.converged


def initial_bias(targets: Tensor, n_out: int, multilabel: bool) -> Tensor:
    """The optimal bias when every weight is zero: the log class frequencies (centred) of the
    encoded training labels, or per task the logit of the observed positive rate.

    Starting the strongest L2 value there instead of at zero removes the slow part of its fit:
    the bias is not regularised, so with a strong L2 term its curvature is thousands of times
    smaller than the weights', and L-BFGS from zero spends most of its iterations on it.
    """
    if multilabel:
        observed = ~torch.isnan(targets)
        positives = torch.where(observed, targets, torch.zeros_like(targets)).sum(dim=0)
        rate = (positives + 0.5) / (observed.sum(dim=0) + 1.0)  # never exactly 0 or 1
        return torch.log(rate) - torch.log1p(-rate)
    counts = torch.bincount(targets, minlength=n_out).to(torch.float64)
    log_freq = torch.log(counts / counts.sum())
    return log_freq - log_freq.mean()


def _design(x: Tensor, mean: Tensor, scale: Tensor) -> Tensor:
    """``[D + 1, n]``: the standardised rows of ``x`` as columns, then a row of ones."""
    xt = x.new_empty(x.shape[1] + 1, x.shape[0])
    torch.div((x - mean).T, scale.unsqueeze(1), out=xt[:-1])
    xt[-1] = 1.0
    return xt


class _Path:
    """The L2 path of one single-label training set: its standardisation, its objective and
    the solution of the last strength fitted.

    :meth:`step` fits the next (weaker) strength, starting from the previous solution when
    ``warm_start``; :meth:`accuracy` scores rows of the whole matrix with the current solution.
    Inner cross-validation walks one path per inner fold in lockstep, and the refit on the
    whole training set walks one more.
    """

    def __init__(self, x: Tensor, targets: Tensor, train: Tensor, standardize: bool) -> None:
        x_train = x[train].to(torch.float64)
        self.mean, self.scale = standardization(x_train, standardize)
        self.xt = _design(x_train, self.mean, self.scale)
        self.classes, self.y = encode_classes(targets[train])
        self.n_out = self.classes.numel()
        start = self.xt.new_zeros(x.shape[1] + 1, self.n_out)
        start[-1] = initial_bias(self.y, self.n_out, False)
        self.first = start.view(-1)
        self.theta = self.first
        self.n_iter = 0
        self.converged = True

    def step(self, lam: float, warm_start: bool, max_iter: int) -> None:
        start = self.theta if warm_start else self.first
        objective = _softmax_objective(self.xt, self.y, self.n_out, lam)
        self.theta, self.n_iter, self.converged = _minimize_lbfgs(objective, start, max_iter)

    @property
    def weights(self) -> Tensor:
        """``[D + 1, C]``: the weights, then the bias row."""
        return self.theta.view(-1, self.n_out)

    def accuracy(self, x: Tensor, rows: Tensor, target: Tensor) -> float:
        """Accuracy of the current solution on ``x[rows]``, scored in float64 chunks."""
        w = self.weights
        correct, start = 0, 0
        for chunk in float64_chunks(x, rows):
            stop = start + chunk.shape[0]
            logits = ((chunk - self.mean) / self.scale) @ w[:-1] + w[-1]
            correct += int((self.classes[logits.argmax(dim=1)] == target[start:stop]).sum())
            start = stop
        return correct / max(rows.numel(), 1)


# ------------------------------------------------------------------------------- estimator
class LogRegProbe(Probe):
    """L2-regularised logistic regression on frozen embeddings.

    The classifier minimises mean cross-entropy + ``weight_decay / 2 * ||W||²`` (bias not
    regularised) on the training rows, full-batch with L-BFGS (strong-Wolfe line search,
    ``lr=1``) in float64, starting from zero weights with the bias at its optimum for them (the
    log class frequencies, :func:`initial_bias`): no random initialisation and no learning rate,
    so the same embeddings always give the same result. A fit stops when every gradient entry
    is at most 1e-4 (scikit-learn's default ``tol``) or the loss stops changing. When several
    ``weight_decay`` values are given, the one with the best validation metric is used (the
    strongest on ties) and the test metric is reported for it. The values are fitted from the
    strongest to the weakest, each starting from the previous solution with a fresh optimizer
    (``warm_start=True``), which makes a long grid cost little more than its weakest values.
    Selecting the strongest value of a grid warns: the optimum may lie above it (with few
    labelled rows and hundreds of standardised dimensions, e.g. the public Planetoid splits,
    values of 1–30 can win). The walk down the grid ends early after ``early_stop``
    consecutive values whose validation metric is below the best so far (a value equal to the
    best ends the run of drops): the weaker values it skips are the most expensive fits, and
    the selection is the same as over the whole grid whenever none of the skipped values would
    have scored above the best.

    With ``selection="cv"`` the validation rows are not held out: the training and validation
    rows together (in k-fold graph classification, the whole training part of an outer fold)
    are split into ``inner_folds`` stratified folds, shuffled with ``seed`` (scikit-learn's
    ``StratifiedKFold``; fewer folds when the rarest class has fewer rows). The grid is walked
    on every inner fold in lockstep, each fold warm-starting along its own path and scoring its
    held-out rows; the strength with the best mean accuracy over the inner folds is selected
    (the strongest on ties; ``early_stop`` counts drops of that mean), refitted on all those
    rows along the path from the strongest value down to it, and scored on the test rows. This
    costs about ``inner_folds + 1`` times the fits of the validation-split selection, and it
    chooses on every row of the training part instead of a tenth of it: on MUTAG a fold's
    validation part is 17 graphs, so one graph moves its accuracy by 6 points and the selection
    fits noise. Only single-label classification supports it.

    float32 embeddings are not copied whole to float64: the training rows are (the fit runs on
    them), the other rows are scored in float64 chunks.

    For multilabel tasks (e.g. ogbg-molpcba) the loss is binary cross-entropy averaged over the
    observed (row, task) entries and the metric is OGB's average precision; labels are float
    tensors with NaN for missing values.

    Args:
        weight_decay: L2 strength, or the values to select among on the validation split
            (default: :data:`DEFAULT_WEIGHT_DECAYS`).
        max_iter: Budget of L-BFGS iterations and of loss evaluations for each fit;
            ``converged`` is False when the selected fit used it up (default: ``5000``).
        standardize: Rescale every feature to zero mean and unit variance, with the statistics
            of the training rows only (default: ``True``).
        multilabel: Treat the task as multilabel classification (default: ``False``).
        warm_start: Start each L2 strength from the previous (stronger) one's solution; with
            ``False`` every fit starts from the first one's start, which gives the same optimum
            (to the stopping tolerance) at a higher cost
            (default: ``True``).
        early_stop: End the walk down the grid after this many consecutive values scoring
            below the best validation metric so far (:data:`DEFAULT_EARLY_STOP` is the
            suggested value); ``None``: fit every value (default: ``None``).
        selection: ``"split"``: select on the validation rows; ``"cv"``: select by stratified
            inner cross-validation on the training and validation rows together, and refit on
            them (default: ``"split"``).
        inner_folds: folds of the inner cross-validation with ``selection="cv"``
            (default: ``5``); unused with ``"split"``.
        seed: seed of the inner fold assignment with ``selection="cv"`` (default: ``0``);
            unused with ``"split"``.

    Attributes (after :meth:`fit`):
        coef_: ``[D, C]`` weights (``[D, T]`` multilabel), in the standardised feature space.
        intercept_: ``[C]`` (``[T]``) biases.
        mean_, scale_: ``[D]`` standardisation applied before ``coef_``.
        classes_: ``[C]`` class ids seen in the training split (single-label only).
        weight_decay_: the selected L2 strength.
        converged_: whether the selected fit stopped before its budget.
        n_iter_: L-BFGS iterations of the selected fit.
        val_metrics_per_weight_decay_: validation accuracy (AP) for every L2 strength
            fitted (those after an early stop are left out); with ``selection="cv"`` the mean
            accuracy over the inner folds.
        inner_folds_: with ``selection="cv"``, the inner folds used.
        fold_metrics_per_weight_decay_: with ``selection="cv"``, every inner fold's accuracy
            for every L2 strength fitted.

    Example:
        >>> LogRegProbe().evaluate(z, y, train_mask, val_mask, test_mask)
        {'train_acc': ..., 'val_acc': ..., 'test_acc': ..., 'weight_decay': ..., 'converged': ...}
    """

    def __init__(
        self,
        *,
        weight_decay: float | Sequence[float] = DEFAULT_WEIGHT_DECAYS,
        max_iter: int = 5000,
        standardize: bool = True,
        multilabel: bool = False,
        warm_start: bool = True,
        early_stop: int | None = None,
        selection: Selection = "split",
        inner_folds: int = 5,
        seed: int = 0,
    ) -> None:
        self.weight_decays: tuple[float, ...] = weight_decay_grid(weight_decay)
        if not isinstance(max_iter, numbers.Integral) or isinstance(max_iter, bool):
            raise TypeError(f"max_iter must be an integer, got {max_iter!r}")
        if max_iter <= 0:
            raise ValueError(f"max_iter must be > 0, got {max_iter}")
        self.weight_decay: float | Sequence[float] = weight_decay
        self.max_iter: int = int(max_iter)
        self.standardize: bool = standardize
        self.multilabel: bool = multilabel
        self.warm_start: bool = bool(warm_start)
        if early_stop is not None and (
            not isinstance(early_stop, numbers.Integral)
            or isinstance(early_stop, bool)
            or early_stop < 1
        ):
            raise ValueError(f"early_stop must be a positive integer or None, got {early_stop!r}")
        self.early_stop: int | None = None if early_stop is None else int(early_stop)
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        if selection == "cv" and multilabel:
            raise ValueError(
                "selection='cv' stratifies its inner folds by class, so it needs single-label "
                "classes; multilabel targets need selection='split'"
            )
        self.selection: Selection = selection
        self.inner_folds: int = check_inner_folds(inner_folds)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an integer, got {seed!r}")
        self.seed: int = int(seed)

    #: The embeddings stay float32 when given so; rows are cast to float64 where used.
    input_dtype = None

    # ------------------------------------------------------------------ public API
    def fit(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
    ) -> LogRegProbe:
        """Fit every L2 strength on the training rows and keep the best one on validation
        (``selection="cv"``: select by inner cross-validation on the training and validation
        rows together and refit on them).

        Args:
            embeddings: ``[N, D]`` floating embeddings.
            labels: ``[N]`` (or ``[N, 1]``) class ids, or ``[N, T]`` {0, 1, NaN} when multilabel.
            train_mask, val_mask: boolean masks ``[N]`` or index tensors.
        """
        x, y, idx = prepare_inputs(
            embeddings, labels, {"train_mask": train_mask, "val_mask": val_mask}, dtype=None
        )
        rows = {"train": idx["train_mask"], "val": idx["val_mask"]}
        targets = self.targets(y, torch.cat(list(rows.values())))
        if self.selection == "cv":
            self._fit_cv(x, targets, torch.cat([rows["train"], rows["val"]]))
        else:
            self._fit(x, targets, rows)
        return self

    @property
    def per_split_keys(self) -> tuple[str, ...]:
        """Result keys that an evaluation over several splits logs split by split besides
        their mean (``probe/<name>/<key>_fold<i>``): the L2 strength each outer fold's inner
        cross-validation selected; none with the validation-split selection."""
        return ("weight_decay",) if self.selection == "cv" else ()

    def decision_function(self, embeddings: ArrayLike) -> Tensor:
        """Logits ``[M, C]`` (``[M, T]`` multilabel) of the fitted classifier, float64."""
        self._check_fitted()
        x = as_float_matrix(embeddings, dtype=None)
        if x.shape[1] != self.coef_.shape[0]:
            raise ValueError(
                f"embeddings have {x.shape[1]} features but the probe was fitted on "
                f"{self.coef_.shape[0]}"
            )
        return torch.cat([self._logits(chunk) for chunk in float64_chunks(x)])

    def predict(self, embeddings: ArrayLike) -> Tensor:
        """Class ids ``[M]``, or ``[M, T]`` 0/1 predictions when multilabel."""
        logits = self.decision_function(embeddings)
        if self.multilabel:
            return (logits > 0).long()
        return self.classes_[logits.argmax(dim=1)]

    tasks: ClassVar[tuple[Task, ...]] = ("classification", "multilabel")

    @property
    def task(self) -> Task:
        """``"multilabel"`` when ``multilabel=True``, else ``"classification"``."""
        return "multilabel" if self.multilabel else "classification"

    # ---------------------------------------------------------------- internals
    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        """Fit on ``train``, select on ``val``, report on every split.

        Returns:
            ``train_acc``, ``val_acc``, ``test_acc`` (``train_ap``, ``val_ap``, ``test_ap``
            when multilabel), the selected ``weight_decay`` and ``converged``. With
            ``selection="cv"``: ``train_acc`` of the refitted model on the training and
            validation rows, ``val_acc`` the selected strength's mean accuracy over the inner
            folds (what the selection maximised), ``test_acc``, ``weight_decay``,
            ``converged`` and ``inner_folds`` (the folds used).
        """
        if self.selection == "cv":
            return self._evaluate_cv(x, targets, rows)
        self._fit(x, targets, rows, stacklevel=4)
        name = "ap" if self.multilabel else "acc"
        out: dict[str, Any] = {}
        for split, split_rows in rows.items():
            out[f"{split}_{name}"] = self._metric(x, split_rows, targets[split_rows])
        out["weight_decay"] = self.weight_decay_
        out["converged"] = self.converged_
        return out

    def _logits(self, x64: Tensor) -> Tensor:
        return ((x64 - self.mean_) / self.scale_) @ self.coef_ + self.intercept_

    def _metric(self, x: Tensor, rows: Tensor, target: Tensor) -> float:
        """Accuracy (AP when multilabel) on ``x[rows]``, scored in float64 chunks."""
        chunks = float64_chunks(x, rows)
        if self.multilabel:
            return average_precision(target, torch.cat([self._logits(c) for c in chunks]))
        correct, start = 0, 0
        for chunk in chunks:
            stop = start + chunk.shape[0]
            pred = self.classes_[self._logits(chunk).argmax(dim=1)]
            correct += int((pred == target[start:stop]).sum())
            start = stop
        return correct / max(rows.numel(), 1)

    def _fit(
        self, x: Tensor, targets: Tensor, rows: Mapping[str, Tensor], stacklevel: int = 3
    ) -> None:
        train, val = rows["train"], rows["val"]
        x_train = x[train].to(torch.float64)
        mean, scale = standardization(x_train, self.standardize)
        xt = _design(x_train, mean, scale)
        del x_train  # the standardised copy is all the fits need
        n_features = x.shape[1]
        if self.multilabel:
            y_train = targets[train]
            observed = ~torch.isnan(y_train)
            n_out = y_train.shape[1]

            def make_objective(lam: float) -> Objective:
                return _sigmoid_objective(xt, y_train, observed, lam)
        else:
            self.classes_, y_encoded = encode_classes(targets[train])
            n_out = self.classes_.numel()

            def make_objective(lam: float) -> Objective:
                return _softmax_objective(xt, y_encoded, n_out, lam)

        self.mean_, self.scale_ = mean, scale
        y_val = targets[val]
        # zero weights, the bias at its optimum for them (see initial_bias)
        start_w = xt.new_zeros(n_features + 1, n_out)
        start_w[-1] = initial_bias(
            y_train if self.multilabel else y_encoded, n_out, self.multilabel
        )
        first = start_w.view(-1)
        theta = first
        self.val_metrics_per_weight_decay_: dict[float, float] = {}
        best: tuple[float, float, Tensor, int, bool] | None = None
        drops = 0  # consecutive values below the best so far
        for lam in self.weight_decays:  # strongest first
            start = theta if self.warm_start else first
            theta, n_iter, converged = _minimize_lbfgs(make_objective(lam), start, self.max_iter)
            w = theta.view(n_features + 1, n_out)
            self.coef_, self.intercept_ = w[:-1], w[-1]
            score = self._metric(x, val, y_val)
            self.val_metrics_per_weight_decay_[lam] = score
            if best is None or score > best[0]:  # strict: ties keep the stronger λ
                best = (score, lam, theta.clone(), n_iter, converged)
            drops = drops + 1 if score < best[0] else 0
            if self.early_stop is not None and drops >= self.early_stop:
                break  # early_stop values in a row below the best: the walk is past its peak
        assert best is not None  # the grid is never empty (checked in __init__)
        _, self.weight_decay_, theta, self.n_iter_, self.converged_ = best
        self._warn_if_strongest(stacklevel + 1)
        w = theta.view(n_features + 1, n_out)
        self.coef_, self.intercept_ = w[:-1], w[-1]
        self.n_features_in_ = n_features

    def _evaluate_cv(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        fit_rows = torch.cat([rows["train"], rows["val"]])
        self._fit_cv(x, targets, fit_rows, stacklevel=5)
        return {
            "train_acc": self._metric(x, fit_rows, targets[fit_rows]),
            "val_acc": self.val_metrics_per_weight_decay_[self.weight_decay_],
            "test_acc": self._metric(x, rows["test"], targets[rows["test"]]),
            "weight_decay": self.weight_decay_,
            "converged": self.converged_,
            "inner_folds": self.inner_folds_,
        }

    def _fit_cv(self, x: Tensor, targets: Tensor, fit_rows: Tensor, stacklevel: int = 4) -> None:
        """Select the L2 strength by inner cross-validation on ``fit_rows``, then refit it on
        all of them (class docstring)."""
        y_fit = targets[fit_rows]
        folds = stratified_folds(
            y_fit, inner_folds=self.inner_folds, seed=self.seed, probe=type(self).__name__
        )
        device = fit_rows.device
        parts = [
            (
                fit_rows[torch.as_tensor(tr, device=device)],
                fit_rows[torch.as_tensor(va, device=device)],
            )
            for tr, va in folds
        ]
        paths = [_Path(x, targets, tr, self.standardize) for tr, _ in parts]
        self.inner_folds_ = len(folds)
        self.val_metrics_per_weight_decay_ = {}
        self.fold_metrics_per_weight_decay_: dict[float, list[float]] = {}
        best: tuple[float, float] | None = None
        drops = 0
        for lam in self.weight_decays:  # strongest first, every fold one step
            scores = []
            for path, (_, held_out) in zip(paths, parts, strict=True):
                path.step(lam, self.warm_start, self.max_iter)
                scores.append(path.accuracy(x, held_out, targets[held_out]))
            mean = math.fsum(scores) / len(scores)
            self.fold_metrics_per_weight_decay_[lam] = scores
            self.val_metrics_per_weight_decay_[lam] = mean
            if best is None or mean > best[0]:  # strict: ties keep the stronger λ
                best = (mean, lam)
            drops = drops + 1 if mean < best[0] else 0
            if self.early_stop is not None and drops >= self.early_stop:
                break
        assert best is not None  # the grid is never empty (checked in __init__)
        self.weight_decay_ = best[1]
        self._warn_if_strongest(stacklevel + 1)
        # the refit walks the same path on every row down to the selected strength
        refit = _Path(x, targets, fit_rows, self.standardize)
        walk = self.weight_decays if self.warm_start else (self.weight_decay_,)
        for lam in walk:
            refit.step(lam, self.warm_start, self.max_iter)
            if lam == self.weight_decay_:
                break
        w = refit.weights
        self.coef_, self.intercept_ = w[:-1], w[-1]
        self.mean_, self.scale_, self.classes_ = refit.mean, refit.scale, refit.classes
        self.n_iter_, self.converged_ = refit.n_iter, refit.converged
        self.n_features_in_ = x.shape[1]

    def _warn_if_strongest(self, stacklevel: int) -> None:
        if len(self.weight_decays) > 1 and self.weight_decay_ == self.weight_decays[0] > 0:
            warnings.warn(
                f"LogRegProbe selected the strongest weight decay of its grid "
                f"({self.weight_decay_:g} of {list(self.weight_decays)}); the best value may lie "
                f"above the grid — add larger values (eval.probes.<name>.weight_decay)",
                UserWarning,
                stacklevel=stacklevel,
            )

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() or evaluate()")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(weight_decay={self.weight_decays}, max_iter={self.max_iter}, "
            f"standardize={self.standardize}, multilabel={self.multilabel}, "
            f"warm_start={self.warm_start}, early_stop={self.early_stop}, "
            f"selection={self.selection!r}, inner_folds={self.inner_folds}, seed={self.seed})"
        )


#: class names before the rename, answered for one release with a DeprecationWarning
__getattr__ = old_names(__name__, {"LogRegProbe": "LogRegProbe"})
