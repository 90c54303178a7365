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


_WAIT_POLICY_SCRIPT = """
import importlib.abc, json, os, sys
seen = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and "torch" not in seen:
            seen["torch"] = os.environ.get("OMP_WAIT_POLICY")
        return None
sys.meta_path.insert(0, Watch())
import graphssl.cli
import torch  # loaded by the task, when not already by graphssl.cli
print(json.dumps(seen))
"""


def test_the_console_entries_make_idle_openmp_threads_sleep_before_torch_loads() -> None:
    """libgomp reads ``OMP_WAIT_POLICY`` once, when torch loads it: a fresh interpreter shows
    the value torch saw when ``graphssl.cli`` imported it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run(
        [sys.executable, "-c", _WAIT_POLICY_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"torch": "PASSIVE"}


def test_a_wait_policy_set_by_the_user_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import graphssl._startup as startup

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    importlib.reload(startup)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    importlib.reload(startup)
    assert os.environ["OMP_WAIT_POLICY"] == startup.WAIT_POLICY == "PASSIVE"
