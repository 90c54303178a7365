"""The C allocator setting (``cpu_allocator``): freed memory is reused without page faults."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graphssl.utils import configure_allocator

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="these tests count glibc's page faults under cpu_allocator; on another C library "
    "the setting changes nothing, so there is nothing to measure",
)

_FAULTS = textwrap.dedent(
    """
    import resource, sys, torch
    from graphssl.utils import configure_allocator
    applied = configure_allocator(sys.argv[1])
    x = torch.ones(32 * 2**20)  # 128 MB, freed: the heap has room for what follows
    del x
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        y = torch.ones(16 * 2**20)  # 64 MB: above glibc's largest mmap threshold
        del y
    print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def _page_faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.slow  # a fresh interpreter counting its page faults
@glibc_only
def test_reuse_allocates_a_freed_large_block_without_faulting_it_in_again() -> None:
    applied, reused = _page_faults("reuse")
    _, system = _page_faults("system")
    assert applied == "True"
    # glibc's default maps and unmaps each 64 MB block: ~16k faults per allocation (4 KiB pages);
    # reused, a block faults in only when small allocations have fragmented the freed space
    assert system > 20 * 10_000
    assert reused < system / 2  # 6 of 20 blocks fault here, against all 20


def test_allocator_mode_is_checked() -> None:
    assert configure_allocator("system") is False
    with pytest.raises(ValueError, match="cpu_allocator must be one of reuse, system, got 'tcm'"):
        configure_allocator("tcm")


_SCOPED = textwrap.dedent(
    """
    import os, resource, torch
    from graphssl.utils import allocator

    def rss_mb():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    with allocator("reuse") as applied:
        x = torch.ones(64 * 2**20)  # 256 MB, freed inside the block: kept by the process
        del x
        kept = rss_mb()
    released = kept - rss_mb()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        y = torch.ones(16 * 2**20)  # 64 MB
        del y
    print(applied, released, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


@glibc_only
def test_allocator_block_returns_the_memory_and_restores_the_defaults() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCOPED], capture_output=True, text=True, check=True
    ).stdout.split()
    applied, released_mb, faults_after = out[0], float(out[1]), int(out[2])
    assert applied == "True"
    assert released_mb > 200  # the 256 MB kept inside the block went back to the system
    # after it, freed 64 MB blocks go back to the system and are mapped afresh again (16,384
    # page faults each); glibc may keep one or two of the five in its heap, which the reuse mode
    # would do for all of them (a few hundred faults in all)
    assert faults_after > 2 * 10_000


@pytest.mark.slow  # a fresh interpreter counting its page faults
@glibc_only
def test_allocator_benchmark_counts_the_faults_reuse_avoids() -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_allocator.py"
    out = subprocess.run(
        [sys.executable, str(script), "--iters", "10", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = {
        cells[0]: cells[1:]
        for line in out.splitlines()
        if line.startswith(("| system", "| reuse"))
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    faults = {mode: float(cells[1].replace(",", "")) for mode, cells in rows.items()}
    # a new 35 MiB tensor is ~9,000 pages: faulted in under glibc's defaults, reused otherwise
    # (a few faults remain, which the kernel's own page sampling adds while the process runs)
    assert faults["system"] > 8000 and faults["reuse"] < faults["system"] / 3, out
    assert "ratio system / reuse:" in out and "load average:" in out


_PAUSED = textwrap.dedent(
    """
    import os, torch
    from graphssl.utils import allocator, system_allocator

    def rss_mb():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    with system_allocator() as outside:  # no "reuse" in force: nothing to pause
        pass
    with allocator("reuse"):
        x = torch.ones(64 * 2**20)  # 256 MB, freed: kept by the process
        del x
        kept = rss_mb()
        with system_allocator() as paused:
            y = torch.ones(64 * 2**20)  # 256 MB, allocated and freed in the block
            del y
            released = kept - rss_mb()
        before = rss_mb()
        z = torch.ones(32 * 2**20)  # 128 MB, freed after the block: kept again
        del z
        kept_after = rss_mb() - before
    print(outside, paused, released, kept_after)
    """
)


@glibc_only
def test_system_allocator_returns_what_is_freed_in_the_block_then_reuses_again() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PAUSED], capture_output=True, text=True, check=True
    ).stdout.split()
    outside, paused, released_mb, kept_after_mb = out[0], out[1], float(out[2]), float(out[3])
    assert outside == "False" and paused == "True"
    # the 256 MB kept before the block went back to the system, and the block's own did not stay
    assert released_mb > 200
    # after the block "reuse" is in force again: a freed 128 MB block stays in the process
    assert kept_after_mb > 100
