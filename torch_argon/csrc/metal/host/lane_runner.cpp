// The lane runner. All state of one threadgroup in flight lives in a ThreadGroupRun.
//  - free: one pooled host thread per lane; the state is guarded by one mutex, lanes block on
//    condition variables (an idle lane costs nothing) and every wait has a deadline, so a stuck
//    threadgroup ends in an error, not a hang.
//  - forward / reverse: every lane is a fiber (ucontext) on the dispatching thread; a scheduler
//    resumes the runnable lanes in schedule order, each until its next barrier, collective or
//    return. Deterministic, and a lane switch costs far less than an OS thread switch.
// Both paths share the bookkeeping of arrivals (note_arrival / note_exit), so divergence is
// diagnosed the same way. macOS has only deprecated ucontext: there every schedule uses threads.
//
// The state machines (one threadgroup in flight):
//
// A sync group (SyncGroup: the threadgroup's lanes for threadgroup_barrier, or the up to 32 lanes
// of one simdgroup for a simd collective) cycles through
//   idle     arrived == 0;
//   filling  0 < arrived, arrived + exited < size: every arrival so far came from one call site
//            (file:line, recorded by the first arrival);
//   complete the arrival that makes arrived + exited == size with exited == 0: generation += 1,
//            arrived = 0 (idle again), and every member waiting on this generation goes on.
// Failures of a group (each marks the whole threadgroup failed): an arrival from another call site
// ("lanes reached different ..."), or arrived + exited == size with exited > 0, by an arrival or
// by the exit that closes the count ("... not reached by N of M lanes (they returned first)").
// A simd collective is two rounds on its group: exchange_begin (publish the lane's slot, wait for
// all) and exchange_done (wait until all have read, so the slots can be reused).
//
// A lane (ThreadGroupRun::state) is
//   runnable --arrive at a collective that is not complete--> blocked
//   runnable --arrive and complete it--> runnable (and its group's blocked lanes -> runnable)
//   blocked  --the group completes--> runnable
//   runnable --return from the kernel--> exited (note_exit, which may fail a waiting group)
//   any      --the threadgroup fails--> unwinds by throwing Abort at its next step --> exited
// Under `free` the blocked state is a wait on the group's condition variable (with kDeadline:
// "timed out at ..."); the state vector records only exits. Under forward / reverse the vector
// drives the scheduler: it resumes the next runnable lane after the last one in schedule order,
// and "deadlock" when none is runnable while some are not exited; lanes left blocked after a
// failure are abandoned (their fibers are re-made for the next threadgroup).
//
// The threadgroup (ThreadGroupRun) is running until finished == n (every lane exited) or failed
// (the first error kept, all waiters woken); run_threadgroup then throws LaneError for a failure.
#include "lane_runner.h"

#include <pthread.h>
#if !defined(__APPLE__)
#include <ucontext.h>
#define ARGON_LANE_FIBERS 1
#endif

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace argon_host {
namespace {

constexpr auto kDeadline = std::chrono::seconds(120);
constexpr size_t kLaneStackBytes = 1 << 20;   // lane threads
constexpr size_t kFiberStackBytes = 256 << 10;  // lane fibers

struct Abort {};  // unwinds a lane once its threadgroup has failed

enum LaneState : uint8_t { kRunnable, kBlocked, kExited };

struct SyncGroup {
  uint32_t first = 0, size = 0;  // member lanes [first, first + size)
  uint32_t arrived = 0, exited = 0;
  uint64_t generation = 0;
  const char* file = nullptr;
  int line = 0;
  std::condition_variable cv;  // free schedule: waiters of this group
  uint64_t slots[kSimdWidth] = {};
};

struct ThreadGroupRun {
  const LaneFn* fn = nullptr;
  Schedule schedule = Schedule::Free;
  Dim3 tgid, threads, groups;
  uint32_t n = 0;

  SyncGroup tg;
  std::unique_ptr<SyncGroup[]> simd;
  std::vector<LaneState> state;
  bool failed = false;
  std::string error;
  uint32_t finished = 0;

  // free schedule
  std::mutex m;
  std::condition_variable done_cv;
#ifdef ARGON_LANE_FIBERS
  ucontext_t scheduler{};  // forward / reverse schedule
#endif

  SyncGroup& simd_of(uint32_t lane) { return simd[lane / kSimdWidth]; }
  uint32_t n_simd() const { return (n + kSimdWidth - 1) / kSimdWidth; }
  uint32_t lane_at(uint32_t p) const { return schedule == Schedule::Reverse ? n - 1 - p : p; }
};

void fiber_yield(ThreadGroupRun& r, uint32_t me);  // lane fiber -> scheduler (below)

thread_local const LanePosition* tls_pos = nullptr;
thread_local ThreadGroupRun* tls_run = nullptr;
thread_local uint32_t tls_lane = 0;

std::string site(const char* file, int line) {
  const char* slash = file ? std::strrchr(file, '/') : nullptr;
  return std::string(slash ? slash + 1 : (file ? file : "?")) + ":" + std::to_string(line);
}

void mark_failed(ThreadGroupRun& r, const std::string& msg) {
  if (!r.failed) {
    r.failed = true;
    r.error = msg;
  }
  if (r.schedule == Schedule::Free) {  // wake every waiter so it can unwind
    r.tg.cv.notify_all();
    for (uint32_t s = 0; s < r.n_simd(); ++s) r.simd[s].cv.notify_all();
    r.done_cv.notify_all();
  }
}

[[noreturn]] void fail(ThreadGroupRun& r, const std::string& msg) {
  mark_failed(r, msg);
  throw Abort{};
}

// Records lane `me` arriving at a collective of `g`; returns whether it completes the group.
bool note_arrival(ThreadGroupRun& r, SyncGroup& g, uint32_t me, const char* what,
                  const char* file, int line) {
  if (r.failed) throw Abort{};
  if (g.arrived == 0) {
    g.file = file;
    g.line = line;
  } else if (g.line != line || std::strcmp(g.file, file) != 0) {
    fail(r, std::string("lanes reached different ") + what + "s: " + site(g.file, g.line) +
                " and " + site(file, line) + " (lane " + std::to_string(me) + ")");
  }
  ++g.arrived;
  const bool complete = g.arrived + g.exited == g.size;
  if (complete && g.exited > 0) {
    fail(r, std::string(what) + " at " + site(file, line) + " not reached by " +
                std::to_string(g.exited) + " of " + std::to_string(g.size) +
                " lanes (they returned first)");
  }
  if (complete) {
    g.arrived = 0;
    ++g.generation;
  }
  return complete;
}

void note_exit(ThreadGroupRun& r, uint32_t me) {
  r.state[me] = kExited;
  for (SyncGroup* g : {&r.tg, &r.simd_of(me)}) {
    ++g->exited;
    if (g->arrived > 0 && g->arrived + g->exited == g->size && !r.failed) {
      mark_failed(r, std::string(g == &r.tg ? "threadgroup_barrier" : "simd collective") +
                         " at " + site(g->file, g->line) + " not reached by " +
                         std::to_string(g->exited) + " of " + std::to_string(g->size) +
                         " lanes (they returned first)");
    }
  }
  ++r.finished;
}

// One lane arrives at a collective of `g` (the threadgroup, or its simdgroup) and returns once
// every member has arrived.
void arrive(ThreadGroupRun& r, SyncGroup& g, const char* what, const char* file, int line) {
  const uint32_t me = tls_lane;
  if (r.schedule == Schedule::Free) {
    std::unique_lock<std::mutex> lock(r.m);
    if (note_arrival(r, g, me, what, file, line)) {
      g.cv.notify_all();
      return;
    }
    const uint64_t gen = g.generation;
    if (!g.cv.wait_for(lock, kDeadline, [&] { return g.generation != gen || r.failed; })) {
      fail(r, std::string("timed out at ") + what + " " + site(file, line));
    }
    if (r.failed) throw Abort{};
    return;
  }
  // Fibers: block (or stay runnable once the group completes) and hand over to the scheduler.
  const bool complete = note_arrival(r, g, me, what, file, line);
  r.state[me] = kBlocked;
  if (complete) {
    for (uint32_t l = g.first; l < g.first + g.size; ++l)
      if (r.state[l] == kBlocked) r.state[l] = kRunnable;
  }
  const LanePosition* pos = tls_pos;
  fiber_yield(r, me);
  tls_pos = pos;
  tls_lane = me;
  if (r.failed) throw Abort{};
}

LanePosition position(const ThreadGroupRun& r, uint32_t lane) {
  LanePosition p{};
  p.tgid[0] = r.tgid.x, p.tgid[1] = r.tgid.y, p.tgid[2] = r.tgid.z;
  p.tid[0] = lane % r.threads.x;
  p.tid[1] = lane / r.threads.x % r.threads.y;
  p.tid[2] = lane / (r.threads.x * r.threads.y);
  p.tg_size[0] = r.threads.x, p.tg_size[1] = r.threads.y, p.tg_size[2] = r.threads.z;
  p.grid_tgs[0] = r.groups.x, p.grid_tgs[1] = r.groups.y, p.grid_tgs[2] = r.groups.z;
  p.flat = lane;
  p.simd_group = lane / kSimdWidth;
  p.simd_lane = lane % kSimdWidth;
  return p;
}

void lane_threw(ThreadGroupRun& r, uint32_t lane, const char* what) {
  const std::string msg = "lane " + std::to_string(lane) + " threw: " + what;
  if (r.schedule == Schedule::Free) {
    std::lock_guard<std::mutex> lock(r.m);
    mark_failed(r, msg);
  } else {
    mark_failed(r, msg);
  }
}

// Runs lane `lane` of r to its end; a failure of the threadgroup unwinds it early.
void lane_body(ThreadGroupRun& r, uint32_t lane, const LanePosition& pos) {
  tls_pos = &pos;
  tls_run = &r;
  tls_lane = lane;
  try {
    (*r.fn)(pos);
  } catch (const Abort&) {
  } catch (const std::exception& e) {
    lane_threw(r, lane, e.what());
  } catch (...) {  // nothing may leave a lane: past a thread's or fiber's start it ends the process
    lane_threw(r, lane, "an exception that is not a std::exception");
  }
}

// ---- free schedule: pooled lane threads ------------------------------------------------------
struct Worker {
  std::mutex m;
  std::condition_variable go_cv;
  bool go = false;
  ThreadGroupRun* run = nullptr;
  uint32_t lane = 0;
};

void* worker_main(void* arg) {
  Worker& w = *static_cast<Worker*>(arg);
  for (;;) {
    ThreadGroupRun* r;
    uint32_t lane;
    {
      std::unique_lock<std::mutex> lock(w.m);
      w.go_cv.wait(lock, [&] { return w.go; });
      w.go = false;
      r = w.run;
      lane = w.lane;
    }
    const LanePosition pos = position(*r, lane);
    lane_body(*r, lane, pos);
    std::lock_guard<std::mutex> lock(r->m);
    note_exit(*r, lane);
    if (r->finished == r->n) r->done_cv.notify_all();
    tls_run = nullptr;
    tls_pos = nullptr;
  }
  return nullptr;
}

// Lane threads: created on demand and reused by every threadgroup; never destroyed (the pool is
// leaked on purpose: its threads wait on it until the process ends).
class LanePool {
 public:
  Worker* get(uint32_t i) {
    while (workers_.size() <= i) {
      auto* w = new Worker();
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, kLaneStackBytes);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      pthread_t t;
      const int rc = pthread_create(&t, &attr, worker_main, w);
      pthread_attr_destroy(&attr);
      if (rc != 0) throw LaneError("could not start a lane thread: " + std::string(strerror(rc)));
      workers_.push_back(w);
    }
    return workers_[i];
  }

 private:
  std::vector<Worker*> workers_;
};

void run_threads(ThreadGroupRun& r) {
  static LanePool* pool = new LanePool();
  // Every lane's thread exists before the first lane starts: a thread that cannot be made then
  // raises with no lane holding a reference to r.
  pool->get(r.n - 1);
  for (uint32_t l = 0; l < r.n; ++l) {
    Worker& w = *pool->get(l);
    std::lock_guard<std::mutex> lock(w.m);
    w.run = &r;
    w.lane = l;
    w.go = true;
    w.go_cv.notify_one();
  }
  std::unique_lock<std::mutex> lock(r.m);
  r.done_cv.wait(lock, [&] { return r.finished == r.n; });
}

#ifdef ARGON_LANE_FIBERS
// ---- forward / reverse schedule: lanes as fibers ---------------------------------------------
struct Fiber {
  ucontext_t ctx{};
  // Not value-initialised: untouched stack pages are never committed.
  std::unique_ptr<char[]> stack{new char[kFiberStackBytes]};
  LanePosition pos{};
};
std::vector<std::unique_ptr<Fiber>>* g_fibers = new std::vector<std::unique_ptr<Fiber>>();

void fiber_main() {
  ThreadGroupRun& r = *tls_run;
  const uint32_t lane = tls_lane;
  lane_body(r, lane, (*g_fibers)[lane]->pos);
  note_exit(r, lane);
}  // returns to r.scheduler through uc_link

void run_fibers(ThreadGroupRun& r) {
  while (g_fibers->size() < r.n) g_fibers->push_back(std::make_unique<Fiber>());
  for (uint32_t l = 0; l < r.n; ++l) {
    Fiber& f = *(*g_fibers)[l];
    f.pos = position(r, l);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kFiberStackBytes;
    f.ctx.uc_link = &r.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
  }
  uint32_t cursor = r.n - 1;  // schedule position of the last lane resumed
  while (!r.failed && r.finished < r.n) {
    uint32_t next = r.n;
    for (uint32_t step = 1; step <= r.n; ++step) {
      const uint32_t p = (cursor + step) % r.n;
      if (r.state[r.lane_at(p)] == kRunnable) {
        next = p;
        break;
      }
    }
    if (next == r.n) {
      mark_failed(r, "deadlock: no lane can run (lanes wait at different collectives)");
      break;
    }
    cursor = next;
    const uint32_t lane = r.lane_at(next);
    tls_run = &r;
    tls_lane = lane;
    tls_pos = &(*g_fibers)[lane]->pos;
    swapcontext(&r.scheduler, &(*g_fibers)[lane]->ctx);
  }
  // Lanes left blocked after a failure are abandoned: their stacks are reused by the next run.
  tls_run = nullptr;
  tls_pos = nullptr;
}

void fiber_yield(ThreadGroupRun& r, uint32_t me) {
  swapcontext(&(*g_fibers)[me]->ctx, &r.scheduler);
}
#else
void fiber_yield(ThreadGroupRun&, uint32_t) {}
void run_fibers(ThreadGroupRun& r) { run_threads(r); }
#endif

std::mutex g_dispatch_mutex;  // one synchronising threadgroup in flight in the whole process
std::string g_schedule_override;

void run_threadgroup(const char* kernel, const LaneFn& fn, Schedule schedule, Dim3 groups,
                     Dim3 threads, Dim3 tgid) {
  ThreadGroupRun r;
  r.fn = &fn;
  r.schedule = schedule;
  r.groups = groups;
  r.threads = threads;
  r.tgid = tgid;
  r.n = static_cast<uint32_t>(threads.count());
  r.tg.size = r.n;
  r.simd = std::make_unique<SyncGroup[]>(r.n_simd());
  for (uint32_t s = 0; s < r.n_simd(); ++s) {
    r.simd[s].first = s * kSimdWidth;
    r.simd[s].size = std::min(kSimdWidth, r.n - s * kSimdWidth);
  }
  r.state.assign(r.n, kRunnable);
  if (schedule == Schedule::Free) {
    run_threads(r);
  } else {
    run_fibers(r);
  }
  if (r.failed) {
    throw LaneError(std::string(kernel) + ", threadgroup (" + std::to_string(tgid.x) + ", " +
                    std::to_string(tgid.y) + ", " + std::to_string(tgid.z) + "): " + r.error);
  }
}

void run_loop(const char* kernel, Dim3 groups, Dim3 threads, const LaneFn& fn) {
  const uint64_t n_groups = groups.count(), n_lanes = threads.count();
  const uint64_t total = n_groups * n_lanes;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t n_threads = total < (1u << 16) ? 1 : std::min<uint64_t>(hw, n_groups);
  std::mutex err_m;
  std::string err;
  const auto keep_error = [&](const char* what) {
    std::lock_guard<std::mutex> lock(err_m);
    if (err.empty()) err = what;
  };
  auto work = [&](uint64_t g0, uint64_t g1) {
    try {
      ThreadGroupRun r;  // for position() only: nothing synchronises on this path
      r.threads = threads;
      r.groups = groups;
      for (uint64_t g = g0; g < g1; ++g) {
        r.tgid = Dim3{uint32_t(g % groups.x), uint32_t(g / groups.x % groups.y),
                      uint32_t(g / (uint64_t(groups.x) * groups.y))};
        for (uint32_t l = 0; l < n_lanes; ++l) {
          const LanePosition pos = position(r, l);
          tls_pos = &pos;
          fn(pos);
        }
      }
    } catch (const std::exception& e) {
      keep_error(e.what());
    } catch (...) {  // an exception leaving a std::thread's function ends the process
      keep_error("an exception that is not a std::exception");
    }
    tls_pos = nullptr;
  };
  const uint64_t chunk = (n_groups + n_threads - 1) / n_threads;
  std::vector<std::thread> pool;
  uint64_t started = 0;
  try {
    for (; started + 1 < n_threads; ++started) {
      pool.emplace_back(work, started * chunk, std::min(n_groups, (started + 1) * chunk));
    }
  } catch (const std::system_error&) {
    // No more threads (a process or container limit): this thread runs the ranges left.
  }
  for (uint64_t t = started; t < n_threads; ++t) {
    work(std::min(n_groups, t * chunk), std::min(n_groups, (t + 1) * chunk));
  }
  for (auto& t : pool) t.join();
  if (!err.empty()) throw LaneError(std::string(kernel) + ": " + err);
}

}  // namespace

const LanePosition& current_lane() {
  if (!tls_pos) throw LaneError("a Metal builtin was called outside of a kernel lane");
  return *tls_pos;
}

void threadgroup_sync(const char* file, int line) {
  if (!tls_run) {
    throw LaneError("threadgroup_barrier at " + site(file, line) + " in a kernel whose source "
                    "shows no synchronisation (build_tools/metal_kernels.py)");
  }
  arrive(*tls_run, tls_run->tg, "threadgroup_barrier", file, line);
}

const uint64_t* simd_exchange_begin(uint64_t value, const char* file, int line) {
  if (!tls_run) {
    throw LaneError("simd collective at " + site(file, line) + " in a kernel whose source "
                    "shows no synchronisation (build_tools/metal_kernels.py)");
  }
  ThreadGroupRun& r = *tls_run;
  SyncGroup& g = r.simd_of(tls_lane);
  {
    std::unique_lock<std::mutex> lock(r.m, std::defer_lock);
    if (r.schedule == Schedule::Free) lock.lock();
    g.slots[tls_lane % kSimdWidth] = value;
  }
  arrive(r, g, "simd collective", file, line);
  return g.slots;
}

void simd_exchange_done(const char* file, int line) {
  arrive(*tls_run, tls_run->simd_of(tls_lane), "simd collective", file, line);
}

Schedule schedule_from_env(uint64_t lanes) {
  std::string name = g_schedule_override;
  if (name.empty()) {
    const char* env = std::getenv("ARGON_HOST_SCHEDULE");
    name = env && *env ? env : "auto";
  }
  if (name == "auto") return lanes <= kAutoThreadLanes ? Schedule::Free : Schedule::Forward;
  if (name == "free") return Schedule::Free;
  if (name == "forward") return Schedule::Forward;
  if (name == "reverse") return Schedule::Reverse;
  throw LaneError("the lane schedule must be auto, free, forward or reverse, got '" + name + "'");
}

void set_schedule_override(const char* name) {
  std::lock_guard<std::mutex> lock(g_dispatch_mutex);
  g_schedule_override = name ? name : "";
}

void run_dispatch(const char* kernel, Dim3 groups, Dim3 threads, bool synchronising,
                  const LaneFn& fn) {
  if (groups.count() == 0 || threads.count() == 0) return;
  if (!synchronising) {
    run_loop(kernel, groups, threads, fn);
    return;
  }
  if (threads.count() > 1024) throw LaneError(std::string(kernel) + ": more than 1024 lanes");
  std::lock_guard<std::mutex> lock(g_dispatch_mutex);
  Schedule schedule = schedule_from_env(groups.count() * threads.count());
#ifndef ARGON_LANE_FIBERS
  schedule = Schedule::Free;  // no fibers on this platform
#endif
  for (uint32_t z = 0; z < groups.z; ++z)
    for (uint32_t y = 0; y < groups.y; ++y)
      for (uint32_t x = 0; x < groups.x; ++x)
        run_threadgroup(kernel, fn, schedule, groups, threads, Dim3{x, y, z});
}

}  // namespace argon_host
