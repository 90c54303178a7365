"""Image encoders: any timm backbone as a ``[B, C, H, W] -> [B, D]`` feature extractor.

timm (Wightman, 2019, https://github.com/huggingface/pytorch-image-models) is imported only
here, when a vision encoder is built. graphssl never downloads weights: a
pretrained backbone needs a local weights file (``checkpoint_path``).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from torch import Tensor, nn

__all__ = ["TimmEncoder"]


def _timm() -> Any:
    try:
        import timm
    except ImportError as err:  # pragma: no cover - timm is a declared dependency
        raise ImportError(
            "vision encoders need the 'timm' package (pip install 'timm>=1.0')"
        ) from err
    return timm


class TimmEncoder(nn.Module):
    """A timm model with its classifier removed: pooled penultimate features ``[B, D]``.

    Built with ``timm.create_model(name, num_classes=0, in_chans=in_chans, ...)``, so ``D`` is
    the model's pooled feature size (:attr:`out_channels`). Any timm architecture name works
    (``timm.list_models()``); extra keyword arguments go to the architecture (e.g.
    ``drop_path_rate``, or ``patch_size`` for a ViT).

    Args:
        name: timm architecture, e.g. ``"resnet18"``, ``"resnet10t"``, ``"vit_tiny_patch16_224"``.
        in_chans: input channels (1 for Fashion-MNIST; the pipeline fills it from the dataset
            when the config says ``-1``) (default: ``3``).
        img_size: input size for architectures that need it (ViT-style position embeddings).
            Convolutional architectures do not take it and it is then ignored: they accept any
            size (default: ``None``, the architecture's own).
        pretrained: load pretrained weights. They must come from a local file
            (``checkpoint_path``); ``True`` without one fails at once, because graphssl never
            downloads (default: ``False``).
        checkpoint_path: local weights file (timm/PyTorch state dict, ``.pth``/``.bin``/
            ``.safetensors``) loaded through timm's pretrained machinery
            (``pretrained_cfg_overlay=dict(file=...)``): the classifier is dropped and the first
            convolution adapted to ``in_chans``. Giving it implies ``pretrained`` (default:
            ``None``).
        **kwargs: passed to ``timm.create_model``.

    Raises:
        ValueError: for an unknown architecture (with the closest names), or ``pretrained=True``
            without ``checkpoint_path``.
        FileNotFoundError: when ``checkpoint_path`` does not exist.
    """

    def __init__(
        self,
        name: str,
        in_chans: int = 3,
        img_size: int | None = None,
        pretrained: bool = False,
        checkpoint_path: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        timm = _timm()
        if in_chans is None or int(in_chans) < 1:
            raise ValueError(
                f"in_chans must be >= 1, got {in_chans!r} (-1 is only filled in "
                f"from the dataset by graphssl's pipeline)"
            )
        if not timm.is_model(name):
            close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
            raise ValueError(
                f"Could not resolve timm model {name!r}"
                + (f"; closest names: {close}" if close else "")
                + " (timm.list_models() lists them all)"
            )
        file: Path | None = None
        if checkpoint_path is not None and str(checkpoint_path) != "":
            file = Path(checkpoint_path).expanduser()
            if not file.is_file():
                raise FileNotFoundError(
                    f"encoder {name!r}: checkpoint_path {str(file)!r} does not exist; expected "
                    f"a local weights file (graphssl never downloads pretrained weights)"
                )
        elif pretrained:
            raise ValueError(
                f"encoder {name!r}: pretrained=True needs a local weights file; set "
                f"checkpoint_path=/path/to/weights (.pth/.safetensors). graphssl never downloads "
                f"weights (the machines it runs on are offline)"
            )
        create_kwargs: dict[str, Any] = dict(kwargs)
        create_kwargs.update(num_classes=0, in_chans=int(in_chans), pretrained=file is not None)
        if file is not None:
            create_kwargs["pretrained_cfg_overlay"] = {"file": str(file)}
        self.name = name
        self.in_chans = int(in_chans)
        self.img_size = None if img_size is None else int(img_size)
        self.model = _create(timm, name, create_kwargs, self.img_size)
        # Models with a pre-logits head (MobileNetV3, EfficientNet-style conv_head) return
        # head_hidden_size features once the classifier is removed; others num_features.
        dim: Any = getattr(self.model, "head_hidden_size", None) or self.model.num_features
        self.out_channels = int(dim)

    def forward(self, x: Tensor) -> Tensor:
        """``[B, in_chans, H, W]`` images to ``[B, out_channels]`` pooled features."""
        out: Tensor = self.model(x)
        return out

    def extra_repr(self) -> str:
        return f"name={self.name!r}, in_chans={self.in_chans}, out_channels={self.out_channels}"


def _create(timm: Any, name: str, kwargs: dict[str, Any], img_size: int | None) -> nn.Module:
    """``timm.create_model`` with ``img_size`` for the architectures that take it only."""
    if img_size is not None:
        try:
            model: nn.Module = timm.create_model(name, img_size=img_size, **kwargs)
            return model
        except TypeError as err:
            if "img_size" not in str(err):
                raise
    model = timm.create_model(name, **kwargs)
    return model
