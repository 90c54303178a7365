"""Progress bars stay off when stderr is not a terminal (``trainer.progress: null``).

Logs of a sweep or a CI job must not fill with carriage-return bars. The train task runs
in-process with its stderr captured (not a terminal), training and mini-batch extraction both on
(the two places with a tqdm bar), and that stderr must hold no bar.
"""

from __future__ import annotations

import io

from tqdm import tqdm

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


def test_training_is_quiet_without_a_terminal(tasks, capfd) -> None:
    tasks.train(
        "dataset=sbm",
        "trainer.epochs=3",
        "eval.extraction.mini_batch=true",
        "eval.figures=false",
        "logger.log_embeddings=false",
    )
    out, err = capfd.readouterr()
    assert "probe/logreg/test_acc" in out  # it did train, extract and probe
    assert not bar_marks(err), f"progress bar in non-tty stderr:\n{err[-2000:]}"
    assert "\r" not in err
