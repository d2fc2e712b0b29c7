// moe_gather on the CPU: xs[r] = x[sorted_token[r]], zero where sorted_token[r] == -1.
// Rows are independent: parallel over rows; a same-dtype row is one memcpy, a conversion
// goes through float (exact for fp16/bf16) and rounds once to the output type.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>

#include "../checks.h"
#include "../op_signatures.h"
#include "../float_dispatch.h"

namespace argon {
namespace {

void moe_gather_out_cpu(const Tensor& x_in, const Tensor& sorted_token_in, const Tensor& out) {
  check_gather(x_in, sorted_token_in, out);
  const Tensor x = x_in.contiguous();
  const Tensor sorted_token = sorted_token_in.contiguous();
  const int64_t R = sorted_token.size(0), T = x.size(0), H = x.size(1);
  const int32_t* tok = sorted_token.const_data_ptr<int32_t>();
  // Check every index before writing anything, so a bad plan cannot read out of bounds.
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK_VALUE(tok[r] >= -1 && tok[r] < T, "sorted_token[", r, "] = ", tok[r],
                " is out of range: expected -1 or a row of x in [0, ", T, ")");
  }
  ARGON_DISPATCH_FLOAT_PAIR(x.scalar_type(), out.scalar_type(), "moe_gather", [&] {
    const in_t* src = x.const_data_ptr<in_t>();
    out_t* dst = out.data_ptr<out_t>();
    at::parallel_for(0, R, std::max<int64_t>(1, 65536 / std::max<int64_t>(H, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        out_t* row = dst + r * H;
        if (tok[r] < 0) {
          std::memset(static_cast<void*>(row), 0, H * sizeof(out_t));
        } else if constexpr (std::is_same_v<in_t, out_t>) {
          std::memcpy(row, src + tok[r] * H, H * sizeof(out_t));
        } else {
          const in_t* s = src + tok[r] * H;
          for (int64_t h = 0; h < H; ++h) row[h] = static_cast<out_t>(static_cast<float>(s[h]));
        }
      }
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("moe_gather_out", TORCH_FN(moe_gather_out_cpu)); }

}  // namespace argon
