"""Projection and prediction heads."""

from __future__ import annotations

from torch import Tensor, nn


class MLPHead(nn.Module):
    """``Linear → [BatchNorm] → PReLU/ReLU → Linear``, the projector/predictor of GRACE and BGRL.

    Args:
        in_channels: input size.
        hidden_channels: hidden size.
        out_channels: output size.
        batch_norm: add a BatchNorm1d after the first layer (default: ``False``).
        act: ``"prelu"``, ``"relu"`` or ``"elu"`` (default: ``"prelu"``).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        batch_norm: bool = False,
        act: str = "prelu",
    ) -> None:
        super().__init__()
        acts = {"prelu": nn.PReLU, "relu": nn.ReLU, "elu": nn.ELU}
        if act not in acts:
            raise ValueError(f"act must be one of {sorted(acts)}, got {act!r}")
        layers: list[nn.Module] = [nn.Linear(in_channels, hidden_channels)]
        if batch_norm:
            layers.append(nn.BatchNorm1d(hidden_channels))
        layers += [acts[act](), nn.Linear(hidden_channels, out_channels)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
