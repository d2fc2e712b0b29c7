// The lane runner: one host thread per lane for kernels that synchronise, a loop otherwise.
// See lane_runner.h for the schedules. All state of one threadgroup in flight lives in a
// ThreadGroupRun guarded by one mutex; lanes block on condition variables, so an idle lane costs
// nothing, and every wait has a deadline so a stuck threadgroup ends in an error, not a hang.
#include "lane_runner.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace argon_host {
namespace {

constexpr auto kDeadline = std::chrono::seconds(120);
constexpr size_t kLaneStackBytes = 1 << 20;

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

struct Worker;

struct ThreadGroupRun {
  const char* kernel = "";
  const LaneFn* fn = nullptr;
  Schedule schedule = Schedule::Free;
  Dim3 tgid, threads, groups;
  uint32_t n = 0;

  std::mutex m;
  SyncGroup tg;
  std::unique_ptr<SyncGroup[]> simd;
  std::vector<LaneState> state;
  std::vector<Worker*> workers;
  int64_t token = -1;  // forward / reverse: the one lane allowed to run
  bool failed = false;
  std::string error;
  uint32_t finished = 0;
  std::condition_variable done_cv;

  SyncGroup& simd_of(uint32_t lane) { return simd[lane / kSimdWidth]; }
  uint32_t order_pos(uint32_t lane) const { return schedule == Schedule::Reverse ? n - 1 - lane : lane; }
  uint32_t lane_at(uint32_t p) const { return schedule == Schedule::Reverse ? n - 1 - p : p; }
};

struct Worker {
  std::mutex m;
  std::condition_variable go_cv;
  bool go = false;
  ThreadGroupRun* run = nullptr;
  uint32_t lane = 0;
  std::condition_variable token_cv;  // forward / reverse: woken when handed the token
};

thread_local const LanePosition* tls_pos = nullptr;
thread_local ThreadGroupRun* tls_run = nullptr;
thread_local uint32_t tls_lane = 0;

std::string site(const char* file, int line) {
  const char* slash = file ? std::strrchr(file, '/') : nullptr;
  return std::string(slash ? slash + 1 : (file ? file : "?")) + ":" + std::to_string(line);
}

void wake_all(ThreadGroupRun& r) {
  r.tg.cv.notify_all();
  for (uint32_t s = 0; s < (r.n + kSimdWidth - 1) / kSimdWidth; ++s) r.simd[s].cv.notify_all();
  for (Worker* w : r.workers) w->token_cv.notify_all();
  r.done_cv.notify_all();
}

void mark_failed(ThreadGroupRun& r, const std::string& msg) {
  if (!r.failed) {
    r.failed = true;
    r.error = msg;
  }
  wake_all(r);
}

[[noreturn]] void fail(ThreadGroupRun& r, const std::string& msg) {
  mark_failed(r, msg);
  throw Abort{};
}

// forward / reverse: hand the token to the next runnable lane after `me` in schedule order
// (cyclically, `me` last). No runnable lane while some have not returned is a deadlock.
void pass_token(ThreadGroupRun& r, uint32_t me) {
  const uint32_t p0 = r.order_pos(me);
  for (uint32_t step = 1; step <= r.n; ++step) {
    const uint32_t lane = r.lane_at((p0 + step) % r.n);
    if (r.state[lane] == kRunnable) {
      r.token = lane;
      r.workers[lane]->token_cv.notify_one();
      return;
    }
  }
  r.token = -1;
  if (r.finished + 1 < r.n || r.state[me] != kExited) {
    mark_failed(r, "deadlock: no lane can run (lanes wait at different collectives)");
  }
}

void wait_for_token(ThreadGroupRun& r, std::unique_lock<std::mutex>& lock, uint32_t me) {
  if (!r.workers[me]->token_cv.wait_for(lock, kDeadline,
                                         [&] { return r.token == me || r.failed; })) {
    fail(r, "timed out waiting for the lane schedule");
  }
  if (r.failed) throw Abort{};
}

// One lane arrives at a synchronisation point of `g` (the threadgroup or its simdgroup).
void arrive(ThreadGroupRun& r, std::unique_lock<std::mutex>& lock, SyncGroup& g, uint32_t me,
            const char* what, const char* file, int line) {
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
  if (r.schedule == Schedule::Free) {
    if (complete) {
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
  r.state[me] = kBlocked;
  if (complete) {
    for (uint32_t l = g.first; l < g.first + g.size; ++l)
      if (r.state[l] == kBlocked) r.state[l] = kRunnable;
  }
  pass_token(r, me);
  wait_for_token(r, lock, me);
}

void lane_exit(ThreadGroupRun& r, uint32_t me) {
  std::unique_lock<std::mutex> lock(r.m);
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
  if (r.schedule != Schedule::Free && !r.failed && r.token == me) pass_token(r, me);
  ++r.finished;
  if (r.finished == r.n) r.done_cv.notify_all();
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

void run_lane(ThreadGroupRun& r, uint32_t lane) {
  const LanePosition pos = position(r, lane);
  tls_pos = &pos;
  tls_run = &r;
  tls_lane = lane;
  try {
    if (r.schedule != Schedule::Free) {
      std::unique_lock<std::mutex> lock(r.m);
      wait_for_token(r, lock, lane);
    }
    (*r.fn)(pos);
  } catch (const Abort&) {
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(r.m);
    mark_failed(r, std::string("lane ") + std::to_string(lane) + " threw: " + e.what());
  }
  lane_exit(r, lane);
  tls_run = nullptr;
  tls_pos = nullptr;
}

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
    run_lane(*r, lane);
  }
  return nullptr;
}

// The lane threads: created on demand, never destroyed, reused by every threadgroup.
class LanePool {
 public:
  Worker* get(uint32_t i) {
    while (workers_.size() <= i) {
      auto w = std::make_unique<Worker>();
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, kLaneStackBytes);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      pthread_t t;
      const int rc = pthread_create(&t, &attr, worker_main, w.get());
      pthread_attr_destroy(&attr);
      if (rc != 0) throw LaneError("could not start a lane thread: " + std::string(strerror(rc)));
      workers_.push_back(std::move(w));
    }
    return workers_[i].get();
  }

 private:
  std::vector<std::unique_ptr<Worker>> workers_;
};

std::mutex g_dispatch_mutex;  // one synchronising threadgroup in flight in the whole process
LanePool g_pool;
std::string g_schedule_override;

void run_threadgroup(const char* kernel, const LaneFn& fn, Schedule schedule, Dim3 groups,
                     Dim3 threads, Dim3 tgid) {
  ThreadGroupRun r;
  r.kernel = kernel;
  r.fn = &fn;
  r.schedule = schedule;
  r.groups = groups;
  r.threads = threads;
  r.tgid = tgid;
  r.n = static_cast<uint32_t>(threads.count());
  r.tg.first = 0;
  r.tg.size = r.n;
  const uint32_t n_simd = (r.n + kSimdWidth - 1) / kSimdWidth;
  r.simd = std::make_unique<SyncGroup[]>(n_simd);
  for (uint32_t s = 0; s < n_simd; ++s) {
    r.simd[s].first = s * kSimdWidth;
    r.simd[s].size = std::min(kSimdWidth, r.n - s * kSimdWidth);
  }
  r.state.assign(r.n, kRunnable);
  r.workers.resize(r.n);
  for (uint32_t l = 0; l < r.n; ++l) r.workers[l] = g_pool.get(l);
  if (schedule != Schedule::Free) r.token = r.lane_at(0);
  for (uint32_t l = 0; l < r.n; ++l) {
    Worker& w = *r.workers[l];
    std::lock_guard<std::mutex> lock(w.m);
    w.run = &r;
    w.lane = l;
    w.go = true;
    w.go_cv.notify_one();
  }
  std::unique_lock<std::mutex> lock(r.m);
  r.done_cv.wait(lock, [&] { return r.finished == r.n; });
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
  auto work = [&](uint64_t g0, uint64_t g1) {
    try {
      for (uint64_t g = g0; g < g1; ++g) {
        ThreadGroupRun r;  // only for position(): no synchronisation in this path
        r.threads = threads;
        r.groups = groups;
        r.tgid = Dim3{uint32_t(g % groups.x), uint32_t(g / groups.x % groups.y),
                      uint32_t(g / (uint64_t(groups.x) * groups.y))};
        for (uint32_t l = 0; l < n_lanes; ++l) {
          const LanePosition pos = position(r, l);
          tls_pos = &pos;
          fn(pos);
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(err_m);
      if (err.empty()) err = e.what();
    }
    tls_pos = nullptr;
  };
  if (n_threads <= 1) {
    work(0, n_groups);
  } else {
    std::vector<std::thread> pool;
    const uint64_t chunk = (n_groups + n_threads - 1) / n_threads;
    for (uint64_t t = 0; t < n_threads; ++t) {
      pool.emplace_back(work, t * chunk, std::min(n_groups, (t + 1) * chunk));
    }
    for (auto& t : pool) t.join();
  }
  if (!err.empty()) throw LaneError(std::string(kernel) + ": " + err);
}

}  // namespace

const LanePosition& current_lane() {
  if (!tls_pos) throw LaneError("a Metal builtin was called outside of a kernel lane");
  return *tls_pos;
}

void threadgroup_sync(const char* file, int line) {
  if (!tls_run) {
    throw LaneError("threadgroup_barrier at " + site(file, line) +
                    " in a kernel registered as barrier-free (kernel_table.cpp)");
  }
  ThreadGroupRun& r = *tls_run;
  std::unique_lock<std::mutex> lock(r.m);
  arrive(r, lock, r.tg, tls_lane, "threadgroup_barrier", file, line);
}

const uint64_t* simd_exchange_begin(uint64_t value, const char* file, int line) {
  if (!tls_run) {
    throw LaneError("simd collective at " + site(file, line) +
                    " in a kernel registered as barrier-free (kernel_table.cpp)");
  }
  ThreadGroupRun& r = *tls_run;
  std::unique_lock<std::mutex> lock(r.m);
  SyncGroup& g = r.simd_of(tls_lane);
  g.slots[tls_lane % kSimdWidth] = value;
  arrive(r, lock, g, tls_lane, "simd collective", file, line);
  return g.slots;
}

void simd_exchange_done(const char* file, int line) {
  ThreadGroupRun& r = *tls_run;
  std::unique_lock<std::mutex> lock(r.m);
  arrive(r, lock, r.simd_of(tls_lane), tls_lane, "simd collective", file, line);
}

Schedule schedule_from_env() {
  std::string name = g_schedule_override;
  if (name.empty()) {
    const char* env = std::getenv("ARGON_HOST_SCHEDULE");
    name = env ? env : "free";
  }
  if (name == "free") return Schedule::Free;
  if (name == "forward") return Schedule::Forward;
  if (name == "reverse") return Schedule::Reverse;
  throw LaneError("ARGON_HOST_SCHEDULE must be free, forward or reverse, got '" + name + "'");
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
  const Schedule schedule = schedule_from_env();
  for (uint32_t z = 0; z < groups.z; ++z)
    for (uint32_t y = 0; y < groups.y; ++y)
      for (uint32_t x = 0; x < groups.x; ++x)
        run_threadgroup(kernel, fn, schedule, groups, threads, Dim3{x, y, z});
}

}  // namespace argon_host
