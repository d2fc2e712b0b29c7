// The op libraries' schemas and their functional kernels (functional.h, run through each
// library's own _out kernels): `argon` in torch_argon._C; `argon_host`, and in CUDA builds
// `argon_metal_cuda`, in the test module torch_argon._C_test. Registered as
// CompositeExplicitAutograd: one kernel for every device; the fakes of meta and fake tensors are
// the Python registrations of ops.py, which run the same forms with the checks in place of the
// kernels (python_checks.cpp).
#include <torch/library.h>

#include "functional.h"
#include "schemas.h"

namespace argon {
namespace {

template <const char* NS>
void register_functional(torch::Library& m) {
  using F = Functional<DispatchOut<NS>>;
#define ARGON_IMPL_FUNCTIONAL(name, schema, out_schema, Fn, OutFn) \
  m.impl(#name, TORCH_FN(F::name));
  ARGON_OPS(ARGON_IMPL_FUNCTIONAL)
#undef ARGON_IMPL_FUNCTIONAL
}

}  // namespace

#ifndef ARGON_TEST_MODULE
TORCH_LIBRARY(argon, m) { define_schemas(m); }
TORCH_LIBRARY_IMPL(argon, CompositeExplicitAutograd, m) { register_functional<kArgon>(m); }
#else
// torch_argon._C_test (module_test.cpp): the test executors' op libraries.
TORCH_LIBRARY(argon_host, m) { define_schemas(m); }
TORCH_LIBRARY_IMPL(argon_host, CompositeExplicitAutograd, m) {
  register_functional<kArgonHost>(m);
}
#ifdef ARGON_WITH_CUDA
// The .metal kernels compiled for CUDA (csrc/metal/cuda): the metal_cuda test backend.
TORCH_LIBRARY(argon_metal_cuda, m) { define_schemas(m); }
TORCH_LIBRARY_IMPL(argon_metal_cuda, CompositeExplicitAutograd, m) {
  register_functional<kArgonMetalCuda>(m);
}
#endif
#endif

}  // namespace argon
