"""Issue 34 on the H200: verify and sweep the grouped GEMMs' kernels and configs, write the config
table the layer reads, and time the whole experts path with it against today's choice.

    python3 bench/h200_gemm_sweep.py --out $OUT      # bench/h200_gemm_sweep.sh runs this

Phases (a time budget, --budget-s, trims the sweep's last points rather than overrun):
 1. compile: every candidate (kernel, tile_m, config) of both GEMMs compiled and run once in
    worker processes (--procs at a time; a candidate that crashes the compiler, hangs or
    mis-computes is dropped, the run goes on), on a small adversarial problem (-1 ids, an empty
    expert, several blocks per persistent program), checked against fp32;
 2. verify: every compiled candidate on each model config (T = 512) against an fp32 reference
    of its GEMM (gathered gate/up + SwiGLU; down from the same bf16 h);
 3. sweep: per model config, T and tile_m (from the mean rows per expert; today's tile_m always
    among them), every verified candidate of each GEMM timed by CUDA graph replay (median) into
    NaN-filled outputs and checked against torch._grouped_mm on the same padded rows;
 4. choose: per point the tile_m with the smallest sum of the two GEMMs' best times; the winners
    become the table (gemm configs for every swept tile_m, the layer's tile_m per load);
 5. experts path (plan + gate/up + down + combine, graph replay, interleaved rounds, the same
    routing): today's choice (the default rules: classic kernels, today's tile_m) against the
    table's, and against torch._grouped_mm (index_select gather, grouped_mm, silu * up,
    grouped_mm, argon combine); beside each, the floors (every expert's weights once at
    4.3 TB/s; the matrix work at 790 TFLOP/s) and the issue's target. Where the table's choice
    is slower than today's, the table keeps today's choice for that point;
 6. writes $OUT/gemm_sweep.json (everything), $OUT/tuned_configs.json (the table: the repo's
    torch_argon/triton_ops/tuned_configs.json merged with this run's entries: copy it there),
    and prints the table last: T, config, old us, new us, target, met?.
Needs the CUDA build of torch_argon for phase 5 (the plan and combine ops); without it phase 5
is skipped and said so.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# --cpu-dry-run: the whole script on the CPU, the kernels through the Triton interpreter (fp16,
# tiny shapes, a few candidates, wall-clock timers): a check of this script's logic, not a
# measurement. The interpreter must be chosen before triton is imported.
DRY_RUN = "--cpu-dry-run" in sys.argv
if DRY_RUN:
    # (loaded by path: importing torch_argon.testing would import the package and its kernels
    # before the interpreter is on)
    import importlib.util
    _spec = importlib.util.spec_from_file_location(
        "argon_triton_interpreter", os.path.join(ROOT, "torch_argon", "testing",
                                                 "triton_interpreter.py"))
    _interpreter = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_interpreter)
    _interpreter.enable()
RUN = types.SimpleNamespace(device="cpu" if DRY_RUN else "cuda", dtype_name="float16" if DRY_RUN
                            else "bfloat16")

# name: (E, K, H, I)
MODELS = {"512x10x2048x512": (512, 10, 2048, 512),  # Qwen3-Next-sized
          "128x8x2048x768": (128, 8, 2048, 768)}  # Qwen3-30B-A3B
if DRY_RUN:
    MODELS = {"8x2x64x32": (8, 2, 64, 32), "4x3x96x48": (4, 3, 96, 48)}
# Issue 34's targets for the experts path, bf16, us: (E, T) -> target.
TARGETS = {(512, 128): 757, (512, 512): 824, (512, 2048): 824, (512, 8192): 1050,
           (128, 128): 309, (128, 512): 309, (128, 2048): 395, (128, 8192): 1100}
HBM_TBPS, MATRIX_TFLOPS = 4.3, 790.0  # the ceilings (measured on this H200)
DEFAULT_T = "2048,8192,512,128,16384"  # the sweep's order: the points that matter most first
if DRY_RUN:
    DEFAULT_T = "64,16"
GEMM_TOL = 2e-2  # relative Frobenius error, bf16 output against fp32 / bf16 torch


# ---- candidates -------------------------------------------------------------------------------

def _import_configs(real=False):
    """configs.py: with real, through the package (its compiled extension, for the plan and
    combine ops) where it imports; else, or where it does not, without the extension (the
    workers need none)."""
    if real:
        try:
            import torch_argon  # noqa: F401
        except Exception as e:  # no build here: the package's pure-Python modules only
            print(f"(torch_argon without its extension: {type(e).__name__}: {e})")
    if "torch_argon" not in sys.modules:
        pkg = types.ModuleType("torch_argon")
        pkg.__path__ = [os.path.join(ROOT, "torch_argon")]
        sys.modules["torch_argon"] = pkg
    from torch_argon.triton_ops import configs
    return configs


def _tma(bn, bk, w, s, **kw):
    return dict(block_n=bn, block_k=bk, num_warps=w, num_stages=s, kernel="tma", **kw)


def _classic(bn, bk, w, s):
    return dict(block_n=bn, block_k=bk, num_warps=w, num_stages=s)


SKIP, P1, P2, CS = (dict(skip_padding=True), dict(persistent=1), dict(persistent=2),
                   dict(tma_store=True))
# (GEMM, BLOCK_M) -> configs besides the default rules' (classic) ones. gate_up's weight tile is
# 2 * block_n rows (gate and up); shared memory per stage is (BLOCK_M + W rows) * block_k * 2 B
# of the H200's 227 KB per block (228 KB per SM: two blocks of <= 113 KB share one). Small
# BLOCK_M: memory-bound (stream the weights, bytes in flight); 128: compute-bound (wide MMAs,
# half blocks over the experts' last tiles, persistent grids). Persistent programs per SM (p)
# never exceed the blocks one SM holds at once (else they run in waves):
# tools/triton_gemm_sm90_check.py prints each candidate's shared memory, registers and
# blocks per SM, from an sm_90 compile without a GPU.
EXTRA = {
    ("gate_up", 16): [_tma(64, 128, 4, 4), _tma(128, 128, 4, 3), _tma(128, 64, 4, 4),
                      _tma(64, 128, 4, 4, **P1)],
    ("gate_up", 32): [_tma(64, 128, 4, 4), _tma(128, 128, 4, 3), _tma(128, 64, 4, 4, **SKIP),
                      _tma(64, 128, 4, 4, **SKIP)],
    ("gate_up", 64): [_tma(64, 64, 4, 4), _tma(128, 64, 8, 4), _tma(128, 64, 4, 4),
                      _tma(128, 64, 8, 4, **SKIP), _tma(64, 64, 4, 4, **SKIP),
                      _tma(128, 64, 8, 3, **SKIP, **P1), _tma(64, 64, 4, 4, **SKIP, **P2)],
    ("gate_up", 128): [_classic(128, 64, 8, 3),
                       _tma(128, 64, 8, 3), _tma(128, 64, 8, 4), _tma(64, 64, 8, 3),
                       _tma(64, 64, 8, 4), _tma(64, 128, 8, 3),
                       _tma(128, 64, 8, 3, **SKIP), _tma(128, 64, 8, 4, **SKIP),
                       _tma(64, 64, 8, 3, **SKIP), _tma(128, 64, 8, 3, **SKIP, **P1),
                       _tma(64, 64, 8, 3, **SKIP, **P1), _tma(64, 64, 8, 3, **SKIP, **P2),
                       _tma(128, 64, 8, 3, **SKIP, **CS), _tma(128, 64, 8, 4, **SKIP, **CS),
                       _tma(64, 64, 8, 3, **SKIP, **CS)],
    ("down", 16): [_tma(128, 128, 4, 4), _tma(128, 64, 4, 5), _tma(256, 64, 4, 4),
                   _tma(128, 128, 4, 4, **P1), _tma(128, 128, 4, 4, **CS)],
    ("down", 32): [_tma(128, 128, 4, 4), _tma(128, 64, 4, 5), _tma(128, 64, 4, 5, **SKIP),
                   _tma(256, 64, 4, 4, **SKIP)],
    ("down", 64): [_tma(128, 64, 4, 4), _tma(256, 64, 8, 3), _tma(128, 128, 4, 3),
                   _tma(128, 64, 4, 4, **SKIP), _tma(256, 64, 8, 3, **SKIP),
                   _tma(128, 64, 4, 4, **SKIP, **P2), _tma(128, 64, 4, 4, **SKIP, **CS),
                   _tma(128, 64, 4, 3, **SKIP)],
    ("down", 128): [_classic(128, 64, 8, 3),
                    _tma(256, 64, 8, 3), _tma(128, 64, 8, 4), _tma(128, 64, 8, 3),
                    _tma(128, 128, 8, 3), _tma(256, 64, 8, 4),
                    _tma(256, 64, 8, 3, **SKIP), _tma(128, 64, 8, 4, **SKIP),
                    _tma(128, 64, 8, 3, **SKIP), _tma(256, 64, 8, 4, **SKIP),
                    _tma(128, 128, 8, 3, **SKIP), _tma(256, 64, 8, 3, **SKIP, **P1),
                    _tma(128, 64, 8, 3, **SKIP, **P2), _tma(128, 64, 8, 3, **SKIP, **CS),
                    _tma(256, 64, 8, 3, **SKIP, **CS), _tma(128, 64, 8, 3, **SKIP, **P1, **CS)],
}
BLOCK_MS = (16, 32, 64, 128)


def candidates(configs, kind, block_m):
    """[(job id, MMConfig)] for one GEMM and BLOCK_M: the default rules' configs first (today's
    kernels, the baseline), then EXTRA."""
    rules = configs.GATE_UP_CONFIGS if kind == "gate_up" else configs.DOWN_CONFIGS
    cfgs = [cfg for bm, _, cfg in rules if bm == block_m]
    cfgs += [configs.MMConfig(**d) for d in EXTRA.get((kind, block_m), [])]
    if DRY_RUN:  # the first classic one, and the first tma one of each option mix
        picks = {}
        for cfg in cfgs:
            picks.setdefault((cfg.kernel, cfg.skip_padding, bool(cfg.persistent),
                              cfg.tma_store), cfg)
        cfgs = list(picks.values())
    out = {}
    for cfg in cfgs:
        out.setdefault(job_id(kind, block_m, cfg), cfg)
    return list(out.items())


def job_id(kind, block_m, cfg):
    return f"{kind} bm{block_m} {cfg.label()}"


def all_jobs(configs):
    return [(jid, kind, bm, cfg) for kind in ("gate_up", "down") for bm in BLOCK_MS
            for jid, cfg in candidates(configs, kind, bm)]


def tile_ms_for(rows_per_expert, default_tm):
    """The tile_m values swept at a load: a tile near a typical expert's rows at small loads,
    64 and 128 (wide MMAs) from 48 rows per expert up; today's choice always among them."""
    if rows_per_expert <= 12:
        tms = [16, 32]
    elif rows_per_expert <= 48:
        tms = [16, 32, 64]
    else:
        tms = [64, 128]
    return sorted(set(tms) | {default_tm})


# ---- phase 1: compile in workers ----------------------------------------------------------------

def worker_main(jobs_path, status_path, fake):
    """Compile and check each job of jobs_path, appending "start" / "done" lines (JSON) to
    status_path as it goes, so the parent knows which job a crash or hang took down."""
    with open(jobs_path) as f:
        jobs = json.load(f)
    status = open(status_path, "a", buffering=1)

    def note(**kw):
        status.write(json.dumps(kw) + "\n")

    problem = None
    for job in jobs:
        note(event="start", id=job["id"], t=time.time())
        t0 = time.time()
        try:
            if fake:  # the manager's tests: job ids name what should happen
                if "crash" in job["id"]:
                    os.abort()
                if "hang" in job["id"]:
                    time.sleep(3600)
                err = 0.5 if "wrong" in job["id"] else 1e-3
            else:
                problem = problem or WorkerProblem()
                err = problem.check(job["kind"], job["block_m"], job["config"])
            note(event="done", id=job["id"], ok=bool(err <= GEMM_TOL), rel_err=err,
                 seconds=time.time() - t0)
        except Exception as e:  # compile errors, out of shared memory, refusals
            note(event="done", id=job["id"], ok=False, seconds=time.time() - t0,
                 error=f"{type(e).__name__}: {str(e)[:300]}")
    status.close()


class WorkerProblem:
    """A small adversarial problem at the real dims: E = 16, T = 2048, K = 4, about 10 % of ids
    -1, expert 3 never chosen; enough blocks that persistent programs loop. Every integer the
    kernels take is a multiple of 16 here as in the sweep (H = 2048, I = 512, E = 16, T), so
    Triton specializes them alike and the sweep loads these compiles from its cache."""

    def __init__(self, E=16, T=2048, K=4, H=2048, I=512):
        import torch
        configs = _import_configs()
        from torch_argon import reference
        self.torch, self.reference, self.configs = torch, reference, configs
        if DRY_RUN:
            T, H, I = 64, 64, 32
        dev, dtype = RUN.device, getattr(torch, RUN.dtype_name)
        g = torch.Generator(device=dev).manual_seed(1)
        self.x = torch.randn(T, H, device=dev, generator=g).to(dtype)
        self.wgu = (torch.randn(E, 2 * I, H, device=dev, generator=g) * H ** -0.5).to(dtype)
        self.wd = (torch.randn(E, H, I, device=dev, generator=g) * I ** -0.5).to(dtype)
        ids = torch.randint(0, E, (T, K), device=dev, generator=g)
        ids = torch.where(ids == 3, 4, ids)
        ids = torch.where(torch.rand(T, K, device=dev, generator=g) < 0.1, -1, ids)
        self.ids, self.w = ids, torch.rand(T, K, device=dev, generator=g)
        self.E, self.H, self.I = E, H, I
        self.refs = {}

    def refs_for(self, tm):
        if tm not in self.refs:
            plan = self.reference.moe_plan(self.ids, self.w, self.E, tm)
            h32, h16, y32 = fp32_references(self.x, self.wgu, self.wd, plan)
            self.refs[tm] = (plan, h32, h16, y32)
        return self.refs[tm]

    def check(self, kind, block_m, config):
        from torch_argon.triton_ops.ops import launch_moe_mm
        torch = self.torch
        cfg = self.configs.MMConfig(**config)
        plan, h32, h16, y32 = self.refs_for(block_m)
        R = plan.sorted_token.shape[0]
        valid = plan.sorted_token >= 0
        n_out = self.I if kind == "gate_up" else self.H
        out = torch.full((R, n_out), float("nan"), device=RUN.device, dtype=self.x.dtype)
        if kind == "gate_up":
            launch_moe_mm(self.x, self.wgu, plan.tile_expert, plan.meta, block_m,
                          plan.sorted_token, out, swiglu=True, zero_unused=False, config=cfg)
            want = h32
        else:
            launch_moe_mm(h16, self.wd, plan.tile_expert, plan.meta, block_m, None, out,
                          swiglu=False, zero_unused=False, config=cfg, row_token=plan.sorted_token)
            want = y32
        return rel_err(out[valid], want)


def rel_err(got, want):
    got, want = got.float(), want.float()
    if not bool(got.isfinite().all()):
        return float("inf")
    den = float(want.norm())
    return float((got - want).norm()) / den if den else float(got.norm())


def fp32_references(x, wgu, wd, plan):
    """(h32 [valid rows, I], h16 [R, I] bf16 with zero padding rows, y32 [valid rows, H]) in
    fp32, expert by expert over the plan's valid rows (syncs: outside any timing)."""
    import torch
    tok = plan.sorted_token
    valid = tok >= 0
    rows_expert = plan.tile_expert.repeat_interleave(plan.tile_m)
    order = valid.nonzero().flatten()
    h32 = torch.empty(len(order), wgu.shape[1] // 2, device=x.device)
    I = wgu.shape[1] // 2
    e_of = rows_expert[order]
    for e in e_of.unique().tolist():
        sel = (e_of == e).nonzero().flatten()
        xe = x[tok[order[sel]].long()].float()
        gu = xe @ wgu[e].float().t()
        h32[sel] = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
    h16 = torch.zeros(tok.shape[0], I, device=x.device, dtype=x.dtype)
    h16[order] = h32.to(x.dtype)
    y32 = torch.empty(len(order), wd.shape[1], device=x.device)
    for e in e_of.unique().tolist():
        sel = (e_of == e).nonzero().flatten()
        y32[sel] = h16[order[sel]].float() @ wd[e].float().t()
    return h32, h16, y32


def compile_jobs(jobs, procs, budget_s, work_dir, job_timeout_s=90, fake=False, log=print):
    """Run the jobs in `procs` worker processes; a worker that dies or hangs on a job is
    killed (its process group: our own child) and restarted on the rest of its list. Returns
    {id: {"ok", "rel_err" or "error", "seconds"}}; jobs left when the budget runs out read
    "not compiled: budget"."""
    os.makedirs(work_dir, exist_ok=True)
    results, t_start = {}, time.time()
    queues = [jobs[i::procs] for i in range(procs)]
    running = []  # [proc, queue, status path, lines read]
    n_started = 0

    def start(queue):
        nonlocal n_started
        n_started += 1
        jobs_path = os.path.join(work_dir, f"jobs_{n_started}.json")
        status_path = os.path.join(work_dir, f"status_{n_started}.jsonl")
        with open(jobs_path, "w") as f:
            json.dump(queue, f)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", jobs_path,
               "--status", status_path] + (["--fake-worker"] if fake else []) + (
                   ["--cpu-dry-run"] if DRY_RUN else [])
        logf = open(os.path.join(work_dir, f"worker_{n_started}.log"), "w")
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
        running.append([proc, queue, status_path, 0, None])

    def kill(proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    for q in queues:
        if q:
            start(q)
    while running:
        time.sleep(0.2)
        for entry in list(running):
            proc, queue, status_path, n_read, current = entry
            if os.path.exists(status_path):
                with open(status_path) as f:
                    lines = f.read().splitlines()
                for line in lines[n_read:]:
                    try:
                        ev = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a line half written: read it next time
                    entry[3] += 1
                    if ev["event"] == "start":
                        entry[4] = (ev["id"], time.time())
                    else:
                        results[ev["id"]] = {k: v for k, v in ev.items()
                                             if k not in ("event", "id")}
                        entry[4] = None
            current = entry[4]
            over_budget = time.time() - t_start > budget_s
            hung = current is not None and time.time() - current[1] > job_timeout_s
            if proc.poll() is None and not (hung or over_budget):
                continue
            if proc.poll() is None:
                kill(proc)
            running.remove(entry)
            if current is not None and current[0] not in results:
                why = ("not compiled: budget" if over_budget else
                       "hung" if hung else f"worker died (exit {proc.returncode})")
                results[current[0]] = {"ok": False, "error": why}
                log(f"  {current[0]}: {why}")
            rest = [j for j in queue if j["id"] not in results]
            if rest and not over_budget:
                start(rest)
            for j in rest if over_budget else []:
                results[j["id"]] = {"ok": False, "error": "not compiled: budget"}
    return results


# ---- timing --------------------------------------------------------------------------------------

def graph_or_wall_us(fn, samples=15):
    """One call captured into a CUDA graph, replayed about 2 ms worth per sample
    (testing.timing.graph_us); the dry run: the wall clock of two calls after one."""
    from torch_argon.testing.timing import graph_us
    return graph_us(fn, RUN.device, samples=2 if DRY_RUN else samples, target_ms=2.0,
                    max_replays=50)


# ---- the problem ---------------------------------------------------------------------------------

def model_weights(E, H, I, seed=0):
    import torch
    dev, dtype = RUN.device, getattr(torch, RUN.dtype_name)
    g = torch.Generator(device=dev).manual_seed(seed)
    wgu = (torch.randn(E, 2 * I, H, device=dev, generator=g) * H ** -0.5).to(dtype)
    wd = (torch.randn(E, H, I, device=dev, generator=g) * I ** -0.5).to(dtype)
    return wgu, wd


def problem(T, E, K, H, seed):
    """x [T, H] and a uniform top-K routing (testing.routing: K distinct experts per token),
    the same for every path timed at this point."""
    import torch
    from torch_argon.testing.routing import routing
    dev = RUN.device
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(T, H, device=dev, generator=g).to(getattr(torch, RUN.dtype_name))
    return (x,) + routing(T, E, K, "uniform", seed=seed, device=dev)


def floors(E, K, H, I, T, touched=None):
    weight_bytes = 3 * H * I * 2
    return {"weight_read_floor_us": E * weight_bytes / (HBM_TBPS * 1e12) * 1e6,
            "touched_weight_read_floor_us": (touched or E) * weight_bytes / (HBM_TBPS * 1e12) * 1e6,
            "matrix_floor_us": T * K * 2 * 3 * H * I / (MATRIX_TFLOPS * 1e12) * 1e6}


# ---- phases 2-5 ----------------------------------------------------------------------------------

class Sweep:
    def __init__(self, args, configs, compiled, log):
        import torch
        self.torch, self.args, self.configs, self.log = torch, args, configs, log
        self.ok_jobs = {jid for jid, r in compiled.items() if r.get("ok")}
        self.jobs = {jid: (kind, bm, cfg) for jid, kind, bm, cfg in all_jobs(configs)}
        from torch_argon import reference
        from torch_argon.triton_ops.ops import launch_moe_mm
        self.reference, self.launch = reference, launch_moe_mm
        self.ops = None
        try:
            import torch_argon  # noqa: F401  (the real package, with the compiled extension)
            from torch_argon.testing import backends
            if backends.get(RUN.device).available:
                self.ops = backends.get(RUN.device).ops
        except Exception as e:  # no build: phase 5 is skipped
            log(f"torch_argon's {RUN.device} ops are not available ({type(e).__name__}: {e})")

    def plan(self, ids, w, E, tm):
        return (self.ops.moe_plan(ids, w, E, tm) if self.ops is not None
                else self.reference.moe_plan(ids, w, E, tm))

    def gemm_call(self, kind, cfg, tm, plan, x, h_in, wgu, wd, out):
        if kind == "gate_up":
            return lambda: self.launch(x, wgu, plan.tile_expert, plan.meta, tm, plan.sorted_token,
                                       out, swiglu=True, zero_unused=False, config=cfg)
        return lambda: self.launch(h_in, wd, plan.tile_expert, plan.meta, tm, None, out,
                                   swiglu=False, zero_unused=False, config=cfg,
                                   row_token=plan.sorted_token)

    def jobs_for(self, kind, bm):
        return [(jid, cfg) for jid, (k, b, cfg) in self.jobs.items()
                if k == kind and b == bm and jid in self.ok_jobs]

    def verify(self, model, T=16 if DRY_RUN else 512):
        """Phase 2: every compiled candidate against fp32 at this model's shapes."""
        torch = self.torch
        E, K, H, I = MODELS[model]
        wgu, wd = self.weights[model]
        x, ids, w = problem(T, E, K, H, seed=T)
        results = {}
        for bm in BLOCK_MS:
            plan = self.reference.moe_plan(ids, w, E, bm)
            h32, h16, y32 = fp32_references(x, wgu, wd, plan)
            valid = plan.sorted_token >= 0
            R = plan.sorted_token.shape[0]
            for kind, n_out, want in (("gate_up", I, h32), ("down", H, y32)):
                out = torch.empty(R, n_out, device=RUN.device, dtype=x.dtype)
                for jid, cfg in self.jobs_for(kind, bm):
                    out.fill_(float("nan"))
                    try:
                        self.gemm_call(kind, cfg, bm, plan, x, h16, wgu, wd, out)()
                        err = rel_err(out[valid], want)
                    except Exception as e:
                        err, results[jid] = float("inf"), f"{type(e).__name__}: {str(e)[:200]}"
                    if err > GEMM_TOL:
                        self.ok_jobs.discard(jid)
                        self.log(f"  verify {model}: {jid} FAILED (rel err {err:.2e})")
                    results.setdefault(jid, err)
        return results

    def sweep_point(self, model, T, tile_ms, deadline):
        """Phase 3 at one (model, T): [record] per (tile_m, GEMM, candidate)."""
        torch = self.torch
        E, K, H, I = MODELS[model]
        wgu, wd = self.weights[model]
        x, ids, w = problem(T, E, K, H, seed=T)
        records = []
        for tm in tile_ms:
            bm = min(tm, 128)
            plan = self.plan(ids, w, E, tm)
            valid = plan.sorted_token >= 0
            R = plan.sorted_token.shape[0]
            ends = plan.offsets[1:]
            xs = self.reference.moe_gather(x, plan.sorted_token)
            h_ref = self.reference.swiglu(torch._grouped_mm(xs, wgu.transpose(1, 2), offs=ends))
            y_ref = torch._grouped_mm(h_ref, wd.transpose(1, 2), offs=ends)
            del xs
            for kind, n_out, want in (("gate_up", I, h_ref[valid]), ("down", H, y_ref[valid])):
                out = torch.empty(R, n_out, device=RUN.device, dtype=x.dtype)
                for jid, cfg in self.jobs_for(kind, bm):
                    if time.time() > deadline:
                        return records, True
                    rec = dict(model=model, T=T, rows_per_expert=T * K / E, tile_m=tm,
                               kind=kind, job=jid, config=cfg.to_dict())
                    call = self.gemm_call(kind, cfg, tm, plan, x, h_ref, wgu, wd, out)
                    try:
                        out.fill_(float("nan"))
                        call()
                        rec["rel_err"] = rel_err(out[valid], want)
                        if rec["rel_err"] <= GEMM_TOL:
                            rec["us"] = graph_or_wall_us(call)
                    except Exception as e:
                        rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    records.append(rec)
                del out
            del h_ref, y_ref
            if RUN.device == "cuda":
                torch.cuda.empty_cache()
        return records, False

    def experts_point(self, model, T, new_table):
        """Phase 5 at one (model, T): today's choice, the table's, torch._grouped_mm."""
        torch, configs = self.torch, self.configs
        from torch_argon.testing import baselines
        from torch_argon.experts import run_implementation
        E, K, H, I = MODELS[model]
        wgu, wd = self.weights[model]
        x, ids, w = problem(T, E, K, H, seed=T)
        ops = self.ops
        tm_old = configs.default_tile_m(T * K, E)
        configs.set_table(new_table)
        tm_new = configs.layer_tile_m(T * K, E, hidden=H, inter=I, dtype=x.dtype,
                                      device_name=device_name())

        def with_table(table, tm):
            def run():
                configs.set_table(table)  # the choice happens at capture; replays keep it
                return run_implementation("triton_dense", x, ids, w, (wgu, wd), tile_m=tm,
                                          ops=ops)
            return run

        def torch_path():
            plan = ops.moe_plan(ids, w, E, 16)
            ends = plan.offsets[1:]
            xs = baselines.gather_index_select(x, plan.sorted_token)
            h = baselines.swiglu_torch(torch._grouped_mm(xs, wgu.transpose(1, 2), offs=ends))
            y = torch._grouped_mm(h, wd.transpose(1, 2), offs=ends)
            return ops.moe_combine(y, plan, w, out_dtype=x.dtype)

        fns = {"old": with_table({}, tm_old), "new": with_table(new_table, tm_new),
               "torch_grouped_mm": torch_path}
        outs = {k: f() for k, f in fns.items()}
        from torch_argon.testing.timing import interleaved_graphs_us
        us = interleaved_graphs_us(fns, RUN.device)
        configs.set_table(None)
        touched = int(torch.unique(ids).numel())
        rec = dict(model=model, E=E, K=K, H=H, I=I, T=T, tile_m_old=tm_old, tile_m_new=tm_new,
                   old_us=us["old"], new_us=us["new"], torch_grouped_mm_us=us["torch_grouped_mm"],
                   new_vs_old_rel_err=rel_err(outs["new"], outs["old"]),
                   new_vs_torch_rel_err=rel_err(outs["new"], outs["torch_grouped_mm"]),
                   target_us=TARGETS.get((E, T)), experts_touched=touched, **floors(E, K, H, I, T,
                                                                                   touched))
        return rec


def best_by_point(records):
    """{(model, T, tile_m, kind): the fastest verified record}."""
    best = {}
    for r in records:
        if "us" not in r:
            continue
        key = (r["model"], r["T"], r["tile_m"], r["kind"])
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    return best


def choose_tile_m(best, model, T, tile_ms):
    """The tile_m whose two GEMMs' best times sum smallest (None if no tile_m has both)."""
    sums = {tm: best[(model, T, tm, "gate_up")]["us"] + best[(model, T, tm, "down")]["us"]
            for tm in tile_ms
            if (model, T, tm, "gate_up") in best and (model, T, tm, "down") in best}
    return (min(sums, key=sums.get), sums) if sums else (None, sums)


def build_table(configs, device, best, choices, dtype_name="bfloat16", keep_old=()):
    """The config table from the winners: gemm entries for every swept (T, tile_m); the
    layer's tile_m per (model, T) as chosen, or today's where keep_old names the point (then
    today's configs at that tile_m too)."""
    gemm, tile_m = {}, {}
    for (model, T, tm, kind), r in sorted(best.items(), key=str):
        E, K, H, I = MODELS[model]
        n_w, kd = (2 * I, H) if kind == "gate_up" else (H, I)
        cfg = r["config"]
        if (model, T) in keep_old and tm == configs.default_tile_m(T * K, E):
            cfg = configs.config_for(kind == "gate_up", min(tm, 128), T * K / E).to_dict()
        key = configs.gemm_key(device, dtype_name, kind, E, n_w, kd)
        gemm.setdefault(key, []).append({"rows_per_expert": round(T * K / E, 3), "tile_m": tm,
                                         "config": cfg, "us": round(r["us"], 1)})
    for (model, T), tm in sorted(choices.items(), key=str):
        E, K, H, I = MODELS[model]
        if (model, T) in keep_old:
            tm = configs.default_tile_m(T * K, E)
        key = configs.tile_m_key(device, dtype_name, E, H, I)
        tile_m.setdefault(key, []).append({"rows_per_expert": round(T * K / E, 3),
                                           "tile_m": tm})
    return {"gemm": gemm, "tile_m": tile_m}


def merge_tables(old, new):
    """The repo's table with every key this run wrote replaced."""
    out = {"gemm": dict(old.get("gemm", {})), "tile_m": dict(old.get("tile_m", {}))}
    for section in ("gemm", "tile_m"):
        out[section].update(new[section])
    return out


def final_table(rows):
    """The last lines printed: one row per (model, T)."""
    head = (f"{'T':>6} {'config':<22} {'tm old>new':>10} {'old us':>8} {'new us':>8} "
            f"{'torch us':>9} {'floor w/m':>11} {'target':>7} {'met?':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        target = r.get("target_us")
        met = "-" if target is None else ("yes" if r["new_us"] <= target else "NO")
        lines.append(f"{r['T']:>6} {r['model']:<22} {r['tile_m_old']:>4}>{r['tile_m_new']:<5} "
                     f"{r['old_us']:>8.1f} {r['new_us']:>8.1f} {r['torch_grouped_mm_us']:>9.1f} "
                     f"{r['weight_read_floor_us']:>5.0f}/{r['matrix_floor_us']:<5.0f} "
                     f"{target if target else '-':>7} {met:>5}")
    return "\n".join(lines)


def device_name():
    from torch_argon.triton_ops.ops import device_name as name
    import torch
    return name(torch.device(RUN.device))


def environment():
    import torch
    import triton
    if DRY_RUN:
        return {"device": device_name(), "sms": 4, "torch": torch.__version__,
                "triton": triton.__version__, "copy_tbps": 0.0, "bf16_matmul_tflops": 0.0}
    p = torch.cuda.get_device_properties(0)

    def copy_us():
        a = torch.empty(1 << 31, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        return graph_or_wall_us(lambda: b.copy_(a), samples=5)

    def matmul_us():
        m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        return graph_or_wall_us(lambda: m @ m, samples=5)

    copy_us, mm_us = copy_us(), matmul_us()
    torch.cuda.empty_cache()
    return {"device": p.name, "sms": p.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "copy_tbps": 2 * (1 << 31) / copy_us / 1e6,
            "bf16_matmul_tflops": 2 * 8192 ** 3 / mm_us / 1e6}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/argon_out"))
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--T", default=DEFAULT_T)
    p.add_argument("--procs", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    p.add_argument("--table-file", default=None,
                   help="the table to merge into (default: the repo's tuned_configs.json)")
    p.add_argument("--budget-s", type=float, default=390.0,
                   help="seconds for the whole run; the sweep's last points are dropped to fit")
    p.add_argument("--compile-budget-s", type=float, default=150.0)
    p.add_argument("--list", action="store_true", help="print the candidates and exit (no GPU)")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="the whole run on the CPU through the Triton interpreter (tiny shapes, "
                        "a few candidates): checks this script, measures nothing")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--status", default=None, help=argparse.SUPPRESS)
    p.add_argument("--fake-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker_main(args.worker, args.status, args.fake_worker)

    models = args.models.split(",")
    for m in models:
        if m not in MODELS:
            sys.exit(f"--models: unknown {m!r}; known: {', '.join(MODELS)}")
    Ts = [int(t) for t in args.T.split(",")]
    configs = _import_configs(real=not args.list)
    jobs = all_jobs(configs)
    if args.list:
        for jid, *_ in jobs:
            print(jid)
        for m in models:
            E, K, H, I = MODELS[m]
            for T in Ts:
                rho = T * K / E
                print(f"{m} T={T}: {rho:.1f} rows/expert, tile_m "
                      f"{tile_ms_for(rho, configs.default_tile_m(T * K, E))}")
        print(f"{len(jobs)} compile jobs")
        return

    t_start = time.time()
    deadline = t_start + args.budget_s
    os.makedirs(args.out, exist_ok=True)
    log_file = open(os.path.join(args.out, "gemm_sweep.log"), "a")

    def log(msg):
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    report = {"args": vars(args)}

    def save(table=None, rows=None, status="", done=False):
        """Writes what the run has so far (a hang or a timeout still leaves it in $OUT): the
        report, and once chosen, the table merged into the repo's and the final lines."""
        report["seconds"] = time.time() - t_start
        report["finished"] = done
        if table is not None:
            report["table"], report["experts"] = table, rows
            old_path = args.table_file or configs.TABLE_FILE
            old = json.load(open(old_path)) if os.path.exists(old_path) else {}
            merged = merge_tables(old, table)
            merged["about"] = (
                f"written by bench/h200_gemm_sweep.py on {device_name()} "
                f"({time.strftime('%Y-%m-%d')}, torch {report['environment']['torch']}, triton "
                f"{report['environment']['triton']}; {status}); copy to "
                "torch_argon/triton_ops/tuned_configs.json")
            with open(os.path.join(args.out, "tuned_configs.json"), "w") as f:
                json.dump(merged, f, indent=1)
        with open(os.path.join(args.out, "gemm_sweep.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
        text = final_table(rows) if rows else "(no experts-path rows)"
        if rows is not None:
            with open(os.path.join(args.out, "gemm_sweep_table.txt"), "w") as f:
                f.write(text + "\n")
        return text
    log(f"== 1. compile {len(jobs)} candidates in {args.procs} workers")
    compiled = compile_jobs([dict(id=jid, kind=kind, block_m=bm, config=cfg.to_dict())
                             for jid, kind, bm, cfg in jobs], args.procs,
                            args.compile_budget_s, os.path.join(args.out, "compile"), log=log)
    report["compile"] = compiled
    save()
    n_ok = sum(r.get("ok", False) for r in compiled.values())
    log(f"   {n_ok}/{len(jobs)} compiled and correct ({time.time() - t_start:.0f} s)")
    for jid, r in sorted(compiled.items()):
        if not r.get("ok"):
            log(f"   dropped {jid}: {r.get('error') or 'rel err %.2e' % r.get('rel_err', -1)}")

    report["environment"] = env = environment()
    log(f"   {env['device']}: copy {env['copy_tbps']:.2f} TB/s, bf16 matmul "
        f"{env['bf16_matmul_tflops']:.0f} TFLOP/s, torch {env['torch']}, triton {env['triton']}")
    sweep = Sweep(args, configs, compiled, log)
    sweep.weights = {m: model_weights(*[MODELS[m][i] for i in (0, 2, 3)]) for m in models}

    log("== 2. verify against fp32")
    report["verify"] = {m: sweep.verify(m) for m in models}
    save()
    log(f"   {len(sweep.ok_jobs)} candidates verified ({time.time() - t_start:.0f} s)")

    log("== 3. sweep")
    records, skipped, partial = [], [], []
    reserve = 30 + 4 * len(models) * len(Ts)  # phase 5
    for T in Ts:
        for m in models:
            E, K, H, I = MODELS[m]
            if time.time() > deadline - reserve:
                skipped.append((m, T))
                continue
            tms = tile_ms_for(T * K / E, configs.default_tile_m(T * K, E))
            recs, cut = sweep.sweep_point(m, T, tms, deadline - reserve)
            if cut:  # a point not swept whole picks nothing (its records stay in the report)
                skipped.append((m, T))
                partial += recs
                continue
            records += recs
            report["sweep"] = records
            save()
            best = best_by_point(recs)
            for tm in tms:
                parts = [f"{k} {best[(m, T, tm, k)]['us']:.1f} ({best[(m, T, tm, k)]['job']})"
                         for k in ("gate_up", "down") if (m, T, tm, k) in best]
                log(f"   {m} T={T} tm={tm}: " + "; ".join(parts))
    report["sweep"] = records
    report["partial_points"] = partial
    report["skipped_points"] = skipped
    for m, T in skipped:
        log(f"   not swept (budget): {m} T={T}: the table keeps the default rules there")

    log("== 4. choose")
    best = best_by_point(records)
    choices = {}
    for T in Ts:
        for m in models:
            E, K, H, I = MODELS[m]
            tm, sums = choose_tile_m(best, m, T, tile_ms_for(T * K / E,
                                                             configs.default_tile_m(T * K, E)))
            if tm is not None:
                choices[(m, T)] = tm
                log(f"   {m} T={T}: tile_m {tm} (gate_up + down: " +
                    ", ".join(f"tm{k} {v:.0f}" for k, v in sorted(sums.items())) + " us)")
    device = device_name()
    keep_old, rows = set(), []
    save(build_table(configs, device, best, choices, RUN.dtype_name), rows,
         f"the experts path checked at none of its {len(choices)} points yet")

    if sweep.ops is None:
        log("== 5. experts path: SKIPPED (no CUDA build of torch_argon: run "
            "`bash bench/h200_run.sh build` first)")
    else:
        log("== 5. experts path (old = today's rules, new = the table)")
        table = build_table(configs, device, best, choices, RUN.dtype_name)
        for T in Ts:
            for m in models:
                if (m, T) not in choices:
                    continue
                try:
                    r = sweep.experts_point(m, T, table)
                except Exception as e:
                    log(f"   {m} T={T}: FAILED {type(e).__name__}: {str(e)[:300]}")
                    keep_old.add((m, T))
                    continue
                if r["new_us"] > r["old_us"] * 1.005 or r["new_vs_old_rel_err"] > GEMM_TOL:
                    keep_old.add((m, T))
                    r["decision"] = "kept today's choice (the table's was slower or differed)"
                    r["table_new_us"], r["new_us"], r["tile_m_new"] = (
                        r["new_us"], r["old_us"], r["tile_m_old"])
                rows.append(r)
                log(f"   {m} T={T}: old {r['old_us']:.1f} us (tm {r['tile_m_old']}), new "
                    f"{r['new_us']:.1f} us (tm {r['tile_m_new']}), torch "
                    f"{r['torch_grouped_mm_us']:.1f} us, err vs old "
                    f"{r['new_vs_old_rel_err']:.1e}" + (f"  [{r['decision']}]"
                                                         if "decision" in r else ""))
                save(build_table(configs, device, best, choices, RUN.dtype_name, keep_old),
                     rows, f"the experts path checked at {len(rows)} of its {len(choices)} "
                     "points so far")
    table = build_table(configs, device, best, choices, RUN.dtype_name, keep_old=keep_old)
    text = save(table, rows, f"the experts path checked at {len(rows)} of its {len(choices)} "
                "points" if sweep.ops is not None else "the experts path not checked (no build)",
                done=True)
    log(f"== done in {time.time() - t_start:.0f} s: $OUT/tuned_configs.json, gemm_sweep.json")
    log(text)


if __name__ == "__main__":
    main()
