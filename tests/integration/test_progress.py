"""Progress bars stay off when stderr is not a terminal (``trainer.progress: null``).

Logs of a sweep or a CI job must not fill with carriage-return bars. The CLI runs in a
subprocess whose stderr is a pipe, training and mini-batch extraction both on (the two places
with a tqdm bar), and its stderr must hold no bar.
"""

from __future__ import annotations

import io
import subprocess

import pytest
from tqdm import tqdm

pytestmark = pytest.mark.integration

#: what a tqdm bar writes: a rate ("it/s", "s/it", "epoch/s", "batch/s"), blocks, "%|" frames
BAR_MARKS = ("it/s", "s/it", "epoch/s", "s/epoch", "batch/s", "s/batch", "|█", "%|")


def bar_marks(text: str) -> list[str]:
    return [m for m in BAR_MARKS if m in text]


def test_marks_detect_a_real_bar() -> None:
    """The check below is not vacuous: a forced tqdm bar is caught by the same marks."""
    for unit in ("it", "epoch", "batch"):
        out = io.StringIO()
        for _ in tqdm(range(3), file=out, disable=False, unit=unit, mininterval=0):
            pass
        assert bar_marks(out.getvalue()), out.getvalue()


def test_cli_is_quiet_without_a_terminal(graphssl_cmd, cli_env, tmp_path) -> None:
    res = subprocess.run(
        [
            *graphssl_cmd,
            "dataset=sbm",
            "trainer.epochs=3",
            "eval.extraction.mini_batch=true",
            "eval.figures=false",
            "logger.log_embeddings=false",
        ],
        env=cli_env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "probe/logreg/test_acc" in res.stdout  # it did train, extract and probe
    assert not bar_marks(res.stderr), f"progress bar in non-tty stderr:\n{res.stderr[-2000:]}"
    assert "\r" not in res.stderr
