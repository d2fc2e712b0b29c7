// Fibers for the host emulation of the gpuq kernels (gpuq_host_runtime.h).
#include "gpuq_host_runtime.h"

#include <ucontext.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpuq::host {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kMaxExchange = 64;

struct AsyncCopy {
  void* dst;
  const void* src;  // null: zeros
};

struct Lane {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  int flat = 0;
  bool done = false;
  std::vector<AsyncCopy> copies;  // issued, not yet waited for
};

struct WarpState {
  int arrived = 0;
  uint64_t generation = 0;
  unsigned char slots[32][kMaxExchange];
};

struct BarrierState {
  int arrived = 0;
  uint64_t generation = 0;
};

struct Block {
  std::vector<Lane> lanes;
  std::vector<WarpState> warps;
  BarrierState barrier;
  ucontext_t scheduler;
  const std::function<void()>* kernel = nullptr;
  int bx = 0, by = 0;
  uint64_t events = 0;  // arrivals and returns: progress, for the divergence check
  std::string error;
};

Block* g_block = nullptr;  // the block being run (launch is not reentrant)
Lane* g_lane = nullptr;

void lane_entry() {
  Lane* me = g_lane;
  try {
    (*g_block->kernel)();
  } catch (const std::exception& e) {
    if (g_block->error.empty()) g_block->error = e.what();
  }
  if (!me->copies.empty() && g_block->error.empty()) {
    g_block->error = "gpuq host: thread " + std::to_string(me->flat) + " returned with " +
                     std::to_string(me->copies.size()) + " cp.async copies never waited for";
  }
  me->done = true;
  ++g_block->events;
  // returns to uc_link (the scheduler)
}

}  // namespace

int lane_id() { return g_lane->flat % 32; }
int thread_id() { return g_lane->flat; }
int warp_id() { return g_lane->flat / 32; }
int block_x() { return g_block->bx; }
int block_y() { return g_block->by; }

void issue_async_copy(void* dst, const void* src) { g_lane->copies.push_back({dst, src}); }

void complete_async_copies() {
  for (const AsyncCopy& c : g_lane->copies) {
    if (c.src) {
      std::memcpy(c.dst, c.src, 16);
    } else {
      std::memset(c.dst, 0, 16);
    }
  }
  g_lane->copies.clear();
}

// Every one of `count` lanes arrives here before any leaves: the last to arrive opens the next
// generation; the others yield to the scheduler until it has.
template <class State>
static void barrier(State& b, int count, Lane* me) {
  const uint64_t gen = b.generation;
  ++g_block->events;
  if (++b.arrived == count) {
    b.arrived = 0;
    ++b.generation;
  } else {
    while (b.generation == gen) swapcontext(&me->ctx, &g_block->scheduler);
  }
  g_lane = me;
}

static void warp_barrier(WarpState& w, Lane* me) { barrier(w, 32, me); }

void block_barrier() {
  barrier(g_block->barrier, static_cast<int>(g_block->lanes.size()), g_lane);
}

void warp_exchange(const void* mine, size_t bytes, void* all) {
  if (bytes > kMaxExchange) throw std::runtime_error("gpuq host: warp exchange too large");
  Lane* me = g_lane;
  WarpState& w = g_block->warps[me->flat / 32];
  std::memcpy(w.slots[me->flat % 32], mine, bytes);
  warp_barrier(w, me);
  for (int l = 0; l < 32; ++l)
    std::memcpy(static_cast<unsigned char*>(all) + l * bytes, w.slots[l], bytes);
  warp_barrier(w, me);  // nobody overwrites the slots before every lane has copied them
}

std::string launch(int grid_x, int grid_y, int threads, const std::function<void()>& kernel) {
  if (threads % 32) return "gpuq host: threads must be a multiple of 32";
  Block block;
  block.kernel = &kernel;
  block.lanes.resize(threads);
  block.warps.resize(threads / 32);
  for (int i = 0; i < threads; ++i) {
    block.lanes[i].stack.reset(new char[kStackBytes]);
    block.lanes[i].flat = i;
  }
  g_block = &block;
  for (int by = 0; by < grid_y && block.error.empty(); ++by) {
    for (int bx = 0; bx < grid_x && block.error.empty(); ++bx) {
      block.bx = bx;
      block.by = by;
      for (auto& w : block.warps) w.arrived = 0;
      block.barrier.arrived = 0;
      for (auto& lane : block.lanes) {
        lane.done = false;
        lane.copies.clear();  // a block that failed may have left some
        getcontext(&lane.ctx);
        lane.ctx.uc_stack.ss_sp = lane.stack.get();
        lane.ctx.uc_stack.ss_size = kStackBytes;
        lane.ctx.uc_link = &block.scheduler;
        makecontext(&lane.ctx, lane_entry, 0);
      }
      int remaining = threads;
      while (remaining > 0) {
        const uint64_t before = block.events;
        for (auto& lane : block.lanes) {
          if (lane.done) continue;
          g_lane = &lane;
          swapcontext(&block.scheduler, &lane.ctx);
          if (lane.done) --remaining;
        }
        if (!block.error.empty()) break;  // a lane threw: its error, not the others' wait
        if (remaining > 0 && block.events == before) {
          block.error = "gpuq host: lanes diverged at a warp exchange (mma) or a block barrier "
                        "in block (" + std::to_string(bx) + ", " + std::to_string(by) + ")";
          break;
        }
      }
    }
  }
  g_block = nullptr;
  g_lane = nullptr;
  return block.error;
}

}  // namespace gpuq::host
