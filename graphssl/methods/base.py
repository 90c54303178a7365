"""Base class of every SSL method.

A method implements :meth:`SSLMethod.loss` (a dict with key ``"loss"``) and
:meth:`SSLMethod.forward` (embeddings, by its own evaluation convention), and names its
sub-encoders in :meth:`SSLMethod.encoders` so ``extract_embeddings(encoder_source=...)`` can pick
one. It never writes an epoch loop: :mod:`graphssl.training` owns that, and steps the
learning-rate schedule the method builds in :meth:`SSLMethod.configure_scheduler`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch_geometric.data import Data

OptimizerFactory = Callable[..., Optimizer]
#: a partial learning-rate scheduler constructor (Hydra ``_partial_: true``), called with the
#: optimizer, and with ``max_steps`` (the optimizer steps of the whole run) when it takes one
SchedulerFactory = Callable[..., LRScheduler]


class SSLMethod(nn.Module):
    """Base of graphssl's self-supervised methods.

    Args:
        optimizer: a partial optimizer constructor (Hydra ``_partial_: true``), called with the
            method's trainable parameters.
        scheduler: a partial learning-rate scheduler constructor (e.g.
            :class:`~graphssl.training.schedules.CosineLR`), called with the optimizer and the
            run's ``max_steps`` by :meth:`configure_scheduler`; the trainer steps it after every
            optimizer step and saves it in checkpoints. ``None``: a constant learning rate.
    """

    #: whether the method can train on ``NeighborLoader`` mini-batches (``trainer.mini_batch``).
    supports_mini_batch: bool = True
    #: ``True`` when the method embeds whole graphs (InfoGraph, GraphCL).
    graph_level: bool = False
    #: whether the same method with fresh, untrained weights is a meaningful reference
    #: (``eval.baseline``); ``False`` for the supervised reference and for embedding tables
    #: that only training fills (DeepWalk, node2vec).
    has_untrained_baseline: bool = True

    def __init__(
        self,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__()
        self._optimizer_factory = optimizer
        self._scheduler_factory = scheduler

    # ------------------------------------------------------------------ contract
    def encoders(self) -> dict[str, nn.Module]:
        """Named sub-encoders, e.g. ``{"encoder": ...}`` or ``{"online": ..., "target": ...}``."""
        raise NotImplementedError

    def loss(self, batch: Data) -> dict[str, Tensor]:
        """Training objective on one batch; must contain the key ``"loss"``."""
        raise NotImplementedError

    def forward(self, batch: Data) -> Tensor:
        """Embeddings of ``batch`` for evaluation (node rows, or graph rows when graph-level)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks (optional)
    def configure_optimizer(self) -> Optimizer | None:
        """The optimizer over :meth:`trainable_parameters`; ``None`` for gradient-free methods."""
        if self._optimizer_factory is None:
            raise ValueError(f"{type(self).__name__} needs an optimizer (got optimizer=None)")
        return self._optimizer_factory(list(self.trainable_parameters()))

    def configure_scheduler(self, optimizer: Optimizer, max_steps: int) -> LRScheduler | None:
        """The learning-rate scheduler of ``optimizer``, stepped after every optimizer step;
        ``None`` when the method was given no ``scheduler``.

        Args:
            optimizer: what :meth:`configure_optimizer` returned.
            max_steps: optimizer steps of the whole run, passed to schedulers that take it.
        """
        factory = self._scheduler_factory
        if factory is None:
            return None
        if "max_steps" in inspect.signature(factory).parameters:
            return factory(optimizer, max_steps=max_steps)
        return factory(optimizer)

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        return (p for p in self.parameters() if p.requires_grad)

    def on_train_start(self, data: Data, max_epochs: int) -> None:
        """Called once before the first epoch with the training graph (e.g. to precompute)."""

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        """Called after every optimizer step with the steps done so far (EMA target updates)."""

    def classifier_logits(self, embeddings: Tensor) -> Tensor | None:
        """Class logits from the embeddings :meth:`forward` returns, for methods that train a
        classifier (the pipeline logs its accuracy as ``supervised/<split>_acc``); others:
        None."""
        return None

    def fit_without_gradients(self, data: Data, epochs: int) -> dict[str, Any] | None:
        """Gradient-free methods (DeepWalk) train here and return summary values; others: None."""
        return None
