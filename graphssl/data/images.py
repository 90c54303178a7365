"""Image DataModules: Fashion-MNIST, scikit-learn's digits and any ``ImageFolder`` tree.

Images are *item-level* data: one embedding row per image. They reuse the graph-level contract
of :class:`~graphssl.data.base.DataModule` (``is_graph_level = True``): the trainer iterates
:meth:`~ImageDataModule.train_dataloader` without touching ``data``, and
:func:`~graphssl.evaluation.extraction.extract_embeddings` iterates
:meth:`~ImageDataModule.eval_dataloader`, one row per image, in the fixed order of
:attr:`~ImageDataModule.labels`.

Batches:

- training: ``(view_1, ..., view_V, y)``: ``num_views`` global views (random resized crop,
  horizontal flip, brightness/contrast jitter, optional Gaussian blur; torchvision
  ``transforms.v2``), then ``num_local_crops`` smaller local crops (DINO's multi-crop), then
  the labels (unused by self-supervised methods). Views are ``float32 [B, C, S, S]``.
- evaluation: ``(x, y)`` without augmentation, every image once, in row order.

Rows are the training pool followed by the test images; :meth:`~ImageDataModule.splits` holds
the seeded train/validation/test row indices. Self-supervised training sees the ``train`` rows
only, so the validation and test images stay unseen until evaluation.
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

from graphssl.data.base import DataModule, Split
from graphssl.data.paths import DATA_ENV, DatasetNotFoundError, default_data_dir

__all__ = [
    "DigitsDataModule",
    "FashionMNISTDataModule",
    "ImageDataModule",
    "ImageFolderDataModule",
]

#: Where the Debian package ``dataset-fashion-mnist`` installs its gzipped IDX files.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class ImageSource(Protocol):
    """Indexable images: ``source[i]`` is a ``uint8 [C, H, W]`` tensor."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Tensor: ...


def _pair(value: Sequence[float], name: str) -> tuple[float, float]:
    lo, hi = (float(v) for v in value)
    if not 0 < lo <= hi <= 1:
        raise ValueError(f"{name} must be (lo, hi) with 0 < lo <= hi <= 1, got {tuple(value)}")
    return lo, hi


class _ViewDataset(Dataset[tuple[Tensor, ...]]):
    """Training items ``(view_1, ..., view_V, y)`` of the rows ``indices``."""

    def __init__(
        self, images: ImageSource, labels: Tensor, indices: Tensor, transforms: Sequence[Any]
    ) -> None:
        self.images, self.labels, self.indices = images, labels, indices
        self.transforms = list(transforms)

    def __len__(self) -> int:
        return int(self.indices.numel())

    def __getitem__(self, i: int) -> tuple[Tensor, ...]:
        row = int(self.indices[i])
        img = self.images[row]
        return (*(t(img) for t in self.transforms), self.labels[row])


class _EvalDataset(Dataset[tuple[Tensor, Tensor]]):
    """Evaluation items ``(x, y)``; for in-memory images a whole batch per index list."""

    def __init__(self, images: ImageSource, labels: Tensor, transform: Any) -> None:
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: Any) -> tuple[Tensor, Tensor]:
        if isinstance(index, list):  # batched fetch (BatchSampler, batch_size=None)
            rows = torch.as_tensor(index, dtype=torch.long)
            assert isinstance(self.images, Tensor)
            return self.transform(self.images[rows]), self.labels[rows]
        return self.transform(self.images[index]), self.labels[index]


class ImageDataModule(DataModule):
    """Base of the image DataModules; subclasses implement :meth:`_load`.

    Args:
        name: dataset name.
        image_size: side of the training views and of the evaluated images; the loaded images
            are resized to it once (default: ``32``).
        batch_size: images per training batch; the last incomplete batch is dropped so
            BatchNorm always sees several images (default: ``256``).
        eval_batch_size: images per evaluation batch (default: ``512``).
        num_workers: DataLoader worker processes for training batches (default: ``0``).
        num_views: global views per training image (default: ``2``).
        crop_scale: area range of the random resized crop of global views
            (default: ``(0.2, 1.0)``).
        flip_p: probability of a horizontal flip (default: ``0.5``).
        jitter: brightness and contrast jitter strength (torchvision ``ColorJitter``); ``0``
            disables it (default: ``0.4``).
        jitter_p: probability of applying the jitter (default: ``0.8``).
        blur_p: probability of a Gaussian blur (kernel ~ a tenth of the image) (default: ``0.0``).
        num_local_crops: extra small crops per image for DINO's multi-crop (default: ``0``).
        local_crop_size: side of local crops (default: ``None``, about ``3/7`` of
            ``image_size``).
        local_crop_scale: area range of local crops (default: ``(0.05, 0.4)``).
        mean: per-channel normalisation mean; ``None`` computes it on the training rows of
            in-memory datasets and uses ``0.5`` otherwise (default: ``None``).
        std: per-channel normalisation std, as ``mean`` (default: ``None``).
        seed: seed of the splits and subsets; shuffling and augmentations draw from torch's
            global generator, which the pipeline seeds from the same ``seed``
            (default: ``0``).
    """

    is_graph_level = True  # item-level: one row per image, extracted over eval_dataloader()

    def __init__(
        self,
        name: str,
        image_size: int = 32,
        batch_size: int = 256,
        eval_batch_size: int = 512,
        num_workers: int = 0,
        num_views: int = 2,
        crop_scale: Sequence[float] = (0.2, 1.0),
        flip_p: float = 0.5,
        jitter: float = 0.4,
        jitter_p: float = 0.8,
        blur_p: float = 0.0,
        num_local_crops: int = 0,
        local_crop_size: int | None = None,
        local_crop_scale: Sequence[float] = (0.05, 0.4),
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(name=name, seed=seed)
        for key, value, low in (
            ("image_size", image_size, 4),
            ("batch_size", batch_size, 1),
            ("eval_batch_size", eval_batch_size, 1),
            ("num_workers", num_workers, 0),
            ("num_views", num_views, 1),
            ("num_local_crops", num_local_crops, 0),
        ):
            if int(value) < low:
                raise ValueError(f"{key} must be >= {low}, got {value}")
        for key, p in (("flip_p", flip_p), ("jitter_p", jitter_p), ("blur_p", blur_p)):
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"{key} must be a probability in [0, 1], got {p}")
        if jitter < 0:
            raise ValueError(f"jitter must be >= 0, got {jitter}")
        self.image_size = int(image_size)
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size)
        self.num_workers = int(num_workers)
        self.num_views = int(num_views)
        self.crop_scale = _pair(crop_scale, "crop_scale")
        self.flip_p, self.jitter, self.jitter_p, self.blur_p = flip_p, jitter, jitter_p, blur_p
        self.num_local_crops = int(num_local_crops)
        self.local_crop_size = (
            max(4, round(self.image_size * 3 / 7))
            if local_crop_size is None
            else int(local_crop_size)
        )
        self.local_crop_scale = _pair(local_crop_scale, "local_crop_scale")
        self._mean_arg = None if mean is None else [float(v) for v in mean]
        self._std_arg = None if std is None else [float(v) for v in std]
        self._images: ImageSource | None = None
        self._labels: Tensor | None = None
        self._split: Split | None = None
        self._classes: int = 0
        self._chans: int = 0
        self.mean: list[float] = []
        self.std: list[float] = []

    # ------------------------------------------------------------------ subclass contract
    def _load(self) -> tuple[ImageSource, Tensor, Split, int]:
        """Load ``(images, labels, split, num_classes)``; images already ``image_size``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ lifecycle
    def _setup(self) -> None:
        images, labels, split, num_classes = self._load()
        if len(images) != labels.numel():
            raise ValueError(
                f"dataset {self.name!r}: {len(images)} images but {labels.numel()} labels"
            )
        self._images, self._labels, self._split = images, labels.long(), split
        self._classes = int(num_classes)
        first = images[0]
        self._chans = int(first.shape[0])
        if first.dtype != torch.uint8 or tuple(first.shape[1:]) != (self.image_size,) * 2:
            raise ValueError(
                f"dataset {self.name!r}: images must be uint8 [C, "
                f"{self.image_size}, {self.image_size}], got {first.dtype} "
                f"{tuple(first.shape)}"
            )
        self.mean, self.std = self._normalisation(images, split.train)

    def _normalisation(self, images: ImageSource, train: Tensor) -> tuple[list[float], list[float]]:
        c = self._chans
        mean, std = self._mean_arg, self._std_arg
        if (mean is None or std is None) and isinstance(images, Tensor):
            total = torch.zeros(c, dtype=torch.float64)
            squares = torch.zeros(c, dtype=torch.float64)
            for chunk in train.split(8192):  # float64 sums without a float copy of everything
                x = images[chunk].transpose(0, 1).reshape(c, -1).double().div_(255)
                total += x.sum(1)
                squares += x.square().sum(1)
            count = max(1, train.numel() * images[0][0].numel())
            mu = total / count
            sd = (squares / count - mu.square()).clamp_min(1e-6).sqrt()
            mean = mean or mu.tolist()
            std = std or sd.tolist()
        mean, std = mean or [0.5] * c, std or [0.5] * c
        if len(mean) != c or len(std) != c:
            raise ValueError(
                f"dataset {self.name!r}: mean/std need {c} values (one per "
                f"channel), got {len(mean)} and {len(std)}"
            )
        return mean, std

    # ------------------------------------------------------------------ data
    @property
    def data(self) -> Any:
        raise AttributeError(
            f"dataset {self.name!r} is an image dataset: it has no graph (.data); iterate "
            f"train_dataloader() / eval_dataloader() instead"
        )

    @property
    def images(self) -> ImageSource:
        """The images in row order (``uint8 [C, image_size, image_size]`` each)."""
        self._require_setup()
        assert self._images is not None
        return self._images

    @property
    def labels(self) -> Tensor:
        """One class label per row (image), in the order of :meth:`eval_dataloader`."""
        self._require_setup()
        assert self._labels is not None
        return self._labels

    @property
    def num_classes(self) -> int:
        self._require_setup()
        return self._classes

    @property
    def in_chans(self) -> int:
        """Image channels (1 for grayscale)."""
        self._require_setup()
        return self._chans

    @property
    def num_features(self) -> int:
        return self.in_chans

    def __len__(self) -> int:
        return len(self.images)

    def encoder_overrides(self) -> dict[str, Any]:
        """Encoder config values the dataset decides (filled where the config says -1/null)."""
        return {
            "in_chans": self.in_chans,
            "img_size": self.image_size,
            "in_channels": self.in_chans,
        }

    def splits(self) -> Sequence[Split]:
        self._require_setup()
        assert self._split is not None
        return [self._split]

    # ------------------------------------------------------------------ transforms
    def _normalize(self) -> Any:
        from torchvision.transforms import v2

        return v2.Compose(
            [v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)]
        )

    def view_transform(
        self, size: int | None = None, scale: tuple[float, float] | None = None
    ) -> Any:
        """The augmentation of one view (a global view by default)."""
        from torchvision.transforms import v2

        self._require_setup()
        size = self.image_size if size is None else size
        steps: list[Any] = [
            v2.RandomResizedCrop(size, scale=scale or self.crop_scale, antialias=True)
        ]
        if self.flip_p > 0:
            steps.append(v2.RandomHorizontalFlip(self.flip_p))
        if self.jitter > 0 and self.jitter_p > 0:
            steps.append(
                v2.RandomApply(
                    [v2.ColorJitter(brightness=self.jitter, contrast=self.jitter)], p=self.jitter_p
                )
            )
        if self.blur_p > 0:
            kernel = max(3, (size // 10) | 1)
            steps.append(v2.RandomApply([v2.GaussianBlur(kernel, sigma=(0.1, 2.0))], p=self.blur_p))
        steps.append(self._normalize())
        return v2.Compose(steps)

    def train_transforms(self) -> list[Any]:
        """One transform per element of a training item: global views, then local crops."""
        out = [self.view_transform() for _ in range(self.num_views)]
        out += [
            self.view_transform(self.local_crop_size, self.local_crop_scale)
            for _ in range(self.num_local_crops)
        ]
        return out

    # ------------------------------------------------------------------ loaders
    def train_dataloader(self) -> DataLoader[Any]:
        """Shuffled ``(view_1, ..., view_V, y)`` batches of the training rows."""
        self._require_setup()
        assert self._labels is not None and self._split is not None
        train = self._split.train
        ds = _ViewDataset(self.images, self._labels, train, self.train_transforms())
        return DataLoader(
            ds,
            batch_size=self.batch_size,
            shuffle=True,
            drop_last=train.numel() > self.batch_size,
            num_workers=self.num_workers,
            persistent_workers=False,
        )

    def eval_dataloader(self) -> Iterable[tuple[Tensor, Tensor]]:
        """``(x, y)`` batches of every row in order, without augmentation."""
        self._require_setup()
        assert self._labels is not None
        ds = _EvalDataset(self.images, self._labels, self._normalize())
        if isinstance(self.images, Tensor):  # one indexing op per batch
            sampler = BatchSampler(SequentialSampler(ds), self.eval_batch_size, drop_last=False)
            return DataLoader(ds, sampler=sampler, batch_size=None)
        return DataLoader(
            ds, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, image_size={self.image_size}, "
            f"seed={self.seed})"
        )


# ---------------------------------------------------------------------------- helpers
def _resize_uint8(images: Tensor, size: int) -> Tensor:
    """``uint8 [N, C, H, W]`` to ``[N, C, size, size]`` (bilinear, antialiased when shrinking)."""
    if tuple(images.shape[-2:]) == (size, size):
        return images
    out = F.interpolate(
        images.float(), size=(size, size), mode="bilinear", align_corners=False, antialias=True
    )
    return out.round_().clamp_(0, 255).to(torch.uint8)


def _fractions(train_frac: float, val_frac: float) -> None:
    if not (0 < train_frac < 1 and 0 <= val_frac < 1 and train_frac + val_frac < 1):
        raise ValueError(
            f"split fractions must satisfy 0 < train_frac < 1, 0 <= val_frac and "
            f"train_frac + val_frac < 1, got train_frac={train_frac}, "
            f"val_frac={val_frac}"
        )


def _random_split(n: int, train_frac: float, val_frac: float, gen: torch.Generator) -> Split:
    perm = torch.randperm(n, generator=gen)
    n_train = max(1, round(train_frac * n))
    n_val = round(val_frac * n)
    return Split(
        train=perm[:n_train].sort().values,
        val=perm[n_train : n_train + n_val].sort().values,
        test=perm[n_train + n_val :].sort().values,
    )


def _subset(n: int, k: int | None, gen: torch.Generator, what: str) -> Tensor:
    """Seeded ``k`` of ``range(n)`` in increasing order (all of them when ``k`` is None)."""
    if k is None or k >= n:
        return torch.arange(n)
    if k < 1:
        raise ValueError(f"{what} must be >= 1 or null, got {k}")
    return torch.randperm(n, generator=gen)[:k].sort().values


# ---------------------------------------------------------------------------- Fashion-MNIST
class FashionMNISTDataModule(ImageDataModule):
    """Fashion-MNIST (Xiao et al., 2017, https://arxiv.org/abs/1708.07747): 28×28 grayscale
    images of 10 clothing classes, 60 000 training and 10 000 test images.

    Read with torchvision's ``FashionMNIST(root, download=False)`` from
    ``<data_dir>/FashionMNIST/raw`` (read-only is fine), else from the Debian package
    ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/*.gz``, gunzipped once into
    ``<cache_dir>/FashionMNIST/raw``). Never downloads.

    Rows: the training pool (``subset`` seeded images of the official training set, or all),
    then the official test images (``test_subset`` of them, or all). ``val_frac`` of the pool is
    the validation split; the official test set is the test split.

    Args:
        data_dir: folder containing ``FashionMNIST/raw`` (default: ``$GRAPHSSL_DATA_DIR`` or
            ``data/``).
        cache_dir: writable folder for the gunzipped Debian files (default:
            ``outputs/cache``; the config passes ``paths.cache_dir``).
        subset: training-pool size (seeded random subset); ``None`` uses all 60 000
            (default: ``None``).
        test_subset: test images kept (seeded); ``None`` keeps all 10 000 (default: ``None``).
        val_frac: fraction of the pool held out for validation (default: ``0.1``).
        image_size: image side; 28 keeps the originals (default: ``28``).
        **kwargs: augmentation and loader options of :class:`ImageDataModule`.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        subset: int | None = None,
        test_subset: int | None = None,
        val_frac: float = 0.1,
        image_size: int = 28,
        name: str = "FashionMNIST",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, image_size=image_size, **kwargs)
        if not 0 < val_frac < 1:
            raise ValueError(f"val_frac must be in (0, 1), got {val_frac}")
        self.data_dir = Path(data_dir) if data_dir else default_data_dir()
        self.cache_dir = Path(cache_dir) if cache_dir else Path("outputs") / "cache"
        self.subset, self.test_subset, self.val_frac = subset, test_subset, float(val_frac)

    def root(self) -> Path:
        """The folder holding ``FashionMNIST/raw`` (the data dir, or the Debian copy's cache).

        Raises:
            DatasetNotFoundError: when neither place has the files.
        """
        raw = self.data_dir / "FashionMNIST" / "raw"
        if all((raw / f).is_file() for f in FASHION_MNIST_FILES):
            return self.data_dir
        if all((DEBIAN_FASHION_MNIST / f"{f}.gz").is_file() for f in FASHION_MNIST_FILES):
            target = self.cache_dir / "FashionMNIST" / "raw"
            target.mkdir(parents=True, exist_ok=True)
            for f in FASHION_MNIST_FILES:
                if not (target / f).is_file():
                    tmp = target / f"{f}.tmp"
                    with (
                        gzip.open(DEBIAN_FASHION_MNIST / f"{f}.gz", "rb") as src,
                        open(tmp, "wb") as dst,
                    ):
                        shutil.copyfileobj(src, dst)
                    tmp.replace(target / f)
            return self.cache_dir
        raise DatasetNotFoundError(
            f"dataset 'FashionMNIST' not found: expected the raw files {list(FASHION_MNIST_FILES)}"
            f" in {raw} (set {DATA_ENV} / paths.data_dir to a folder holding FashionMNIST/raw), "
            f"or the Debian package dataset-fashion-mnist's "
            f"{DEBIAN_FASHION_MNIST}/<file>.gz (apt install dataset-fashion-mnist). graphssl "
            f"does not download data at run time."
        )

    def _load(self) -> tuple[ImageSource, Tensor, Split, int]:
        from torchvision.datasets import FashionMNIST

        root = self.root()
        train = FashionMNIST(str(root), train=True, download=False)
        test = FashionMNIST(str(root), train=False, download=False)
        gen = torch.Generator().manual_seed(self.seed)
        pool = _subset(len(train.targets), self.subset, gen, "subset")
        keep = _subset(len(test.targets), self.test_subset, gen, "test_subset")
        images = torch.cat([train.data[pool], test.data[keep]]).unsqueeze(1)
        labels = torch.cat([train.targets[pool], test.targets[keep]])
        n = pool.numel()
        perm = torch.randperm(n, generator=gen)
        n_val = max(1, round(self.val_frac * n))
        split = Split(
            train=perm[n_val:].sort().values,
            val=perm[:n_val].sort().values,
            test=torch.arange(n, n + keep.numel()),
        )
        return _resize_uint8(images, self.image_size), labels, split, len(train.classes)


# ---------------------------------------------------------------------------- digits
class DigitsDataModule(ImageDataModule):
    """scikit-learn's handwritten digits (UCI optdigits test set): 1 797 grayscale 8×8 images
    of 10 classes, bundled with scikit-learn (no file needed), resized to ``image_size``.

    Args:
        image_size: side the 8×8 images are upsampled to (default: ``32``).
        train_frac: seeded training fraction (default: ``0.6``).
        val_frac: seeded validation fraction; the rest is the test split (default: ``0.2``).
        subset: keep this many seeded images (tests); ``None`` keeps all (default: ``None``).
        **kwargs: augmentation and loader options of :class:`ImageDataModule` (flips default
            off: a mirrored digit is another digit).
    """

    def __init__(
        self,
        image_size: int = 32,
        train_frac: float = 0.6,
        val_frac: float = 0.2,
        subset: int | None = None,
        name: str = "digits",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("flip_p", 0.0)
        super().__init__(name=name, image_size=image_size, **kwargs)
        _fractions(train_frac, val_frac)
        self.train_frac, self.val_frac, self.subset = float(train_frac), float(val_frac), subset

    def _load(self) -> tuple[ImageSource, Tensor, Split, int]:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        gen = torch.Generator().manual_seed(self.seed)
        keep = _subset(len(bunch.target), self.subset, gen, "subset")
        x = torch.as_tensor(bunch.images, dtype=torch.float32)[keep]  # values 0..16
        images = (x * (255.0 / 16.0)).round().to(torch.uint8).unsqueeze(1)
        labels = torch.as_tensor(bunch.target, dtype=torch.long)[keep]
        split = _random_split(keep.numel(), self.train_frac, self.val_frac, gen)
        return _resize_uint8(images, self.image_size), labels, split, 10


# ---------------------------------------------------------------------------- ImageFolder
class _FolderImages:
    """Lazily decoded ``ImageFolder`` images as ``uint8 [C, size, size]`` tensors."""

    def __init__(self, paths: list[str], size: int, channels: int) -> None:
        from torchvision.transforms import v2

        self.paths, self.channels = paths, channels
        self.transform = v2.Compose(
            [v2.PILToTensor(), v2.Resize(size, antialias=True), v2.CenterCrop(size)]
        )

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Tensor:
        from PIL import Image

        with Image.open(self.paths[index]) as img:
            out: Tensor = self.transform(img.convert("L" if self.channels == 1 else "RGB"))
        return out


class ImageFolderDataModule(ImageDataModule):
    """Any ``root/<class>/<image>`` tree, read with torchvision's ``ImageFolder``.

    Images are decoded lazily, resized (shorter side) and centre-cropped to ``image_size``;
    splits are seeded fractions of all images.

    Args:
        root: the folder of class folders.
        channels: 1 (grayscale) or 3 (RGB) (default: ``3``).
        image_size: image side (default: ``64``).
        train_frac: seeded training fraction (default: ``0.6``).
        val_frac: seeded validation fraction; the rest is the test split (default: ``0.2``).
        **kwargs: augmentation and loader options of :class:`ImageDataModule`.
    """

    def __init__(
        self,
        root: str | Path,
        channels: int = 3,
        image_size: int = 64,
        train_frac: float = 0.6,
        val_frac: float = 0.2,
        name: str = "ImageFolder",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, image_size=image_size, **kwargs)
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {channels}")
        _fractions(train_frac, val_frac)
        self.root = Path(root)
        self.channels = int(channels)
        self.train_frac, self.val_frac = float(train_frac), float(val_frac)

    def _load(self) -> tuple[ImageSource, Tensor, Split, int]:
        from torchvision.datasets import ImageFolder

        if not self.root.is_dir():
            raise DatasetNotFoundError(
                f"dataset {self.name!r}: image folder {self.root} does not exist; expected "
                f"root/<class>/<image> (set dataset.root)"
            )
        try:
            folder = ImageFolder(str(self.root))
        except FileNotFoundError as err:
            raise DatasetNotFoundError(f"dataset {self.name!r}: {err}") from err
        labels = torch.as_tensor(folder.targets, dtype=torch.long)
        gen = torch.Generator().manual_seed(self.seed)
        split = _random_split(labels.numel(), self.train_frac, self.val_frac, gen)
        images = _FolderImages([p for p, _ in folder.samples], self.image_size, self.channels)
        return images, labels, split, len(folder.classes)
