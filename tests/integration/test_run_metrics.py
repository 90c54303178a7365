"""A mini-batch run logs the data's size, the sampler's throughput and the peak memory."""

from __future__ import annotations


def test_mini_batch_run_logs_throughput_and_memory(tasks) -> None:
    tasks.train(
        "dataset=sbm",
        "trainer.mini_batch=true",
        "trainer.batch_size=128",
        "trainer.epochs=2",
        "eval.figures=false",
        "logger.log_embeddings=false",
    )
    (run,) = tasks.runs()
    m = run.data.metrics
    assert m["data/num_nodes"] > 0 and m["data/num_edges"] > 0
    assert m["time/batches_per_second"] > 0
    assert 0 < m["time/sample_seconds"] < m["time/train_seconds"]
    assert m["time/compute_seconds"] > 0
    assert m["time/figures_seconds"] >= 0
    # the interpreter, torch and the graph alone take more than 50 MiB; a unit slip (bytes or
    # KiB read as GiB) would give an absurd figure either way
    assert 0.05 < m["mem/peak_rss_gb"] < 64
