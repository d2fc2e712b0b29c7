// The GGUF weight formats as the C++ side knows them: ggml type id, name, values and bytes per
// block, and whether the quantized ops have kernels for it (the block formats of quant_params.h;
// the plain float types F32 / F16 / BF16 are known, to name them in errors, but take no kernel).
// It mirrors torch_argon/quant/formats.py; tests/test_quant_ops.py checks that they agree.
// Free of torch (module.cpp exposes it to Python as _C.quant_formats()).
#pragma once
#include <cstdint>

#include "shared/quant_params.h"

namespace argon {

struct QuantFormat {
  const char* name;     // the GGUF name, e.g. "Q4_K"
  int32_t type_id;      // gguf.GGMLQuantizationType
  int32_t block_elems;  // values per block
  int32_t block_bytes;  // bytes per block
  bool has_kernels;     // dequantize / moe_qmm take it
};

inline constexpr QuantFormat kQuantFormats[] = {
    {"F32", 0, 1, 4, false},
    {"F16", 1, 1, 2, false},
    {"BF16", 30, 1, 2, false},
#define ARGON_QUANT_FORMAT_ROW(lower, UPPER, id, elems, bytes) {#UPPER, id, elems, bytes, true},
    ARGON_QUANT_FORMATS(ARGON_QUANT_FORMAT_ROW)
#undef ARGON_QUANT_FORMAT_ROW
};

// The format with ggml type id `type_id`, or nullptr.
inline const QuantFormat* find_quant_format(int64_t type_id) {
  for (const QuantFormat& f : kQuantFormats) {
    if (f.type_id == type_id) return &f;
  }
  return nullptr;
}

}  // namespace argon
