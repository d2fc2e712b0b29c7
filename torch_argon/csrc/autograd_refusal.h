// The error an argon op without a backward formula raises where a gradient would be needed
// (grad mode on, an argument requiring grad): an output whose gradient silently never reaches
// its inputs is worse than no output. Raised by the ops' Autograd kernels
// (autograd_skip.cpp) and, through _C.refuse_gradient, by the ops defined in Python.
#pragma once
#include <string_view>

namespace argon {

// Raises NotImplementedError: `op` (e.g. "argon::moe_mm") cannot pass a gradient to `argument`,
// and what to do instead.
[[noreturn]] void refuse_gradient(std::string_view op, std::string_view argument);

}  // namespace argon
