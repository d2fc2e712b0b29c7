// Runs a Metal dispatch (a grid of threadgroups) on host threads.
//
// Kernels that synchronise (threadgroup memory, barriers, simd collectives) run with one host
// thread per lane, taken from a pool that is reused across threadgroups and dispatches; one
// threadgroup runs at a time (its threadgroup arrays are function-local statics). Kernels without
// any synchronisation run their lanes as a plain loop, threadgroups spread over a few threads.
//
// Lane schedules for synchronising kernels (env ARGON_HOST_SCHEDULE, or set_schedule_override):
//   free     one host thread per lane, all lanes concurrent; the OS interleaves them (this is
//            what ThreadSanitizer checks);
//   forward  lanes as fibers on the dispatching thread, one at a time, in ascending lane order,
//            each until its next barrier, simd collective or return: deterministic and cheap;
//   reverse  the same in descending lane order;
//   auto     (default) free for dispatches of up to kAutoThreadLanes lanes, forward beyond, so
//            large parity cases stay fast.
// On macOS (no usable ucontext) every schedule runs lane threads.
// A missing barrier shows up deterministically under forward (a lane reads what a higher lane
// has not yet written) or reverse (what a lower lane has not yet written).
// A barrier that not every lane reaches, or lanes at different barriers, raises LaneError.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

#include "lane_sync.h"

namespace argon_host {

struct LaneError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Schedule { Free, Forward, Reverse };
constexpr uint64_t kAutoThreadLanes = 32768;
Schedule schedule_from_env(uint64_t lanes);    // the schedule for a dispatch of `lanes` lanes
void set_schedule_override(const char* name);  // "auto" | "free" | "forward" | "reverse" | "" (env)

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t(x) * y * z; }
};

using LaneFn = std::function<void(const LanePosition&)>;

// Runs groups x threads lanes of `fn`. `synchronising` picks the lane-thread path. Throws
// LaneError (with the kernel name) when lanes diverge at a barrier or a lane throws.
void run_dispatch(const char* kernel, Dim3 groups, Dim3 threads, bool synchronising,
                  const LaneFn& fn);

}  // namespace argon_host
