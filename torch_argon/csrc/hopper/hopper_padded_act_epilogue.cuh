// The padded Hopper GEMM's gate/up epilogue with the activation fused (hopper_padded_gemm.cuh
// PaddedActGemm): the consumer warpgroups turn their fp32 accumulators of a gate/up tile into
// h = act(gate) * up and store h [rows, I] straight from registers, so gu [rows, 2I] is never
// written and the swiglu pass over it never runs.
//
// Bits. The unfused path's GEMM rounds every accumulator to the output dtype (fp16 / bf16, round
// to nearest even: CUTLASS's LinearCombination with alpha 1 and no C), then swiglu reads gate
// and up back as floats, computes act(g) * u in fp32 and rounds once. This epilogue does the
// same operations in the same order on the same values: both accumulators rounded to the dtype
// and widened back, argon_gated<CudaMath> (csrc/shared/activation.h: the expression the CUDA
// swiglu kernel evaluates, with CUDA's expf / erff / tanhf), one rounding to nearest even. The
// units are compiled with --fmad=false, as the swiglu kernel is (setup.py's nvcc flags;
// build_tools/hopper_build.py UNIT_FLAGS), so no multiply-add of the activation is contracted
// into an fma differently. The accumulators themselves are the plain GEMM's: the same tile,
// wgmma instruction and K order, the interleaved stack only moving a column within the tile (a
// wgmma's sum for one output does not depend on its column's place: the premise the GPU tests
// check with the rest). So h is the unfused path's h bit for bit
// (tests/test_hopper_padded_act.py checks it on the GPU for both dtypes, every activation and
// both configurations).
//
// Pairing. The weight stack's gate and up rows are interleaved in blocks of 8 (torch_argon/
// hopper/padded_ops.py interleave_gate_up): the GEMM's column 16 j + c (c < 8) is gate column
// 8 j + c, column 16 j + 8 + c is up column 8 j + c. A wgmma accumulator (CuTe's CLayout_64xN:
// value mode (2, 2, N / 8) with strides (column 1, row 8, column 8)) gives a thread the columns
// 8 i + 2 (lane % 4) + {0, 1} of two rows; so value (v0, r, 2 j) is gate and (v0, r, 2 j + 1)
// is up of one h element, and the two v0 are adjacent h columns: one 32-bit store of two h
// values, a quad of lanes writing 16 contiguous bytes of a row. The unit asserts the atom's
// accumulator layout at compile time; tools/hopper_act_probe.cu checks the whole partition (every
// thread, both configurations) on the host.
//
// Interface. CUTLASS's sm90 kernels take a register-to-global epilogue through
// Sm90TmaWarpSpecializedAdapter (cutlass/epilogue/collective/detail.hpp: what the epilogue
// builder gives the NoSmemWarpSpecialized schedule around DefaultEpilogue): no epilogue smem,
// no TMA store, no producer load; the kernel calls store(...) per output tile with the
// accumulators, and the adapter calls operator() below. Bounds: the rows of the problem (whole
// 128-row tiles: always inside) and the I columns of h (I a multiple of 8: an 8-column block is
// wholly in or out, and so is each pair). Rows of a used tile are all written (padding rows:
// zeros in, act(0) * 0 = 0 out); tiles the scheduler does not yield are untouched.
#pragma once

#include <cstdint>
#include <cstring>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/numeric_conversion.h>

#include "cuda/cuda_math.cuh"
#include "shared/activation.h"

namespace argon_hopper_padded {

// What GemmUniversalAdapter names EpilogueOutputOp (its types only; nothing calls it).
template <class Element>
struct GateUpActThreadOp {
  using ElementOutput = Element;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementD = Element;
  static constexpr int kCount = 2;
  struct Params {};
};

template <class Element>
class GateUpActEpilogue {
 public:
  using ElementC = void;  // no source operand
  using ElementD = Element;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;
  using StrideD = StrideC;  // h: row-major, shared by every expert (L stride 0)
  using ThreadEpilogueOp = GateUpActThreadOp<Element>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  struct Arguments {
    Element* ptr_h = nullptr;  // h [rows, n_h], row stride ldh
    int64_t ldh = 0;
    int32_t n_h = 0;           // I: half the GEMM's N
    int32_t activation = ARGON_ACT_SILU;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  // The GEMM's N is 2 n_h with n_h a multiple of 8 (whole blocks of 8 gate / up columns), h's
  // rows hold n_h values and start 4-byte aligned (a pair is one 32-bit store).
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    return args.ptr_h != nullptr && args.n_h > 0 && args.n_h % 8 == 0 &&
           int64_t(cute::get<1>(problem_shape)) == 2 * int64_t(args.n_h) &&
           args.ldh >= args.n_h && args.ldh % 2 == 0 &&
           reinterpret_cast<uintptr_t>(args.ptr_h) % 4 == 0 &&
           (args.activation == ARGON_ACT_SILU || args.activation == ARGON_ACT_GELU ||
            args.activation == ARGON_ACT_GELU_TANH);
  }

  CUTLASS_HOST_DEVICE
  GateUpActEpilogue(Params const& params, SharedStorage const& = SharedStorage())
      : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  // The adapter's call per output tile (Sm90TmaWarpSpecializedAdapter::store).
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    // one loop per activation, the branch taken once per tile (uniform across the CTA)
    if (params_.activation == ARGON_ACT_GELU) {
      store_h<ARGON_ACT_GELU>(problem_shape_mnkl, blk_shape, blk_coord_mnkl, accumulators,
                              tiled_mma, thread_idx);
    } else if (params_.activation == ARGON_ACT_GELU_TANH) {
      store_h<ARGON_ACT_GELU_TANH>(problem_shape_mnkl, blk_shape, blk_coord_mnkl, accumulators,
                                   tiled_mma, thread_idx);
    } else {
      store_h<ARGON_ACT_SILU>(problem_shape_mnkl, blk_shape, blk_coord_mnkl, accumulators,
                              tiled_mma, thread_idx);
    }
  }

 private:
  template <int Act, class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL,
            class FrgEngine, class FrgLayout, class TiledMma>
  CUTLASS_DEVICE void store_h(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK,
                              BlockCoordMNKL blk_coord_mnkl,
                              cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma,
                              int thread_idx) const {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value && is_static<FrgLayout>::value,
                  "static tile and accumulator layouts");
    constexpr int kTileM = size<0>(BlockShapeMNK{});
    constexpr int kTileN = size<1>(BlockShapeMNK{});
    static_assert(kTileN % 16 == 0, "whole blocks of 8 gate and 8 up columns per tile");
    // The accumulator's value mode is the wgmma atom's (2, 2, N / 8): the premise of the
    // pairing (above), checked on the atom's own layout.
    using AtomC = typename TiledMma::Atom::Traits::CLayout;
    constexpr int kAtomN = size<1>(typename TiledMma::AtomShape_MNK{});
    static_assert(std::is_same_v<AtomC, SM90::GMMA::CLayout_64xN<kAtomN>>,
                  "the gate/up pairing assumes the wgmma accumulator layout CLayout_64xN");
    static_assert(rank<0>(FrgLayout{}) == 3 && size<0, 0>(FrgLayout{}) == 2 &&
                      size<0, 1>(FrgLayout{}) == 2 && size<0, 2>(FrgLayout{}) % 2 == 0,
                  "accumulator values (2, 2, N / 8), N / 8 even");
    constexpr int kBlocks = size<0, 2>(FrgLayout{});  // 8-column blocks of a thread's atom
    constexpr int kMmaM = size<1>(FrgLayout{});
    constexpr int kMmaN = size<2>(FrgLayout{});

    const int rows = int(get<0>(problem_shape_mnkl));
    const int m0 = int(get<0>(blk_coord_mnkl)) * kTileM;
    const int n0 = int(get<1>(blk_coord_mnkl)) * kTileN;  // the GEMM's (interleaved) column
    // (m, n) in the tile of every accumulator value of this thread
    Tensor coord = tiled_mma.get_thread_slice(thread_idx)
                       .partition_C(make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{})));
    static_assert(decltype(size(coord))::value == decltype(size(acc))::value,
                  "one coordinate per accumulator value");

    using ToElement = cutlass::NumericArrayConverter<Element, float, 2,
                                                     cutlass::FloatRoundStyle::round_to_nearest>;
    using ToFloat = cutlass::NumericArrayConverter<float, Element, 2>;
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < kMmaM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < kMmaN; ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < 2; ++r) {
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < kBlocks / 2; ++j) {
            const auto gate0 = make_coord(make_coord(0, r, 2 * j), mm, nn);
            const auto gate1 = make_coord(make_coord(1, r, 2 * j), mm, nn);
            const auto up0 = make_coord(make_coord(0, r, 2 * j + 1), mm, nn);
            const auto up1 = make_coord(make_coord(1, r, 2 * j + 1), mm, nn);
            const auto at = coord(gate0);
            const int row = m0 + int(get<0>(at));
            const int col = n0 + int(get<1>(at));    // gate's GEMM column: col % 16 < 8, even
            const int hcol = (col >> 4) * 8 + (col & 7);  // and its h column (hcol + 1 beside)
            if (row < rows && hcol < params_.n_h) {
              cutlass::Array<float, 2> g, u, h;
              g[0] = acc(gate0);
              g[1] = acc(gate1);
              u[0] = acc(up0);
              u[1] = acc(up1);
              // the GEMM's rounding of gate and up, then swiglu's fp32 value and its rounding
              const cutlass::Array<float, 2> gr = ToFloat{}(ToElement{}(g));
              const cutlass::Array<float, 2> ur = ToFloat{}(ToElement{}(u));
              h[0] = argon_gated<argon::cuda::CudaMath>(gr[0], ur[0], Act);
              h[1] = argon_gated<argon::cuda::CudaMath>(gr[1], ur[1], Act);
              const cutlass::Array<Element, 2> out = ToElement{}(h);
              uint32_t bits;
              static_assert(sizeof(out) == sizeof(bits), "two 16-bit values");
              memcpy(&bits, &out, sizeof bits);
              *reinterpret_cast<uint32_t*>(params_.ptr_h + int64_t(row) * params_.ldh + hcol) =
                  bits;
            }
          }
        }
      }
    }
  }

  Params params_;
};

}  // namespace argon_hopper_padded
