"""Timers shared by the main job and the bench scripts. Each returns the median microseconds of
one call.

- median_us: any device; CUDA events on CUDA, the wall clock around a device sync elsewhere.
- cuda_events_us: CUDA events around `inner` back-to-back calls, `samples` times.
- cuda_graph_us: `inner` calls captured into one CUDA graph, replays queued back to back, so
  launch overhead and GPU idle time stay out of the figure (for small ops).
- cuda_graph_replays_us: one call captured, replayed back to back about `target_ms` worth per
  sample (for calls of 100 us and more: a layer, a GEMM).
- graph_us: cuda_graph_replays_us on CUDA, median_us elsewhere (a dry run on the CPU).
- interleaved_graphs_us: several calls, each captured once, replayed in turns.
- rounds_us: several calls timed in turns over rounds, so a burst of load reaches them alike.
- heat: raise a CUDA GPU's clocks before a measurement.
- busy_notes: why a set of timings cannot be trusted.

Imports torch only (no torch_argon), so a script can load this file by path to time another
tree's build with the same timers (bench/plan_lean_ab.py).
"""
import os
import statistics
import time

import torch

SPREAD_LIMIT = 0.25  # (max - min) / median of a call's round medians above this: a busy machine
SPREAD_FLOOR_US = 20.0  # ... when the gap is also above this many microseconds


def synchronize(device):
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def cuda_events_us(fn, *, inner=1, samples=20):
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / inner)
    return statistics.median(times)


def median_us(fn, device, *, warmup=3, repeat=20, inner=1):
    """inner: on CUDA, calls back to back between the events of one sample (the per-call
    figure is their mean), so a short call's launch gaps count as they do in a model."""
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    if device.type == "cuda":
        return cuda_events_us(fn, inner=inner, samples=repeat)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def _warm_on_side_stream(fn, calls):
    """fn called on a side stream, as CUDA graph capture wants before capturing it (the
    allocator's pools, lazy initialization, Triton's compile)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def _capture(fn, calls):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def cuda_graph_us(fn, *, inner=20, samples=30, warmup=3):
    _warm_on_side_stream(fn, warmup)
    graph = _capture(fn, inner)
    for _ in range(5):
        graph.replay()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(samples + 1)]
    events[0].record()
    for i in range(samples):
        graph.replay()
        events[i + 1].record()
    events[-1].synchronize()
    times = [events[i].elapsed_time(events[i + 1]) * 1e3 / inner for i in range(samples)]
    del graph
    return statistics.median(times)


def cuda_graph_replays_us(fn, *, samples=20, target_ms=1.0, max_replays=100):
    """fn captured once into a CUDA graph; each sample times back-to-back replays, as many as
    take about target_ms (at most max_replays), with CUDA events; the median per call."""
    _warm_on_side_stream(fn, 3)
    graph = _capture(fn, 1)
    one = cuda_events_us(graph.replay, samples=3)
    replays = max(1, min(max_replays, int(target_ms * 1e3 / max(one, 1.0))))
    us = cuda_events_us(graph.replay, inner=replays, samples=samples)
    del graph
    return us


def graph_us(fn, device, *, samples=20, target_ms=1.0, max_replays=100):
    """cuda_graph_replays_us on a CUDA device; elsewhere the median wall clock of `samples`
    calls after one (median_us): a dry run of a GPU script on the CPU."""
    if torch.device(device).type == "cuda":
        return cuda_graph_replays_us(fn, samples=samples, target_ms=target_ms,
                                     max_replays=max_replays)
    return median_us(fn, device, warmup=1, repeat=samples)


def interleaved_graphs_us(fns, device, *, rounds=3, samples=7, target_ms=3.0, max_inner=20):
    """{name: median us per call} of several calls on the same data, each captured once into a
    CUDA graph of as many calls as take about target_ms (at most max_inner), the graphs replayed
    in turns (`rounds` times, `samples` replays each), so clock and thermal drift spread over
    all of them. Off CUDA: median_us of each (a dry run)."""
    if torch.device(device).type != "cuda":
        return {name: median_us(fn, device, warmup=1, repeat=2) for name, fn in fns.items()}
    graphs = {}
    for name, fn in fns.items():
        _warm_on_side_stream(fn, 1)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        est_us = max((time.perf_counter() - t0) * 1e6, 1.0)
        inner = max(1, min(max_inner, int(target_ms * 1e3 / est_us)))
        graph = _capture(fn, inner)
        graph.replay()
        graphs[name] = (graph, inner)
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, (graph, inner) in graphs.items():
            times[name].append(cuda_events_us(graph.replay, samples=samples) / inner)
    del graphs
    return {name: statistics.median(t) for name, t in times.items()}


def rounds_us(calls, rounds, time_call):
    """{key: [us of each round]} of calls {key: fn}: every call timed once per round by
    time_call(key, fn, round_index), the rounds one after another, so a burst of load elsewhere
    reaches every call alike."""
    runs = {key: [] for key in calls}
    for r in range(rounds):
        for key, fn in calls.items():
            runs[key].append(time_call(key, fn, r))
    return runs


def one_call_us(fn):
    """Wall-clock microseconds of one call (no device sync: CPU work, or a dry run)."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def busy_notes(tables, runs, *, whole="whole layer", load=None, cores=None, own_threads=1):
    """Why timings cannot be trusted (empty when nothing says so):
    - tables {name: {part: us}}: a part that reads slower than the `whole` that runs it;
    - runs {key: [us of each round]}: a call whose round medians spread by more than
      SPREAD_LIMIT of their median and more than SPREAD_FLOOR_US (timer jitter of a few-us
      call is no sign); keys are (table, part) pairs or strings;
    - a 1-minute load average (os.getloadavg unless given) that, less this job's own threads,
      exceeds half the cores."""
    notes = []
    for name, times in tables.items():
        total = times.get(whole)
        slower = [s for s, us in times.items() if s != whole and total and us > total]
        if slower:
            notes.append(f"{name}: {', '.join(slower)} read slower than the {whole} "
                         f"({total:.1f} us), which runs {'it' if len(slower) == 1 else 'them'}")
    wide = []
    for key, rounds in runs.items():
        mid, gap = statistics.median(rounds), max(rounds) - min(rounds)
        if gap > SPREAD_FLOOR_US and gap > SPREAD_LIMIT * mid:
            label = " ".join(key) if isinstance(key, tuple) else str(key)
            wide.append((gap / mid, f"{label} {gap / mid:.0%}"))
    if wide:
        wide = [text for _, text in sorted(wide, reverse=True)]
        more = f" and {len(wide) - 3} more stages" if len(wide) > 3 else ""
        notes.append(f"rounds disagree by more than {SPREAD_LIMIT:.0%}: "
                     + ", ".join(wide[:3]) + more)
    if load is None and hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
    cores = cores or os.cpu_count() or 1
    if load is not None and load - own_threads > cores / 2:
        notes.append(f"load average {load:.1f} on {cores} cores (this job's share is at most "
                     f"{own_threads}): other work shares the CPU")
    return notes


def heat(ms=60, settle_s=0.3):
    """Keep the GPU busy with matrix products for a moment, so its clocks are up (an idle H200
    here sits at 345 MHz and tiny kernels alone do not always raise it), then let it settle:
    timed within milliseconds of the last product, a plan call read up to 1.1 us slower
    (H200, bench/plan_heat_ab.py, T = 512: 7.6-7.9 us against 6.8 untouched or after 0.3 s, the
    clock still at 1965 MHz), a transient of the heavy load, not the kernel's steady state."""
    # no random numbers: after a failed graph capture the default CUDA generator refuses to
    # draw until the process ends, and a benchmark then goes on timing eagerly
    a = torch.full((4096, 4096), 1.0 / 64, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    time.sleep(settle_s)
