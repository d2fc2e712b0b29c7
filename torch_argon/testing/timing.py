"""Timing helpers shared by the main job and the bench scripts. All return the median
microseconds of one call.

- median_us: any device; CUDA events on CUDA, the wall clock around a device sync elsewhere.
- cuda_events_us: CUDA events around `inner` back-to-back calls, `samples` times.
- cuda_graph_us: `inner` calls captured into one CUDA graph, replays queued back to back, so
  launch overhead and GPU idle time stay out of the figure (for small ops).
- heat: raise a CUDA GPU's clocks before a measurement.
"""
import statistics
import time

import torch


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


def median_us(fn, device, *, warmup=3, repeat=20):
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    if device.type == "cuda":
        return cuda_events_us(fn, samples=repeat)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def cuda_graph_us(fn, *, inner=20, samples=30, warmup=3):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the graph (allocator, lazy init)
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
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


def heat(ms=60, settle_s=0.3):
    """Keep the GPU busy with matrix products for a moment, so its clocks are up (an idle H200
    here sits at 345 MHz and tiny kernels alone do not always raise it), then let it settle:
    timed within milliseconds of the last product, a plan call read up to 1.1 us slower
    (H200, bench/plan_heat_ab.py, T = 512: 7.6-7.9 us against 6.8 untouched or after 0.3 s, the
    clock still at 1965 MHz), a transient of the heavy load, not the kernel's steady state."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    time.sleep(settle_s)
