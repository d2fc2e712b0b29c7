// Kernels that are wrong on purpose, each in one way one compute-sanitizer tool must report, and
// one that is right: the positive and negative controls of bench/h200_metal_cuda.sh. A sanitizer
// run that does not flag its control shows nothing about the real kernels. CUDA only (the
// metal_cuda backend); launched as one threadgroup with `out` and `input` of n ints.
#include <metal_stdlib>
using namespace metal;

// Right: each lane reads its neighbour's value after a barrier. Clean under every tool.
kernel void sanitizer_ok(device int* out [[buffer(0)]],
                         device const int* input [[buffer(1)]],
                         uint tid [[thread_position_in_threadgroup]],
                         uint n [[threads_per_threadgroup]]) {
  threadgroup int v[1024];
  v[tid] = input[tid] + 1;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = v[(tid + 1) % n];
}

// racecheck: the barrier between the write and the neighbour's read is missing.
kernel void sanitizer_race(device int* out [[buffer(0)]],
                           device const int* input [[buffer(1)]],
                           uint tid [[thread_position_in_threadgroup]],
                           uint n [[threads_per_threadgroup]]) {
  threadgroup int v[1024];
  v[tid] = input[tid] + 1;
  out[tid] = v[(tid + 1) % n];
}

// synccheck: odd lanes wait at a second barrier that even lanes never reach (a barrier in
// divergent code; two identical barriers in an if / else could be merged by the compiler).
kernel void sanitizer_divergent_barrier(device int* out [[buffer(0)]],
                                        device const int* input [[buffer(1)]],
                                        uint tid [[thread_position_in_threadgroup]],
                                        uint n [[threads_per_threadgroup]]) {
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid % 2 == 1) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[tid] = input[tid];
}

// memcheck: the last lane writes one element past `out`.
kernel void sanitizer_out_of_bounds(device int* out [[buffer(0)]],
                                    device const int* input [[buffer(1)]],
                                    uint tid [[thread_position_in_threadgroup]],
                                    uint n [[threads_per_threadgroup]]) {
  out[tid == n - 1 ? n + 64 : tid] = input[tid];
}

// initcheck: reads `input`, which the driver leaves uninitialised for this control.
kernel void sanitizer_uninitialised_read(device int* out [[buffer(0)]],
                                         device const int* input [[buffer(1)]],
                                         uint tid [[thread_position_in_threadgroup]],
                                         uint n [[threads_per_threadgroup]]) {
  out[tid] = input[tid] * 2;
}
