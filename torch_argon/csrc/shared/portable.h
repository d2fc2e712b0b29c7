// The common subset of the Metal Shading Language, CUDA and C++ that the shared headers of this
// folder are written in, so that the Metal kernels, the CUDA kernels and the CPU kernels include
// the same definitions (params structs, block layouts, the activation formulas) as they are.
//
//   argon_u8 / u16 / u32 / u64, argon_i32   fixed-width integers (Metal's uchar ... ulong)
//   ARGON_FN                              a helper function: `inline` (and __device__ in CUDA)
//   ARGON_DEVICE, ARGON_THREAD            Metal's address spaces of a buffer and of a thread's
//                                         own memory, on pointers; nothing elsewhere
//   ARGON_CONSTANT                        program-scope lookup tables: `constant` in Metal,
//                                         `const` elsewhere
//   argon_as_float(u32), argon_as_u32(f)  the bits of a float, and back
//
// The including side may define ARGON_DEVICE, ARGON_THREAD, ARGON_CONSTANT or ARGON_FN before
// its first include to supply its own (the metal_cuda units put the tables in __device__
// memory); these are only defaults. Nothing here defines a Metal keyword as a macro, so a C++
// file can include the shared headers with torch's.
#pragma once

#if defined(__METAL_VERSION__)
#include <metal_stdlib>
typedef uchar argon_u8;
typedef ushort argon_u16;
typedef uint argon_u32;
typedef int argon_i32;
typedef ulong argon_u64;
#ifndef ARGON_DEVICE
#define ARGON_DEVICE device
#endif
#ifndef ARGON_THREAD
#define ARGON_THREAD thread
#endif
#ifndef ARGON_CONSTANT
#define ARGON_CONSTANT constant
#endif
#ifndef ARGON_FN
#define ARGON_FN inline
#endif
ARGON_FN float argon_as_float(argon_u32 u) { return metal::as_type<float>(u); }
ARGON_FN argon_u32 argon_as_u32(float f) { return metal::as_type<uint>(f); }

#else  // C++ and CUDA
#include <stdint.h>
#include <string.h>
typedef uint8_t argon_u8;
typedef uint16_t argon_u16;
typedef uint32_t argon_u32;
typedef int32_t argon_i32;
typedef uint64_t argon_u64;
#ifndef ARGON_DEVICE
#define ARGON_DEVICE
#endif
#ifndef ARGON_THREAD
#define ARGON_THREAD
#endif
#ifndef ARGON_CONSTANT
#define ARGON_CONSTANT const
#endif
#ifndef ARGON_FN
#if defined(__CUDACC__)
#define ARGON_FN __host__ __device__ __forceinline__
#else
#define ARGON_FN inline
#endif
#endif
ARGON_FN float argon_as_float(argon_u32 u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
ARGON_FN argon_u32 argon_as_u32(float f) {
  argon_u32 u;
  memcpy(&u, &f, sizeof u);
  return u;
}
#endif
