"""Time the expert-parallel MoE experts (torch_argon.distributed.ep_moe_experts) in both modes
against the same experts on one device holding them all, and the share of time spent in
collectives; merge the records into a JSON file.

    # CPU, gloo, spawning 2 then 4 processes (the README's CPU table), a few minutes on 2 cores:
    python bench/bench_distributed.py --spawn 2,4 --json bench/results/cpu_distributed.json
    # GPUs, NCCL, one process per GPU (bench/h200_distributed.sh runs this):
    torchrun --standalone --nproc_per_node=2 bench/bench_distributed.py \
        --configs qwen3-30b,e512 --T-per-rank 512,2048,8192,16384 --json bench/results/h200x2.json

What is timed (per config, world size W, T and mode): every rank routes its own tokens (sharded
tokens, testing.routing's uniform routing; the router itself is not timed), then one call of
ep_moe_experts; the call's time is the slowest rank's (wall clock around the call after a
barrier, with a device sync on CUDA; the max over ranks, median over --repeat calls).
"one device": rank 0 alone runs torch_argon.moe_experts on all W*T tokens with all E experts (on
the CPU with as many threads as each rank has: --threads, default 1, since two OpenMP threads on
a shared 2-core machine measured 2-10x slower than one).
Collectives' share: a separate pass with a device sync and a host clock around each collective
the layer makes (its time includes waiting for slower ranks). "handshake" is the all_to_all
mode's header and split-size trade, read on the host (its one host sync); "collectives" all of
them, the handshake included; both as a share of that pass's call time.
Each record also says how far the EP output is from the one-device output (max |diff| /
max |ref|) and whether two EP calls gave the same bytes.

Records: {"config", "E", "K", "H", "I", "dtype", "backend", "device", "world", "tokens",
"T_rank", "T_total", "mode", "ep_us", "single_us", "handshake_us", "collective_us",
"instrumented_us", "handshake_share", "collective_share", "rel_err", "repeatable", "threads",
"repeat"}. A run replaces the records of the file with the same (backend, config, world, tokens,
T_rank, mode) and keeps the others.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import torch_argon  # noqa: E402
from torch_argon import distributed as ep  # noqa: E402
from torch_argon.testing.layers import make_layer  # noqa: E402
from torch_argon.testing.routing import routing  # noqa: E402
from distributed_table import distributed_table  # noqa: E402

CONFIGS = {
    # small but real, for 2 CPU cores
    "cpu": dict(E=64, K=8, H=1024, I=256, dtype="fp32"),
    # Qwen3-30B-A3B's experts
    "qwen3-30b": dict(E=128, K=8, H=2048, I=768, dtype="bf16"),
    # Qwen3-Next-80B-A3B's experts
    "e512": dict(E=512, K=10, H=2048, I=512, dtype="bf16"),
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
KEY = ("backend", "config", "world", "tokens", "T_rank", "mode")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CollectiveClock:
    """Wraps the collectives torch_argon.distributed makes with a device sync and a host clock
    (outermost call only: the handshake's own all_to_all_single counts as handshake)."""

    def __init__(self, device):
        self.device, self.depth = device, 0
        self.seconds = {"handshake": 0.0, "collective": 0.0}

    def wrap(self, fn, kind):
        def timed(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            sync(self.device)
            t0 = time.perf_counter()
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                sync(self.device)
                self.seconds[kind] += time.perf_counter() - t0
        return timed

    def __enter__(self):
        clock = self

        class TimedDist:  # torch.distributed with all_to_all_single timed
            def __getattr__(self, name):
                return getattr(dist, name)
            all_to_all_single = staticmethod(clock.wrap(dist.all_to_all_single, "collective"))
        self.saved = ep.dist, ep._handshake, ep._all_gather_single
        ep.dist = TimedDist()
        ep._handshake = self.wrap(ep._handshake, "handshake")
        ep._all_gather_single = self.wrap(ep._all_gather_single, "collective")
        return self

    def __exit__(self, *exc):
        ep.dist, ep._handshake, ep._all_gather_single = self.saved


def time_once(fn, device):
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def make_problem(cfg, T_total, device, seed=0):
    """All experts and all tokens, the same on every rank (testing.layers.make_layer and
    testing.routing's uniform routing, from a seed on the device)."""
    layer = make_layer(T_total, cfg["E"], cfg["K"], cfg["H"], cfg["I"], DTYPES[cfg["dtype"]],
                       device, seed=seed)
    ids, weights = routing(T_total, cfg["E"], cfg["K"], seed=seed, device=device)
    return layer.w_gate_up, layer.w_down, layer.x, ids, weights


def bench_one(cfg_name, T_rank, args, *, world, rank, device, threads):
    cfg = CONFIGS[cfg_name]
    T_total = T_rank * world
    gate_up, down, x, ids, w = make_problem(cfg, T_total, device)
    lo, hi = ep.local_expert_range(cfg["E"])
    local = (gate_up[lo:hi].clone(), down[lo:hi].clone())
    rows = slice(rank * T_rank, (rank + 1) * T_rank)
    mx, mids, mw = x[rows], ids[rows], w[rows]
    full = (gate_up, down) if rank == 0 else None
    del gate_up, down

    def single():  # the one-device layer on every token (rank 0 alone; the others wait)
        return torch_argon.moe_experts(x, ids, w, full)

    def layer(mode):
        return ep.ep_moe_experts(mx, mids, mw, local, n_experts=cfg["E"], mode=mode)

    # Rounds: the one-device call, then each mode, in turn, so that a shared machine's drifting
    # load falls on all of them alike.
    single_s, ep_s = [], {mode: [] for mode in args.modes}
    for i in range(args.warmup + args.repeat):
        dist.barrier()
        if rank == 0:
            t = time_once(single, device)
            single_s += [t] if i >= args.warmup else []
        for mode in args.modes:
            dist.barrier()
            t = time_once(lambda: layer(mode), device)
            ep_s[mode] += [t] if i >= args.warmup else []
    slowest = torch.tensor([ep_s[m] for m in args.modes], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a call lasts until its last rank is done
    ep_us = {m: statistics.median(row) * 1e6 for m, row in zip(args.modes, slowest.tolist())}
    single_us = statistics.median(single_s) * 1e6 if rank == 0 else float("nan")
    ref = single() if rank == 0 else None
    records = []
    for mode in args.modes:
        with CollectiveClock(device) as clock:
            n = max(1, args.repeat // 3)
            dist.barrier()
            sync(device)
            t0 = time.perf_counter()
            for _ in range(n):
                out = layer(mode)
            sync(device)
            instr = (time.perf_counter() - t0) / n
        spent = torch.tensor([clock.seconds["handshake"] / n, clock.seconds["collective"] / n,
                              instr], dtype=torch.float64, device=device)
        dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        hand_s, coll_s, instr_s = spent.tolist()
        again = layer(mode)
        same = torch.tensor([int(torch.equal(out, again))], device=device)
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
        every = [torch.empty_like(out) for _ in range(world)]
        dist.all_gather(every, out.contiguous())
        rel_err = float("nan")
        if rank == 0:
            got = torch.cat(every).float()
            rel_err = ((got - ref.float()).abs().max() / ref.float().abs().max()).item()
        records.append(dict(
            config=cfg_name, **cfg, backend=dist.get_backend(), device=device_name(device),
            world=world, tokens="sharded", T_rank=T_rank, T_total=T_total, mode=mode,
            ep_us=round(ep_us[mode], 1), single_us=round(single_us, 1),
            handshake_us=round(hand_s * 1e6, 1), collective_us=round((hand_s + coll_s) * 1e6, 1),
            instrumented_us=round(instr_s * 1e6, 1),
            handshake_share=round(hand_s / instr_s, 4),
            collective_share=round((hand_s + coll_s) / instr_s, 4),
            rel_err=rel_err, repeatable=bool(same.item()), threads=threads, repeat=args.repeat))
        if rank == 0:
            r = records[-1]
            print(f"{cfg_name} W={world} T/rank={T_rank} {mode}: {r['ep_us'] / 1e3:.2f} ms "
                  f"(one device {single_us / 1e3:.2f} ms), handshake {r['handshake_share']:.0%}, "
                  f"collectives {r['collective_share']:.0%}, rel err {rel_err:.1e}, "
                  f"repeatable {r['repeatable']}", flush=True)
    return records


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def run(args, *, world, rank, device, threads):
    records = []
    for cfg_name in args.configs:
        for T in args.T:
            T_rank = T if args.per_rank else max(1, T // world)
            records += bench_one(cfg_name, T_rank, args, world=world, rank=rank, device=device,
                                 threads=threads)
    return records


def merge(path, records, meta):
    data = {"meta": {}, "records": []}
    if path and os.path.exists(path):
        data = json.loads(open(path).read())
    new_keys = {tuple(r[k] for k in KEY) for r in records}
    kept = [r for r in data["records"] if tuple(r[k] for k in KEY) not in new_keys]
    data["records"] = kept + records
    data["meta"].update(meta)
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    return data


# ---- launchers --------------------------------------------------------------------------------

def spawned(rank, world, init_file, out_file, args):
    threads = args.threads
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=600))
    records = run(args, world=world, rank=rank, device=torch.device("cpu"), threads=threads)
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump(records, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default=None, help=f"comma-separated, of {list(CONFIGS)}")
    p.add_argument("--T", default=None, help="token counts: the layer's total (split over the "
                   "ranks), or per rank with --per-rank")
    p.add_argument("--T-per-rank", default=None, help="same as --T ... --per-rank")
    p.add_argument("--per-rank", action="store_true")
    p.add_argument("--modes", default="all_to_all,no_sync")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="CPU: torch threads per process")
    p.add_argument("--spawn", default=None, help="CPU: spawn gloo jobs of these world sizes")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    cuda = torch.cuda.is_available() and not args.spawn
    if args.T_per_rank:
        args.T, args.per_rank = args.T_per_rank, True
    args.configs = (args.configs or ("qwen3-30b,e512" if cuda else "cpu")).split(",")
    args.T = [int(t) for t in (args.T or ("512,2048,8192,16384" if cuda else
                                          "128,512,2048,8192")).split(",")]
    if cuda and args.T_per_rank is None and not args.per_rank:
        args.per_rank = True
    args.modes = args.modes.split(",")
    args.repeat = args.repeat or (20 if cuda else 3)
    meta = dict(date=datetime.date.today().isoformat(), torch=torch.__version__,
                command=" ".join(sys.argv))
    if args.spawn:
        import torch.multiprocessing as mp
        records = []
        for world in [int(w) for w in args.spawn.split(",")]:
            init_file = tempfile.mktemp(prefix="argon_bench_")
            out_file = tempfile.mktemp(prefix="argon_bench_out_")
            mp.spawn(spawned, args=(world, init_file, out_file, args), nprocs=world)
            records += json.loads(open(out_file).read())
            os.remove(out_file)
        meta["cpu_count"] = os.cpu_count()
        data = merge(args.json, records, meta)
        print(distributed_table({"records": records}))
        return
    # torchrun: one process per GPU (NCCL), or per CPU process (gloo)
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=300), device_id=device)
        threads = torch.get_num_threads()
    else:
        device = torch.device("cpu")
        threads = args.threads
        torch.set_num_threads(threads)
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    records = run(args, world=world, rank=rank, device=device, threads=threads)
    if rank == 0:
        meta["device"] = device_name(device)
        data = merge(args.json, records, meta)
        print(distributed_table({"records": records}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
