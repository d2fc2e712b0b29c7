// A standalone (torch-free) run of the plan and gather kernels through the shared recipe and the
// host runner, for ThreadSanitizer (.ci/tsan.sh). Lanes run as concurrent threads (the free
// schedule), so TSan sees every pair of lanes that touch the same threadgroup or device memory
// without a barrier or atomic between them. Results are checked bit for bit against a plain
// serial plan; outputs start as garbage. Exit status: 0 when every case matches.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "host_encoder.h"
#include "lane_runner.h"
#include "metal/recipe.h"

namespace {

using argon::metal::BufArg;

template <typename T>
BufArg buf(std::vector<T>& v) { return BufArg{v.data(), 0}; }

struct Plan {
  std::vector<int32_t> counts, offsets, sorted_token, pos, tile_expert, meta;
  std::vector<float> sorted_weight;
};

int64_t r_max_of(int64_t T, int64_t K, int64_t E, int64_t tm) {
  const int64_t n = T * K;
  return (n + std::min(E, n) * (tm - 1) + tm - 1) / tm * tm;
}

// The contract, serially: stable order by expert, padding and tail rows -1 / 0.
Plan serial_plan(const std::vector<int32_t>& ids, const std::vector<float>& w, int64_t T,
                 int64_t K, int64_t E, int64_t tm) {
  const int64_t R = r_max_of(T, K, E, tm);
  Plan p;
  p.counts.assign(E, 0);
  p.offsets.assign(E + 1, 0);
  p.sorted_token.assign(R, -1);
  p.sorted_weight.assign(R, 0.f);
  p.pos.assign(T * K, -1);
  p.tile_expert.assign(R / tm, -1);
  int32_t valid = 0, bad = 0;
  for (int32_t e : ids) {
    if (e >= 0 && e < E) ++p.counts[e], ++valid;
    else if (e != -1) ++bad;
  }
  for (int64_t e = 0; e < E; ++e) p.offsets[e + 1] = p.offsets[e] + (p.counts[e] + tm - 1) / tm * tm;
  std::vector<int32_t> cursor(p.offsets.begin(), p.offsets.end() - 1);
  for (int64_t i = 0; i < T * K; ++i) {
    const int32_t e = ids[i];
    if (e < 0 || e >= E) continue;
    const int32_t r = cursor[e]++;
    p.sorted_token[r] = static_cast<int32_t>(i / K);
    p.sorted_weight[r] = w[i];
    p.pos[i] = r;
  }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = p.offsets[e] / tm; j < p.offsets[e + 1] / tm; ++j) p.tile_expert[j] = e;
  p.meta = {p.offsets[E], static_cast<int32_t>(p.offsets[E] / tm), valid, bad};
  return p;
}

template <typename T>
bool same(const char* name, const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0) return true;
  std::fprintf(stderr, "  %s differs\n", name);
  return false;
}

template <typename T>
std::vector<T> garbage(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0x7f, n * sizeof(T));
  return v;
}

bool check_plan(const char* name, int64_t T, int64_t K, int64_t E, int64_t tm, int mode,
                uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(T * K);
  std::vector<float> w(T * K);
  for (int64_t i = 0; i < T * K; ++i) {
    const uint32_t r = rng();
    ids[i] = mode == 0 ? int32_t(r % E) : mode == 1 ? int32_t(seed % E) : int32_t(r % (E + 1)) - 1;
    if (mode == 2 && r % 97 == 0) ids[i] = int32_t(E + r % 5);  // out of range: counted
    w[i] = float(r % 1000) / 1000.f;
  }
  const Plan want = serial_plan(ids, w, T, K, E, tm);
  const int64_t R = r_max_of(T, K, E, tm);
  Plan got;
  got.counts = garbage<int32_t>(E);
  got.offsets = garbage<int32_t>(E + 1);
  got.sorted_token = garbage<int32_t>(R);
  got.sorted_weight = garbage<float>(R);
  got.pos = garbage<int32_t>(T * K);
  got.tile_expert = garbage<int32_t>(R / tm);
  got.meta = garbage<int32_t>(4);
  const auto launch = argon::metal::plan_launch(T, K, E, tm, R, false, ARGON_F32);
  std::vector<int32_t> scratch = garbage<int32_t>(launch.scratch_ints);
  argon::metal::PlanBuffers b{buf(ids), buf(w), buf(got.counts), buf(got.offsets),
                              buf(got.sorted_token), buf(got.sorted_weight), buf(got.pos),
                              buf(got.tile_expert), buf(got.meta), buf(scratch)};
  argon_host::HostEncoder enc;
  argon::metal::encode_plan(enc, launch, b);
  bool ok = same("counts", got.counts, want.counts) & same("offsets", got.offsets, want.offsets) &
            same("sorted_token", got.sorted_token, want.sorted_token) &
            same("sorted_weight", got.sorted_weight, want.sorted_weight) &
            same("pos", got.pos, want.pos) & same("tile_expert", got.tile_expert, want.tile_expert) &
            same("meta", got.meta, want.meta);
  std::printf("plan %-28s T=%lld K=%lld E=%lld tm=%lld block=%u: %s\n", name, (long long)T,
              (long long)K, (long long)E, (long long)tm, launch.params.block, ok ? "ok" : "MISMATCH");
  return ok;
}

// fp16 -> fp16 (gather_copy16, or gather_any for odd widths) and fp32 -> fp16 (gather_from_f32).
bool check_gather(int64_t T, int64_t H, bool from_f32, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t R = 3 * T;
  std::vector<int32_t> st(R);
  for (auto& t : st) t = int32_t(rng() % (T + 1)) - 1;
  std::vector<uint16_t> x16(T * H);
  std::vector<float> x32(T * H);
  for (int64_t i = 0; i < T * H; ++i) {
    x32[i] = float(int32_t(rng() % 20001) - 10000) / 7.f;
    const _Float16 h = static_cast<_Float16>(x32[i]);
    std::memcpy(&x16[i], &h, 2);
  }
  std::vector<uint16_t> want(R * H, 0), got = garbage<uint16_t>(R * H);
  for (int64_t r = 0; r < R; ++r)
    if (st[r] >= 0) std::memcpy(&want[r * H], &x16[st[r] * H], H * 2);
  ArgonGatherParams p{};
  p.rows = uint32_t(R);
  p.cols = uint32_t(H);
  p.n_tokens = uint32_t(T);
  p.src_dtype = from_f32 ? ARGON_F32 : ARGON_F16;
  p.dst_dtype = ARGON_F16;
  argon::metal::GatherBuffers b{from_f32 ? buf(x32) : buf(x16), buf(st), buf(got)};
  argon_host::HostEncoder enc;
  argon::metal::encode_gather(enc, p, b);
  const bool ok = same("xs", got, want);
  std::printf("gather %-15s T=%lld H=%lld: %s\n", argon::metal::gather_kernel(p, b), (long long)T,
              (long long)H, ok ? "ok" : "MISMATCH");
  return ok;
}

}  // namespace

int main() {
  argon_host::set_schedule_override("free");  // every lane its own thread, all concurrent
  bool ok = true;
  try {
    ok &= check_plan("uniform, several blocks", 700, 4, 64, 16, 0, 1);
    ok &= check_plan("skips and bad ids", 300, 5, 40, 8, 2, 2);
    ok &= check_plan("K=1, one expert", 1100, 1, 7, 32, 1, 3);
    ok &= check_plan("E=1024 (512-entry blocks)", 200, 4, 1024, 4, 0, 4);
    ok &= check_plan("E=33, K=2", 150, 2, 33, 1, 2, 5);
    ok &= check_gather(50, 64, false, 6);
    ok &= check_gather(50, 62, false, 7);
    ok &= check_gather(50, 64, true, 8);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  std::printf(ok ? "all cases match\n" : "MISMATCHES\n");
  return ok ? 0 : 1;
}
