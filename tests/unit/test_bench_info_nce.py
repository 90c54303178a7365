"""``benchmarks/bench_info_nce.py``: its table row per size, both paths' losses agreeing."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch


def test_the_table_compares_both_paths_per_size(
    load_benchmark: Callable[[str], ModuleType], capsys
) -> None:
    bench = load_benchmark("bench_info_nce")
    threads = torch.get_num_threads()
    try:
        bench.main(["--rows", "40", "300", "--dim", "8", "--repeat", "1"])
    finally:
        torch.set_num_threads(threads)
    rows = [line.strip("|").split("|") for line in capsys.readouterr().out.splitlines()[3:]]
    assert [int(r[0]) for r in rows] == [40, 300]
    for n, dense, blocks, ratio, dense_mib, block_mib, difference in rows:
        assert dense.strip().endswith(" ms") and blocks.strip().endswith(")")
        assert float(ratio.strip().rstrip("×")) > 0
        rows_per_block = min(int(n), 2**22 // int(n))
        assert blocks.strip().endswith(f"({rows_per_block})")
        assert float(dense_mib) == round(8 * int(n) ** 2 * 4 / 2**20)
        assert float(block_mib) == round(4 * rows_per_block * int(n) * 4 / 2**20)
        assert float(difference) < 1e-5
