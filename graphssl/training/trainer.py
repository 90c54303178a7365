"""The one training loop of graphssl: epochs, early stopping, callbacks, resumable state.

Methods only define ``loss(batch)``; this loop owns optimisation, the order of batches (drawn
by :class:`~graphssl.training.batches.EpochBatches`), the progress bar and when callbacks
(metric logging, checkpoints, diagnostics) are called. What a
checkpoint holds is the loop's (:meth:`Trainer.save_checkpoint`); when and where one is written
is a callback's (:class:`~graphssl.training.callbacks.checkpoint.ModelCheckpoint`).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from graphssl.data.base import DataModule
from graphssl.methods.base import SSLMethod
from graphssl.training import distributed
from graphssl.training.batches import EpochBatches, encoder_hops
from graphssl.training.checkpoint import capture_rng, restore_rng
from graphssl.training.checkpoint import save_checkpoint as write_checkpoint
from graphssl.training.compile import compile_encoders, compile_problem, restore_eager

log = logging.getLogger(__name__)


@dataclass
class EpochResult:
    """What one epoch produced: mean of each loss term over batches, and wall time."""

    epoch: int
    metrics: dict[str, float]
    seconds: float


@dataclass
class FitResult:
    """Summary of :meth:`Trainer.fit`."""

    epochs: list[EpochResult] = field(default_factory=list)
    best_epoch: int = -1
    best_loss: float = math.inf
    stopped_early: bool = False
    #: optimisation steps this fit ran, seconds spent waiting on the batch iterator (sampling
    #: and collation in mini-batch mode) and seconds spent in the batch loop in all
    num_batches: int = 0
    sample_seconds: float = 0.0
    loop_seconds: float = 0.0
    #: ranks that trained the model together (``trainer.devices``)
    world_size: int = 1

    @property
    def losses(self) -> list[float]:
        return [e.metrics["loss"] for e in self.epochs]

    def summary(self) -> dict[str, float]:
        """``train/final_loss``, ``train/epochs`` and ``train/best_epoch`` (counted from 1, as
        the ``Epoch 010`` lines; 0 when no loss was finite) (and
        ``dist/world_size`` on several processes); empty when no epoch ran (e.g.
        ``trainer.epochs=0``)."""
        if not self.epochs:
            return {}
        out = {
            "train/final_loss": self.epochs[-1].metrics["loss"],
            "train/epochs": float(len(self.epochs)),
            "train/best_epoch": float(self.best_epoch + 1),
        }
        if self.world_size > 1:
            out["dist/world_size"] = float(self.world_size)
        return out

    def throughput(self) -> dict[str, float]:
        """``time/batches_per_second`` (steps over the batch loop's wall time),
        ``time/sample_seconds`` (in the batch iterator) and ``time/compute_seconds`` (the rest:
        forward, backward, optimizer); empty when no batch ran."""
        if self.num_batches == 0:
            return {}
        return {
            "time/batches_per_second": self.num_batches / max(self.loop_seconds, 1e-9),
            "time/sample_seconds": self.sample_seconds,
            "time/compute_seconds": self.loop_seconds - self.sample_seconds,
        }


@dataclass
class _EpochState:
    """What a checkpoint of the epoch that just ended holds besides the method, optimizer and
    scheduler: the fit so far and the early-stopping counters."""

    epoch: int
    result: FitResult
    bad_epochs: int
    best_state: dict[str, torch.Tensor] | None
    stopped_early: bool


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Move a PyG ``Data``/``Batch``, a tensor, or a tuple/list/dict of them to ``device``."""
    if hasattr(batch, "to") and not isinstance(batch, (tuple, list, dict)):
        return batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(move_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: move_to_device(v, device) for k, v in batch.items()}
    return batch


class Callback:
    """Hooks the trainer calls; subclasses override what they need.

    At the end of each epoch they run in this order: :meth:`on_epoch_end` (the epoch's
    metrics; a callback may set :attr:`Trainer.should_stop` or :attr:`Trainer.should_checkpoint`
    here), the trainer's early-stopping and stop decision, :meth:`on_epoch_checkpoint` (where
    checkpoints are written, each preceded by every callback's :meth:`on_checkpoint`), then
    :meth:`on_epoch_complete`.
    """

    def on_fit_start(self, trainer: Trainer, method: SSLMethod) -> None: ...

    def on_train_batch_end(
        self, trainer: Trainer, method: SSLMethod, values: dict[str, float], batch_idx: int
    ) -> None:
        """After each optimizer step: the step's loss and metrics (in a process group, their
        global values, the same on every rank) and the step's index in its epoch."""

    def on_epoch_end(self, trainer: Trainer, method: SSLMethod, result: EpochResult) -> None: ...

    def on_epoch_checkpoint(self, trainer: Trainer, method: SSLMethod, epoch: int) -> None:
        """Once the epoch's stop decision is made (:attr:`Trainer.is_last_epoch`): the place
        to write its checkpoint with :meth:`Trainer.save_checkpoint` (as
        :class:`~graphssl.training.callbacks.checkpoint.ModelCheckpoint` does)."""

    def on_checkpoint(self, trainer: Trainer, method: SSLMethod, epoch: int) -> None:
        """Before a checkpoint is written: persist whatever the checkpoint will vouch for
        (state of the callback goes into ``trainer.checkpoint_extra``)."""

    def on_resume(self, trainer: Trainer, method: SSLMethod, state: dict[str, Any]) -> None:
        """When :meth:`Trainer.fit` continues from a checkpoint: ``state`` is all of it."""

    def on_epoch_complete(self, trainer: Trainer, method: SSLMethod, epoch: int) -> None:
        """After the epoch's checkpoint (if any) is on disk: the place for slow or fallible
        I/O such as sending metrics to a tracking store, so a failure there never costs the
        checkpoint of the epoch."""

    def on_fit_end(self, trainer: Trainer, method: SSLMethod, result: FitResult) -> None: ...


class DivergedError(ValueError):
    """The loss became NaN or infinite, or grew past :data:`DIVERGENCE_FACTOR` times its
    first value: the run cannot recover, and a wrong setting (a learning rate, the inputs) is
    the usual cause, so it is reported as a user error in one paragraph."""


#: a loss whose magnitude exceeds this multiple of the first batch's (at least of 1) has
#: diverged
DIVERGENCE_FACTOR = 1e6


class MemoryBudgetError(ValueError):
    """A full-batch run would need more memory than ``trainer.memory_budget_gb``."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped at the end of an epoch because :meth:`Trainer.request_stop` was called
    (a signal such as SIGTERM); the epoch's checkpoint is written when checkpoints are on."""


class Trainer:
    """Trains any :class:`~graphssl.methods.base.SSLMethod` on a DataModule.

    Args:
        epochs: maximum number of epochs (default: ``100``).
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; code never picks one itself
            (default: ``"cpu"``).
        patience: stop when the training loss has not improved for this many epochs and restore
            the best weights; ``None`` disables early stopping (default: ``None``).
        mini_batch: train on ``NeighborLoader`` mini-batches instead of the full graph
            (default: ``False``).
        num_neighbors: fanout per hop for mini-batch training; ``None`` samples 10 neighbours
            per message-passing layer of the method's encoder (default: ``None``).
        batch_size: seed nodes per mini-batch (default: ``1024``).
        grad_clip: clip the gradient norm to this value; ``None`` disables (default: ``None``).
        progress: show a progress bar; ``None`` shows it only on a terminal (default: ``None``).
        checkpoint_every: a shorthand: with ``checkpoint_path``, a
            :class:`~graphssl.training.callbacks.checkpoint.ModelCheckpoint` writing it every
            this many epochs is added to ``callbacks``; ``None`` writes only the epochs a
            callback asks for (default: ``None``). The train task passes ``None`` and builds its
            checkpoint callback from ``conf/callbacks/`` instead.
        checkpoint_path: the checkpoint file of that shorthand; ``None`` adds no checkpoint
            callback (default: ``None``).
        memory_budget_gb: full-batch training on a node-level graph is refused before the first
            epoch when the method's estimate of one step's memory
            (:meth:`~graphssl.methods.base.SSLMethod.full_batch_bytes`) exceeds this many GiB;
            ``None`` disables the check (default: ``8.0``).
        callbacks: objects with :class:`Callback` hooks; one may end training after the
            current epoch by setting :attr:`should_stop` (e.g. selection on a validation probe),
            one writes checkpoints (``ModelCheckpoint``).
        log_every: log ``Epoch 010, loss 0.5200, 0.4 s`` every this many epochs, after the
            first and the last, and after every epoch slower than 2 s; ``None`` logs none
            (default: ``10``).
        limit_batches: train on at most this many batches per epoch (smoke tests,
            ``debug=fast``); ``None`` uses all (default: ``None``).
        devices: processes (ranks) training this one model; above 1, :meth:`fit` runs inside a
            ``torch.distributed`` process group of that many ranks, which the train task starts
            (:func:`graphssl.training.distributed.launch`); ``batch_size`` (or the dataset's
            batch size) is then per rank (default: ``1``).
        num_nodes: machines; above 1, ``devices`` ranks run on each, one per task of a
            SLURM job step (default: ``1``).
        dist_timeout_s: seconds a collective may wait for the other ranks before the fit fails,
            a guard against hangs that must also cover rank 0's callbacks between epochs
            (checkpoints, diagnostics, selection probes) (default: ``300``).
        compile: run the method's encoders through ``torch.compile`` while training
            (:mod:`graphssl.training.compile`); refused at construction, with what is missing,
            where it cannot run (no C++ compiler on CPU, no ``triton`` on CUDA)
            (default: ``False``).
    """

    def __init__(
        self,
        epochs: int = 100,
        device: str = "cpu",
        patience: int | None = None,
        mini_batch: bool = False,
        num_neighbors: Sequence[int] | None = None,
        batch_size: int = 1024,
        grad_clip: float | None = None,
        progress: bool | None = None,
        checkpoint_every: int | None = None,
        checkpoint_path: str | None = None,
        callbacks: Iterable[Callback] = (),
        memory_budget_gb: float | None = 8.0,
        log_every: int | None = 10,
        limit_batches: int | None = None,
        devices: int = 1,
        num_nodes: int = 1,
        dist_timeout_s: float = 300.0,
        compile: bool = False,
    ) -> None:
        for name, count in (("devices", devices), ("num_nodes", num_nodes)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"trainer.{name} must be a positive integer, got {count!r}")
        if isinstance(dist_timeout_s, bool) or not (
            isinstance(dist_timeout_s, int | float) and dist_timeout_s > 0
        ):
            raise ValueError(
                f"trainer.dist_timeout_s must be a positive number of seconds, got "
                f"{dist_timeout_s!r}"
            )
        self.devices, self.num_nodes = devices, num_nodes
        self.dist_timeout_s = float(dist_timeout_s)
        for name, value in (("epochs", epochs), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"trainer.{name} must be an integer, got {value!r} ({type(value).__name__})"
                )
        if epochs < 0:
            raise ValueError(f"trainer.epochs must be >= 0, got {epochs}")
        if patience is not None and patience < 1:
            raise ValueError(f"trainer.patience must be >= 1 or null, got {patience}")
        if batch_size < 1:
            raise ValueError(f"trainer.batch_size must be >= 1, got {batch_size}")
        for name, opt in (("log_every", log_every), ("limit_batches", limit_batches)):
            if opt is not None and (isinstance(opt, bool) or not isinstance(opt, int) or opt < 1):
                raise ValueError(f"trainer.{name} must be a positive integer or null, got {opt!r}")
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(
                f"trainer.checkpoint_every must be >= 1 or null, got {checkpoint_every}"
            )
        if memory_budget_gb is not None and not memory_budget_gb > 0:
            raise ValueError(
                f"trainer.memory_budget_gb must be > 0 or null, got {memory_budget_gb}"
            )
        self.memory_budget_gb = memory_budget_gb
        self.epochs = epochs
        self.device = torch.device(device)
        if not isinstance(compile, bool):
            raise TypeError(f"trainer.compile must be true or false, got {compile!r}")
        # refused here, before any data is loaded, rather than at the first compiled step
        if compile and (problem := compile_problem(self.device)) is not None:
            raise RuntimeError(problem)
        self.compile = compile
        self.patience = patience
        #: where each epoch's batches come from; it holds ``mini_batch``, ``batch_size``,
        #: ``num_neighbors`` and ``limit_batches``
        self._epoch_batches = EpochBatches(
            mini_batch,
            batch_size,
            None if num_neighbors is None else list(num_neighbors),
            limit_batches,
        )
        self.grad_clip = grad_clip
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.log_every = log_every
        self.config_hash: str | None = None
        #: what callbacks add to the checkpoint (in :meth:`Callback.on_checkpoint`) and the
        #: train task's run id
        self.checkpoint_extra: dict[str, Any] = {}
        self.callbacks: list[Callback] = list(callbacks)
        if checkpoint_path is not None:
            from graphssl.training.callbacks.checkpoint import ModelCheckpoint

            self.callbacks.append(ModelCheckpoint(checkpoint_path, every_n_epochs=checkpoint_every))
        elif checkpoint_every is not None:
            raise ValueError(
                f"trainer.checkpoint_every={checkpoint_every} is set but no checkpoint_path was "
                f"given; expected the file to write (or a ModelCheckpoint among the callbacks)"
            )
        self.optimizer: torch.optim.Optimizer | None = None
        #: the method's learning-rate scheduler, stepped after every optimizer step
        self.scheduler: LRScheduler | None = None
        self.global_step = 0
        self.should_stop = False
        #: the first loss of the current fit, the reference of the divergence check
        self._first_loss: float | None = None
        #: a callback sets this to write a checkpoint of the current epoch even when it is not
        #: one of ``checkpoint_every``'s (e.g. while the tracking store is unreachable); cleared
        #: once a checkpoint of an epoch is written
        self.should_checkpoint = False
        #: ``True`` while :meth:`fit` runs its epochs
        self.fitting = False
        #: from the stop decision of an epoch on (:meth:`Callback.on_epoch_checkpoint`,
        #: :meth:`Callback.on_epoch_complete`): whether :meth:`fit` ends after it (its epoch
        #: budget, early stopping, :attr:`should_stop` or :meth:`request_stop`)
        self.is_last_epoch = False
        #: the file and epoch of the latest :meth:`save_checkpoint`
        self.last_checkpoint: Path | None = None
        self.last_checkpoint_epoch: int | None = None
        self._stop_reason: str | None = None
        self._resume_state: dict[str, Any] | None = None
        self._resume_path = None if checkpoint_path is None else str(checkpoint_path)
        self._epoch_state: _EpochState | None = None
        self._checkpoints_written = 0

    @property
    def mini_batch(self) -> bool:
        return self._epoch_batches.mini_batch

    @property
    def batch_size(self) -> int:
        return self._epoch_batches.batch_size

    @property
    def num_neighbors(self) -> list[int] | None:
        return self._epoch_batches.num_neighbors

    @property
    def limit_batches(self) -> int | None:
        return self._epoch_batches.limit_batches

    def request_stop(self, reason: str) -> None:
        """End :meth:`fit` after the current epoch (its checkpoint written when checkpoints are
        on) with :class:`TrainingInterrupted`; safe to call from a signal handler."""
        self._stop_reason = reason

    # ------------------------------------------------------------------ checkpoints
    def resume_from(
        self, state: dict[str, Any], checkpoint_path: str | os.PathLike[str] | None = None
    ) -> None:
        """Continue from a checkpoint (see :mod:`graphssl.training.checkpoint`) in :meth:`fit`;
        ``checkpoint_path``, the file it was read from, only goes into the log line."""
        self._resume_state = state
        if checkpoint_path is not None:
            self._resume_path = str(checkpoint_path)

    def save_checkpoint(self, method: SSLMethod, path: str | os.PathLike[str]) -> Path:
        """Write everything :meth:`resume_from` needs to continue the fit exactly to ``path``.

        Every callback's :meth:`Callback.on_checkpoint` runs first (their state goes into
        :attr:`checkpoint_extra`); the checkpoint then holds the epoch, the method, optimizer
        and scheduler states, the random generators, the history and early-stopping counters,
        the best weights and :attr:`checkpoint_extra`, written atomically
        (:func:`graphssl.training.checkpoint.save_checkpoint`). Called from
        :meth:`Callback.on_epoch_checkpoint`, so that every :meth:`Callback.on_epoch_complete`
        runs once the epoch's checkpoints are on disk.

        Raises:
            RuntimeError: called elsewhere than in :meth:`Callback.on_epoch_checkpoint`.
            CheckpointWriteError: the file could not be written (the previous one is intact).
        """
        state = self._epoch_state
        if state is None or self.optimizer is None:
            raise RuntimeError(
                "Trainer.save_checkpoint writes the state of a fit at the end of an epoch; call "
                "it from a callback's on_epoch_checkpoint"
            )
        for cb in self.callbacks:
            cb.on_checkpoint(self, method, state.epoch)
        result = state.result
        written = write_checkpoint(
            path,
            {
                "epoch": state.epoch,
                "global_step": self.global_step,
                "model": method.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                "rng": capture_rng(),
                "config_hash": self.config_hash,
                "history": [[e.epoch, e.metrics, e.seconds] for e in result.epochs],
                "best_epoch": result.best_epoch,
                "best_loss": result.best_loss,
                "bad_epochs": state.bad_epochs,
                "best_state": state.best_state,
                "stopped_early": state.stopped_early,
                **self.checkpoint_extra,
            },
        )
        self.last_checkpoint, self.last_checkpoint_epoch = written, state.epoch
        self._checkpoints_written += 1
        return written

    # ------------------------------------------------------------------ loaders
    def _check_mini_batch(self, datamodule: DataModule, method: SSLMethod) -> None:
        if not self.mini_batch:
            return
        if datamodule.is_graph_level:
            raise ValueError(
                f"trainer.mini_batch=true samples NeighborLoader mini-batches of one graph, but "
                f"dataset {datamodule.name!r} is a dataset of items that already trains in "
                f"batches; set trainer.mini_batch=false"
            )
        if not method.supports_mini_batch:
            raise ValueError(
                f"{type(method).__name__} does not support mini-batch training; "
                f"set trainer.mini_batch=false"
            )

    def _check_memory_budget(self, datamodule: DataModule, method: SSLMethod) -> None:
        """Refuse full-batch training whose estimated step memory exceeds the budget."""
        if self.mini_batch or datamodule.is_graph_level or self.memory_budget_gb is None:
            return
        n, e = int(datamodule.data.num_nodes), int(datamodule.data.num_edges)
        need, budget = method.full_batch_bytes(n, e), self.memory_budget_gb * 2**30
        if need > budget:
            raise MemoryBudgetError(
                f"{type(method).__name__} full-batch training on {n:,} nodes ({e:,} edges) "
                f"needs an estimated {need:,} bytes ({need / 2**30:.1f} GiB) for one step "
                f"({method.full_batch_loss_bytes(n) / 2**30:.1f} GiB in the loss, the rest in "
                f"activations), above trainer.memory_budget_gb={self.memory_budget_gb:g}; "
                f"train on neighbour-sampled mini-batches with trainer.mini_batch=true (the loss "
                f"then covers trainer.batch_size={self.batch_size} seed nodes per step), or raise "
                f"trainer.memory_budget_gb if this machine has the memory"
            )

    def _batches(self, datamodule: DataModule, method: SSLMethod, epoch: int) -> Iterable[Any]:
        return self._epoch_batches(datamodule, method, epoch)

    def steps_per_epoch(self, datamodule: DataModule) -> int:
        """Optimizer steps in an epoch of ``datamodule`` on this process."""
        return self._epoch_batches.steps(datamodule)

    def _check_distributed(self, datamodule: DataModule, method: SSLMethod) -> None:
        """Refuse what several processes cannot train exactly."""
        world = distributed.world_size()
        if self.devices * self.num_nodes != world:
            raise ValueError(
                f"trainer.devices={self.devices} x trainer.num_nodes={self.num_nodes} but this "
                f"process group has {world} ranks; expected one rank per device"
            )
        name = type(method).__name__
        if not method.supports_distributed:
            because = method.not_distributed_because or (
                "its loss has not been made exact over the global batch"
            )
            raise ValueError(
                f"{name} does not train on several processes: {because} (docs/distributed.md "
                f"lists the methods that do); set trainer.devices=1"
            )
        if not datamodule.is_graph_level and not self.mini_batch:
            raise ValueError(
                f"trainer.devices={self.devices} with full-batch training on the one graph of "
                f"{datamodule.name!r} would repeat the same step on every process; set "
                f"trainer.mini_batch=true to shard the seed nodes across processes"
            )
        fanout, depth = self.num_neighbors, encoder_hops(method)
        if self.mini_batch and fanout is not None and len(fanout) < depth + method.decoder_hops:
            raise ValueError(
                f"trainer.num_neighbors={fanout} samples {len(fanout)} hop(s), but {name} on "
                f"several processes needs {depth + method.decoder_hops}: one per layer of its "
                f"encoder ({depth}) and of its decoder ({method.decoder_hops}), so that a "
                f"seed's loss does not depend on the seeds the other processes hold; set e.g. "
                f"trainer.num_neighbors={fanout + fanout[-1:] * method.decoder_hops} or null"
            )

    # ------------------------------------------------------------------ fit
    def _log_epoch(self, res: EpochResult, start_epoch: int, last: bool) -> None:
        """One PyG-example-style line (``Epoch 010, loss 0.5200, 0.4 s``) through logging."""
        n = res.epoch + 1
        if self.log_every is None or not (
            last or n % self.log_every == 0 or res.epoch == start_epoch or res.seconds > 2.0
        ):
            return
        terms = ", ".join(f"{k} {v:.4f}" for k, v in res.metrics.items())
        if self.progress:  # keep the bar whole on a terminal
            with logging_redirect_tqdm():
                log.info("Epoch %03d, %s, %.1f s", n, terms, res.seconds)
        else:
            log.info("Epoch %03d, %s, %.1f s", n, terms, res.seconds)

    def _next_batch(self, iterator: Iterator[Any], index: int, result: FitResult) -> Any:
        """Batch ``index`` of the epoch from ``iterator``, or ``None`` past its end or past
        :attr:`limit_batches`; the time it takes counts as sampling in ``result``."""
        if self.limit_batches is not None and index >= self.limit_batches:
            return None
        t_fetch = time.perf_counter()
        batch = next(iterator, None)
        result.sample_seconds += time.perf_counter() - t_fetch
        return batch

    def _check_divergence(self, method: SSLMethod, value: float, epoch: int) -> None:
        """Raise :class:`DivergedError` on a non-finite loss ``value``, or one whose magnitude
        exceeds :data:`DIVERGENCE_FACTOR` times the first loss of this fit."""
        name = type(method).__name__
        if not math.isfinite(value):
            raise DivergedError(
                f"{name} loss became {value} at epoch {epoch}; lower the learning rate "
                f"(the optimizer's lr in model.optimizer) or check the inputs for NaN/inf"
            )
        first = self._first_loss
        if first is None:
            self._first_loss = value
            return
        # a first loss near zero would make any later value look divergent: the bound is at
        # least DIVERGENCE_FACTOR itself
        if abs(value) > DIVERGENCE_FACTOR * max(abs(first), 1.0):
            raise DivergedError(
                f"{name} loss diverged at epoch {epoch + 1}: {value:.4g}, more than "
                f"{DIVERGENCE_FACTOR:.0e} times its first value {first:.4g}; lower the learning "
                f"rate (the optimizer's lr in model.optimizer) or enable trainer.grad_clip"
            )

    def _resume(
        self,
        method: SSLMethod,
        optimizer: torch.optim.Optimizer,
        state: dict[str, Any],
        result: FitResult,
    ) -> tuple[int, int, dict[str, torch.Tensor] | None]:
        """Load a checkpoint's ``state`` into the method, optimizer, scheduler, random
        generators, ``result`` and the callbacks; returns the epoch to continue at, the epochs
        without improvement and the best weights so far."""
        method.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.global_step = int(state["global_step"])
        start_epoch = int(state["epoch"]) + 1
        result.epochs = [EpochResult(int(e), dict(m), float(sec)) for e, m, sec in state["history"]]
        result.best_epoch = int(state["best_epoch"])
        result.best_loss = float(state["best_loss"])
        restore_rng(state["rng"])
        for cb in self.callbacks:
            cb.on_resume(self, method, state)
        if state.get("stopped_early"):
            result.stopped_early, start_epoch = True, self.epochs
        log.info("resuming at epoch %d from %s", start_epoch, self._resume_path or "a checkpoint")
        return start_epoch, int(state["bad_epochs"]), state["best_state"]

    def _train_epoch(
        self,
        method: SSLMethod,
        datamodule: DataModule,
        epoch: int,
        max_steps: int,
        result: FitResult,
    ) -> EpochResult:
        """One epoch of optimizer steps; its metrics are the means over its batches (in a process
        group, of each step's values averaged over the ranks with the gradients, so every rank
        logs, stops and selects on the same values). Adds the epoch's batches and seconds to
        ``result``."""
        optimizer = self.optimizer
        assert optimizer is not None
        params = [p for group in optimizer.param_groups for p in group["params"]]
        in_group = distributed.is_distributed()
        t0 = time.perf_counter()
        method.train()
        sums: dict[str, float] = {}
        n_batches = 0
        # a per-batch bar under the epoch bar, shown once an epoch has run a few seconds
        batches = tqdm(
            self._batches(datamodule, method, epoch),
            total=self.steps_per_epoch(datamodule),
            desc=f"epoch {epoch}",
            disable=not (self.progress and self.mini_batch),
            unit="batch",
            leave=False,
            delay=3.0,
            dynamic_ncols=True,
        )
        iterator = iter(batches)
        batch = self._next_batch(iterator, 0, result)
        while batch is not None:
            batch = move_to_device(batch, self.device)
            optimizer.zero_grad(set_to_none=True)
            out = method.loss(batch)
            if not in_group:
                values = {k: float(v.detach()) for k, v in out.items()}
                self._check_divergence(method, values["loss"], epoch)
            out["loss"].backward()
            following = None
            if in_group:
                # the mean over ranks: the gradient of the global batch, and the step's values
                # (a loss held in shares becomes the global one) in the same all-reduce, while
                # this rank samples its next batch, which no parameter affects
                sync = distributed.GradientSync(params, list(out.values()))
                following = self._next_batch(iterator, n_batches + 1, result)
                values = dict(zip(out, sync.wait(), strict=True))
                self._check_divergence(method, values["loss"], epoch)
            if self.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(method.parameters(), self.grad_clip)
            optimizer.step()
            self.global_step += 1
            method.on_after_optimizer_step(self.global_step, max_steps)
            if self.scheduler is not None:
                self.scheduler.step()
            for k, v in values.items():
                sums[k] = sums.get(k, 0.0) + v
            for cb in self.callbacks:
                cb.on_train_batch_end(self, method, values, n_batches)
            n_batches += 1
            batch = following if in_group else self._next_batch(iterator, n_batches, result)
        batches.close()
        result.num_batches += n_batches
        result.loop_seconds += time.perf_counter() - t0
        metrics = {k: v / max(n_batches, 1) for k, v in sums.items()}
        return EpochResult(epoch=epoch, metrics=metrics, seconds=time.perf_counter() - t0)

    def fit(self, method: SSLMethod, datamodule: DataModule) -> FitResult:
        """Train ``method`` for up to :attr:`epochs` epochs and return the per-epoch losses."""
        datamodule.setup()
        in_group = distributed.is_distributed()
        if self.devices * self.num_nodes > 1 and not in_group:
            raise ValueError(
                f"trainer.devices={self.devices} x trainer.num_nodes={self.num_nodes}: "
                f"Trainer.fit trains one rank of a "
                f"torch.distributed process group; start the ranks with "
                f"graphssl.training.distributed.launch (the train task does)"
            )
        self._check_mini_batch(datamodule, method)
        self._check_memory_budget(datamodule, method)
        if in_group:
            self._check_distributed(datamodule, method)
        method.to(self.device)
        result = FitResult(world_size=distributed.world_size())
        self._first_loss = None
        if in_group:
            # the same model, optimizer state and resume point on every rank
            distributed.prepare_method(method, self.device)
            self._resume_state = distributed.broadcast_state(self._resume_state)
        self.should_stop = False
        self.is_last_epoch = False
        full_graph = datamodule.data if not datamodule.is_graph_level else None
        if full_graph is not None:
            method.on_train_start(full_graph, self.epochs)
        for cb in self.callbacks:
            cb.on_fit_start(self, method)

        if (
            full_graph is not None
            and (summary := method.fit_without_gradients(full_graph, self.epochs)) is not None
        ):
            res = EpochResult(
                epoch=0,
                metrics={k: float(v) for k, v in summary.items()},
                seconds=float(summary.get("seconds", 0.0)),
            )
            result.epochs.append(res)
            for cb in self.callbacks:
                cb.on_epoch_end(self, method, res)
            for cb in self.callbacks:
                cb.on_fit_end(self, method, result)
            return result

        if self.optimizer is None:
            self.optimizer = method.configure_optimizer()
        optimizer = self.optimizer
        assert optimizer is not None
        max_steps = self.epochs * self.steps_per_epoch(datamodule)
        if self.scheduler is None:
            self.scheduler = method.configure_scheduler(optimizer, max_steps)
        best_state: dict[str, torch.Tensor] | None = None
        bad_epochs = 0
        start_epoch = 0
        if self._resume_state is not None:
            state, self._resume_state = self._resume_state, None
            start_epoch, bad_epochs, best_state = self._resume(method, optimizer, state, result)
        bar = tqdm(
            range(start_epoch, self.epochs),
            desc=f"train {type(method).__name__}",
            disable=not self.progress,
            unit="epoch",
            dynamic_ncols=True,
        )
        self.fitting = True
        compiled = compile_encoders(method.encoders()) if self.compile else []
        try:
            for epoch in bar:
                res = self._train_epoch(method, datamodule, epoch, max_steps, result)
                metrics = res.metrics
                result.epochs.append(res)
                bar.set_postfix(loss=f"{metrics['loss']:.4f}")
                for cb in self.callbacks:
                    cb.on_epoch_end(self, method, res)
                if in_group:  # callbacks and signal handlers live on rank 0: its decision
                    self.should_stop, self._stop_reason = distributed.broadcast_object(
                        (self.should_stop, self._stop_reason)
                    )
                if metrics["loss"] < result.best_loss:
                    result.best_loss, result.best_epoch, bad_epochs = metrics["loss"], epoch, 0
                    if self.patience is not None:
                        best_state = {k: v.detach().clone() for k, v in method.state_dict().items()}
                else:
                    bad_epochs += 1
                stop = (
                    self.patience is not None and bad_epochs >= self.patience
                ) or self.should_stop
                interrupted = self._stop_reason is not None
                self._log_epoch(
                    res, start_epoch, last=stop or interrupted or epoch + 1 == self.epochs
                )
                self.is_last_epoch = stop or interrupted or epoch + 1 == self.epochs
                self._epoch_state = _EpochState(epoch, result, bad_epochs, best_state, stop)
                written = self._checkpoints_written
                for cb in self.callbacks:
                    cb.on_epoch_checkpoint(self, method, epoch)
                self._epoch_state = None
                saved = self._checkpoints_written > written
                if saved:
                    self.should_checkpoint = False
                for cb in self.callbacks:
                    cb.on_epoch_complete(self, method, epoch)
                if interrupted:
                    raise TrainingInterrupted(
                        f"{self._stop_reason}: training stopped after epoch {epoch + 1}"
                        + (f"; checkpoint written to {self.last_checkpoint}" if saved else "")
                    )
                if stop:
                    log.info(
                        "early stopping at epoch %d (%s)",
                        epoch + 1,
                        "a callback asked"
                        if self.should_stop
                        else f"best loss {result.best_loss:.4f} at epoch {result.best_epoch + 1}",
                    )
                    result.stopped_early = True
                    break
        finally:
            restore_eager(compiled)
            self.fitting = False
            self._stop_reason = None
            self._epoch_state = None
        bar.close()
        if best_state is not None:
            method.load_state_dict(best_state)
        for cb in self.callbacks:
            cb.on_fit_end(self, method, result)
        return result
