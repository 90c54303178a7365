"""``trainer.compile=true`` on CPU: compile time and per-epoch CPU time against eager.

For each preset (default: DGI, GRACE and BGRL on Cora), builds the method from the same seed
twice and runs the bare training loop of ``bench_sparse.py``: eagerly, and with its encoders
compiled as ``trainer.compile=true`` compiles them
(:func:`graphssl.training.compile.compile_encoders`). Compilation runs in this process
(``torch._inductor.config.compile_threads = 1``) and the C++ compiler it starts is counted
as a child process, so the compile time is CPU time of the whole process tree. TorchInductor's
caches (compiled graphs, built C++) start empty in a fresh directory unless ``--warm-cache``:
the figure is a first compile.

- **compile s**: CPU seconds of the first ``--warmup`` compiled epochs minus as many steady
  compiled epochs (the first epoch traces and builds; GRACE and BGRL drop different edges at
  every step, so their second epoch compiles once more with dynamic sizes);
- **eager / compiled s/epoch**: the fastest of ``--repeats`` runs of ``--epochs`` epochs after
  the warm-up, CPU seconds per epoch; the ratio compiled / eager (< 1: compiling pays per
  epoch) and the epochs it takes to earn the compile time back;
- the losses after the same number of epochs, eager and compiled (equal to float rounding).

Usage::

    python benchmarks/bench_compile.py [--presets dgi_cora grace_cora bgrl_cora] [--epochs 5]
    python benchmarks/bench_compile.py --sparse-input false     # the dense first layer
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sparse import REPO, Loop, build
from flops import cpu_seconds, process_tree_cpu

PRESETS = ["dgi_cora", "grace_cora", "bgrl_cora"]


def measure(
    preset: str, epochs: int, repeats: int, warmup: int, sparse_input: str = "auto"
) -> dict[str, float]:
    from graphssl.training.compile import compile_encoders, restore_eager

    out: dict[str, float] = {"eager": float("inf"), "compiled": float("inf")}
    total = warmup + epochs * repeats
    for mode in ("eager", "compiled"):
        method, data = build(preset, sparse_input)
        compiled = compile_encoders(method.encoders()) if mode == "compiled" else []
        loop = Loop(method, data, total)
        t0, w0 = process_tree_cpu(), time.perf_counter()
        loop.epochs(warmup)
        first, first_wall = process_tree_cpu() - t0, time.perf_counter() - w0
        for _ in range(repeats):
            out[mode] = min(out[mode], cpu_seconds(loop.epochs, epochs) / epochs)
        out[f"{mode}_loss"] = loop.loss
        out[f"{mode}_first"], out[f"{mode}_first_wall"] = first, first_wall
        restore_eager(compiled)
    out["compile"] = out["compiled_first"] - warmup * out["compiled"]
    out["compile_wall"] = out["compiled_first_wall"] - warmup * out["compiled"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=PRESETS, help="conf/experiment names")
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs (default: 5)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs (default: 2)")
    parser.add_argument("--warmup", type=int, default=3, help="epochs before timing (default: 3)")
    parser.add_argument(
        "--sparse-input", default="auto", help="encoder.sparse_input (default: auto)"
    )
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="keep TorchInductor's on-disk cache of compiled graphs (default: off, a cold compile)",
    )
    args = parser.parse_args(argv)

    if "GRAPHSSL_DATA_DIR" not in os.environ and (REPO.parent / "shared" / "data").is_dir():
        os.environ["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")
    os.environ.setdefault("GRAPHSSL_OUTPUTS", str(REPO / "outputs"))
    logging.basicConfig(level=logging.WARNING)
    if not args.warm_cache:  # a first compile: nothing reused from earlier runs on this machine
        import tempfile

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_compile_")
    import torch
    import torch._inductor.config

    from graphssl.training.compile import compile_problem

    problem = compile_problem(torch.device("cpu"))
    if problem is not None:
        print(problem)
        return 1
    torch.set_num_threads(1)
    torch._inductor.config.compile_threads = 1
    if not args.warm_cache:
        torch._inductor.config.fx_graph_cache = False
        torch._inductor.config.autotune_local_cache = False
    print(
        f"load average {os.getloadavg()[0]:.2f}; torch {torch.__version__}; "
        f"encoder.sparse_input={args.sparse_input}; cache {'warm' if args.warm_cache else 'off'}"
    )
    print(
        "\n| preset | compile CPU s (wall s) | eager s/epoch | compiled s/epoch | compiled / eager "
        "| epochs to break even | loss eager / compiled |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for preset in args.presets:
        r = measure(preset, args.epochs, args.repeats, args.warmup, args.sparse_input)
        saved = r["eager"] - r["compiled"]
        even = f"{r['compile'] / saved:.0f}" if saved > 0 else "never"
        print(
            f"| {preset} | {r['compile']:.1f} ({r['compile_wall']:.1f}) | {r['eager']:.4f} "
            f"| {r['compiled']:.4f} | **{r['compiled'] / r['eager']:.3f}** | {even} "
            f"| {r['eager_loss']:.6f} / {r['compiled_loss']:.6f} |",
            flush=True,
        )
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
