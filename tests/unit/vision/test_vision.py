"""Image path: DataModules, timm encoders, SimCLR/BYOL/DINO/supervised, the model zoo, the CLI.

Everything runs offline on scikit-learn's bundled digits (and the shared Fashion-MNIST files
when present) with timm's tiny ``test_resnet`` architecture, single-threaded (on a loaded
2-core machine one thread is several times faster than two).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.data.images import (
    DigitsDataModule,
    FashionMNISTDataModule,
    ImageFolderDataModule,
)
from graphssl.data.paths import DatasetNotFoundError
from graphssl.evaluation import Evaluation
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.methods.losses import dino_loss, simclr_nt_xent
from graphssl.models.vision import TimmEncoder
from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"
SHARED_DATA = Path(os.environ.get("GRAPHSSL_SHARED_DATA", "/work/shared/data"))
TINY = "test_resnet"  # timm's smallest ResNet (0.4M parameters)
VISION_METHODS = ["simclr", "byol", "dino", "supervised"]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def compose_cfg(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def tiny_digits_cfg(model: str, *extra: str) -> Any:
    return resolve_config(
        compose_cfg(
            f"model={model}",
            "dataset=digits",
            "encoder=timm_small",
            f"encoder.name={TINY}",
            "dataset.subset=256",
            "dataset.image_size=16",
            "dataset.batch_size=64",
            "trainer.epochs=6",
            "trainer.patience=null",
            "trainer.progress=false",
            *extra,
        )
    )


# ---------------------------------------------------------------------------- methods
@pytest.mark.parametrize("model", VISION_METHODS)
def test_method_trains_extracts_and_probes(model: str) -> None:
    cfg = tiny_digits_cfg(model)
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    assert cfg.encoder.in_chans == -1 and method.backbone.in_chans == 1  # filled from the data
    result = instantiate(cfg.trainer).fit(method, dm)
    losses = result.losses
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses), losses
    first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
    assert last < first, f"{model}: loss did not fall ({first:.4f} -> {last:.4f}): {losses}"

    z, y = extract_embeddings(method, dm)
    assert z.shape == (len(dm), method.backbone.out_channels) == (256, 96)
    assert y is not None and torch.equal(y, dm.labels) and torch.isfinite(z).all()
    split = dm.splits()[0]
    res = LogRegProbe(weight_decay=[1e-2, 1e-4]).evaluate(z, y, split.train, split.val, split.test)
    assert 0.2 < res["test_acc"] <= 1.0  # 10 classes: well above chance even after 12 steps

    for name, enc in method.encoders().items():  # every named sub-encoder extracts [N, D]
        zs, _ = extract_embeddings(method, dm, encoder_source=name)
        assert zs.shape == z.shape, name
        if enc is method.backbone:
            assert torch.allclose(zs, z, atol=1e-5), name

    extra = Evaluation.classifier_metrics(method, z, y, dm, "cpu")
    if model == "supervised":
        assert set(extra) == {"supervised/train_acc", "supervised/val_acc", "supervised/test_acc"}
        assert all(0.0 <= v <= 1.0 for v in extra.values())
    else:
        assert extra == {}


def test_method_forward_takes_batches_or_images() -> None:
    cfg = tiny_digits_cfg("byol")
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm).eval()
    x, y = next(iter(dm.eval_dataloader()))
    with torch.no_grad():
        assert torch.equal(method((x[:3], y[:3])), method(x[:3]))
    assert set(method.encoders()) == {"online", "target", "encoder"}
    dino = build_method(tiny_digits_cfg("dino"), dm)
    assert set(dino.encoders()) == {"teacher", "student", "encoder"}
    assert dino.backbone is dino.teacher


def test_dino_multi_crop() -> None:
    cfg = tiny_digits_cfg(
        "dino", "dataset.num_local_crops=2", "dataset.local_crop_size=8", "trainer.epochs=1"
    )
    seed_everything(0)
    dm = build_datamodule(cfg)
    batch = next(iter(dm.train_dataloader()))
    assert [tuple(t.shape) for t in batch] == [(64, 1, 16, 16)] * 2 + [(64, 1, 8, 8)] * 2 + [(64,)]
    method = build_method(cfg, dm)
    losses = instantiate(cfg.trainer).fit(method, dm).losses
    assert len(losses) == 1 and math.isfinite(losses[0])


# ---------------------------------------------------------------------------- losses
def test_simclr_nt_xent_matches_naive_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    tau = 0.3
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    n = 6
    terms = []
    for i in range(2 * n):
        pos = (i + n) % (2 * n)
        sims = [float(z[i] @ z[k]) / tau for k in range(2 * n) if k != i]
        terms.append(-(float(z[i] @ z[pos]) / tau - math.log(sum(math.exp(s) for s in sims))))
    assert simclr_nt_xent(z1, z2, tau).item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    with pytest.raises(ValueError, match="same shape"):
        simclr_nt_xent(z1, z2[:3])


def test_dino_loss_known_answers() -> None:
    k = 16
    flat = [torch.zeros(4, k), torch.zeros(4, k)]
    center = torch.zeros(1, k)
    # uniform teacher and student: cross-entropy log K
    assert dino_loss(flat, flat, center).item() == pytest.approx(math.log(k), rel=1e-6)
    # a confident teacher and a student that agrees: close to 0
    sharp = [torch.eye(k)[:4] * 10, torch.eye(k)[:4] * 10]
    assert dino_loss(sharp, sharp, center, student_temp=0.01, teacher_temp=0.01).item() < 1e-3


# ---------------------------------------------------------------------------- encoders
def test_pretrained_without_file_fails_at_once() -> None:
    with pytest.raises(ValueError, match="pretrained=True needs a local weights file"):
        TimmEncoder(TINY, in_chans=1, pretrained=True)
    with pytest.raises(FileNotFoundError, match="never downloads"):
        TimmEncoder(TINY, in_chans=1, checkpoint_path="/nonexistent/weights.pth")
    with pytest.raises(ValueError, match="Could not resolve timm model 'resnet1888'"):
        TimmEncoder("resnet1888", in_chans=1)


def test_checkpoint_path_loads_local_weights(tmp_path: Path) -> None:
    import timm

    torch.manual_seed(0)
    source = timm.create_model(TINY, num_classes=7)  # RGB + a classifier
    path = tmp_path / "weights.pth"
    torch.save(source.state_dict(), path)
    enc = TimmEncoder(TINY, in_chans=1, checkpoint_path=str(path))
    fresh = TimmEncoder(TINY, in_chans=1)
    src = source.state_dict()
    loaded = enc.model.state_dict()
    last = [k for k in loaded if k.endswith("weight") and "conv" in k][-1]
    assert torch.equal(loaded[last], src[last])
    assert not torch.equal(fresh.model.state_dict()[last], src[last])
    stem = next(k for k in loaded if "conv" in k and k.endswith("weight"))
    assert loaded[stem].shape[1] == 1  # first convolution adapted to one channel
    assert enc(torch.randn(2, 1, 16, 16)).shape == (2, enc.out_channels)


def test_img_size_only_for_architectures_that_take_it() -> None:
    cnn = TimmEncoder(TINY, in_chans=1, img_size=20)  # ResNets take any size
    assert cnn(torch.randn(2, 1, 20, 20)).shape == (2, cnn.out_channels)
    vit = TimmEncoder("test_vit", in_chans=1, img_size=16, patch_size=4)
    assert vit(torch.randn(2, 1, 16, 16)).shape == (2, vit.out_channels)


# ---------------------------------------------------------------------------- data
def test_digits_datamodule_batches_splits_and_order() -> None:
    dm = DigitsDataModule(image_size=16, subset=200, batch_size=32, seed=3)
    dm.setup()
    split = dm.splits()[0]
    rows = torch.cat([split.train, split.val, split.test]).sort().values
    assert torch.equal(rows, torch.arange(200))
    assert (split.train.numel(), split.val.numel(), split.test.numel()) == (120, 40, 40)
    assert dm.num_classes == 10 and dm.in_chans == 1 and dm.is_graph_level
    assert dm.encoder_overrides() == {"in_chans": 1, "img_size": 16, "in_channels": 1}
    v1, v2, y = next(iter(dm.train_dataloader()))
    assert v1.shape == v2.shape == (32, 1, 16, 16) and v1.dtype == torch.float32
    assert not torch.equal(v1, v2) and y.shape == (32,)
    assert len(dm.train_dataloader()) == 120 // 32  # incomplete last batch dropped
    batches = list(dm.eval_dataloader())
    x = torch.cat([b[0] for b in batches])
    assert x.shape == (200, 1, 16, 16)
    assert torch.equal(torch.cat([b[1] for b in batches]), dm.labels)
    assert torch.equal(torch.cat([b[0] for b in dm.eval_dataloader()]), x)  # fixed order
    train_x = x[split.train]
    assert train_x.mean().abs() < 0.05 and (train_x.std() - 1).abs() < 0.05  # normalised
    same = DigitsDataModule(image_size=16, subset=200, seed=3)
    same.setup()
    assert torch.equal(same.splits()[0].test, split.test) and torch.equal(same.labels, dm.labels)
    with pytest.raises(AttributeError, match="image dataset"):
        _ = dm.data


def test_missing_fashion_mnist_fails_fast(tmp_path: Path, monkeypatch) -> None:
    from graphssl.data import images

    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    dm = FashionMNISTDataModule(data_dir=tmp_path / "nowhere", cache_dir=tmp_path / "cache")
    with pytest.raises(DatasetNotFoundError) as err:
        dm.setup()
    msg = str(err.value)
    assert str(tmp_path / "nowhere" / "FashionMNIST" / "raw") in msg
    assert str(tmp_path / "no-debian") in msg and "dataset-fashion-mnist" in msg
    assert "train-images-idx3-ubyte" in msg and "GRAPHSSL_DATA_DIR" in msg


def _write_idx(path: Path, data: torch.Tensor) -> None:
    """A gzipped IDX file (the format of the MNIST family): magic, dims, uint8 payload."""
    import gzip
    import struct

    magic = 0x0800 + data.ndim
    header = struct.pack(f">I{data.ndim}I", magic, *data.shape)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + data.to(torch.uint8).numpy().tobytes())


def test_fashion_mnist_from_debian_gz(tmp_path: Path, monkeypatch) -> None:
    """The Debian package's ``*.gz`` files are gunzipped into the cache and read from there."""
    from graphssl.data import images

    debian = tmp_path / "debian"
    debian.mkdir()
    gen = torch.Generator().manual_seed(0)
    for part, n in (("train", 300), ("t10k", 50)):
        _write_idx(
            debian / f"{part}-images-idx3-ubyte.gz",
            torch.randint(0, 256, (n, 28, 28), generator=gen),
        )
        _write_idx(debian / f"{part}-labels-idx1-ubyte.gz", torch.arange(n) % 10)
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST", debian)
    dm = FashionMNISTDataModule(
        data_dir=tmp_path / "nowhere",
        cache_dir=tmp_path / "cache",
        subset=200,
        test_subset=40,
        seed=1,
    )
    dm.setup()
    assert (tmp_path / "cache" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte").is_file()
    split = dm.splits()[0]
    assert len(dm) == 240 and split.test.tolist() == list(range(200, 240))
    assert split.val.numel() == 20 and split.train.numel() == 180
    assert dm.num_classes == 10 and dm.images.shape == (240, 1, 28, 28)


def test_fashion_mnist_shared_files() -> None:
    if not (SHARED_DATA / "FashionMNIST" / "raw").is_dir():
        pytest.skip(f"Fashion-MNIST raw files not found in {SHARED_DATA}")
    dm = FashionMNISTDataModule(data_dir=SHARED_DATA, subset=1000, test_subset=500)
    dm.setup()  # read-only folder: torchvision only reads the raw files
    assert len(dm) == 1500 and dm.labels.unique().tolist() == list(range(10))
    assert dm.splits()[0].test.numel() == 500


def test_image_folder_datamodule(tmp_path: Path) -> None:
    from PIL import Image

    gen = torch.Generator().manual_seed(0)
    for c, cls in enumerate(("cat", "dog")):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(5):
            arr = (torch.rand(20, 24, 3, generator=gen) * 255).to(torch.uint8).numpy()
            arr[..., 0] = 250 * c
            Image.fromarray(arr).save(tmp_path / "imgs" / cls / f"{i}.png")
    dm = ImageFolderDataModule(tmp_path / "imgs", image_size=16, batch_size=4)
    dm.setup()
    assert len(dm) == 10 and dm.num_classes == 2 and dm.in_chans == 3
    assert dm.labels.tolist() == [0] * 5 + [1] * 5
    x, y = next(iter(dm.eval_dataloader()))
    assert x.shape == (10, 3, 16, 16) and y.tolist() == dm.labels.tolist()
    v1, _, _ = next(iter(dm.train_dataloader()))
    assert v1.shape == (4, 3, 16, 16)
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        ImageFolderDataModule(tmp_path / "missing").setup()


# ---------------------------------------------------------------------------- model zoo
class _StubImageData:
    """What build_method reads from a DataModule (the zoo test needs no data)."""

    num_classes = 10

    def encoder_overrides(self) -> dict[str, int]:
        return {"in_chans": 1, "img_size": 32, "in_channels": 1}


def zoo_config() -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="train", overrides=["experiment=model_zoo"], return_hydra_config=True
        )


def zoo_encoders() -> list[str]:
    """The ``encoder.name`` values the zoo sweeps, parsed as Hydra's sweeper parses them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    value = zoo_config().hydra.sweeper.params["encoder.name"]
    (override,) = OverridesParser.create().parse_overrides([f"encoder.name={value}"])
    return list(override.sweep_string_iterator())


def test_model_zoo_is_a_multirun_over_12_models() -> None:
    cfg = zoo_config()
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert cfg.dataset._target_.endswith("FashionMNISTDataModule")
    assert cfg.model._target_.endswith("Supervised")
    names = zoo_encoders()
    assert len(set(names)) >= 12
    families = {re.match(r"[a-z]+", n).group() for n in names}  # type: ignore[union-attr]
    assert len(families) >= 6, families
    assert "trainer.epochs" in cfg.hydra.sweeper.params  # training lengths vary too


def test_every_zoo_member_builds_and_forwards() -> None:
    for name in zoo_encoders():
        cfg = resolve_config(compose_cfg("experiment=model_zoo", f"encoder.name={name}"))
        method = build_method(cfg, _StubImageData())  # type: ignore[arg-type]
        method.eval()
        with torch.no_grad():
            z = method(torch.randn(2, 1, 32, 32))
        assert z.shape == (2, method.backbone.out_channels), name
        logits = method.classifier_logits(z)
        assert logits is not None and logits.shape == (2, 10), name


# ----------------------------------------------------------------------- the task
@pytest.mark.slow
def test_train_task_simclr_on_digits(tasks) -> None:
    """The image path end to end through the composed config: data, timm encoder, SimCLR,
    extraction, diagnostics, probes and the store (in-process; the CLI is tested elsewhere)."""
    tasks.train("dataset=digits", "model=simclr", "encoder=timm_small", "trainer.epochs=1")
    (run,) = tasks.runs()
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert metrics["probe/logreg/test_acc"] > 0.5
    assert "diag/rankme" in metrics and "train/loss" in metrics
    assert run.data.params["encoder.name"] == "resnet10t"
    assert run.data.tags["embeddings.shape"] == "1797x512"
