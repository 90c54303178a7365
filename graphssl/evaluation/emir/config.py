"""Settings and result of the KNIFE-based ``I_S`` estimator."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CONDITIONAL_ENTROPY_FLOOR_PER_DIM",
    "GAUSSIAN_ENTROPY_PER_DIM",
    "EMIRConfig",
    "EMIRResult",
]

#: ``-log p(z|u) / d_Z`` can never go below this (std >= 1/e under the tanh clamp).
CONDITIONAL_ENTROPY_FLOOR_PER_DIM: float = 0.5 * math.log(2.0 * math.pi) - 1.0
#: Differential entropy per dimension of a standard normal, ``1/2 log(2 pi e)``.
GAUSSIAN_ENTROPY_PER_DIM: float = 0.5 * math.log(2.0 * math.pi * math.e)


@dataclass(frozen=True)
class EMIRConfig:
    """Hyperparameters of the KNIFE-based ``I_S`` estimator (defaults: ``KNIFEArgs``).

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
        held_out: make the held-out figure the primary one (:attr:`EMIRResult.i_s`, the
            pairwise ``matrix``) instead of the in-sample one (default: ``False``: the
            reference code scores the rows it fitted).
        held_out_estimate: fit both kernels on ``1 - held_out_fraction`` of the rows (a seeded
            split) and score the same fitted kernels twice, on those rows (the in-sample
            figure, the reference code's choice) and on the held-out rows (the held-out
            figure): both figures from one fit, at no extra training cost. The in-sample
            figure then comes from ``1 - held_out_fraction`` of the rows. ``False`` (and
            ``held_out=False``): fit and score all rows, exactly the reference code, no
            held-out figure (default: ``True``).
        held_out_fraction: size of the held-out part (default: ``0.2``).
        seed: seeds initialisation, shuffling and the held-out split (default: ``0``).
        device: where the kernels are trained (default: ``"cpu"``).
        n_jobs: worker processes of :func:`pairwise_information_sufficiency`, one target column
            at a time each, ``cpu_count // n_jobs`` torch threads per worker; ``-1`` means one
            per CPU core. The kernels train on minibatches of 64, where one single-threaded
            process per core beats one process with many threads (benchmarks/bench_emir.py).
            Every pair is seeded on its own, so the matrix does not depend on it
            (default: ``1``, in this process).
        vectorize: fit all sources of one target at once, in one stacked conditional net
            (every source's parameters initialised as the one-pair path initialises them, the
            same minibatch order, one optimizer step for all): the same values as fitting the
            pairs one at a time up to float32 rounding (observed <= 6e-5 after 2 epochs on
            3,000 rows), in fewer, larger operations: 1.5x faster for the 90-pair matrix of
            benchmarks/bench_emir.py on 2 cores. It holds every source's net of a target at
            once (S times the one-pair memory). Only used by
            :func:`pairwise_information_sufficiency` (default: ``True``; ``False``: one pair at
            a time).
        cpu_allocator: the C allocator during :func:`pairwise_information_sufficiency` on CPU,
            as the trainer's ``cpu_allocator``: ``"reuse"`` keeps freed memory in the process
            (on glibc; restored after the fit), so the same-sized tensors of every step are not
            mapped and faulted in again: the stacked net's gradients for a d_Z = 256 target are
            38 MB, above glibc's 32 MB mapping threshold (90 pairs in 4.58 min against 6.81 with
            ``"system"``, benchmarks/bench_emir.py); ``"system"`` leaves it as it is
            (default: ``"reuse"``).
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
    held_out_estimate: bool = True
    held_out_fraction: float = 0.2
    seed: int = 0
    device: str = "cpu"
    n_jobs: int = 1
    vectorize: bool = True
    cpu_allocator: Literal["reuse", "system"] = "reuse"

    @property
    def splits_rows(self) -> bool:
        """Whether the kernels are fitted on a seeded part of the rows (a held-out figure)."""
        return self.held_out or self.held_out_estimate

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
        for name in ("held_out", "held_out_estimate", "vectorize", "use_tanh", "optimize_mu"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"EMIRConfig.{name} must be a boolean, got {getattr(self, name)!r}"
                )
        for name in ("batch_size", "marg_modes", "cond_modes", "n_epochs_stop"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EMIRConfig.{name} must be a positive integer, got {value!r}")
        for name in ("ff_layers", "ff_dim_hidden", "n_epochs", "n_epochs_marg"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"EMIRConfig.{name} must be a non-negative integer, got {value!r}")
        if self.cpu_allocator not in ("reuse", "system"):
            raise ValueError(
                "EMIRConfig.cpu_allocator must be 'reuse' or 'system', got "
                f"{self.cpu_allocator!r}: 'reuse' keeps freed memory in the process during the "
                "fit, 'system' leaves the C allocator as it is"
            )
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

    The primary fields (``h_z`` ... ``i_s_per_dim``, ``n_eval``) are the in-sample figure (the
    rows the kernels were fitted on), or the held-out figure when ``EMIRConfig.held_out``; the
    ``*_held_out`` fields are the held-out figure of the same fitted kernels (NaN, and
    ``n_held_out = 0``, when the rows were not split).

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
        h_z_held_out: ``H(Z)`` on the held-out rows.
        h_z_given_u_held_out: ``H(Z|U)`` on the held-out rows.
        i_s_held_out: ``h_z_held_out - h_z_given_u_held_out``.
        i_s_per_dim_held_out: ``i_s_held_out / d_z``.
        n_held_out: held-out rows.
        i_s_per_dim_in_sample: the in-sample ``I_S / d_Z`` whichever figure is primary.
        n_in_sample: rows the kernels were fitted (and the in-sample figure scored) on.
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
    h_z_held_out: float = math.nan
    h_z_given_u_held_out: float = math.nan
    i_s_held_out: float = math.nan
    i_s_per_dim_held_out: float = math.nan
    n_held_out: int = 0
    i_s_per_dim_in_sample: float = math.nan
    n_in_sample: int = 0
