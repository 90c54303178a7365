"""Memory exhaustion ends in one paragraph naming the stage, the size asked and what to lower:
Python's ``MemoryError``, torch's CPU allocator error and a failed ``mmap``, each raised for real
under an address-space limit (``RLIMIT_AS``, what ``prlimit --as`` sets) in a child process, and
a whole run whose training step cannot get its memory."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from faultkit import run_statuses
from runkit import assert_one_paragraph

from graphssl.tasks.memory import memory_exhausted, size_asked, stage, stage_of

resource = pytest.importorskip("resource", reason="address-space limits need a POSIX system")

# In the child: limit the address space to what is mapped now plus 512 MiB, then ask for more
# in three ways, each inside a named stage; print the paragraph of each failure.
CHILD = textwrap.dedent(
    """
    import json, mmap, resource
    import torch
    from graphssl.tasks.memory import memory_exhausted, stage

    def mapped():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    limit = mapped() + (512 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = {}
    for name, where, ask in (
        ("python", "probes", lambda: bytearray(4 << 30)),
        ("torch", "training", lambda: torch.empty(1 << 30, dtype=torch.float32)),
        ("mmap", "extraction", lambda: mmap.mmap(-1, 4 << 30)),
    ):
        try:
            with stage(where):
                ask()
        except BaseException as err:
            out[name] = [type(err).__name__, memory_exhausted(err)]
    print(json.dumps(out))
    """
)


def test_real_allocation_failures_under_an_address_space_limit() -> None:
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    kind, text = out["python"]
    assert kind == "MemoryError" and text.startswith("out of memory during probes:")
    assert "eval.max_rows" in text
    kind, text = out["torch"]
    assert kind == "RuntimeError", text
    assert text.startswith("out of memory during training: an allocation of 4.00 GiB failed")
    assert "trainer.mini_batch=true" in text and "trainer.batch_size" in text
    kind, text = out["mmap"]
    assert kind == "OSError" and text.startswith("out of memory during extraction:")
    assert "Cannot allocate memory" in text and "trainer.mini_batch=true" in text


def test_translation_in_process(monkeypatch) -> None:
    torch_err = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 8000000000 bytes. Error code 12 (Cannot allocate memory)"
    )
    assert size_asked(torch_err) == "7.45 GiB"
    numpy_err = MemoryError("Unable to allocate 7.45 GiB for an array with shape (1000000, 2000)")
    assert size_asked(numpy_err) == "7.45 GiB"
    assert memory_exhausted(ValueError("no")) is None
    assert memory_exhausted(RuntimeError("shape mismatch")) is None
    assert memory_exhausted(OSError(errno.ENOENT, "missing")) is None
    text = memory_exhausted(OSError(errno.ENOMEM, "Cannot allocate memory"))
    assert text is not None and text.startswith("out of memory during the run:")
    for err in (torch_err, numpy_err):
        with pytest.raises(type(err)) as info, stage("diagnostics"):
            raise err
        text = memory_exhausted(info.value)
        assert text is not None
        assert text.startswith("out of memory during diagnostics: an allocation of 7.45 GiB")
        assert "eval.max_rows=<rows>" in text

    # without a stage block, the stage is read from where in graphssl it was raised
    from graphssl.evaluation.diagnostics import metrics

    def no_memory(*args, **kwargs):
        raise torch_err

    monkeypatch.setattr(metrics, "validate", no_memory)
    with pytest.raises(RuntimeError) as info:
        metrics.rankme(torch.randn(20, 4))
    assert stage_of(info.value) == "diagnostics"
    assert memory_exhausted(info.value).startswith("out of memory during diagnostics")


@pytest.mark.integration
@pytest.mark.slow
def test_a_run_out_of_memory_in_training_is_one_paragraph(
    graphssl_cmd, cli_env, outputs_dir, tmp_path
) -> None:
    """GRACE on a 4000-node graph asks for 4000 x 4000 similarities (61 MiB each, several per
    step); when training starts, the process may map only 128 MiB more than it has mapped."""
    launch = textwrap.dedent(
        """
        import resource, sys
        from graphssl.training import trainer

        fit = trainer.Trainer.fit

        def fit_under_a_limit(self, *args, **kwargs):
            with open("/proc/self/status") as f:
                size = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmSize:"))
            limit = size + (128 << 20)
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
            return fit(self, *args, **kwargs)

        trainer.Trainer.fit = fit_under_a_limit
        from graphssl.cli import main
        sys.argv = ["graphssl", *sys.argv[1:]]
        main()
        """
    )
    env = {**cli_env, "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            launch,
            "dataset=sbm",
            "dataset.block_size=2000",
            "dataset.p_in=0.002",
            "dataset.p_out=0.0002",
            "model=grace",
            "trainer.memory_budget_gb=null",
            "trainer.epochs=2",
            "eval.figures=false",
            "logger.log_embeddings=false",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 1, res.stderr[-3000:]
    assert_one_paragraph(res.stderr)
    (line,) = [ln for ln in res.stderr.splitlines() if "out of memory" in ln]
    assert line.startswith("graphssl: out of memory during training: an allocation of "), line
    assert "trainer.mini_batch=true" in line and "trainer.batch_size" in line
    assert run_statuses(outputs_dir / "mlflow.db") == ["FAILED"]
