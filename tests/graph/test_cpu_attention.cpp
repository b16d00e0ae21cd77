// The CPU attention kernel (cpu::attend_rows and each instruction set's build of it) on random heads:
// every row within a rounding bound of the softmax-weighted sum computed in double precision, and
// every row's bits the same whether it runs alone, in a group of any size, or with fp16 keys and values
// read in place instead of converted: prefill in chunks gives what decode token by token gives. The
// cases span 1 to 19 key tiles and 1 to 13 rows, so every grouping of rows and tiles the kernel uses
// (and its remainders) runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_attention_isa.h"
#include "backend/cpu/cpu_ops.h"
#include "quant/dot.h"
#include "quant/fp16.h"

namespace zinc {
namespace {

using backend::cpu::AttendRows;
using backend::cpu::kAttendTile;

using Kernel = std::function<void(const AttendRows&, float*)>;

struct Isa {
  std::string name;
  Kernel fn;
};

// Each build this CPU runs (the dot products' detection, which ZINC_CPU_ISA does not cap).
std::vector<Isa> kernels() {
  std::vector<Isa> out{{"base", backend::cpu::attend_base}};
#if defined(__x86_64__)
  for (const std::string& isa : quant::dot_isas_available()) {
    if (isa == "avx2") out.push_back({"avx2", backend::cpu::attend_avx2});
    if (isa == "avx512") out.push_back({"avx512", backend::cpu::attend_avx512});
  }
#endif
  return out;
}

// One KV head's keys and values (head `head` of `heads`, hd elements each) at positions [0, n), as
// float tiles and rows and as the fp16 bits they were rounded from (so both hold the same numbers).
struct Cache {
  int hd, heads, head;
  int64_t n, tiles;
  std::vector<float> kt, v;
  std::vector<uint16_t> kth, vh;
  std::vector<const void*> ktp, vp, ktph, vph;
  Cache(int hd_, int heads_, int head_, int64_t n_, std::mt19937& rng) : hd(hd_), heads(heads_), head(head_), n(n_) {
    const int64_t kw = static_cast<int64_t>(hd) * heads;
    tiles = (n + kAttendTile - 1) / kAttendTile;
    kt.assign(static_cast<size_t>(tiles * kw * kAttendTile), 0.0f);
    kth.assign(kt.size(), 0);
    v.resize(static_cast<size_t>(n * kw));
    vh.resize(v.size());
    std::normal_distribution<float> d(0.0f, 1.0f);
    const auto half = [&](float x, uint16_t& h) {
      h = quant::f32_to_fp16(x);
      return quant::fp16_to_f32(h);
    };
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < kw; ++c) {
        const size_t at = static_cast<size_t>((j / kAttendTile) * kw * kAttendTile + c * kAttendTile + j % kAttendTile);
        kt[at] = half(d(rng), kth[at]);
        v[static_cast<size_t>(j * kw + c)] = half(d(rng), vh[static_cast<size_t>(j * kw + c)]);
      }
    for (int64_t t = 0; t < tiles; ++t) {
      ktp.push_back(kt.data() + t * kw * kAttendTile);
      ktph.push_back(kth.data() + t * kw * kAttendTile);
    }
    for (int64_t j = 0; j < n; ++j) {
      vp.push_back(v.data() + j * kw);
      vph.push_back(vh.data() + j * kw);
    }
  }
  float key(int64_t j, int i) const {
    const int64_t kw = static_cast<int64_t>(hd) * heads, c = static_cast<int64_t>(head) * hd + i;
    return kt[static_cast<size_t>((j / kAttendTile) * kw * kAttendTile + c * kAttendTile + j % kAttendTile)];
  }
  float value(int64_t j, int i) const { return v[static_cast<size_t>(j * hd * heads + head * hd + i)]; }
};

struct Rows {
  std::vector<std::vector<float>> q;
  std::vector<int64_t> lo, hi;
  std::vector<float> sink;
};

// Rows [r0, r0 + nq) of `rows` through `fn`, their outputs in out[r0 ..].
void run(const Kernel& fn, const Cache& c, const Rows& rows, int r0, int nq, bool f16, float scale, float softcap, bool sinks,
         std::vector<std::vector<float>>& out) {
  std::vector<const float*> qs;
  std::vector<float*> outs;
  for (int r = r0; r < r0 + nq; ++r) {
    qs.push_back(rows.q[static_cast<size_t>(r)].data());
    out[static_cast<size_t>(r)].assign(static_cast<size_t>(c.hd), NAN);
    outs.push_back(out[static_cast<size_t>(r)].data());
  }
  AttendRows a;
  a.q = qs.data();
  a.nq = nq;
  a.lo = rows.lo.data() + r0;
  a.hi = rows.hi.data() + r0;
  a.kt = f16 ? c.ktph.data() : c.ktp.data();
  a.v = f16 ? c.vph.data() : c.vp.data();
  a.f16 = f16;
  a.v_first = 0;
  a.kv_offset = static_cast<int64_t>(c.head) * c.hd;
  a.hd = c.hd;
  a.scale = scale;
  a.softcap = softcap;
  a.sink = sinks ? rows.sink.data() + r0 : nullptr;
  a.out = outs.data();
  // attend_rows' scratch, with a guard past it that must stay as it was.
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < nq; ++r) jlo = std::min(jlo, a.lo[r]), jhi = std::max(jhi, a.hi[r]);
  const int64_t tiles = jhi / kAttendTile - jlo / kAttendTile + 1;
  const auto need = static_cast<size_t>(nq * backend::cpu::attend_sums_floats(c.hd) + backend::cpu::attend_sums_floats(nq) +
                                        nq * tiles * kAttendTile);
  std::vector<float> buf(need + 64, 12345.0f);
  fn(a, buf.data());
  for (size_t i = need; i < buf.size(); ++i) ASSERT_EQ(buf[i], 12345.0f) << "wrote past its scratch";
}

// Row r's output in double precision.
std::vector<double> reference(const Cache& c, const Rows& rows, int r, float scale, float softcap, bool sinks) {
  const auto& q = rows.q[static_cast<size_t>(r)];
  std::vector<double> s;
  double mx = -INFINITY;
  for (int64_t j = rows.lo[static_cast<size_t>(r)]; j <= rows.hi[static_cast<size_t>(r)]; ++j) {
    double x = 0;
    for (int i = 0; i < c.hd; ++i) x += static_cast<double>(q[static_cast<size_t>(i)]) * c.key(j, i);
    x *= scale;
    if (softcap > 0) x = softcap * std::tanh(x / softcap);
    s.push_back(x);
    mx = std::max(mx, x);
  }
  if (sinks) mx = std::max(mx, static_cast<double>(rows.sink[static_cast<size_t>(r)]));
  double total = sinks ? std::exp(rows.sink[static_cast<size_t>(r)] - mx) : 0.0;
  for (double& x : s) total += (x = std::exp(x - mx));
  std::vector<double> out(static_cast<size_t>(c.hd), 0.0);
  for (size_t k = 0; k < s.size(); ++k)
    for (int i = 0; i < c.hd; ++i) out[static_cast<size_t>(i)] += s[k] / total * c.value(rows.lo[static_cast<size_t>(r)] + static_cast<int64_t>(k), i);
  return out;
}

struct Shape {
  int hd;
  int64_t n;   // keys in the cache
  int nq;      // rows
  int window;  // 0: causal from position 0; else each row sees its last `window` keys
  float softcap;
  bool sinks;
};

TEST(CpuAttention, EveryRowNearTheDefinitionAndTheSameBitsInAnyGroup) {
  const std::vector<Shape> shapes = {
      {128, 300, 13, 0, 0.0f, false},  // 19 tiles: groups of 4 tiles, then 2 and 1; rows 4 + 4 + 4 + 1
      {128, 130, 2, 0, 0.0f, false},   // a decode's two query heads of one KV head
      {128, 140, 1, 0, 0.0f, false},   // one row: groups of 8 tiles
      {64, 77, 5, 20, 0.0f, false},    // a sliding window starting mid-tile
      {72, 50, 3, 0, 30.0f, true},     // softcap and sinks; 72 elements: a part vector past the whole ones
      {256, 33, 7, 0, 0.0f, false},
  };
  std::mt19937 rng(7);
  for (const Isa& isa : kernels()) {
    for (const Shape& sh : shapes) {
      SCOPED_TRACE(isa.name + " hd " + std::to_string(sh.hd) + " keys " + std::to_string(sh.n) + " rows " + std::to_string(sh.nq));
      const Cache c(sh.hd, 2, 1, sh.n, rng);
      Rows rows;
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (int r = 0; r < sh.nq; ++r) {
        std::vector<float> q(static_cast<size_t>(sh.hd));
        for (auto& x : q) x = d(rng);
        rows.q.push_back(q);
        // The last rows of a prompt chunk: row r sees through position n - 1 - (nq - 1 - r) / 2 (two
        // query heads a position).
        const int64_t hi = sh.n - 1 - (sh.nq - 1 - r) / 2;
        rows.hi.push_back(hi);
        rows.lo.push_back(sh.window > 0 ? std::max<int64_t>(0, hi - sh.window + 1) : 0);
        rows.sink.push_back(d(rng));
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
      std::vector<std::vector<float>> all(static_cast<size_t>(sh.nq)), one(all.size()), part(all.size()), half(all.size());
      run(isa.fn, c, rows, 0, sh.nq, false, scale, sh.softcap, sh.sinks, all);
      run(isa.fn, c, rows, 0, sh.nq, true, scale, sh.softcap, sh.sinks, half);
      for (int r = 0; r < sh.nq; ++r) run(isa.fn, c, rows, r, 1, r % 2 == 0, scale, sh.softcap, sh.sinks, one);
      // Groups of 3 (then what is left): other rows share each call.
      for (int r = 0; r < sh.nq; r += 3) run(isa.fn, c, rows, r, std::min(3, sh.nq - r), false, scale, sh.softcap, sh.sinks, part);
      for (int r = 0; r < sh.nq; ++r) {
        const auto& got = all[static_cast<size_t>(r)];
        const std::vector<double> want = reference(c, rows, r, scale, sh.softcap, sh.sinks);
        double largest = 0;
        for (double x : want) largest = std::max(largest, std::fabs(x));
        for (int i = 0; i < sh.hd; ++i) {
          ASSERT_NEAR(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)], 2e-5 * std::max(1.0, largest)) << "row " << r << " element " << i;
        }
        EXPECT_EQ(0, std::memcmp(got.data(), one[static_cast<size_t>(r)].data(), got.size() * sizeof(float))) << "row " << r << " alone";
        EXPECT_EQ(0, std::memcmp(got.data(), part[static_cast<size_t>(r)].data(), got.size() * sizeof(float))) << "row " << r << " in threes";
        EXPECT_EQ(0, std::memcmp(got.data(), half[static_cast<size_t>(r)].data(), got.size() * sizeof(float))) << "row " << r << " fp16";
      }
    }
  }
}

// attend_rows (the build ZINC_CPU_ISA leaves in use) gives the same bits as that build called directly.
TEST(CpuAttention, AttendRowsUsesOneOfTheBuilds) {
  std::mt19937 rng(11);
  const Cache c(128, 1, 0, 90, rng);
  Rows rows;
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int r = 0; r < 4; ++r) {
    std::vector<float> q(128);
    for (auto& x : q) x = d(rng);
    rows.q.push_back(q);
    rows.lo.push_back(0);
    rows.hi.push_back(86 + r);
  }
  std::vector<std::vector<float>> got(4);
  {
    std::vector<const float*> qs;
    std::vector<float*> outs;
    for (int r = 0; r < 4; ++r) {
      got[static_cast<size_t>(r)].assign(128, NAN);
      qs.push_back(rows.q[static_cast<size_t>(r)].data());
      outs.push_back(got[static_cast<size_t>(r)].data());
    }
    AttendRows a;
    a.q = qs.data();
    a.nq = 4;
    a.lo = rows.lo.data();
    a.hi = rows.hi.data();
    a.kt = c.ktp.data();
    a.v = c.vp.data();
    a.hd = 128;
    a.scale = 0.1f;
    a.out = outs.data();
    std::vector<float> scratch;
    backend::cpu::attend_rows(a, scratch);
  }
  int same = 0;
  for (const Isa& isa : kernels()) {
    std::vector<std::vector<float>> want(4);
    run(isa.fn, c, rows, 0, 4, false, 0.1f, 0.0f, false, want);
    bool eq = true;
    for (int r = 0; r < 4; ++r) eq &= std::memcmp(got[static_cast<size_t>(r)].data(), want[static_cast<size_t>(r)].data(), 128 * sizeof(float)) == 0;
    same += eq;
  }
  EXPECT_GE(same, 1);
}

}  // namespace
}  // namespace zinc
