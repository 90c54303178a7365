"""The run summary's memory figures: the GPU peak a run on CUDA logs, and nothing off CUDA."""

from __future__ import annotations

import pytest
import torch

from graphssl.tasks import _summary
from graphssl.tasks._summary import peak_gpu_gb, reset_peak_gpu, summary_table


def test_no_gpu_figure_off_cuda() -> None:
    assert peak_gpu_gb("cpu") is None
    reset_peak_gpu("cpu")  # nothing to reset, and no CUDA call made
    if not torch.cuda.is_available():
        assert peak_gpu_gb("cuda") is None
        reset_peak_gpu("cuda:1")


class _FakeCuda:
    """The four ``torch.cuda`` calls the figures make, on a machine whose current GPU is 2."""

    def __init__(self) -> None:
        self.peaks = {2: 3 * 2**29, 3: 2**30}
        self.reset: list[torch.device] = []

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 2

    def max_memory_allocated(self, device: torch.device) -> int:
        return self.peaks[device.index]

    def reset_peak_memory_stats(self, device: torch.device) -> None:
        self.reset.append(device)
        self.peaks[device.index] = 0


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> _FakeCuda:
    fake = _FakeCuda()
    calls = ("is_available", "current_device", "max_memory_allocated", "reset_peak_memory_stats")
    for name in calls:
        monkeypatch.setattr(_summary.torch.cuda, name, getattr(fake, name))
    return fake


def test_gpu_peak_is_in_gib_on_the_configured_gpu(fake_cuda: _FakeCuda) -> None:
    assert peak_gpu_gb("cuda") == pytest.approx(1.5)  # the current GPU, 2
    assert peak_gpu_gb("cuda:3") == pytest.approx(1.0)
    reset_peak_gpu("cuda:3")
    assert fake_cuda.reset == [torch.device("cuda", 3)]
    assert peak_gpu_gb("cuda:3") == 0.0
    assert peak_gpu_gb("cuda") == pytest.approx(1.5)  # another GPU's count is its own


def test_summary_shows_the_gpu_peak() -> None:
    table = summary_table({"mem/peak_rss_gb": 1.25, "mem/peak_gpu_gb": 0.5, "x/y": 1.0}, "run")
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[2:]}
    assert rows == {"mem/peak_rss_gb": "1.2500", "mem/peak_gpu_gb": "0.5000"}
