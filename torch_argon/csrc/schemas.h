// The argon op schemas, written once. Both op libraries define them: `argon` (dispatched by
// device: CPU, CUDA, MPS) and `argon_host` (the .metal kernels executed on host threads, CPU
// tensors), so the test suite can run one contract against every backend.
#pragma once
#include <torch/library.h>

namespace argon {

inline void define_schemas(torch::Library& m) {
  // Functional forms: allocate their outputs (sizes from shapes only), then run the _out form.
  m.def("moe_plan(Tensor topk_ids, Tensor topk_weights, int n_expert, int tile_m) -> "
        "(Tensor counts, Tensor offsets, Tensor sorted_token, Tensor sorted_weight, Tensor pos, "
        "Tensor tile_expert, Tensor meta)");
  m.def("moe_gather(Tensor x, Tensor sorted_token, ScalarType? out_dtype=None) -> Tensor");
  m.def("moe_combine(Tensor y, Tensor pos, Tensor topk_weights, Tensor? shared=None, "
        "Tensor? residual=None, ScalarType? out_dtype=None) -> Tensor");
  m.def("swiglu(Tensor gate, Tensor? up=None, ScalarType? out_dtype=None) -> Tensor");
  m.def("moe_mm(Tensor xs, Tensor w, Tensor tile_expert, int tile_m) -> Tensor");

  // _out forms: write every element of caller-provided outputs. Backends implement these.
  m.def("moe_plan_out(Tensor topk_ids, Tensor topk_weights, int n_expert, int tile_m, "
        "Tensor(a!) counts, Tensor(b!) offsets, Tensor(c!) sorted_token, Tensor(d!) sorted_weight, "
        "Tensor(e!) pos, Tensor(f!) tile_expert, Tensor(g!) meta) -> ()");
  m.def("moe_gather_out(Tensor x, Tensor sorted_token, Tensor(a!) out) -> ()");
  m.def("moe_combine_out(Tensor y, Tensor pos, Tensor topk_weights, Tensor? shared, "
        "Tensor? residual, Tensor(a!) out) -> ()");
  m.def("swiglu_out(Tensor gate, Tensor? up, Tensor(a!) out) -> ()");
  m.def("moe_mm_out(Tensor xs, Tensor w, Tensor tile_expert, int tile_m, Tensor(a!) out) -> ()");
}

}  // namespace argon
