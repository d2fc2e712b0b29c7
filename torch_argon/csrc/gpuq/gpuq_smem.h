// The shared-memory primitives of the tile-decode kernels (gpuq_tiled_kernel.h), written twice
// like gpuq_prims.h: as CUDA (inline PTX: ldmatrix, cp.async) for sm_80+, and as plain C++ for
// the host emulation (gpuq_host_runtime.h: every lane a fiber on one thread, so a block's static
// shared memory is memory every lane of the block sees).
//
// ldmatrix.sync.aligned.m8n8.x4.b16 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"):
// four 8 x 8 matrices of 16-bit values, one 16-byte row each at an address a lane gives: lanes
// 8i .. 8i + 7 give rows 0 .. 7 of matrix i. Register i of lane l then holds matrix i's row
// l / 4, values 2 (l % 4) and 2 (l % 4) + 1 (the lower one in the lower half): exactly the
// m16n8k16 fragment layouts of gpuq_prims.h for an A tile read by rows (matrices: rows 0-7 /
// 8-15 x values 0-7 / 8-15) and a B tile stored as B^T rows. The emulation exchanges the 32
// row addresses through the warp and each lane reads its four words from them.
//
// cp.async.cg.shared.global, 16 bytes: the copy of a global 16-byte chunk into shared memory
// without a register round trip, or 16 zero bytes (its src-size 0 form); issued copies are
// complete after cp_async_wait_all (cp.async.wait_all: the issuing thread's copies; a block
// barrier after it makes them every thread's). The emulation queues each thread's copies and
// carries them out at its wait (gpuq_host_runtime.h), so a kernel that reads a buffer before
// waiting for its copies reads stale bytes there too, and its tests fail.
#pragma once
#include "gpuq_prims.h"

namespace gpuq {
inline namespace GPUQ_TARGET {

// Four registers of the m8n8.x4 matrices whose rows this warp's lanes point at (`row`: this
// lane's row, 16-byte aligned, in shared memory).
GQ_DEV void ldmatrix_x4(uint32_t r[4], const void* row) {
#if defined(__CUDACC__)
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  const uint8_t* mine = checked<16>(static_cast<const uint8_t*>(row));
  const uint8_t* rows[32];
  host::warp_exchange(&mine, sizeof mine, rows);
  const int lane = host::lane_id();
  for (int i = 0; i < 4; ++i) std::memcpy(&r[i], rows[8 * i + lane / 4] + 4 * (lane % 4), 4);
#endif
}

// 16 bytes from global `src` to shared `dst` (both 16-byte aligned), or 16 zero bytes where
// !valid (src is then not read).
GQ_DEV void cp_async_16(void* dst, const void* src, bool valid) {
#if defined(__CUDACC__)
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(addr), "l"(src),
               "r"(valid ? 16 : 0));
#else
  uint8_t* d = const_cast<uint8_t*>(checked<16>(static_cast<const uint8_t*>(dst)));
  host::issue_async_copy(d, valid ? checked<16>(static_cast<const uint8_t*>(src)) : nullptr);
#endif
}

// Closes this thread's group of issued copies (cp.async.commit_group).
GQ_DEV void cp_async_commit() {
#if defined(__CUDACC__)
  asm volatile("cp.async.commit_group;");
#endif
}

// Waits until every copy this thread issued has landed (cp.async.wait_all).
GQ_DEV void cp_async_wait_all() {
#if defined(__CUDACC__)
  asm volatile("cp.async.wait_all;" ::: "memory");
#else
  host::complete_async_copies();
#endif
}

// 8 bytes (two words) to an 8-byte aligned address (a shared-memory store).
GQ_DEV void store_8_bytes(void* dst, uint32_t lo, uint32_t hi) {
#if defined(__CUDACC__)
  *static_cast<uint2*>(dst) = make_uint2(lo, hi);
#else
  const uint32_t words[2] = {lo, hi};
  std::memcpy(const_cast<uint8_t*>(checked<8>(static_cast<const uint8_t*>(dst))), words, 8);
#endif
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
