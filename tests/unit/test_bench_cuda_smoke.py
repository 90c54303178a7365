"""``benchmarks/cuda_smoke.py`` kept runnable where no GPU is: its checks on the CPU, through the
train task and the library, and a failed check that fails the run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

import pytest
import torch


@pytest.fixture(scope="module")
def smoke(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("cuda_smoke")


@pytest.fixture
def quiet_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _table(out: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_the_checks_pass_on_the_cpu(smoke, quiet_store, capsys) -> None:
    assert smoke.main(["--device", "cpu", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "cuda smoke: all checks passed" in out
    assert "[FAIL]" not in out
    assert out.count("FINISHED") == 2
    rows = _table(out)
    assert set(rows) == {"full-batch", "mini-batch"}
    for epochs, epoch, _training, gpu, acc in rows.values():
        assert epochs == "2" and epoch.endswith(" ms") and float(epoch.split()[0]) > 0
        assert gpu == "–"  # no GPU figure off CUDA
        assert 0 < float(acc) <= 1


def test_a_failed_check_fails_the_run(smoke, quiet_store, capsys, monkeypatch) -> None:
    library_path = smoke.library_path

    def certain_guess(*args: object) -> float:
        library_path(*args)
        return 1.0  # a probe has to beat guessing: with "chance" at 100 %, no accuracy can

    monkeypatch.setattr(smoke, "library_path", certain_guess)
    assert smoke.main(["--device", "cpu", "--epochs", "1"]) == 1
    out = capsys.readouterr().out
    assert out.count("[FAIL] logreg test accuracy") == 2
    assert "cuda smoke: FAILED" in out


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="this machine has CUDA, so the script trains on it instead of printing its no-CUDA "
    "note; the CPU tests above cover the checks",
)
def test_without_cuda_it_says_so_and_passes(smoke, capsys) -> None:
    assert smoke.main([]) == 0
    assert "CUDA is unavailable" in capsys.readouterr().out
