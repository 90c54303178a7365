"""The one training loop, its callbacks and checkpoints."""

from graphssl.training.trainer import Callback, EpochResult, FitResult, Trainer

__all__ = ["Callback", "EpochResult", "FitResult", "Trainer"]
