"""``benchmarks/bench_distributed.py``: configurations, the extrapolated epoch, the job's memory
and the table built from them, and one configuration trained in-process on a tiny generated
graph (no products size, no spawned ranks)."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_distributed.py"
GiB = 2**30


@pytest.fixture(scope="module")
def bench(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("bench_distributed")


def test_configurations_are_devices_by_threads(bench):
    assert bench.parse_config("2x1") == bench.Config(2, 1)
    assert bench.parse_config(" 1×2 ") == bench.Config(1, 2)
    assert bench.parse_config("4X3").name == "4x3"
    for bad in ("2", "0x1", "1x0", "ax1", "2x1x1", ""):
        with pytest.raises(ValueError, match="DEVICESxTHREADS"):
            bench.parse_config(bad)


def test_steps_and_extrapolation(bench):
    # ogbn-products at batch 1024: 2,392 steps, on one rank or on two of 512 seeds each
    assert bench.steps_per_epoch(2_449_029, 1024, 1) == 2392
    assert bench.steps_per_epoch(2_449_029, 1024, 2) == 2392
    # a global batch that does not divide: 2 seeds per rank, 4 per step
    assert bench.steps_per_epoch(10, 5, 2) == 3
    assert bench.extrapolate(3.0, 30, 2392) == pytest.approx(239.2)
    with pytest.raises(ValueError, match="0 batches"):
        bench.extrapolate(1.0, 0, 10)


def _child(seconds, cpus, batches=10, steps=100, loss=0.5, threads=1):
    """Measurements as a child writes them: per rank the fit's start and each epoch's end in CPU
    seconds, rank 0's epoch seconds."""
    ranks = [
        {"cpu": c, "wall": list(range(len(c) - 1)), "seconds": seconds, "threads": threads}
        for c in cpus
    ]
    return {
        "steps_per_epoch": steps,
        "batches_per_epoch": batches,
        "threads": threads,
        "start_s": 2.0,
        "loss": loss,
        "ranks": ranks,
        "load": (1.0, 1.5),
    }


def _memory(bench, ranks, pss, wait=0):
    return bench.job_memory(ranks, {"peak_pss": {"Pss": pss}, "processes": {}}, wait)


def test_epoch_leaves_out_the_warm_up_and_sums_the_ranks_cpu(bench):
    # 3 epochs of 10 batches, 100 steps each: the warm-up (9 s) is left out, median of 2 and 4
    # seconds, times 10
    cpus = [[0.0, 5.0, 7.0, 10.0], [0.0, 4.0, 5.0, 7.0]]  # per epoch 5, 2, 3 and 4, 1, 2
    row = bench.summarise(
        bench.Config(2, 1), _child([9.0, 2.0, 4.0], cpus), _memory(bench, [1, 2], 3)
    )
    assert row["epoch_s"] == pytest.approx(30.0)
    assert row["epoch_cpu_s"] == pytest.approx(40.0)  # median of (2 + 1) and (3 + 2), times 10
    assert row["epochs_measured"] == 2
    assert (row["mem_rss_sum"], row["mem_rss_max"], row["mem_pss"]) == (3, 2, 3)
    with pytest.raises(ValueError, match="1 ranks, expected 2"):
        bench.summarise(bench.Config(2, 1), _child([9.0, 2.0], [[0, 1, 2]]), {})
    with pytest.raises(ValueError, match="warm-up"):
        bench.summarise(bench.Config(1, 1), _child([9.0], [[0, 1]]), {})


def test_memory_of_one_process_and_of_ranks(bench):
    one = _memory(bench, [3 * GiB], 2 * GiB, wait=4 * GiB)  # os.wait4's peak is the larger
    assert (one["rss_sum"], one["pss"]) == (4 * GiB, 2 * GiB)
    two = bench.job_memory(
        [3 * GiB, 2 * GiB],
        {
            "peak_pss": {"Pss": 4 * GiB, "Pss_Shmem": GiB},
            "processes": {1: {"RssShmem": 2 * GiB, "RssAnon": GiB}, 2: {"RssShmem": GiB}},
        },
        3 * GiB,
    )
    assert (two["rss_sum"], two["rss_max"], two["pss"]) == (5 * GiB, 3 * GiB, 4 * GiB)
    assert two["pss_parts"] == {"Pss_Shmem": GiB}
    assert sorted(two["shmem"]) == [GiB, 2 * GiB] and sorted(two["anon"]) == [0, GiB]


def _rows(bench, two_epoch):
    rows = []
    for config, epoch, rss, pss in (
        ("1x1", 100.0, [4 * GiB], 4 * GiB),
        ("1x2", 70.0, [4 * GiB], 4 * GiB),
        ("2x1", two_epoch, [4 * GiB, 3 * GiB], 5 * GiB),
    ):
        c = bench.parse_config(config)
        child = _child([1.0, epoch / 10], [[0.0, 1.0, 11.0]] * c.devices)  # 10 CPU s a rank
        rows.append(bench.summarise(c, child, _memory(bench, rss, pss)))
    return rows


def test_table_and_targets_from_the_measurements(bench):
    rows = _rows(bench, 55.0)
    text = bench.report(rows, "heading", "note")
    table = [line for line in text.splitlines() if line.startswith("| ")]
    lines = {line.split("|")[1].strip(): line for line in table}
    assert "| 100.0 | 1.00× |" in lines["1x1"]
    assert "| 55.0 | 1.82× | 200.0 | 2.00× | 7.00 (4.00 + 3.00) | 5.00 | 1.25× |" in lines["2x1"]
    assert "1.0 → 1.5" in lines["2x1"]
    checks = bench.targets(rows)
    assert checks[0] == "2x1 epoch vs 1x1: 1.82× faster (target ≥ 1.7×): met"
    assert checks[1].startswith("2x1 peak memory vs 1x1, summed PSS (shared memory once): 1.25×")
    assert "(target ≤ 1.3×): met" in checks[1] and checks[1].endswith("1.75×")
    assert checks[2] == "2x1 vs 1x2: 55.0 s against 70.0 s (1.27×): ahead, met"
    slow = bench.targets(_rows(bench, 80.0))
    assert slow[0].endswith("1.25× faster (target ≥ 1.7×): not met")
    assert slow[2].endswith("(0.88×): behind, not met")


def test_ceiling_splits_the_speed_up_into_its_factors(bench):
    # 1x1 at batch B: 100 s; one process at B/2 alone: 110 s (smaller batches share fewer
    # neighbours); two at once: 121 s and 132 s each (shared memory bandwidth); 2x1: 72.6 s
    single = {"config": "1x1", "epoch_s": 100.0}
    one = {"threads": 1, "epoch_s": 110.0}
    pair = [{"epoch_s": 121.0}, {"epoch_s": 132.0}]
    wide = {"config": "2x1", "epoch_s": 72.6}
    lines = bench.ceiling_lines(one, pair, single, wide)
    assert lines[0].endswith("an epoch shared by 2 without collectives takes 66.0 s, 1.67× faster")
    assert lines[1] == "factor: contention (at once / alone) 1.20×"
    assert lines[2].endswith("1.10×; ceiling 1.52× 1x1")
    assert lines[3] == "factor: synchronisation (2x1 over the trainings at once) 1.10×"
    assert len(lines) == 4  # no CPU times: no split
    # with CPU times: the pair's 126.5 CPU s each make a 63.25 s share a rank; the 2x1 job
    # used 132.0 CPU s (66.0 a rank, 1.04×) over a 72.6 s epoch (busy 91 %)
    for r, cpu in zip(pair, (121.0, 132.0), strict=True):
        r["epoch_cpu_s"] = cpu
    wide["epoch_cpu_s"] = 132.0
    split = bench.ceiling_lines(one, pair, single, wide)[4]
    assert split == (
        "  of which: the ranks' CPU 1.04× their share of the trainings' at once (collectives, "
        "shared memory), waiting off the CPU 1.05× (a rank's CPU over the epoch's wall time: 91 %)"
    )
    assert bench._with_batch(["--batch", "1024", "--seed", "0"], 512) == [
        "--batch",
        "512",
        "--seed",
        "0",
    ]


@pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps_rollup"),
    reason="the memory sampler reads Linux's /proc/<pid>/smaps_rollup (kernel 4.14 or newer)",
)
def test_sampler_reads_this_process(bench):
    sampler = bench.MemorySampler(os.getpid(), pss_interval=3600.0, margin=2**40)
    sampler.sample()  # the first read is a new high of the RSS: PSS is read
    sampler.sample()  # no new high by a TiB, and within the hour: status only
    got = sampler.stop()
    me = got["processes"][os.getpid()]
    assert me["VmHWM"] >= me["VmRSS"] > 0
    assert got["peak_pss"]["Pss"] > 0 and got["peak_rss_sum"] >= me["VmRSS"]
    assert (got["samples"], got["pss_samples"]) == (2, 1)


def test_one_configuration_on_a_tiny_generated_graph(bench, tmp_path, monkeypatch):
    import graphssl.tasks.components as components

    threads = []
    monkeypatch.setattr(components, "set_threads", threads.append)  # the test's pools stay
    argv = ["--dataset", "synthetic_large", "--num-nodes", "400", "--avg-degree", "6"]
    argv += ["--cache-dir", str(tmp_path), "--max-batches", "2", "--epochs", "3"]
    argv += ["--batch", "64", "--fanout", "3", "2", "--hidden", "16"]
    args = bench.parse_args(argv)
    assert args.configs == [bench.Config(1, 1), bench.Config(1, 2), bench.Config(2, 1)]
    assert "trainer.limit_batches=2" in bench.overrides(args, bench.Config(2, 1))
    assert "trainer.batch_size=32" in bench.overrides(args, bench.Config(2, 1))
    measured = bench.child(args, bench.Config(1, 1), tmp_path)
    assert threads == [1]
    assert measured["num_nodes"] == 400
    assert measured["steps_per_epoch"] == math.ceil(400 / 64) == 7
    assert measured["batches_per_epoch"] == 2
    (rank,) = measured["ranks"]
    assert len(rank["cpu"]) == 4 and len(rank["seconds"]) == 3 and rank["maxrss"] > 0
    row = bench.summarise(bench.Config(1, 1), measured, _memory(bench, [], 1, wait=1))
    assert row["epoch_s"] == pytest.approx(
        statistics.median(s * 7 / 2 for s in rank["seconds"][1:])
    )
    assert math.isfinite(row["loss"]) and row["epoch_cpu_s"] > 0
