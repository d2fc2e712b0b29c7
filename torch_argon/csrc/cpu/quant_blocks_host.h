// torch_argon/metal/quant_blocks.h (the GGUF block structs and chunk dequants, written in Metal
// Shading Language) compiled as C++ through the host shim of <metal_stdlib>, whose address-space
// keywords are macros (`device`, `constant`, `thread`, `kernel`, `threadgroup`). They would
// rename torch's own identifiers (Tensor::device()), so include this header after every other
// one; it removes the macros again. Torch-free.
// The CPU build's -ffp-contract=off keeps each * and - of the formulas a separate rounding.
#pragma once
#include <metal_stdlib>

#include "quant_blocks.h"

#undef kernel
#undef device
#undef constant
#undef threadgroup
#undef thread
