"""Every job of a sweep leaves ``.hydra/config.pickle`` that Hydra's ``--experimental-rerun``
reads, joblib workers included (their launcher node is typed by a class pickle cannot find)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from dataclasses import dataclass

import pytest
from omegaconf import OmegaConf
from runkit import FAST, all_runs, store_client

from graphssl.tracking.sweep import config_pickle


@dataclass
class _Launcher:
    n_jobs: int = 2


def test_a_config_typed_by_a_reimported_class_is_pickled_plain(monkeypatch) -> None:
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig

    cfg = OmegaConf.create({"a": 1, "hydra": OmegaConf.structured(HydraConf)})
    cfg.hydra.launcher = OmegaConf.structured(_Launcher)
    OmegaConf.set_struct(cfg, True)
    OmegaConf.set_readonly(cfg.hydra, True)  # as Hydra leaves it
    # what Hydra's plugin loader does: the module now holds another class of the same name
    monkeypatch.setattr(sys.modules[__name__], "_Launcher", type("_Launcher", (), {}))
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(cfg, protocol=4)
    back = pickle.loads(config_pickle(cfg))
    assert back.a == 1 and OmegaConf.to_container(back.hydra.launcher) == {"n_jobs": 2}
    assert OmegaConf.is_struct(back)
    HydraConfig.instance().set_config(back)  # what --experimental-rerun does with it


@pytest.mark.integration
@pytest.mark.slow
def test_joblib_jobs_leave_a_config_pickle_that_reruns(
    graphssl_cmd, cli_env, outputs_dir, tmp_path
) -> None:
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher",
        reason="hydra-joblib-launcher is not installed (it comes with the dev extra: make install)",
    )
    args = [*FAST, "model=dgi", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    res = subprocess.run(
        [*graphssl_cmd, "-m", *args, "trainer.epochs=2,3"],
        env=cli_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "PicklingError" not in res.stderr and "SaveJobConfig" not in res.stderr
    pickles = sorted((outputs_dir / "multiruns").glob("*/*/[0-9]/.hydra/config.pickle"))
    assert len(pickles) == 2 and all(p.stat().st_size > 0 for p in pickles)
    job0 = pickle.loads(pickles[0].read_bytes())
    assert job0.trainer.epochs == 2
    rerun = subprocess.run(
        [*graphssl_cmd, "--experimental-rerun", str(pickles[0])],
        env=cli_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    runs = [
        r
        for r in all_runs(store_client(outputs_dir))
        if r.data.tags.get("graphssl.role") != "sweep"
    ]
    assert len(runs) == 3
    assert [r.info.status for r in runs] == ["FINISHED"] * 3
    assert sorted(r.data.params["trainer.epochs"] for r in runs) == ["2", "2", "3"]
