"""Expert parallelism (torch_argon.distributed) on CPU with gloo, in 2 and 4 processes.

Each world size is one spawned job running every case of distributed_cases.py in one process
group (spawning and importing dominate the time on a small machine); each case is a test here
that fails unless every rank reported it passed. A hang fails: the job ends at JOB_TIMEOUT_S
(and gloo's own timeout ends a stuck collective sooner), and the cases it left unreported fail
with the reason. Tolerances are in distributed_cases.py's docstring. The ownership rule and
choose_mode need no processes and are tested directly.
"""
import functools

import pytest
import torch

import distributed_cases
from torch_argon import distributed as ep

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="torch.distributed is not available")

JOB_TIMEOUT_S = 240
WORLDS = (2, 4)


@functools.lru_cache(maxsize=None)
def job(world):
    return distributed_cases.run_job(world, distributed_cases.cases_for(world), JOB_TIMEOUT_S)


@pytest.mark.parametrize("world,name", [pytest.param(w, n, id=f"{w}ranks-{n}")
                                        for w in WORLDS for n in distributed_cases.cases_for(w)])
def test_case(world, name):
    results = job(world)
    reports = results.get(name, {})
    problems = []
    for rank in range(world):
        status, msg = reports.get(rank, (None, None))
        if status == "skip":
            pytest.skip(msg)
        if status != "ok":
            why = msg or results["__job__"].get(rank, (None, "no report"))[1]
            problems.append(f"rank {rank}: {why}")
    assert not problems, f"{name} at {world} ranks:\n" + "\n".join(problems)


@pytest.mark.parametrize("E,W,sizes", [(8, 2, [4, 4]), (7, 2, [4, 3]), (10, 4, [3, 3, 2, 2]),
                                       (5, 4, [2, 1, 1, 1]), (4, 4, [1, 1, 1, 1]), (3, 1, [3])])
def test_expert_split_first_ranks_own_one_more(E, W, sizes):
    starts = ep.expert_starts(E, W)
    assert starts[0] == 0 and starts[-1] == E
    assert [b - a for a, b in zip(starts, starts[1:])] == sizes


def test_choose_mode():
    kw = dict(top_k=8, itemsize=2)
    assert ep.choose_mode(10_000, world_size=1, **kw) == "no_sync"
    assert ep.choose_mode(ep.NO_SYNC_MAX_TOKENS, world_size=8, **kw) == "no_sync"
    # Different T on the ranks: only all_to_all can run sharded tokens.
    assert ep.choose_mode(4, world_size=2, same_T_everywhere=False, **kw) == "all_to_all"
    # Large T: the bytes decide. Sharded, K=8, bf16: no_sync moves (W-1)*6, all_to_all
    # 32*(W-1)/W per token and element: no_sync up to W=5, all_to_all from W=6.
    T = 4 * ep.NO_SYNC_MAX_TOKENS
    assert ep.choose_mode(T, world_size=2, **kw) == "no_sync"
    assert ep.choose_mode(T, world_size=8, **kw) == "all_to_all"
    # Replicated: 4 bytes of fp32 partials against 2*K/W*itemsize of rows out and back.
    assert ep.choose_mode(T * 16, world_size=8, tokens="replicated", **kw) == "no_sync"
    assert ep.choose_mode(T * 16, world_size=16, tokens="replicated", **kw) == "all_to_all"
