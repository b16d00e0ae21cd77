// Vulkan attention (kv_store and attention launchers) against the graph op's definition in float64:
// the caches are written through kv_store, read back and decoded by the CPU's dequantize_row, and the
// reference attends over exactly those values (so F16 and Q8_0 caches need no looser bound than F32).
// kv_store itself is checked against the CPU quantizer byte for byte (up to the last bit of rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/vulkan/vk_attention.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "float_bound.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

gguf::TensorType tensor_type(KvCacheType t) {
  switch (t) {
    case KvCacheType::F32: return gguf::TensorType::F32;
    case KvCacheType::F16: return gguf::TensorType::F16;
    case KvCacheType::Q8_0: return gguf::TensorType::Q8_0;
  }
  return gguf::TensorType::F32;
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::vector<float> random_floats(std::mt19937& rng, size_t n, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

class VulkanAttention : public VulkanTest {};

// One layer's K and V caches in one buffer (V at the next aligned offset, as an executor packs them),
// rows beyond those written filled with 0xff bytes (NaN in F32 and F16) that attention must not read.
struct Caches {
  Context& ctx;
  KvCacheType type;
  uint32_t kv_width, n_ctx;
  size_t row_bytes, bytes, v_offset;
  Buffer buf;
  Caches(Context& c, KvCacheType t, uint32_t width, uint32_t rows)
      : ctx(c),
        type(t),
        kv_width(width),
        n_ctx(rows),
        row_bytes(kv_row_bytes(t, width)),
        bytes(align_up(row_bytes * rows, 4)),
        v_offset(align_up(row_bytes * rows, c.features().offset_alignment)) {
    buf = ctx.host_buffer(v_offset + bytes);
    std::memset(buf.mapped, 0xff, v_offset + bytes);
  }
  ~Caches() { ctx.release(buf); }
  View k() const { return {&buf, 0, bytes}; }
  View v() const { return {&buf, v_offset, bytes}; }
  const uint8_t* raw(bool is_v) const { return static_cast<const uint8_t*>(buf.mapped) + (is_v ? v_offset : 0); }
  // Positions [0, n) decoded to floats, position i from cache row row_of(i).
  template <class RowOf>
  std::vector<float> decoded(bool is_v, uint32_t n, const RowOf& row_of) const {
    std::vector<float> out(static_cast<size_t>(n) * kv_width);
    for (uint32_t i = 0; i < n; ++i) {
      quant::dequantize_row(tensor_type(type), raw(is_v) + row_of(i) * row_bytes,
                            out.data() + static_cast<size_t>(i) * kv_width, kv_width);
    }
    return out;
  }
};

// A host buffer holding floats.
struct Floats {
  Context& ctx;
  Buffer buf;
  Floats(Context& c, const std::vector<float>& v) : ctx(c), buf(c.host_buffer(std::max<size_t>(16, v.size() * 4))) {
    std::memcpy(buf.mapped, v.data(), v.size() * 4);
  }
  Floats(Context& c, size_t n) : ctx(c), buf(c.host_buffer(std::max<size_t>(16, n * 4))) {}
  ~Floats() { ctx.release(buf); }
  void set(const std::vector<float>& v) { std::memcpy(buf.mapped, v.data(), v.size() * 4); }
  const float* data() const { return static_cast<const float*>(buf.mapped); }
  View view() const { return {&buf, 0, 0}; }
};

// A part's header in the step buffer (n_past, n_tokens) and its sequence's block table for a context
// of n_ctx positions: position i lives in cache row row_of(i). The blocks (of 32 rows, the
// executor's) are named in reverse order, so a kernel that ignored the table would miss its rows.
struct Step {
  static constexpr uint32_t kBlock = 32;
  Context& ctx;
  uint32_t blocks;
  Buffer buf;
  Step(Context& c, uint32_t n_ctx) : ctx(c), blocks((n_ctx + kBlock - 1) / kBlock), buf(c.host_buffer(16 + 4 * blocks)) {
    auto* w = static_cast<uint32_t*>(buf.mapped);
    std::memset(w, 0, 16);
    for (uint32_t i = 0; i < blocks; ++i) w[4 + i] = blocks - 1 - i;
  }
  ~Step() { ctx.release(buf); }
  void set(uint32_t n_past, uint32_t n_tokens) {
    static_cast<uint32_t*>(buf.mapped)[0] = n_past;
    static_cast<uint32_t*>(buf.mapped)[1] = n_tokens;
  }
  uint32_t rows() const { return blocks * kBlock; }  // the cache rows the table names
  uint32_t row_of(uint32_t pos) const { return (blocks - 1 - pos / kBlock) * kBlock + pos % kBlock; }
  View view() const { return {&buf, 0, 16 + 4 * static_cast<size_t>(blocks)}; }
};

struct Case {
  const char* name;
  KvCacheType type;
  uint32_t n_head, n_head_kv, head_dim, n_tokens, n_past;
  uint32_t window = 0;
  float softcap = 0;
  bool sinks = false;
  uint32_t n_split = 0;  // 0: the launcher's choice
  bool q8k = false;      // the output's Q8_K codes too (checked against the CPU's quantizer of the output)
  // Or the activation codes of the output for weights of this 32-element format (F32: none), where
  // the launcher writes them (attention_q8_fits).
  gguf::TensorType act = gguf::TensorType::F32;
};

// The graph op's definition (CpuExecutable::attention) in float64, and for each output a bound on the
// kernel's float arithmetic under Vulkan's precision (float_bound.h). The kernel (attention.comp) scores
// a tile of at least 32 keys at a time with a running max m, weights each key by exp(s - m) and rescales
// what it has summed by exp(m_old - m_new) when the max grows; a split's result is merged by one more such
// factor, a sink by one more. So key j's final weight is exp(s_j - M) computed as a product of at most
// T + 3 exponentials (T tiles in its range: N / 32 + splits + 1) whose arguments add up to M - s_j, each
// within 3 + 2|x| ulps, and as many roundings: relative error d_j <= (3 (T + 3) + 2 (M - s_j + 2 e_s)) ulps
// + (T + 4) u + 2 e_s, e_s the scores' own bound (q * scale, a dot of head_dim terms, the softcap's
// tanh). Perturbing the weights of a weighted mean by d_j moves it by at most sum w_j d_j |v_j - out| /
// sum w_j <= 2 max|v| (sum w_j d_j / sum w_j); the sums of the N weights and weighted rows round by at
// most (N + splits + 4) u of max|v| and |out|; the final division by 2.5 ulps and a product by half of one.
// The tensor-core prompt kernel (attention_uses_coopmat) rounds q (times scale) and the weights p to
// f16: a score moves by at most 2^-11 sum |q k| scale, which moves the mean by twice that times max|v|,
// and p's rounding by 2^-11 max|v| more (10% over for the second-order terms).
struct Reference {
  std::vector<double> out, bound;  // [n_tokens][n_head * head_dim]
};

Reference reference(const Case& c, const std::vector<float>& q, const std::vector<float>& kf, const std::vector<float>& vf,
                    const std::vector<float>& sinks, float scale, uint32_t splits, bool f16_qp = false) {
  using test::Fb;
  const uint32_t hd = c.head_dim, kw = c.n_head_kv * hd, qw = c.n_head * hd, group = c.n_head / c.n_head_kv;
  Reference r{std::vector<double>(static_cast<size_t>(c.n_tokens) * qw), std::vector<double>(static_cast<size_t>(c.n_tokens) * qw)};
  for (uint32_t t = 0; t < c.n_tokens; ++t) {
    const int64_t pos = c.n_past + t;
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
    const double n_keys = static_cast<double>(pos - lo + 1) + (c.sinks ? 1 : 0);
    const double tiles = std::ceil(n_keys / 32) + splits + 1;
    for (uint32_t h = 0; h < c.n_head; ++h) {
      const size_t koff = static_cast<size_t>(h / group) * hd;
      std::vector<Fb> qs(hd);
      for (uint32_t i = 0; i < hd; ++i) qs[i] = Fb(q[static_cast<size_t>(t) * qw + h * hd + i]) * Fb(scale);
      std::vector<double> sc;
      double mx = -INFINITY, e_s = 0, mag = 0;
      for (int64_t j = lo; j <= pos; ++j) {
        double m = 0;
        for (uint32_t i = 0; i < hd; ++i) m += std::fabs(qs[i].v * kf[static_cast<size_t>(j) * kw + koff + i]);
        mag = std::max(mag, m);
        Fb s = test::dot(qs, test::exact(&kf[static_cast<size_t>(j) * kw + koff], hd));
        if (c.softcap > 0) {
          // cap * tanh_safe(s / cap): tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2 |x|).
          const Fb x = test::vk::div(s, Fb(c.softcap));
          const Fb ax{std::fabs(x.v), x.e};
          const Fb e = test::vk::exp(-(Fb(2.0) * ax));
          const Fb th = test::vk::div(Fb(1.0) - e, Fb(1.0) + e);
          s = Fb(c.softcap) * Fb(x.v < 0 ? -th.v : th.v, th.e);
        }
        sc.push_back(s.v);
        e_s = std::max(e_s, s.e);
        mx = std::max(mx, s.v);
      }
      if (c.sinks) mx = std::max(mx, static_cast<double>(sinks[h]));
      double sum = 0, spread = 0;  // sum of weights; sum of weights times their relative error
      const auto weigh = [&](double s) {
        const double w = std::exp(s - mx);
        const double d = test::ulps(3 * (tiles + 3) + 2 * (mx - s + 2 * e_s), 1.0) + (tiles + 4) * test::kU + 2 * e_s;
        sum += w;
        spread += w * d;
        return w;
      };
      if (c.sinks) weigh(sinks[h]);
      std::vector<double> w;
      for (double s : sc) w.push_back(weigh(s));
      for (uint32_t i = 0; i < hd; ++i) {
        double a = 0, vmax = 0;
        for (int64_t j = lo; j <= pos; ++j) {
          const double v = vf[static_cast<size_t>(j) * kw + koff + i];
          a += w[static_cast<size_t>(j - lo)] * v;
          vmax = std::max(vmax, std::fabs(v));
        }
        const double out = a / sum;
        const size_t at = static_cast<size_t>(t) * qw + h * hd + i;
        r.out[at] = out;
        r.bound[at] = 1.01 * (2 * vmax * spread / sum + (n_keys + splits + 4) * test::kU * (vmax + std::fabs(out)) +
                              test::ulps(3, std::fabs(out))) +
                      (f16_qp ? 1.1 * (0x1p-10 * mag + 0x1p-11) * vmax : 0.0);
      }
    }
  }
  return r;
}

// How many outputs lie outside their bounds (the first few reported).
int outside(const float* got, const Reference& want, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < want.out.size(); ++i) {
    const double e = std::fabs(got[i] - want.out[i]);
    if (!(e <= want.bound[i]) && bad++ < 3) {
      ADD_FAILURE() << what << ": output " << i << " is " << got[i] << ", the definition's " << want.out[i] << " +- " << want.bound[i];
    }
  }
  return bad;
}

// The launcher's arguments for case c's shape (its n_tokens) over `caches`, the part's header `step`
// and a context of n_ctx positions; q, out and the sinks (used where c has them) given.
AttentionArgs case_args(const Case& c, const Caches& caches, View step, View q, View out, View sinks, uint32_t n_ctx, float scale) {
  AttentionArgs a;
  a.type = c.type;
  a.q = q;
  a.k_cache = caches.k();
  a.v_cache = caches.v();
  if (c.sinks) a.sinks = sinks;
  a.step = step;
  a.out = out;
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.n_tokens = c.n_tokens;
  a.n_ctx = n_ctx;
  a.sliding_window = c.window;
  a.scale = scale;
  a.softcap = c.softcap;
  a.n_split = c.n_split;
  return a;
}

// Writes a history of n_past rows and then the step's rows through kv_store, runs attention and
// compares with the reference over the cache as stored.
void run_case(Context& ctx, const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t hd = c.head_dim, kw = c.n_head_kv * hd, qw = c.n_head * hd;
  const uint32_t n_ctx = c.n_past + c.n_tokens + 9;  // unwritten rows after the last
  // With a softcap, scores large enough for the cap to matter.
  const float scale = (c.softcap > 0 ? 4.0f : 1.0f) / std::sqrt(static_cast<float>(hd));
  Step step(ctx, n_ctx);
  Caches caches(ctx, c.type, kw, step.rows());
  Dispatcher& d = ctx.immediate();
  if (c.n_past > 0) {
    Floats hk(ctx, random_floats(rng, static_cast<size_t>(c.n_past) * kw)),
        hv(ctx, random_floats(rng, static_cast<size_t>(c.n_past) * kw));
    step.set(0, c.n_past);
    kv_store(ctx, d, c.type, hk.view(), hv.view(), caches.k(), caches.v(), step.view(), kw, c.n_past);
  }
  Floats k(ctx, random_floats(rng, static_cast<size_t>(c.n_tokens) * kw)),
      v(ctx, random_floats(rng, static_cast<size_t>(c.n_tokens) * kw));
  const std::vector<float> qv = random_floats(rng, static_cast<size_t>(c.n_tokens) * qw);
  const std::vector<float> sv = random_floats(rng, c.n_head, 2.0f);
  Floats q(ctx, qv), sinks(ctx, sv), out(ctx, static_cast<size_t>(c.n_tokens) * qw);
  step.set(c.n_past, c.n_tokens);
  kv_store(ctx, d, c.type, k.view(), v.view(), caches.k(), caches.v(), step.view(), kw, c.n_tokens);

  AttentionArgs a = case_args(c, caches, step.view(), q.view(), out.view(), sinks.view(), n_ctx, scale);
  const uint32_t splits = attention_splits(ctx, a);
  const size_t scratch_bytes = attention_scratch_bytes(splits, c.n_head, hd, c.n_tokens);
  if (c.n_split == 0) {
    EXPECT_LE(scratch_bytes, attention_scratch_bytes(ctx, c.n_head, c.n_head_kv, hd, c.n_tokens, n_ctx)) << c.name;
  }
  Buffer scratch = ctx.host_buffer(std::max<size_t>(16, scratch_bytes));
  a.scratch = {&scratch, 0, 0};
  const bool codes = c.q8k && attention_q8k_fits(ctx, c.n_head, hd);
  if (c.q8k && !codes) std::printf("no Q8_K output on this device: the codes are not checked\n");
  Buffer xq = ctx.host_buffer(codes ? q8k_row_bytes(qw) * c.n_tokens : 16);
  if (codes) a.xq = {&xq, 0, 0};
  Buffer q8 = ctx.host_buffer(std::max<size_t>(16, mul_mv_q8_bytes(qw) * c.n_tokens));
  if (c.act != gguf::TensorType::F32) {
    a.q8_format = q8_act_format(c.act);
    if (attention_q8_fits(ctx, a)) {
      a.q8 = {&q8, 0, 0};
    } else {
      std::printf("%s: no activation codes from attention here (%u splits)\n", c.name, splits);
    }
  }
  attention(ctx, d, a);

  const uint32_t rows = c.n_past + c.n_tokens;
  const auto row_of = [&](uint32_t i) { return step.row_of(i); };
  const Reference want = reference(c, qv, caches.decoded(false, rows, row_of), caches.decoded(true, rows, row_of), sv, scale, splits,
                                   attention_uses_coopmat(ctx, a));
  if (attention_uses_coopmat(ctx, a)) std::printf("%s: the tensor-core prompt kernel\n", c.name);
  EXPECT_EQ(outside(out.data(), want, c.name), 0) << c.name << " (" << splits << " splits)";
  if (codes) {
    std::vector<uint8_t> got(q8k_row_bytes(qw) * c.n_tokens);
    std::memcpy(got.data(), xq.mapped, got.size());
    expect_codes_of(std::vector<float>(out.data(), out.data() + static_cast<size_t>(c.n_tokens) * qw), got, qw, c.n_tokens);
  }
  if (a.q8.buffer) {
    std::vector<uint8_t> got(mul_mv_q8_bytes(qw) * c.n_tokens);
    std::memcpy(got.data(), q8.mapped, got.size());
    std::string first;
    EXPECT_EQ(codes_unlike_the_cpus(c.act, std::vector<float>(out.data(), out.data() + static_cast<size_t>(c.n_tokens) * qw), got,
                                    qw, first),
              0)
        << c.name << ": activation codes, first at " << first;
  }
  ctx.release(q8);
  ctx.release(xq);
  ctx.release(scratch);
}

TEST_F(VulkanAttention, KvStoreWritesTheCpuQuantizersBytes) {
  // Positions n_past.. of each type against quant::quantize_row, in the rows the block table names
  // (positions 30..34 span two blocks, stored in reverse order); every other row keeps its bytes (Q8_0
  // blocks share 16-bit halves with their neighbours across row ends). kv_width 96: Q8_0 rows of 102
  // bytes, so blocks start at both halves of a uint.
  std::mt19937 rng(11);
  for (const KvCacheType type : {KvCacheType::F32, KvCacheType::F16, KvCacheType::Q8_0}) {
    for (const uint32_t kw : {96u, 256u}) {
      const uint32_t n_past = 30, n_tokens = 5, n_ctx = 40;
      Step step(*ctx_, n_ctx);
      Caches caches(*ctx_, type, kw, step.rows());
      std::memset(caches.buf.mapped, 0xa5, caches.v_offset + caches.bytes);
      const std::vector<float> kv = random_floats(rng, static_cast<size_t>(n_tokens) * kw, 3.0f),
                               vv = random_floats(rng, static_cast<size_t>(n_tokens) * kw, 3.0f);
      Floats k(*ctx_, kv), v(*ctx_, vv);
      step.set(n_past, n_tokens);
      kv_store(*ctx_, ctx_->immediate(), type, k.view(), v.view(), caches.k(), caches.v(), step.view(), kw, n_tokens);
      const size_t rb = caches.row_bytes;
      for (const bool is_v : {false, true}) {
        const uint8_t* got = caches.raw(is_v);
        const std::vector<float>& src = is_v ? vv : kv;
        std::vector<uint8_t> want(rb * n_tokens);
        for (uint32_t t = 0; t < n_tokens; ++t) {
          quant::quantize_row(tensor_type(type), src.data() + static_cast<size_t>(t) * kw, want.data() + t * rb, kw);
        }
        // The step's positions, gathered from their rows; every other row untouched.
        std::vector<bool> written(step.rows(), false);
        std::vector<uint8_t> gathered(want.size());
        for (uint32_t t = 0; t < n_tokens; ++t) {
          written[step.row_of(n_past + t)] = true;
          std::memcpy(gathered.data() + t * rb, got + step.row_of(n_past + t) * rb, rb);
        }
        for (uint32_t r = 0; r < step.rows(); ++r) {
          if (written[r]) continue;
          for (size_t i = 0; i < rb; ++i) ASSERT_EQ(got[r * rb + i], 0xa5) << "row " << r << " byte " << i << ", not the step's";
        }
        const uint8_t* g = gathered.data();
        if (type == KvCacheType::F32) {
          EXPECT_EQ(std::memcmp(g, want.data(), want.size()), 0);
        } else if (type == KvCacheType::F16) {
          // The shader rounds to nearest even in integer arithmetic (f16_rne.glsl), as the CPU does.
          EXPECT_EQ(std::memcmp(g, want.data(), want.size()), 0);
        } else {
          // Q8_0: d = amax / 127 stored as fp16, codes round(x / d). The device's reciprocal and product
          // are within Vulkan's 2.5 ulps and one rounding of the CPU's, so x / d differs by less than
          // 2^-20 of 127 between them: a code may differ (by one) only where x / d lies that close to a
          // half, and the stored scale only where amax / 127 lies that close to an fp16 rounding point.
          // Everywhere else the bytes must be the CPU's.
          const double near = 127 * 0x1p-20;
          for (uint32_t t = 0; t < n_tokens; ++t) {
            for (uint32_t b = 0; b < kw / 32; ++b) {
              const uint8_t* gb = g + t * rb + b * 34;
              const uint8_t* wb = want.data() + t * rb + b * 34;
              double amax = 0;
              for (uint32_t j = 0; j < 32; ++j) amax = std::max(amax, static_cast<double>(std::fabs(src[t * kw + b * 32 + j])));
              const double d = amax / 127;
              uint16_t hg, hw;
              std::memcpy(&hg, gb, 2);
              std::memcpy(&hw, wb, 2);
              // How far d lies from the midpoint between the two fp16 values around it, relative to d.
              const double lo = quant::fp16_to_f32(quant::f32_to_fp16(static_cast<float>(d)));
              const double ulp = std::ldexp(1.0, std::ilogb(d) - 10);
              const double to_tie = std::fabs(std::fabs(d - lo) - ulp / 2) / d;
              if (to_tie > 0x1p-20) ASSERT_EQ(hg, hw) << "row " << t << " block " << b << ": the scale";
              else ASSERT_LE(std::abs(int(hg) - int(hw)), 1) << "row " << t << " block " << b;
              if (hg != hw) continue;  // a scale one fp16 step apart moves every code: checked above
              for (uint32_t j = 0; j < 32; ++j) {
                const double r = src[t * kw + b * 32 + j] / d;
                const double frac = std::fabs(r - std::trunc(r));
                const int cg = static_cast<int8_t>(gb[2 + j]), cw = static_cast<int8_t>(wb[2 + j]);
                if (std::fabs(frac - 0.5) > near) ASSERT_EQ(cg, cw) << "row " << t << " block " << b << " element " << j;
                else ASSERT_LE(std::abs(cg - cw), 1) << "row " << t << " block " << b << " element " << j;
              }
            }
          }
        }
      }
    }
  }
}

// One test per case (each builds its own pipelines, which is most of a case's time on lavapipe).
class VulkanAttentionCase : public VulkanAttention, public ::testing::WithParamInterface<Case> {};

TEST_P(VulkanAttentionCase, MatchesTheDefinition) {
  uint32_t seed = 2166136261u;
  for (const char* c = GetParam().name; *c; ++c) seed = (seed ^ static_cast<uint8_t>(*c)) * 16777619u;
  run_case(*ctx_, GetParam(), seed);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n;
  for (const char* c = info.param.name; *c; ++c) {
    if (std::isalnum(static_cast<unsigned char>(*c)))
      n += *c;
    else if (!n.empty() && n.back() != '_')
      n += '_';
  }
  while (!n.empty() && n.back() == '_') n.pop_back();
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Decode, VulkanAttentionCase,
    ::testing::Values(Case{"at 0, GQA 4:1, F16", KvCacheType::F16, 8, 2, 128, 1, 0},
                      Case{"at 1, 1:1, hd 64, F32, codes", KvCacheType::F32, 4, 4, 64, 1, 1, 0, 0, false, 0, true},
                      Case{"at 37, hd 256, softcap, F16", KvCacheType::F16, 8, 2, 256, 1, 37, 0, 3.0f},
                      Case{"at 37, hd 256, 1:1, F32", KvCacheType::F32, 2, 2, 256, 1, 37},
                      Case{"at 37, 16 splits, most empty, codes", KvCacheType::F16, 8, 2, 128, 1, 37, 0, 0, false, 16, true},
                      Case{"at 700, sinks, F16", KvCacheType::F16, 8, 2, 128, 1, 700, 0, 0, true},
                      Case{"at 700, one split, F16, codes", KvCacheType::F16, 8, 2, 128, 1, 700, 0, 0, false, 1, true},
                      // One split writes its codes itself (blocks of 256 of 8 heads of 128; of 4 of 64).
                      Case{"at 300, GQA 8:1 (qwen3-30b-a3b's heads), one split, sinks, F16, codes", KvCacheType::F16, 32, 4,
                           128, 1, 300, 0, 0, true, 1, true},
                      Case{"at 300, GQA 4:1, hd 64, one split, window 100, Q8_0, codes", KvCacheType::Q8_0, 16, 4, 64, 1, 300,
                           100, 0, false, 1, true},
                      Case{"at 700, window 100, F32, codes", KvCacheType::F32, 4, 1, 64, 1, 700, 100, 0, false, 0, true},
                      Case{"at 37, hd 512, 4 splits, F16, codes", KvCacheType::F16, 4, 2, 512, 1, 37, 0, 0, false, 4, true},
                      Case{"at 37, GQA 3:1, F16", KvCacheType::F16, 6, 2, 128, 1, 37},
                      Case{"at 4100, GQA 8:1 (qwen3-30b-a3b's heads), 128 splits, F16, codes", KvCacheType::F16, 32, 4, 128, 1, 4100, 0, 0, false, 128, true},
                      Case{"at 2000, GQA 8:1, 3 splits, sinks, F32", KvCacheType::F32, 16, 2, 128, 1, 2000, 0, 0, true, 3},
                      Case{"at 37, hd 96, 3 splits, F16, codes", KvCacheType::F16, 8, 2, 96, 1, 37, 0, 0, false, 3, true},
                      Case{"at 1500, 128 splits, sinks, F16", KvCacheType::F16, 8, 2, 128, 1, 1500, 0, 0, true, 128},
                      Case{"at 1500, 128 splits, F16, codes", KvCacheType::F16, 8, 2, 128, 1, 1500, 0, 0, false, 128, true},
                      Case{"at 37, gpt-oss heads, sinks, 4 splits, Q8_0 activation codes", KvCacheType::F16, 64, 8, 64, 1, 37, 0,
                           0, true, 4, false, gguf::TensorType::MXFP4},
                      Case{"at 700, GQA 4:1, Q8_1 activation codes", KvCacheType::F16, 8, 2, 128, 1, 700, 0, 0, false, 0, false,
                           gguf::TensorType::Q4_1},
                      Case{"at 37, hd 96, 3 splits, Q8_0 activation codes", KvCacheType::F16, 8, 2, 96, 1, 37, 0, 0, false, 3,
                           false, gguf::TensorType::Q8_0},
                      // One split writes the activation codes itself (gpt-oss's heads; blocks of 3 a head).
                      Case{"at 300, gpt-oss heads, one split, sinks, Q8_0 activation codes", KvCacheType::F16, 64, 8, 64, 1, 300,
                           0, 0, true, 1, false, gguf::TensorType::MXFP4},
                      Case{"at 37, GQA 2:1, hd 96, one split, Q8_1 activation codes", KvCacheType::F16, 6, 3, 96, 1, 37, 0, 0,
                           false, 1, false, gguf::TensorType::Q4_1}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Prefill, VulkanAttentionCase,
    ::testing::Values(Case{"5 at 0, GQA 4:1, F32", KvCacheType::F32, 8, 2, 128, 5, 0},
                      Case{"5 at 33, window 16, 1:1, hd 64, F16", KvCacheType::F16, 4, 4, 64, 5, 33, 16},
                      Case{"5 at 33, GQA 3:1, F16", KvCacheType::F16, 6, 2, 128, 5, 33},
                      Case{"70 at 0, 1:1, F16", KvCacheType::F16, 4, 4, 128, 70, 0},
                      Case{"70 at 33, sinks, window 40, hd 64, F16", KvCacheType::F16, 8, 2, 64, 70, 33, 40, 0, true},
                      Case{"70 at 33, hd 256, softcap, F32", KvCacheType::F32, 4, 1, 256, 70, 33, 0, 5.0f},
                      Case{"70 at 33, 3 splits, F32, codes", KvCacheType::F32, 8, 2, 128, 70, 33, 0, 0, false, 3, true},
                      Case{"70 at 33, one split, sinks, F16", KvCacheType::F16, 8, 2, 128, 70, 33, 0, 0, true, 1},
                      Case{"7 at 33, hd 512, F16", KvCacheType::F16, 2, 1, 512, 7, 33},
                      // A verifying step's few tokens: each token's rows as a decode step takes them.
                      Case{"4 at 1500, GQA 4:1, F16, codes", KvCacheType::F16, 8, 2, 128, 4, 1500, 0, 0, false, 0, true},
                      Case{"8 at 700, window 100, sinks, GQA 4:1, F32", KvCacheType::F32, 8, 2, 64, 8, 700, 100, 0, true},
                      // A workgroup's rows over several tokens and past the last: one split's activation codes.
                      Case{"3 at 40, GQA 3:1, hd 64, one split, Q8_0 activation codes", KvCacheType::F16, 6, 2, 64, 3, 40, 0, 0,
                           false, 1, false, gguf::TensorType::Q8_0}),
    case_name);

INSTANTIATE_TEST_SUITE_P(Q8_0, VulkanAttentionCase,
                         ::testing::Values(Case{"decode at 37, GQA 4:1", KvCacheType::Q8_0, 8, 2, 128, 1, 37},
                                           Case{"decode at 900, GQA 8:1, 2 splits", KvCacheType::Q8_0, 8, 1, 128, 1, 900, 0, 0, false, 2},
                                           Case{"prefill 5 at 33, hd 96, blocks at odd halves", KvCacheType::Q8_0, 3, 1,
                                                96, 5, 33},
                                           Case{"prefill 70 at 0, hd 64", KvCacheType::Q8_0, 4, 4, 64, 70, 0}),
                         case_name);

TEST_F(VulkanAttention, RotationWithItsNormMatchesTheDefinitionAndAppendsToTheCache) {
  // rope_heads: the per-head norm before the rotation and the cache append after it in one dispatch,
  // against the CPU's norm and rotation (float rounding apart) and kv_store's bytes of those rows.
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto mode : {graph::RopeMode::Normal, graph::RopeMode::NeoX}) {
    for (const auto type : {KvCacheType::F16, KvCacheType::F32}) {
      const int n_head = 3, head_dim = 128, n_rot = 64, n_tok = 2;
      const uint32_t n_past = 5, width = n_head * head_dim, n = width * n_tok;
      graph::RopeParams rp;
      rp.base = 1e4f;
      std::vector<float> x(n), w(head_dim), v(n), cs(static_cast<size_t>(n_rot) * n_tok);
      for (auto& e : x) e = nd(rng) * 3.0f;
      for (auto& e : w) e = nd(rng);
      for (auto& e : v) e = nd(rng);
      for (int t = 0; t < n_tok; ++t) cpu::rope_cos_sin(n_rot, rp, nullptr, static_cast<int32_t>(n_past) + t, cs.data() + t * n_rot);
      const size_t row = kv_row_bytes(type, width);
      Step step(*ctx_, 2 * Step::kBlock);  // positions 5, 6 in cache rows 37, 38
      const size_t cache_bytes = row * step.rows();
      Buffer bx = ctx_->device_buffer(n * 4), bw = ctx_->device_buffer(w.size() * 4), bv = ctx_->device_buffer(n * 4),
             bc = ctx_->device_buffer(cs.size() * 4), by = ctx_->device_buffer(n * 4), bk = ctx_->device_buffer(cache_bytes),
             bvc = ctx_->device_buffer(cache_bytes), rk = ctx_->device_buffer(cache_bytes), rv = ctx_->device_buffer(cache_bytes);
      ctx_->upload(bx, 0, x.data(), n * 4);
      ctx_->upload(bw, 0, w.data(), w.size() * 4);
      ctx_->upload(bv, 0, v.data(), n * 4);
      ctx_->fill_zero(bk, 0, cache_bytes);
      ctx_->upload(bc, 0, cs.data(), cs.size() * 4);
      step.set(n_past, n_tok);
      RopeHeadsArgs a;
      a.x = View{&bx};
      a.cs = View{&bc};
      a.y = View{&by};
      a.n_head = n_head;
      a.head_dim = head_dim;
      a.n_rot = n_rot;
      a.n_tokens = n_tok;
      a.neox = mode == graph::RopeMode::NeoX;
      a.norm = true;
      a.norm_w = View{&bw};
      a.eps = 1e-6f;
      a.store = true;
      a.type = type;
      a.v = View{&bv};
      a.k_cache = View{&bk};
      a.v_cache = View{&bvc};
      a.step = step.view();
      rope_heads(*ctx_, ctx_->immediate(), a);
      std::vector<float> got(n);
      ctx_->download(by, 0, got.data(), n * 4);
      // rope_heads.comp's formulas, exactly and with their bound under Vulkan's precision (float_bound.h):
      // per head, h_e = x_e * inversesqrt(sum x^2 / head_dim + eps) * w_e; a rotated pair's first element
      // h_d c - h_p s, its second h_p s + h_d c, with the (cos, sin) the kernel is given.
      int outside = 0;
      for (int t = 0; t < n_tok; ++t) {
        for (int hh = 0; hh < n_head; ++hh) {
          const size_t base = static_cast<size_t>(t) * width + static_cast<size_t>(hh) * head_dim;
          const auto xh = test::exact(x.data() + base, head_dim);
          const test::Fb scale = test::vk::inversesqrt(test::vk::div(test::dot(xh, xh), test::Fb(head_dim)) + test::Fb(1e-6f));
          std::vector<test::Fb> hd(head_dim);
          for (int e = 0; e < head_dim; ++e) hd[static_cast<size_t>(e)] = xh[static_cast<size_t>(e)] * scale * test::Fb(w[static_cast<size_t>(e)]);
          for (int d = 0; d < head_dim; ++d) {
            test::Fb r = hd[static_cast<size_t>(d)];
            if (d < n_rot) {
              const bool neox = mode == graph::RopeMode::NeoX;
              const bool first = neox ? d < n_rot / 2 : d % 2 == 0;
              const int i = neox ? (first ? d : d - n_rot / 2) : d / 2;
              const int partner = neox ? (first ? d + n_rot / 2 : d - n_rot / 2) : (first ? d + 1 : d - 1);
              const test::Fb c(cs[static_cast<size_t>(t * n_rot + 2 * i)]), sn(cs[static_cast<size_t>(t * n_rot + 2 * i + 1)]);
              const test::Fb &hd_d = hd[static_cast<size_t>(d)], &hd_p = hd[static_cast<size_t>(partner)];
              r = first ? hd_d * c - hd_p * sn : hd_p * sn + hd_d * c;
            }
            const double g = got[base + static_cast<size_t>(d)];
            if (std::fabs(g - r.v) > r.e && outside++ < 3) {
              ADD_FAILURE() << "token " << t << " head " << hh << " dim " << d << ": " << g << " vs " << r.v << " +- " << r.e;
            }
          }
        }
      }
      EXPECT_EQ(outside, 0) << (a.neox ? "NeoX" : "normal");
      // The cache rows are kv_store's of the device's own rotated rows and of v.
      kv_store(*ctx_, ctx_->immediate(), type, View{&by}, View{&bv}, View{&rk}, View{&rv}, step.view(), width, n_tok);
      std::vector<uint8_t> k1(row * n_tok), k2(k1.size()), v1(k1.size()), v2(k1.size());
      const size_t first = row * step.row_of(n_past);
      ctx_->download(bk, first, k1.data(), k1.size());
      ctx_->download(rk, first, k2.data(), k2.size());
      ctx_->download(bvc, first, v1.data(), v1.size());
      ctx_->download(rv, first, v2.data(), v2.size());
      EXPECT_EQ(k1, k2);
      EXPECT_EQ(v1, v2);
      std::vector<float> other(n);  // rows the table does not name for these positions: never written
      ctx_->download(bk, row * n_past, other.data(), std::min(other.size() * 4, row * n_tok));
      EXPECT_TRUE(std::all_of(other.begin(), other.end(), [](float f) { return f == 0.0f; })) << "rows of the unmapped positions";
      for (Buffer* b : {&bx, &bw, &bv, &bc, &by, &bk, &bvc, &rk, &rv}) ctx_->release(*b);
    }
  }
}

TEST_F(VulkanAttention, ProductsWithTheirHeadsRotationAndCacheAppendAreTheSeparateDispatches) {
  // Decode's q / k product doing rope_heads's norm, rotation and k append in its last workgroup of each
  // head (mul_mv_k_rope / mul_mv_q8_rope, in place), and v's product appending v (mul_mv_k_vstore /
  // mul_mv_q8_vstore): bit for bit the product then rope_heads (its rotated rows and both caches'
  // bytes), for each K-quant and three 32-element formats (with biases; Q4_1 on Q8_1 codes), both
  // caches, both pairings, heads of 64 and 128 (a part of them rotated), with and without the heads'
  // norm and its weights, the counters from a base past 0 and back at zero after (a second run the same).
  std::mt19937 rng(12);
  struct Shape {
    uint32_t head_dim, n_head, n_rot, ncols;
  };
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q5_K, gguf::TensorType::Q6_K, gguf::TensorType::Q5_0,
                          gguf::TensorType::Q8_0, gguf::TensorType::Q4_1}) {
    const bool q8 = has_mul_mv_q8(type);
    if (!has_mul_mv_k(*ctx_, type) && !q8) GTEST_SKIP() << "the device has no packed integer dot product or subgroups under 8";
    for (const Shape sh : {Shape{128, 4, 64, 512}, Shape{64, 8, 64, 256}}) {
      const uint32_t width = sh.head_dim * sh.n_head;
      if (q8 && !ctx_->features().int_dot) GTEST_SKIP() << "the device has no packed integer dot product";
      ASSERT_TRUE(q8 ? mul_mv_q8_tail_fits(*ctx_, type, sh.ncols, width, sh.head_dim)
                     : mul_mv_k_tail_fits(*ctx_, type, sh.ncols, width, sh.head_dim))
          << "subgroups of " << ctx_->features().subgroup_size;
      for (const auto cache : {KvCacheType::F16, KvCacheType::F32}) {
        for (const bool neox : {false, true}) {
          const bool weighted = neox == (cache == KvCacheType::F16), normed = neox || cache == KvCacheType::F32;
          SCOPED_TRACE(testing::Message() << gguf::tensor_type_name(type) << ", heads of " << sh.head_dim << ", "
                                          << (cache == KvCacheType::F16 ? "F16" : "F32") << (neox ? ", NeoX" : "")
                                          << (normed ? ", normed" : "") << (weighted ? ", weighted" : ""));
          const uint32_t n_past = 37;
          const size_t rs = quant::row_size(type, sh.ncols);
          std::vector<uint8_t> wk(rs * width + 16), wv(wk.size());
          std::vector<float> row(sh.ncols);
          for (auto* wq : {&wk, &wv}) {
            for (uint32_t r = 0; r < width; ++r) {
              for (auto& v : row) v = random_floats(rng, 1)[0] * static_cast<float>(1 + r % 3) + 0.1f * static_cast<float>(r % 5);
              quant::quantize_row(type, row.data(), wq->data() + r * rs, sh.ncols);
            }
          }
          const std::vector<float> x = random_floats(rng, sh.ncols, 2.0f), nw = random_floats(rng, sh.head_dim);
          std::vector<float> cs(sh.n_rot);
          graph::RopeParams rp;
          rp.base = 1e4f;
          cpu::rope_cos_sin(static_cast<int>(sh.n_rot), rp, nullptr, static_cast<int32_t>(n_past), cs.data());
          Step step(*ctx_, 3 * Step::kBlock);
          step.set(n_past, 1);
          const size_t cache_bytes = kv_row_bytes(cache, width) * step.rows();
          Buffer bwk = ctx_->device_buffer(wk.size()), bwv = ctx_->device_buffer(wv.size()), bx = ctx_->device_buffer(x.size() * 4),
                 bq = ctx_->device_buffer(q8 ? mul_mv_q8_bytes(sh.ncols) : q8k_row_bytes(sh.ncols)),
                 bnw = ctx_->device_buffer(nw.size() * 4), bb = ctx_->device_buffer(2 * width * 4),
                 bcs = ctx_->device_buffer(cs.size() * 4), count = ctx_->device_buffer(4 * (3 + sh.n_head));
          std::vector<Buffer> out;  // per path: k, k rotated, v, k cache, v cache
          for (int i = 0; i < 10; ++i) out.push_back(ctx_->device_buffer(i % 5 < 3 ? width * 4 : cache_bytes));
          ctx_->upload(bwk, 0, wk.data(), wk.size());
          ctx_->upload(bwv, 0, wv.data(), wv.size());
          ctx_->upload(bx, 0, x.data(), x.size() * 4);
          ctx_->upload(bnw, 0, nw.data(), nw.size() * 4);
          ctx_->upload(bcs, 0, cs.data(), cs.size() * 4);
          const std::vector<float> biases = random_floats(rng, 2 * width);
          ctx_->upload(bb, 0, biases.data(), biases.size() * 4);
          const View kb = q8 ? View{&bb, 0, width * 4} : View{}, vb = q8 ? View{&bb, width * 4, width * 4} : View{};
          ctx_->fill_zero(count, 0, count.size);
          for (Buffer& b : out) ctx_->fill_zero(b, 0, b.size);
          // The separate dispatches.
          if (q8) {
            quantize_q8_act(*ctx_, ctx_->immediate(), type, View{&bx}, View{&bq}, sh.ncols, 1);
            mul_mv_q8_codes(*ctx_, ctx_->immediate(), type, View{&bwk}, View{&bq}, View{&out[0]}, kb, sh.ncols, width, 1);
            mul_mv_q8_codes(*ctx_, ctx_->immediate(), type, View{&bwv}, View{&bq}, View{&out[2]}, vb, sh.ncols, width, 1);
          } else {
            quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bq}, sh.ncols, 1);
            mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwk}, View{&bq}, View{&out[0]}, sh.ncols, width, 1);
            mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwv}, View{&bq}, View{&out[2]}, sh.ncols, width, 1);
          }
          RopeHeadsArgs a;
          a.x = View{&out[0]};
          a.cs = View{&bcs};
          a.y = View{&out[1]};
          a.n_head = sh.n_head;
          a.head_dim = sh.head_dim;
          a.n_rot = sh.n_rot;
          a.n_tokens = 1;
          a.neox = neox;
          a.norm = normed;
          a.norm_w = weighted ? View{&bnw} : View{};
          a.eps = 1e-6f;
          a.offset = weighted ? 1.0f : 0.0f;
          a.store = true;
          a.type = cache;
          a.v = View{&out[2]};
          a.k_cache = View{&out[3]};
          a.v_cache = View{&out[4]};
          a.step = step.view();
          rope_heads(*ctx_, ctx_->immediate(), a);
          // The products with their tails, twice (the counters reset by the last workgroup of each head).
          MulMvKRope r;
          r.cs = View{&bcs};
          r.norm_w = a.norm_w;
          r.k_cache = View{&out[8]};
          r.step = step.view();
          r.count = View{&count};
          r.head_dim = sh.head_dim;
          r.n_rot = sh.n_rot;
          r.count_base = 3;
          r.neox = neox;
          r.norm = normed;
          r.store = true;
          r.f32_cache = cache == KvCacheType::F32;
          r.eps = a.eps;
          r.offset = a.offset;
          const auto rotating = [&](View y) {
            if (q8) mul_mv_q8_rope(*ctx_, ctx_->immediate(), type, View{&bwk}, View{&bq}, y, kb, sh.ncols, width, r);
            else mul_mv_k_rope(*ctx_, ctx_->immediate(), type, View{&bwk}, View{&bq}, y, sh.ncols, width, r);
          };
          for (int run = 0; run < 2; ++run) {
            rotating(View{&out[6]});
            if (q8) {
              mul_mv_q8_vstore(*ctx_, ctx_->immediate(), type, View{&bwv}, View{&bq}, View{&out[7]}, vb, View{&out[9]},
                               step.view(), r.f32_cache, sh.ncols, width);
            } else {
              mul_mv_k_vstore(*ctx_, ctx_->immediate(), type, View{&bwv}, View{&bq}, View{&out[7]}, View{&out[9]}, step.view(),
                              r.f32_cache, sh.ncols, width);
            }
          }
          std::vector<std::vector<uint8_t>> got;
          for (Buffer& b : out) {
            got.emplace_back(b.size);
            ctx_->download(b, 0, got.back().data(), b.size);
          }
          EXPECT_EQ(got[6], got[1]) << "the rotated rows";
          EXPECT_EQ(got[7], got[2]) << "v";
          EXPECT_EQ(got[8], got[3]) << "the k cache";
          EXPECT_EQ(got[9], got[4]) << "the v cache";
          EXPECT_NE(got[1], got[0]) << "(the rotation changed the rows)";
          std::vector<uint32_t> counters(3 + sh.n_head);
          ctx_->download(count, 0, counters.data(), counters.size() * 4);
          EXPECT_TRUE(std::all_of(counters.begin(), counters.end(), [](uint32_t c) { return c == 0; }));
          // Without the append: the same rotated rows, the cache untouched.
          r.store = false;
          ctx_->fill_zero(out[8], 0, out[8].size);
          rotating(View{&out[5]});
          std::vector<uint8_t> plain(width * 4), cache_after(out[8].size);
          ctx_->download(out[5], 0, plain.data(), plain.size());
          ctx_->download(out[8], 0, cache_after.data(), cache_after.size());
          EXPECT_EQ(plain, got[1]);
          EXPECT_TRUE(std::all_of(cache_after.begin(), cache_after.end(), [](uint8_t b) { return b == 0; }));
          for (Buffer* b : {&bwk, &bwv, &bx, &bq, &bnw, &bcs, &count, &bb}) ctx_->release(*b);
          for (Buffer& b : out) ctx_->release(b);
        }
      }
    }
  }
}

TEST_F(VulkanAttention, ARecordedStepFollowsNPastFromTheStepBuffer) {
  // kv_store and attention recorded once (as the executor records a decode step) and replayed at
  // successive positions with new q, k, v each time: the kernels take n_past from the step buffer.
  const Case base{"recorded decode", KvCacheType::F16, 8, 2, 64, 1, 0, 0, 0, true};
  const uint32_t hd = base.head_dim, kw = base.n_head_kv * hd, qw = base.n_head * hd, n_ctx = 64;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::mt19937 rng(7);
  Step step(*ctx_, n_ctx);
  Caches caches(*ctx_, base.type, kw, step.rows());
  Floats k(*ctx_, kw), v(*ctx_, kw), q(*ctx_, qw), out(*ctx_, qw);
  const std::vector<float> sv = random_floats(rng, base.n_head, 2.0f);
  Floats sinks(*ctx_, sv);
  AttentionArgs a;
  a.type = base.type;
  a.q = q.view();
  a.k_cache = caches.k();
  a.v_cache = caches.v();
  a.sinks = sinks.view();
  a.step = step.view();
  a.out = out.view();
  a.n_head = base.n_head;
  a.n_head_kv = base.n_head_kv;
  a.head_dim = hd;
  a.n_tokens = 1;
  a.n_ctx = n_ctx;
  a.scale = scale;
  Buffer scratch = ctx_->host_buffer(
      std::max<size_t>(16, attention_scratch_bytes(*ctx_, base.n_head, base.n_head_kv, hd, 1, n_ctx)));
  a.scratch = {&scratch, 0, 0};
  {
    Recording rec(*ctx_, 8);
    kv_store(*ctx_, rec, base.type, k.view(), v.view(), caches.k(), caches.v(), step.view(), kw, 1);
    rec.barrier();
    attention(*ctx_, rec, a);
    rec.finish();
    const auto row_of = [&](uint32_t i) { return step.row_of(i); };
    for (uint32_t n_past = 0; n_past < 40; ++n_past) {
      const std::vector<float> qv = random_floats(rng, qw);
      k.set(random_floats(rng, kw));
      v.set(random_floats(rng, kw));
      q.set(qv);
      step.set(n_past, 1);
      rec.submit_and_wait();
      if (n_past % 13 != 0 && n_past != 39) continue;
      Case c = base;
      c.n_past = n_past;
      const Reference want = reference(c, qv, caches.decoded(false, n_past + 1, row_of), caches.decoded(true, n_past + 1, row_of),
                                       sv, scale, attention_splits(*ctx_, a));
      EXPECT_EQ(outside(out.data(), want, "at n_past " + std::to_string(n_past)), 0);
    }
  }
  ctx_->release(scratch);
}

TEST_F(VulkanAttention, ARowOfFewKeysIsTheSameBitsWhateverItsSplitsAndStep) {
  // Decode-sized steps compute a row of at most attention_one_keys() keys as one split (the others
  // write nothing; the merge reads its output back and writes only its codes). So a row is the same
  // bits (output and codes) in a step of one token or four, recorded with the splits of a large
  // context or (max_keys within the bound) with one split and no merge. Four tokens at 125..128 of a
  // 4,096-position context: the first rows have 126..128 keys, the last 129 (merged from its splits).
  if (attention_one_keys() < 128) GTEST_SKIP() << "ZINC_VULKAN_FA_ONE_KEYS is under 128";
  // Shapes (act F32: Q8_K codes of the output; else that 32-element format's).
  for (const Case& sh : {Case{"qwen3-30b-a3b's heads, F16, sinks, Q8_K codes", KvCacheType::F16, 32, 4, 128, 1, 0, 0, 0, true},
                         Case{"gpt-oss heads, window 100, Q8_0 cache, Q8_0 codes", KvCacheType::Q8_0, 64, 8, 64, 1, 0, 100, 0, true, 0,
                              false, gguf::TensorType::Q8_0},
                         Case{"heads of 256, F32", KvCacheType::F32, 8, 2, 256, 1, 0}}) {
    SCOPED_TRACE(sh.name);
    std::mt19937 rng(11);
    const uint32_t hd = sh.head_dim, kw = sh.n_head_kv * hd, qw = sh.n_head * hd, n_ctx = 4096, n0 = 125, nt = 4;
    Step step(*ctx_, n_ctx);
    Caches caches(*ctx_, sh.type, kw, step.rows());
    Dispatcher& d = ctx_->immediate();
    Floats hk(*ctx_, random_floats(rng, static_cast<size_t>(n0 + nt) * kw)), hv(*ctx_, random_floats(rng, static_cast<size_t>(n0 + nt) * kw));
    step.set(0, n0 + nt);
    kv_store(*ctx_, d, sh.type, hk.view(), hv.view(), caches.k(), caches.v(), step.view(), kw, n0 + nt);
    const std::vector<float> qv = random_floats(rng, static_cast<size_t>(nt) * qw);
    Floats sinks(*ctx_, random_floats(rng, sh.n_head, 2.0f));
    Buffer scratch = ctx_->host_buffer(attention_scratch_bytes(*ctx_, sh.n_head, sh.n_head_kv, hd, nt, n_ctx));
    const bool q8k = sh.act == gguf::TensorType::F32;
    const size_t code_bytes = q8k ? q8k_row_bytes(qw) : mul_mv_q8_bytes(qw);
    // The step of `n` tokens from q's row `first` at n_past, its rows' outputs and codes (none: empty).
    const auto run = [&](uint32_t first, uint32_t n, uint32_t max_keys, std::vector<float>* out, std::vector<uint8_t>* codes) {
      Floats q(*ctx_, std::vector<float>(qv.begin() + first * qw, qv.begin() + (first + n) * qw)), o(*ctx_, static_cast<size_t>(n) * qw);
      Buffer xq = ctx_->host_buffer(code_bytes * n);
      Case c = sh;
      c.n_tokens = n;
      AttentionArgs a = case_args(c, caches, step.view(), q.view(), o.view(), sinks.view(), n_ctx, 1.0f / std::sqrt(static_cast<float>(hd)));
      a.scratch = {&scratch, 0, 0};
      a.max_keys = max_keys;
      if (q8k) {
        if (attention_q8k_fits(*ctx_, sh.n_head, hd)) a.xq = {&xq, 0, 0};
      } else {
        a.q8_format = q8_act_format(sh.act);
        if (attention_q8_fits(*ctx_, a)) a.q8 = {&xq, 0, 0};
      }
      step.set(n0 + first, n);
      attention(*ctx_, d, a);
      out->assign(o.data(), o.data() + static_cast<size_t>(n) * qw);
      codes->clear();
      if (a.xq.buffer || a.q8.buffer) codes->assign(static_cast<const uint8_t*>(xq.mapped), static_cast<const uint8_t*>(xq.mapped) + code_bytes * n);
      ctx_->release(xq);
      return attention_splits(*ctx_, a);
    };
    std::vector<float> all, one;
    std::vector<uint8_t> all_codes, one_codes;
    EXPECT_GT(run(0, nt, 0, &all, &all_codes), 1u);
    if (!q8k && !all_codes.empty()) {
      std::string first;
      EXPECT_EQ(codes_unlike_the_cpus(sh.act, all, all_codes, qw, first), 0) << "activation codes, first at " << first;
    }
    if (q8k && !all_codes.empty()) expect_codes_of(all, all_codes, qw, nt);
    for (uint32_t t = 0; t < nt; ++t) {
      const uint32_t keys = n0 + t + 1;
      for (const uint32_t max_keys : {0u, 128u}) {
        if (max_keys != 0 && keys > max_keys) continue;
        const uint32_t splits = run(t, 1, max_keys, &one, &one_codes);
        EXPECT_EQ(splits == 1, max_keys != 0) << "row " << t;
        const std::string where = "row " + std::to_string(t) + " (" + std::to_string(keys) + " keys) alone, " + std::to_string(splits) + " splits";
        EXPECT_EQ(std::memcmp(one.data(), all.data() + t * qw, qw * 4), 0) << where;
        if (!one_codes.empty() && !all_codes.empty()) {
          EXPECT_EQ(std::memcmp(one_codes.data(), all_codes.data() + t * code_bytes, code_bytes), 0) << where << ": codes";
        }
      }
    }
    ctx_->release(scratch);
  }
}

TEST_F(VulkanAttention, BadShapesAreClearErrors) {
  AttentionArgs a;
  a.n_head = 6;
  a.n_head_kv = 4;
  a.head_dim = 64;
  a.n_tokens = 1;
  a.n_ctx = 16;
  EXPECT_THROW(attention(*ctx_, ctx_->immediate(), a), Error);
  a.n_head_kv = 2;
  a.head_dim = 1024;
  EXPECT_THROW(attention(*ctx_, ctx_->immediate(), a), Error);
}

}  // namespace
}  // namespace zinc::backend::vk
