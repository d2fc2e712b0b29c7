// The `argon_metal_cuda` op library: the argon _out ops run by the unmodified .metal kernels
// compiled for CUDA (through cuda/prelude/metal_stdlib and generated __global__ wrappers), on CUDA
// tensors, through the same recipe as MPS and the host runner (metal/out_ops.cpp). The test suite
// selects it as backend "metal_cuda": the Metal kernels with real concurrency and 32-wide warps,
// and under compute-sanitizer (bench/h200_metal_cuda.sh). It shows neither Apple's scheduling,
// nor its simdgroup-matrix layout and rounding, nor any speed.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "metal/cuda/cuda_encoder.h"
#include "metal/out_ops.h"

namespace argon::metal {
namespace {

thread_local int64_t t_device = -1;  // the device of the tensors of the op being recorded

class CudaTarget final : public Target {
 public:
  BufArg bind(const at::Tensor& t) override {
    TORCH_CHECK(t.is_cuda(), "metal_cuda: expected a CUDA tensor");
    t_device = t.get_device();
    return BufArg{const_cast<void*>(t.storage().data()),
                  static_cast<uint64_t>(t.storage_offset()) * t.element_size()};
  }
  void encode(const std::function<void(Encoder&)>& body) override {
    CommandRecorder recorder;
    body(recorder);
    if (recorder.commands().empty()) return;
    c10::cuda::OptionalCUDAGuard guard;
    if (t_device >= 0) guard.set_index(static_cast<c10::DeviceIndex>(t_device));
    argon_cuda::CudaEncoder enc(c10::cuda::getCurrentCUDAStream().stream());
    try {
      recorder.replay(enc);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, e.what());
    }
  }
};

Target& cuda_target() {
  static CudaTarget t;
  return t;
}

// One block of `threads` lanes of a kernel of csrc/metal/cuda/sanitizer_selftest.metal, with
// `out` as [[buffer(0)]] and `input` as [[buffer(1)]]: the sanitizer's positive controls.
void sanitizer_selftest(const std::string& kernel, const at::Tensor& out, const at::Tensor& input,
                        int64_t threads) {
  TORCH_CHECK(threads >= 1 && threads <= 1024, "threads must be in [1, 1024]");
  const BufArg o = cuda_target().bind(out), i = cuda_target().bind(input);
  cuda_target().encode([&](Encoder& enc) {
    enc.set_kernel(kernel.c_str());
    enc.set_buffer(0, o);
    enc.set_buffer(1, i);
    enc.dispatch({1, 1, 1}, {static_cast<uint32_t>(threads), 1, 1});
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(argon_metal_cuda, m) {
  m.def("sanitizer_selftest(str kernel, Tensor(a!) out, Tensor input, int threads) -> ()");
}

TORCH_LIBRARY_IMPL(argon_metal_cuda, CUDA, m) {
  register_out_ops<cuda_target>(m);
  m.impl("sanitizer_selftest", TORCH_FN(sanitizer_selftest));
}

}  // namespace argon::metal
