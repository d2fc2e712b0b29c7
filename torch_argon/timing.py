"""Timing helpers shared by the main job and the bench scripts: median wall time of a callable
on a device, synchronising the device around each call (events on CUDA), and CUDA-graph replay
timing for small ops where launch overhead would otherwise dominate."""
import statistics
import time

import torch


def synchronize(device):
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def median_us(fn, device, *, warmup=3, repeat=20, min_seconds=0.0):
    """Median microseconds of fn() over `repeat` calls (more if min_seconds asks for it)."""
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    start_all = time.perf_counter()
    while len(times) < repeat or time.perf_counter() - start_all < min_seconds:
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def graph_median_us(fn, *, calls_per_graph=20, warmup=3, repeat=30):
    """Median GPU time of one fn() call under CUDA graph replay: fn is captured
    calls_per_graph times into one graph, and each replay is timed with events."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls_per_graph):
            fn()
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3 / calls_per_graph)
    return statistics.median(times)
