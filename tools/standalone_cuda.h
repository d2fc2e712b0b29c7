// What the standalone GPU checks (tools/*_standalone.cu: a kernel's C entry point and units in
// one binary, no torch, carried to a device and run in seconds) share on the host: the CUDA error
// check (exit code 2), the device's line, copies to and from the device, the multiprocessor
// count, and the median of timed launches.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

#define CHECK_CUDA(call)                                                                     \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);   \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

namespace standalone {

// The output's first line: which GPU gave the numbers.
inline void print_device() {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
}

inline void free_all(std::initializer_list<const void*> buffers) {
  for (const void* p : buffers) CHECK_CUDA(cudaFree(const_cast<void*>(p)));
}

// A device copy of v (16 bytes of slack: the kernels' 16-byte loads near the end stay inside).
template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, v.size() * sizeof(T) + 16));
  CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <class T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> v(n);
  CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

inline int sm_count() {  // asked once: not inside the timed launches
  static int count = 0;
  if (count) return count;
  int dev = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
  return count;
}

// Median of 20 launches after 3 untimed (us), each timed with cudaEvents; -1 where `one` (a
// launch: 0, or nonzero having printed why) failed.
template <class F>
double median_us(F&& one) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    if (one()) return -1;
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    if (i >= 3) ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3;
}

}  // namespace standalone
