"""Ranks read from a scheduler's environment: SLURM job steps and submitit's local executor."""

from __future__ import annotations

import pytest

from graphssl.training.distributed.cluster import (
    PORT_BASE,
    PORT_SPAN,
    ClusterRanks,
    cluster_ranks,
    first_host,
    port_for_job,
)

#: what srun sets for task 3 of a step of 4 tasks on 2 machines
STEP = {
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("localhost", "localhost"),
        ("gpu[07-09,12],cpu3", "gpu07"),
        ("node3,node[1-2]", "node3"),
        ("rack[1-2]-n[001-004]", "rack1-n001"),
        ("a-b[5]", "a-b5"),
        (" n[10,2-3] ", "n10"),
    ],
)
def test_first_host_of_a_node_list(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.parametrize("nodelist", ["", "gpu[07-08", "gpu]07["])
def test_a_node_list_that_cannot_be_read_is_refused(nodelist: str) -> None:
    with pytest.raises(ValueError, match="first host of the node list"):
        first_host(nodelist)


def test_the_port_follows_the_job_id() -> None:
    assert port_for_job("123456") == PORT_BASE + 123456 % PORT_SPAN
    assert port_for_job("123456") != port_for_job("123457")
    assert port_for_job("77_3") == PORT_BASE + 773  # an array task's id
    assert port_for_job(None) == PORT_BASE
    assert all(PORT_BASE <= port_for_job(j) < PORT_BASE + PORT_SPAN for j in (0, 10**9, "x"))


def test_a_slurm_task_is_one_rank() -> None:
    ranks = cluster_ranks(STEP)
    assert ranks == ClusterRanks(
        rank=3,
        world=4,
        local_rank=1,
        node=1,
        master_addr="gpu07",
        master_port=port_for_job("123456"),
        source="SLURM",
    )
    # the step's own node list and task count come first; MASTER_ADDR/PORT override
    step = {
        **STEP,
        "SLURM_STEP_NODELIST": "cpu[2-3]",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_PROCID": "1",
    }
    assert cluster_ranks(step) == ClusterRanks(1, 2, 1, 1, "cpu2", port_for_job("123456"), "SLURM")
    custom = cluster_ranks({**STEP, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"})
    assert custom is not None and (custom.master_addr, custom.master_port) == ("10.0.0.5", 29500)


def test_submitit_local_tasks_are_ranks_on_this_machine() -> None:
    env = {
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_LOCALID": "1",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_JOB_ID": "4242",
    }
    assert cluster_ranks(env) == ClusterRanks(
        1, 2, 1, 0, "127.0.0.1", port_for_job("4242"), "submitit_local"
    )


@pytest.mark.parametrize(
    "env",
    [
        {},  # no scheduler
        {**STEP, "SLURM_NTASKS": "1"},  # a step of one task: the job spawns its own ranks
        {k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"},  # a batch script, not a step
    ],
)
def test_no_cluster_ranks_outside_a_step_of_several_tasks(env: dict[str, str]) -> None:
    assert cluster_ranks(env) is None


def test_scheduler_values_that_are_not_numbers_are_refused() -> None:
    with pytest.raises(ValueError, match=r"SLURM_PROCID='x' is not an integer"):
        cluster_ranks({**STEP, "SLURM_PROCID": "x"})
    with pytest.raises(ValueError, match="rank 5 is outside the step's 4 tasks"):
        cluster_ranks({**STEP, "SLURM_PROCID": "5"})
