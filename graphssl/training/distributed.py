"""One model on several processes: ``torch.distributed`` process groups, spawning and sharding.

``trainer.devices=N`` trains one model on ``N`` processes (ranks) of this machine, with gloo on
CPU and NCCL on CUDA. :func:`launch` runs rank 0 in the calling process (the Hydra job, which
owns the MLflow run) and starts ranks ``1..N-1`` with ``torch.multiprocessing``'s spawn; every
rank runs the one training loop (:class:`~graphssl.training.trainer.Trainer`), which, inside a
process group:

* makes BatchNorm layers normalise over the global batch (:class:`GatheredBatchNorm`, or
  :class:`torch.nn.SyncBatchNorm` on CUDA) and broadcasts rank 0's parameters and buffers
  (:func:`prepare_method`);
* gives each rank its slice of every global batch (:func:`node_seed_batches` for neighbour-
  sampled node batches, :class:`ShardedBatchSampler` for graph and image datasets): one seeded
  permutation per epoch, identical on every rank, cut into global batches of
  ``trainer.batch_size × N`` items, rank ``r`` taking the ``r``-th of ``N`` near-equal parts;
* averages the gradients over ranks after each backward (:func:`sync_gradients`); the losses
  gather every rank's rows with gradient (:func:`gather_rows`), so each step equals one step of
  one process on the whole global batch.

Every collective carries the process group's timeout (``trainer.dist_timeout_s``), a guard
against hangs; a rank that dies closes its sockets and the others fail at their next collective
within moments, and :func:`launch` names the rank in the error it raises.
"""

from __future__ import annotations

import io
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import Sampler

from graphssl.methods.collective import (
    all_reduce_mean,
    comm_device,
    gather_rows,
    is_distributed,
    rank,
    rows_before,
)
from graphssl.methods.collective import world_size as world_size

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "GatheredBatchNorm",
    "RankFailedError",
    "ShardedBatchSampler",
    "all_reduce_mean",
    "backend_for",
    "broadcast_object",
    "broadcast_state",
    "gather_rows",
    "is_distributed",
    "launch",
    "node_seed_batches",
    "prepare_method",
    "rank",
    "rank_device",
    "revert_sync_batchnorm",
    "shard",
    "sync_gradients",
    "threads_per_rank",
    "world_size",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds a collective (or the rendezvous) may wait for the other ranks before failing
DEFAULT_TIMEOUT_S = 300.0
#: seconds the spawned ranks may take to start and build their data and model before joining
RENDEZVOUS_TIMEOUT_S = 1800.0
#: the loopback address ranks meet on (one machine)
HOST = "127.0.0.1"
#: store key each spawned rank increments once it is connected
_READY_KEY = "graphssl/ready"
#: store key prefix under which a spawned rank records the error it stops with
_ERROR_KEY = "graphssl/error"
#: seconds rank 0 waits for the other ranks to exit after it failed, to learn which one died
_EXIT_GRACE_S = 10.0


class RankFailedError(RuntimeError):
    """A rank of a multi-process fit failed or died; the message names it."""


# ---------------------------------------------------------------------------- settings
def backend_for(device: str | torch.device) -> str:
    """``"nccl"`` for a CUDA device, ``"gloo"`` otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rank_device(device: str | torch.device, rank: int) -> torch.device:
    """The device of ``rank``: ``cuda:<rank>`` when the run's device is CUDA, else ``device``."""
    dev = torch.device(device)
    return torch.device("cuda", rank) if dev.type == "cuda" else dev


def threads_per_rank(devices: int, requested: int | None = None) -> int:
    """Torch intra-op threads per rank so that ``devices × threads`` stays within this
    process's CPU cores (``os.sched_getaffinity``); ``requested`` (``num_threads``) caps it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    share = max(1, cores // max(devices, 1))
    return share if requested is None else max(1, min(share, int(requested)))


# ---------------------------------------------------------------------------- process groups
def _init_group(
    store: dist.Store, rank: int, world: int, backend: str, timeout_s: float, device: torch.device
) -> None:
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        store=store,
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )


def _teardown() -> None:
    if is_distributed():
        dist.destroy_process_group()


def _child(
    index: int,
    worker: Callable[..., Any],
    world: int,
    port: int,
    backend: str,
    timeout_s: float,
    threads: int,
    device: str,
    args: tuple[Any, ...],
) -> None:
    """Entry of a spawned rank: ``worker(rank, *args)`` builds what the rank trains (outside
    the group, so the collectives' timeout never covers loading data), then the rank joins the
    group and calls what the worker returned."""
    me = index + 1
    # Ctrl-C and SIGTERM reach every process of the job; rank 0 alone decides (it stops all
    # ranks after the epoch, or ends and the others fail at their next collective), so a
    # spawned rank never races it to exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    torch.set_num_threads(threads)
    store = dist.TCPStore(HOST, port, world, is_master=False, timeout=timedelta(seconds=timeout_s))
    try:
        fit = worker(me, *args)
        store.add(_READY_KEY, 1)
        _init_group(store, me, world, backend, timeout_s, rank_device(device, me))
        fit()
    except Exception as err:  # recorded for rank 0's message, then torch's spawn reports it
        try:
            message = f"{type(err).__name__}: {' '.join(str(err).split())[:500]}"
            store.set(f"{_ERROR_KEY}/{me}", message)
        except (RuntimeError, OSError):
            pass
        raise
    finally:
        _teardown()


def _die_with_parent() -> None:
    """Have the kernel SIGKILL this process when rank 0 ends (Linux ``PR_SET_PDEATHSIG``; torch's
    spawn asks for SIGINT, which a spawned rank ignores), so no rank outlives its job."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # another libc: the next collective still ends the rank
        return


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _failed_rank(context: mp.ProcessContext, store: dist.Store, wait_s: float) -> str | None:
    """A sentence naming the first spawned rank that failed, with its error when it recorded
    one in the store (waiting up to ``wait_s`` for one to finish dying), or ``None``."""
    deadline = time.monotonic() + wait_s
    while True:
        for index, proc in enumerate(context.processes):
            code = proc.exitcode
            if code is not None and code != 0:
                key, error = f"{_ERROR_KEY}/{index + 1}", ""
                try:
                    if store.check([key]):
                        error = ": " + store.get(key).decode(errors="replace")
                except (RuntimeError, OSError):  # the store itself may be what failed
                    pass
                return f"rank {index + 1} (pid {proc.pid}) {_exit_reason(code)}{error}"
        if time.monotonic() >= deadline or all(p.exitcode is not None for p in context.processes):
            return None
        time.sleep(0.05)


def _stop(context: mp.ProcessContext) -> None:
    """Kill the spawned ranks still alive (they hold nothing to save: rank 0 owns the run and
    the checkpoints) and reap them."""
    for proc in context.processes:
        if proc.is_alive():
            proc.kill()
    for proc in context.processes:
        proc.join(10)


def _wait_for_ranks(store: dist.TCPStore, context: mp.ProcessContext, timeout_s: float) -> None:
    """Wait until every spawned rank has connected; fail fast, naming it, when one dies."""
    expected = len(context.processes)
    deadline = time.monotonic() + timeout_s
    while store.add(_READY_KEY, 0) < expected:
        failed = _failed_rank(context, store, 0.0)
        if failed is not None:
            raise RankFailedError(
                f"{failed} before joining the process group; the multi-process fit "
                f"(trainer.devices={expected + 1}) stopped"
            )
        if time.monotonic() > deadline:
            raise RankFailedError(
                f"only {store.add(_READY_KEY, 0)} of {expected} spawned ranks connected to "
                f"{HOST}:{store.port} within {timeout_s:g} s of starting; expected all "
                f"of trainer.devices={expected + 1} ranks to have built their data and model"
            )
        time.sleep(0.02)


def launch(
    main: Callable[[], T],
    worker: Callable[..., Any],
    args: Sequence[Any],
    devices: int,
    *,
    device: str = "cpu",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int | None = None,
) -> T:
    """Run ``main()`` as rank 0 of a process group of ``devices`` ranks and return its result.

    Ranks ``1..devices-1`` are spawned (``torch.multiprocessing``, start method ``spawn``); each
    calls ``worker(rank, *args)`` (a module-level function, so that it can be pickled), which
    builds what the rank trains and returns a callable that trains it, then joins the group
    and calls it: it must run the same collectives as ``main`` (the same training loop).
    Waiting for the ranks to build (up to :data:`RENDEZVOUS_TIMEOUT_S`) stops at once when one
    of them dies. The
    ranks meet on a TCP store that rank 0 opens on a free port of 127.0.0.1 chosen by the
    operating system. ``main`` runs with ``threads`` torch threads (default:
    :func:`threads_per_rank`); the previous count comes back afterwards, and the group is
    destroyed before this returns, so what follows runs on one process again.

    Raises:
        RankFailedError: a spawned rank failed or died (the message names it and its exit
            status); the other ranks are stopped.
        ValueError: ``devices`` is below 2.
    """
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 2:
        raise ValueError(f"launch starts 2 or more ranks, got devices={devices!r}")
    if is_distributed():
        raise RuntimeError(
            "launch was called inside a torch.distributed process group; expected to start one"
        )
    threads = threads_per_rank(devices) if threads is None else threads
    backend = backend_for(device)
    store = dist.TCPStore(
        HOST,
        0,
        devices,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    port = int(store.port)
    log.info(
        "training on %d processes (%s, %d thread(s) each, rendezvous %s:%d)",
        devices,
        backend,
        threads,
        HOST,
        port,
    )
    context = mp.start_processes(
        _child,
        args=(worker, devices, port, backend, timeout_s, threads, device, tuple(args)),
        nprocs=devices - 1,
        join=False,
        start_method="spawn",
    )
    previous = torch.get_num_threads()
    try:
        _wait_for_ranks(store, context, max(timeout_s, RENDEZVOUS_TIMEOUT_S))
        _init_group(store, 0, devices, backend, timeout_s, rank_device(device, 0))
        torch.set_num_threads(threads)
        try:
            result = main()
        except BaseException as err:
            # decided before the group is torn down: until then the other ranks wait in their
            # collectives, so a rank that already exited is one that failed on its own
            wait = _EXIT_GRACE_S if _is_communication_error(err) else 0.0
            failed = _failed_rank(context, store, wait)
            brief = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
            if failed is not None:
                raise RankFailedError(
                    f"{failed}; the multi-process fit (trainer.devices={devices}) stopped, rank 0 "
                    f"with {brief}"
                ) from err
            if wait:  # every rank alive, one of them silent: the collective's timeout fired
                alive = [i + 1 for i, proc in enumerate(context.processes) if proc.is_alive()]
                raise RankFailedError(
                    f"rank 0 stopped waiting on the other ranks ({brief}) while rank(s) "
                    f"{', '.join(map(str, alive)) or 'none'} were still running: a rank stopped "
                    f"answering for trainer.dist_timeout_s={timeout_s:g} s or lost its "
                    f"connection; the multi-process fit (trainer.devices={devices}) stopped"
                ) from err
            raise
        finally:
            torch.set_num_threads(previous)
            _teardown()
        for proc in context.processes:  # every collective is done: the ranks are exiting
            proc.join(timeout_s)
        failed = _failed_rank(context, store, 0.0)
        if failed is not None:
            raise RankFailedError(f"{failed} after training (trainer.devices={devices})")
        return result
    finally:
        _stop(context)


def _is_communication_error(err: BaseException) -> bool:
    """Whether ``err`` is a collective or store failure (a peer that went away, a timeout)
    rather than an error of rank 0's own code."""
    if isinstance(err, dist.DistError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        word in text for word in ("gloo", "nccl", "connection", "timed out", "timeout", "peer")
    )


# ---------------------------------------------------------------------------- training helpers
def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` of rank ``src`` on every rank (``obj`` itself without a group): small picklable
    values such as flags (``torch.distributed.broadcast_object_list``)."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]  # type: ignore[no-any-return]


def broadcast_state(state: T, src: int = 0) -> T:
    """A checkpoint-like ``state`` (tensors, numbers, strings, containers, ``None``) of rank
    ``src`` on every rank: written with ``torch.save`` and read back with
    ``torch.load(weights_only=True)``, so the receiving ranks run no code from it."""
    if world_size() == 1:
        return state
    me, device = rank(), comm_device()
    if me == src:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).to(device)
        size = torch.tensor([data.numel()], dtype=torch.long, device=device)
    else:
        size = torch.zeros(1, dtype=torch.long, device=device)
    dist.broadcast(size, src=src)
    if me != src:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=src)
    if me == src:
        return state
    raw = data.cpu().numpy().tobytes()
    return torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")  # type: ignore[no-any-return]


class GatheredBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover every rank's rows: it gathers the rows of all
    ranks with gradient (:func:`gather_rows`), normalises that global batch as one process
    would, and keeps this rank's rows; the running statistics, computed from the same global
    batch, stay identical on every rank. Exact on any device and backend (gloo included, which
    :class:`torch.nn.SyncBatchNorm` does not support); it moves the layer's input rather than
    two statistics, so on CUDA :func:`prepare_method` uses ``SyncBatchNorm`` instead. Outside a
    process group, or in evaluation mode, it is the BatchNorm it replaced."""

    #: the BatchNorm class this layer replaced (:func:`revert_sync_batchnorm` restores it)
    replaced: type[_BatchNorm] = nn.BatchNorm1d

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an input of 2 or more dimensions, got {input.dim()}D")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not (self.training and world_size() > 1):
            return super().forward(input)
        start = rows_before(input.shape[0])
        out = super().forward(gather_rows(input))
        return out[start : start + input.shape[0]]


def _swap_batchnorm(module: nn.Module, to: type[_BatchNorm] | None) -> nn.Module:
    """``module`` with its BatchNorm layers replaced by ``to`` (``None``: by the class each
    :class:`GatheredBatchNorm` or ``SyncBatchNorm`` replaced), sharing their parameters and
    buffers; a module that is not a BatchNorm is changed in place and returned."""
    out = module
    if isinstance(module, _BatchNorm):
        if to is None:  # only the layers a swap made know what they replaced
            target = module.__dict__.get("replaced") or (
                module.replaced if isinstance(module, GatheredBatchNorm) else None
            )
        elif isinstance(module, to):
            target = None
        else:
            target = to
        if target is not None and type(module) is not target:
            out = target(
                module.num_features,
                module.eps,
                module.momentum,  # type: ignore[arg-type]
                module.affine,
                module.track_running_stats,
            )
            if to is not None:
                out.replaced = type(module)  # type: ignore[assignment]
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
    for name, child in module.named_children():
        swapped = _swap_batchnorm(child, to)
        if swapped is not child:
            setattr(out, name, swapped)
    return out


def prepare_method(method: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
    """Make every rank hold the same model: BatchNorm layers normalise over the global batch
    (:class:`GatheredBatchNorm`; :class:`torch.nn.SyncBatchNorm` on CUDA; same parameters and
    state-dict keys), then rank 0's parameters and buffers are broadcast. Returns ``method``."""
    if isinstance(method, _BatchNorm):
        raise TypeError(
            f"{type(method).__name__} is itself a BatchNorm layer; expected a model holding them"
        )
    cuda = torch.device(device).type == "cuda"
    _swap_batchnorm(method, nn.SyncBatchNorm if cuda else GatheredBatchNorm)
    with torch.no_grad():
        for tensor in [*method.parameters(), *method.buffers()]:
            dist.broadcast(tensor.data, src=0)
    return method


def revert_sync_batchnorm(module: nn.Module) -> nn.Module:
    """Undo :func:`prepare_method`'s BatchNorm replacement (same parameters and buffers), so
    the model runs on one process again; returns ``module``."""
    return _swap_batchnorm(module, None)


def sync_gradients(parameters: Sequence[nn.Parameter]) -> None:
    """Average the gradients of ``parameters`` over ranks, in one all-reduce; a parameter that
    got no gradient on a rank counts as zero there (every rank then holds the same ``.grad``)."""
    world = world_size()
    if world == 1:
        return
    params = list(parameters)
    if not params:
        return
    flat = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(params[0].dtype)
            for p in params
        ]
    )
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
        offset += n


def shard(items: torch.Tensor, parts: int, index: int) -> torch.Tensor:
    """Part ``index`` of ``parts`` near-equal contiguous parts of ``items`` (sizes differ by at
    most one); a batch with fewer items than parts is padded with its first items first, so
    no part is empty."""
    if items.numel() < parts:
        reps = math.ceil(parts / max(items.numel(), 1))
        items = items.repeat(reps)[:parts]
    return torch.tensor_split(items, parts)[index]


def global_batches(
    count: int, batch_size: int, seed: int, drop_last: bool = False
) -> list[torch.Tensor]:
    """The global batches of an epoch: a permutation of ``range(count)`` drawn from a generator
    seeded ``seed``, cut into consecutive batches of ``batch_size`` (the last one shorter,
    or dropped when ``drop_last``)."""
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(int(seed)))
    out = list(perm.split(batch_size))
    if drop_last and out and out[-1].numel() < batch_size:
        out.pop()
    return out


def node_seed_batches(
    num_nodes: int, batch_size: int, seed: int, world: int, me: int
) -> list[torch.Tensor]:
    """This rank's seed nodes for each step of an epoch: every node once per epoch over all
    ranks, global batches of ``batch_size × world`` seeds, rank ``me`` taking part ``me``."""
    return [shard(b, world, me) for b in global_batches(num_nodes, batch_size * world, seed)]


def neighbor_batches(loader: Any, seeds: Sequence[torch.Tensor]) -> Iterator[Any]:
    """The mini-batches a PyG ``NeighborLoader`` (built over every node) samples for the given
    seed tensors, in order: its own sampling and collation, with the seeds chosen here."""
    for nodes in seeds:
        out = loader.collate_fn(nodes)
        yield out if loader.filter_per_worker else loader.filter_fn(out)


class ShardedBatchSampler(Sampler[list[int]]):
    """A batch sampler over ``count`` items for one rank: each epoch one permutation seeded by
    :meth:`set_epoch` (the same on every rank), global batches of ``batch_size × world``, rank
    ``me`` taking part ``me`` of each (the split of ``DistributedSampler``, batch by batch, so
    the global batch of a step is the one a single process would draw).

    Args:
        count: items in the dataset.
        batch_size: items per rank and step.
        world: ranks.
        me: this rank.
        seed: seed of the permutations (epoch ``e`` draws from ``epoch_seed(seed, e)``).
        drop_last: drop a last global batch shorter than the others (default: ``False``).
    """

    def __init__(
        self, count: int, batch_size: int, world: int, me: int, seed: int, drop_last: bool = False
    ) -> None:
        self.count, self.batch_size, self.world, self.me = count, batch_size, world, me
        self.seed, self.drop_last, self.epoch = int(seed), drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[torch.Tensor]:
        from graphssl.data.sampler import epoch_seed

        batches = global_batches(
            self.count,
            self.batch_size * self.world,
            epoch_seed(self.seed, self.epoch),
            self.drop_last,
        )
        return [shard(b, self.world, self.me) for b in batches]

    def __iter__(self) -> Iterator[list[int]]:
        return (b.tolist() for b in self._batches())

    def __len__(self) -> int:
        full, rest = divmod(self.count, self.batch_size * self.world)
        return full + (1 if rest and not self.drop_last else 0)
