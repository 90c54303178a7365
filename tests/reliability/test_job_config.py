"""Every job of a sweep leaves ``.hydra/config.pickle`` that Hydra's ``--experimental-rerun``
reads, joblib workers included (their launcher node is typed by a class pickle cannot find).
A joblib sweep leaving the pickles and one job rerun from its pickle:
``tests/integration/test_launchers.py::test_joblib_four_jobs_on_two_workers``."""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass

import pytest
from omegaconf import OmegaConf

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
