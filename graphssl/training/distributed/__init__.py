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
* averages the gradients over ranks after each backward (:func:`sync_gradients`); a loss that
  compares rows with each other gathers every rank's rows with gradient (:func:`gather_rows`),
  one that averages per-row terms takes its rank's share of the global mean
  (:func:`global_mean`), one computed from statistics of the batch sums them over ranks
  (:func:`all_reduce_sum`, :func:`shared_sum`), so each step equals one step of one process
  on the whole global batch.

Every collective carries the process group's timeout (``trainer.dist_timeout_s``), a guard
against hangs; a rank that dies closes its sockets and the others fail at their next collective
within moments, and :func:`launch` names the rank in the error it raises.

On a cluster (``trainer.num_nodes > 1``, or a job step of several tasks) the scheduler starts
the processes instead: each task of the step is one rank, read from the environment by
:func:`cluster_ranks` (SLURM's ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``/
``SLURM_NODEID``, or submitit's local executor's ``SUBMITIT_LOCAL_*``). Rank 0 opens the
rendezvous store on the first host of the step's node list, on a port derived from the job id
(:func:`port_for_job`); :func:`launch_tasks` runs rank 0 and :func:`join_tasks` every other
rank, with nothing spawned.
"""

from graphssl.methods.collective import (
    all_reduce_mean,
    all_reduce_sum,
    gather_rows,
    global_mean,
    is_distributed,
    rank,
    shared_sum,
    world_size,
)
from graphssl.training.distributed.batchnorm import (
    GatheredBatchNorm,
    prepare_method,
    revert_sync_batchnorm,
)
from graphssl.training.distributed.cluster import (
    ClusterRanks,
    cluster_ranks,
    first_host,
    join_tasks,
    launch_tasks,
    port_for_job,
)
from graphssl.training.distributed.group import (
    DEFAULT_TIMEOUT_S,
    RankFailedError,
    backend_for,
    rank_device,
    task_device,
    threads_per_rank,
)
from graphssl.training.distributed.sharding import (
    ShardedBatchSampler,
    global_batches,
    neighbor_batches,
    node_seed_batches,
    shard,
)
from graphssl.training.distributed.spawn import launch
from graphssl.training.distributed.sync import (
    GradientSync,
    broadcast_object,
    broadcast_parameters,
    broadcast_state,
    sync_gradients,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ClusterRanks",
    "GatheredBatchNorm",
    "GradientSync",
    "RankFailedError",
    "ShardedBatchSampler",
    "all_reduce_mean",
    "all_reduce_sum",
    "backend_for",
    "broadcast_object",
    "broadcast_parameters",
    "broadcast_state",
    "cluster_ranks",
    "first_host",
    "gather_rows",
    "global_batches",
    "global_mean",
    "is_distributed",
    "join_tasks",
    "launch",
    "launch_tasks",
    "neighbor_batches",
    "node_seed_batches",
    "port_for_job",
    "prepare_method",
    "rank",
    "rank_device",
    "revert_sync_batchnorm",
    "shard",
    "shared_sum",
    "sync_gradients",
    "task_device",
    "threads_per_rank",
    "world_size",
]
