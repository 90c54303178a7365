"""One thread budget per process: torch and every BLAS/OpenMP pool, including the pools of
libraries loaded after the budget was set (run in a fresh process: pools are process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = """
import json, torch
from graphssl.threads import apply_thread_budget, pool_sizes, thread_budget
before = pool_sizes()
apply_thread_budget(1)
import sklearn.linear_model  # its OpenMP runtime loads after the budget was set
after = pool_sizes()
torch.set_num_threads(2)
with thread_budget() as inside:  # torch's count, for every pool, within the block
    within = pool_sizes()
print(json.dumps({"before": before, "after": after, "within": within, "inside": inside,
                  "restored": pool_sizes()}))
"""


def test_every_pool_follows_the_budget_also_when_loaded_later() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if set(r["before"].values()) == {1}:
        pytest.skip("one core: every pool already has one thread")
    assert set(r["after"].values()) == {1}, r["after"]
    assert len(r["after"]) > len(r["before"])  # scikit-learn's pool, loaded later, is in
    assert r["inside"] == 2 and set(r["within"].values()) == {2}, r["within"]
    assert set(r["restored"].values()) == {1, 2}  # the pools' sizes before the block, torch 2
