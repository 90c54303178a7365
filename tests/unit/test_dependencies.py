"""pyproject.toml declares the supported ranges, constraints.txt pins the tested set inside them,
and make (so CI, whose .ci/run goes through make) installs with those pins."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]


def declared() -> dict[str, list[Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    out: dict[str, list[Requirement]] = {}
    for req in reqs:
        out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


def pins() -> dict[str, Version]:
    out: dict[str, Version] = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        assert match, f"constraints.txt: {line!r} is not an exact pin (name==version)"
        name = canonicalize_name(match[1])
        assert name not in out, f"constraints.txt pins {name} twice"
        out[name] = Version(match[2])
    return out


def test_every_pin_lies_in_its_declared_range() -> None:
    ranges = declared()
    for name, version in pins().items():
        assert name in ranges, f"constraints.txt pins {name}, which pyproject.toml does not declare"
        for req in ranges[name]:
            assert req.specifier.contains(version, prereleases=True), (
                f"constraints.txt pins {name}=={version}, outside pyproject.toml's {req}"
            )


def test_runtime_dependencies_are_ranges_and_all_pinned() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pinned = pins()
    for text in project["dependencies"]:
        req = Requirement(text)
        assert not any(s.operator in ("==", "===") for s in req.specifier), (
            f"pyproject.toml pins {req}; expected a supported range (the pin goes in "
            f"constraints.txt)"
        )
        assert canonicalize_name(req.name) in pinned, f"constraints.txt does not pin {req.name}"
    tested = {"torch": "2.14.1", "torchvision": "0.29.1", "torch-geometric": "2.8.1"}
    for name, version in {**tested, "hydra-core": "1.3.8"}.items():
        assert pinned[name] == Version(version)


def test_make_installs_with_the_constraints() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^CONSTRAINTS \?= constraints\.txt$", makefile, re.M)
    install = makefile[makefile.index("$(STAMP):") :].split("\n\n", 1)[0]
    assert "-c $(CONSTRAINTS)" in install and "$(CONSTRAINTS)" in install.splitlines()[0]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci and "pip install" not in ci  # CI installs only through make


def test_make_test_runs_a_worker_per_core_also_under_ci_thread_settings() -> None:
    """CI exports OMP_NUM_THREADS=1 (one thread per test process), and GNU nproc honours it:
    the worker count must still be the machine's cores (at most 4)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed (apt-get install make)")
    cores = min(len(os.sched_getaffinity(0)), 4)
    for threads in ("1", None):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "TEST_JOBS")}
        if threads is not None:
            env["OMP_NUM_THREADS"] = threads
        # -n: print the commands without running them; the stamp's install line may come first
        out = subprocess.run(
            ["make", "-n", "test"], cwd=REPO, env=env, capture_output=True, text=True, check=True
        ).stdout
        pytest_line = next(line for line in out.splitlines() if " -m pytest" in line)
        assert f"-n {cores} --dist loadfile" in pytest_line, (threads, pytest_line)
