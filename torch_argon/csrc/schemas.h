// The argon op schemas, defined from the op table. Both op libraries define them: `argon`
// (dispatched by device: CPU, CUDA, MPS) and `argon_host` (the .metal kernels executed on host
// threads, CPU tensors), so the test suite can run one contract against every backend.
#pragma once
#include <torch/library.h>

#include "op_table.h"

namespace argon {

inline void define_schemas(torch::Library& m) {
#define ARGON_DEFINE_SCHEMA(name, schema, out_schema, Fn, OutFn) \
  m.def(#name schema);                                           \
  m.def(#name "_out" out_schema);
  ARGON_OPS(ARGON_DEFINE_SCHEMA)
#undef ARGON_DEFINE_SCHEMA
}

}  // namespace argon
