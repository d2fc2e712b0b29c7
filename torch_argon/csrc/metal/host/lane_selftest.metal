// Kernels that use barriers and simd collectives wrongly on purpose, and one that uses them
// rightly: the host runner must run the right one and stop the others with a clear error rather
// than hang (tests/test_metal_host.py). Host only; launched as one threadgroup.
#include <metal_stdlib>
using namespace metal;

// Each lane reads its neighbour's value after a barrier.
kernel void selftest_barrier_ok(device int* out [[buffer(0)]],
                                uint tid [[thread_position_in_threadgroup]],
                                uint n [[threads_per_threadgroup]]) {
  threadgroup int v[1024];
  v[tid] = int(tid) * 10;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = v[(tid + 1) % n];
}

// Lane 3 returns before the barrier the others wait at.
kernel void selftest_early_return(device int* out [[buffer(0)]],
                                  uint tid [[thread_position_in_threadgroup]],
                                  uint n [[threads_per_threadgroup]]) {
  if (tid == 3) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = 1;
}

// Odd and even lanes wait at two different barriers.
kernel void selftest_split_barrier(device int* out [[buffer(0)]],
                                   uint tid [[thread_position_in_threadgroup]],
                                   uint n [[threads_per_threadgroup]]) {
  if (tid % 2 == 1) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[tid] = 1;
}

// Lane 40 skips a simd_sum the rest of its simdgroup performs.
kernel void selftest_simd_early_return(device int* out [[buffer(0)]],
                                       uint tid [[thread_position_in_threadgroup]],
                                       uint n [[threads_per_threadgroup]]) {
  if (tid == 40) return;
  out[tid] = simd_sum(1);
}
