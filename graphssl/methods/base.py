"""Base class of every SSL method, and the one way to run an encoder on a batch.

A method implements :meth:`SSLMethod.loss` (a dict with key ``"loss"``) and
:meth:`SSLMethod.forward` (embeddings, by its own evaluation convention), and names its
sub-encoders in :meth:`SSLMethod.encoders` so ``extract_embeddings(encoder_source=...)`` can pick
one. It never writes an epoch loop: :mod:`graphssl.training` owns that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn
from torch.optim import Optimizer
from torch_geometric.data import Data
from torch_geometric.nn import global_add_pool, global_mean_pool

from graphssl.models.encoders import seed_embeddings

if TYPE_CHECKING:  # graphssl.training imports this module
    from graphssl.training.schedules import CosineLR

OptimizerFactory = Callable[..., Optimizer]


def encode(
    encoder: nn.Module,
    batch: Data,
    *,
    graph_level: bool = False,
    pool: str = "mean",
    seeds_only: bool = False,
) -> Tensor:
    """Run ``encoder`` on ``batch`` with the uniform ``(x, edge_index, edge_weight)`` call.

    Args:
        encoder: a :class:`~graphssl.models.encoders.GNNEncoder` (or compatible module).
        batch: a PyG ``Data``/``Batch``.
        graph_level: pool node embeddings into one row per graph (``batch.batch``).
        pool: ``"mean"`` or ``"sum"`` readout when ``graph_level`` (default: ``"mean"``).
        seeds_only: for a ``NeighborLoader`` batch, return only its ``batch_size`` seed rows,
            and let the encoder's layers skip the hops they do not need (node level only; a
            batch without ``batch_size`` gives all rows) (default: ``False``).

    Returns:
        ``[N, D]`` node embeddings, or ``[num_graphs, D]`` when ``graph_level``.

    An image batch (a ``[B, C, H, W]`` tensor, or a tuple ``(x, y)`` from an image
    DataModule) is passed to ``encoder(x)`` as is: image encoders pool by themselves.
    """
    if isinstance(batch, Tensor):
        return encoder(batch)  # type: ignore[no-any-return]
    if isinstance(batch, (tuple, list)):
        return encoder(batch[0])  # type: ignore[no-any-return]
    if seeds_only and not graph_level:
        return seed_embeddings(encoder, batch)
    h: Tensor = encoder(batch.x, batch.edge_index, getattr(batch, "edge_weight", None))
    if not graph_level:
        return h
    index = getattr(batch, "batch", None)
    if pool == "sum":
        return global_add_pool(h, index)
    if pool == "mean":
        return global_mean_pool(h, index)
    raise ValueError(f"pool must be 'mean' or 'sum', got {pool!r}")


class SSLMethod(nn.Module):
    """Base of graphssl's self-supervised methods.

    Args:
        optimizer: a partial optimizer constructor (Hydra ``_partial_: true``), called with the
            method's trainable parameters.
    """

    #: whether the method can train on ``NeighborLoader`` mini-batches (``trainer.mini_batch``).
    supports_mini_batch: bool = True
    #: ``True`` when the method embeds whole graphs (InfoGraph, GraphCL).
    graph_level: bool = False

    def __init__(self, optimizer: OptimizerFactory | None = None) -> None:
        super().__init__()
        self._optimizer_factory = optimizer
        #: a learning-rate schedule (e.g. :class:`~graphssl.training.schedules.CosineLR`) that
        #: :meth:`configure_optimizer` attaches and :meth:`on_after_optimizer_step` advances
        self.lr_schedule: CosineLR | None = None

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
        optimizer = self._optimizer_factory(list(self.trainable_parameters()))
        if self.lr_schedule is not None:
            self.lr_schedule.attach(optimizer)
        return optimizer

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        return (p for p in self.parameters() if p.requires_grad)

    def on_train_start(self, data: Data, max_epochs: int) -> None:
        """Called once before the first epoch with the training graph (e.g. to precompute)."""

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        """Called after every optimizer step (EMA target updates, schedules); overrides call
        ``super()`` to keep :attr:`lr_schedule` running."""
        if self.lr_schedule is not None:
            self.lr_schedule.step(step, max_steps)

    def classifier_logits(self, embeddings: Tensor) -> Tensor | None:
        """Class logits from the embeddings :meth:`forward` returns, for methods that train a
        classifier (the pipeline logs its accuracy as ``supervised/<split>_acc``); others:
        None."""
        return None

    def fit_without_gradients(self, data: Data, epochs: int) -> dict[str, Any] | None:
        """Gradient-free methods (DeepWalk) train here and return summary values; others: None."""
        return None
