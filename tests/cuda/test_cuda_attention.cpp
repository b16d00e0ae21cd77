// The CUDA attention kernels against a double-precision softmax: prompts on tensor cores (CudaFlash)
// and decode rows with their keys split in parts (CudaDecodeAttention), over F32, F16 and Q8_0 caches
// in blocks through tables, with windows, soft caps and sinks; and the decode launch forming the heads
// itself. Skips, saying why, where no NVIDIA GPU is visible.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "cuda_test_util.h"
#include "gguf/types.h"
#include "quant/quant.h"

namespace zinc {
namespace {

using gguf::TensorType;
using test_cuda::Dev;
using test_cuda::upload;

// What the attention tests share: a case (window, cap, sinks), its arguments over the caller's device
// buffers, and the double-precision softmax of one row and head over keys and values given by
// position (key(j), value(j): that head's hd elements).
struct AttnCase {
  int window;
  float softcap;
  bool sinks;
};
struct AttnBuffers {
  const Dev &q, &k, &v, &pos, &table_at, &tables, &sinks, &out;
};
backend::cuda::AttentionArgs attention_args(const AttnBuffers& b, TensorType kv, size_t row_bytes, int n, int n_head, int n_head_kv, int hd,
                                            const AttnCase& c) {
  backend::cuda::AttentionArgs a;
  a.q = b.q.as<float>();
  a.q_stride = n_head * hd;
  a.k = b.k.p;
  a.v = b.v.p;
  a.kv_type = static_cast<int>(kv);
  a.row_bytes = row_bytes;
  a.n = n;
  a.pos = b.pos.as<int32_t>();
  a.table_at = b.table_at.as<int32_t>();
  a.tables = b.tables.as<int32_t>();
  a.n_head = n_head;
  a.n_head_kv = n_head_kv;
  a.head_dim = hd;
  a.window = c.window;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.softcap = c.softcap;
  a.sinks = c.sinks ? b.sinks.as<float>() : nullptr;
  a.out = b.out.as<float>();
  return a;
}
template <class Key, class Value>
std::vector<double> softmax_ref(const float* q, int pos, const AttnCase& c, float scale, float sink, int hd, Key key, Value value) {
  const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
  std::vector<double> s(static_cast<size_t>(pos + 1 - lo)), out(static_cast<size_t>(hd), 0.0);
  double mx = c.sinks ? sink : -INFINITY;
  for (int j = lo; j <= pos; ++j) {
    const float* k = key(j);
    double d = 0;
    for (int e = 0; e < hd; ++e) d += static_cast<double>(q[e]) * k[e];
    d *= scale;
    if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
    s[static_cast<size_t>(j - lo)] = d;
    mx = std::max(mx, d);
  }
  double sum = c.sinks ? std::exp(sink - mx) : 0.0;
  for (double& v : s) sum += (v = std::exp(v - mx));
  for (int j = lo; j <= pos; ++j) {
    const float* v = value(j);
    for (int e = 0; e < hd; ++e) out[static_cast<size_t>(e)] += s[static_cast<size_t>(j - lo)] * v[e];
  }
  for (double& o : out) o /= sum;
  return out;
}

// A prompt's attention on tensor cores against a double-precision softmax over the cache's own values
// (F16 or Q8_0 rows as the cache holds them): 100 rows of one sequence at positions 37..136, its
// cache blocks out of order in the pool, two query heads per cache head; with and without a sliding
// window, a score cap and sinks; the keys in one part and split over blocks. Q is rounded to f16 and so are the probabilities the values are
// weighed by: the bound is a few f16 roundings of outputs of size about one.
class CudaFlash : public ::testing::TestWithParam<std::tuple<TensorType, int>> {
 protected:
  void SetUp() override { ZINC_NEED_CUDA_DEVICE(); }
};

TEST_P(CudaFlash, PromptAttentionMatchesTheSoftmax) {
  const auto [kv, hd] = GetParam();
  ASSERT_TRUE(backend::cuda::flash_attention_fits(static_cast<int>(kv), hd));
  const int n_head = 4, n_head_kv = 2, n = 100, first = 37, keys = first + n;
  const int kw = n_head_kv * hd, blocks = (keys + backend::cuda::kKvBlock - 1) / backend::cuda::kKvBlock;
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t rb = quant::row_size(kv, kw);
  // The pool: blocks + 2 blocks, the sequence's in reverse order from block 1.
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = blocks - b;
  const size_t slots = static_cast<size_t>(blocks + 2) * backend::cuda::kKvBlock;
  std::vector<uint8_t> kc(slots * rb, 0xff), vc(slots * rb, 0xff);  // 0xffff: f16 NaN where nothing was written
  std::vector<float> kf(static_cast<size_t>(keys * kw)), vf(kf.size()), row(static_cast<size_t>(kw));
  for (int j = 0; j < keys; ++j) {
    const size_t slot = static_cast<size_t>(table[static_cast<size_t>(j / backend::cuda::kKvBlock)]) * backend::cuda::kKvBlock +
                        static_cast<size_t>(j % backend::cuda::kKvBlock);
    for (int w = 0; w < 2; ++w) {
      for (float& v : row) v = dist(rng);
      uint8_t* dst = (w ? vc.data() : kc.data()) + slot * rb;
      quant::quantize_row(kv, row.data(), dst, kw);
      quant::dequantize_row(kv, dst, (w ? vf.data() : kf.data()) + static_cast<size_t>(j * kw), kw);
    }
  }
  std::vector<float> q(static_cast<size_t>(n * n_head * hd));
  for (float& v : q) v = dist(rng);
  std::vector<int32_t> pos(static_cast<size_t>(n)), table_at(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) pos[static_cast<size_t>(r)] = first + r;
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  Dev dk(kc.size()), dv(vc.size()), dq(q.size() * 4), dpos(n * 4), dat(n * 4), dtab(table.size() * 4), dsink(16), dout(q.size() * 4);
  upload(dk, kc.data(), kc.size());
  upload(dv, vc.data(), vc.size());
  upload(dq, q.data(), q.size() * 4);
  upload(dpos, pos.data(), pos.size() * 4);
  upload(dat, table_at.data(), table_at.size() * 4);
  upload(dtab, table.data(), table.size() * 4);
  upload(dsink, sinks.data(), 16);
  const AttnBuffers bufs{dq, dk, dv, dpos, dat, dtab, dsink, dout};
  // The keys in one part, and split: 3 parts (of 2, 2 and 1 cache blocks) and 8 (5 past the keys).
  const size_t part_bytes = static_cast<size_t>(n * n_head * 8 * (hd + 2)) * 4;
  Dev dpart(part_bytes);
  for (const int splits : {1, 3, 8})
  for (const AttnCase c : {AttnCase{0, 0, false}, AttnCase{50, 0, false}, AttnCase{0, 30.0f, true}, AttnCase{20, 0, true}}) {
    backend::cuda::AttentionArgs a = attention_args(bufs, kv, rb, n, n_head, n_head_kv, hd, c);
    if (splits > 1) a.splits = splits, a.part = dpart.as<float>();
    ASSERT_EQ(cudaMemset(dout.p, 0, q.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(dpart.p, 0xff, part_bytes), cudaSuccess);  // NaN: every part read is written first
    backend::cuda::flash_attention(nullptr, a);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(q.size());
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0;
    for (int r = 0; r < n; ++r)
      for (int h = 0; h < n_head; ++h) {
        const int kvh = h / (n_head / n_head_kv);
        const auto at = [&](const std::vector<float>& f) { return [&f, kw, kvh, hd](int j) { return f.data() + static_cast<size_t>(j * kw + kvh * hd); }; };
        const std::vector<double> want = softmax_ref(q.data() + static_cast<size_t>((r * n_head + h) * hd), pos[static_cast<size_t>(r)], c, a.scale,
                                                     sinks[static_cast<size_t>(h)], hd, at(kf), at(vf));
        for (int e = 0; e < hd; ++e) {
          const double g = got[static_cast<size_t>((r * n_head + h) * hd + e)], o = want[static_cast<size_t>(e)];
          worst = std::max(worst, std::fabs(g - o));
          ASSERT_NEAR(g, o, 2e-3) << "window " << c.window << " cap " << c.softcap << " sinks " << c.sinks << " splits " << splits << " row "
                                  << r << " head " << h << " element " << e;
        }
      }
    fmt::print("{} head {}, window {}, cap {}, sinks {}, {} part(s): worst difference {:.2e}\n", gguf::tensor_type_name(kv), hd, c.window,
               c.softcap, c.sinks, splits, worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Caches, CudaFlash,
                         ::testing::Combine(::testing::Values(TensorType::F16, TensorType::Q8_0), ::testing::Values(64, 128)),
                         [](const ::testing::TestParamInfo<std::tuple<TensorType, int>>& i) {
                           return fmt::format("{}_{}", gguf::tensor_type_name(std::get<0>(i.param)), std::get<1>(i.param));
                         });

// Decode rows' attention (keys split over blocks) against a double-precision softmax over the cache's
// values: three rows of two sequences (positions 3000 and 3001 of one, 5 of the other; their blocks
// interleaved in one pool), every cache type, heads of 64 to 512, the keys in one part and in up
// to seven merged by the last block (twice: the counts left at zero); windows, a cap, sinks; query
// heads sharing a KV head in twos and fours (one block's heads) and alone.
class CudaDecodeAttention : public ::testing::TestWithParam<std::tuple<TensorType, int>> {
 protected:
  void SetUp() override { ZINC_NEED_CUDA_DEVICE(); }
};

void check_decode_attention(TensorType kv, int hd, int n_head, int n_head_kv) {
  SCOPED_TRACE(fmt::format("{} heads on {} KV heads", n_head, n_head_kv));
  constexpr int kB = backend::cuda::kKvBlock;
  const int kw = n_head_kv * hd, n = 3;
  const std::vector<int32_t> pos = {3000, 5, 3001};
  const int blocks_a = 3002 / kB + 1;
  std::vector<int32_t> tables(static_cast<size_t>(2 * blocks_a));
  for (int b = 0; b < blocks_a; ++b) tables[static_cast<size_t>(b)] = 2 * b + 1;  // A: odd blocks
  tables[static_cast<size_t>(blocks_a)] = 0;                                    // B: block 0
  const std::vector<int32_t> table_at = {0, blocks_a, 0};
  const size_t rb = quant::row_size(kv, kw), slots = static_cast<size_t>(2 * blocks_a + 2) * kB;
  std::mt19937 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint8_t> kc(slots * rb, 0xff), vc(slots * rb, 0xff);
  std::vector<float> kf(slots * static_cast<size_t>(kw)), vf(kf.size()), row(static_cast<size_t>(kw));
  const auto fill = [&](int seq, int keys) {
    for (int j = 0; j < keys; ++j) {
      const size_t slot = static_cast<size_t>(tables[static_cast<size_t>(seq * blocks_a + j / kB)]) * kB + static_cast<size_t>(j % kB);
      for (int w = 0; w < 2; ++w) {
        for (float& v : row) v = dist(rng);
        uint8_t* dst = (w ? vc.data() : kc.data()) + slot * rb;
        quant::quantize_row(kv, row.data(), dst, kw);
        quant::dequantize_row(kv, dst, (w ? vf.data() : kf.data()) + slot * static_cast<size_t>(kw), kw);
      }
    }
  };
  fill(0, 3002);
  fill(1, 6);
  std::vector<float> q(static_cast<size_t>(n * n_head * hd));
  for (float& v : q) v = dist(rng);
  std::vector<float> sinks(static_cast<size_t>(n_head));
  for (int h = 0; h < n_head; ++h) sinks[static_cast<size_t>(h)] = std::array{0.5f, -1.0f, 2.0f, 0.0f}[static_cast<size_t>(h % 4)] + 0.25f * static_cast<float>(h / 4);
  const int splits = 7;
  Dev dk(kc.size()), dv(vc.size()), dq(q.size() * 4), dpos(n * 4), dat(n * 4), dtab(tables.size() * 4), dsink(sinks.size() * 4), dout(q.size() * 4),
      dpart(static_cast<size_t>(n * n_head * splits * (hd + 4)) * 4), dcount(static_cast<size_t>(n * n_head) * 4);
  upload(dk, kc.data(), kc.size());
  upload(dv, vc.data(), vc.size());
  upload(dq, q.data(), q.size() * 4);
  upload(dpos, pos.data(), pos.size() * 4);
  upload(dat, table_at.data(), table_at.size() * 4);
  upload(dtab, tables.data(), tables.size() * 4);
  upload(dsink, sinks.data(), sinks.size() * 4);
  ASSERT_EQ(cudaMemset(dcount.p, 0, static_cast<size_t>(n * n_head) * 4), cudaSuccess);
  const AttnBuffers bufs{dq, dk, dv, dpos, dat, dtab, dsink, dout};
  // Where the heads allow it, the output's activation codes too: the same bytes as quantizing the
  // output by its own launch.
  const bool codes = backend::cuda::attention_codes_fit(hd, n_head, n_head_kv);
  const int64_t cols = static_cast<int64_t>(n_head) * hd;
  const size_t code_bytes = static_cast<size_t>(n * cols + n * cols / 64 + 16 + n * cols / 16);
  Dev dcodes(code_bytes), dwant(code_bytes);
  for (const AttnCase c : {AttnCase{0, 0, false}, AttnCase{300, 0, true}, AttnCase{0, 30.0f, true}})
    for (const auto& [parts, keys] : {std::pair{1, 0}, std::pair{splits, 0}, std::pair{splits, 0}, std::pair{splits, 256}}) {
      backend::cuda::AttentionArgs a = attention_args(bufs, kv, rb, n, n_head, n_head_kv, hd, c);
      a.splits = parts;
      a.part_keys = keys;  // (256: the 3002-key row in 7 parts of 429, the 7-key row in one)
      a.part = dpart.as<float>();
      a.count = dcount.as<unsigned>();
      if (codes) a.codes = dcodes.p;
      ASSERT_EQ(cudaMemset(dout.p, 0, q.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMemset(dcodes.p, 0, code_bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(dwant.p, 0, code_bytes), cudaSuccess);
      backend::cuda::attention(nullptr, a);
      if (codes) backend::cuda::quantize_codes(nullptr, dout.as<float>(), cols, 1, cols, n, dwant.p);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> got(q.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      if (codes) {
        std::vector<uint8_t> cg(code_bytes), cw(code_bytes);
        ASSERT_EQ(cudaMemcpy(cg.data(), dcodes.p, code_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(cw.data(), dwant.p, code_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_TRUE(std::any_of(cw.begin(), cw.end(), [](uint8_t b) { return b != 0; }));
        ASSERT_EQ(cg, cw) << parts << " parts of " << keys << "+ keys: the attention's codes differ from its output's";
      }
      std::vector<unsigned> counts(static_cast<size_t>(n * n_head));
      ASSERT_EQ(cudaMemcpy(counts.data(), dcount.p, counts.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (const unsigned k : counts) ASSERT_EQ(k, 0u) << "a count left after the merge";
      for (int r = 0; r < n; ++r)
        for (int h = 0; h < n_head; ++h) {
          const int kvh = h / (n_head / n_head_kv);
          const int32_t* table = tables.data() + table_at[static_cast<size_t>(r)];
          const auto at = [&](const std::vector<float>& f) {
            return [&f, table, kw, kvh, hd](int j) {
              return f.data() + (static_cast<size_t>(table[j / kB]) * kB + static_cast<size_t>(j % kB)) * static_cast<size_t>(kw) +
                     static_cast<size_t>(kvh * hd);
            };
          };
          const std::vector<double> want = softmax_ref(q.data() + static_cast<size_t>((r * n_head + h) * hd), pos[static_cast<size_t>(r)], c,
                                                       a.scale, sinks[static_cast<size_t>(h)], hd, at(kf), at(vf));
          for (int e = 0; e < hd; ++e)
            ASSERT_NEAR(got[static_cast<size_t>((r * n_head + h) * hd + e)], want[static_cast<size_t>(e)], 2e-5)
                << parts << " parts of " << keys << "+ keys, window " << c.window << " cap " << c.softcap << " sinks " << c.sinks << " row " << r
                << " head " << h << " element " << e;
        }
    }
  // A step of up to kSameRows rows splits each row's keys as a step of that row alone does (the
  // splits and parts a context takes, on an H200's 132 multiprocessors): the three rows together and
  // each alone, the same bit for bit.
  ASSERT_LE(n, backend::cuda::kSameRows);
  const int sms = 132;
  Dev dpart_all(static_cast<size_t>(n * n_head * backend::cuda::kMaxAttentionSplits * (hd + 4)) * 4), dalone(q.size() * 4);
  backend::cuda::AttentionArgs a = attention_args(bufs, kv, rb, n, n_head, n_head_kv, hd, AttnCase{0, 0, true});
  a.part = dpart_all.as<float>();
  a.count = dcount.as<unsigned>();
  a.splits = backend::cuda::decode_attention_splits(n, n_head, n_head_kv, hd, sms);
  a.part_keys = backend::cuda::decode_attention_part_keys(n);
  backend::cuda::attention(nullptr, a);
  for (int r = 0; r < n; ++r) {
    backend::cuda::AttentionArgs b = a;
    b.n = 1;
    b.q = a.q + static_cast<int64_t>(r) * a.q_stride;
    b.pos = a.pos + r;
    b.table_at = a.table_at + r;
    b.out = dalone.as<float>() + static_cast<int64_t>(r) * a.q_stride;
    b.splits = backend::cuda::decode_attention_splits(1, n_head, n_head_kv, hd, sms);
    b.part_keys = backend::cuda::decode_attention_part_keys(1);
    backend::cuda::attention(nullptr, b);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> together(q.size()), alone(q.size());
  ASSERT_EQ(cudaMemcpy(together.data(), dout.p, together.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(alone.data(), dalone.p, alone.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_GT(a.splits, 1);
  for (size_t i = 0; i < together.size(); ++i)
    ASSERT_EQ(std::memcmp(&together[i], &alone[i], 4), 0) << "row " << i / static_cast<size_t>(a.q_stride) << " element "
                                                          << i % static_cast<size_t>(a.q_stride) << ": " << together[i] << " alone " << alone[i];
}

TEST_P(CudaDecodeAttention, RowsMatchTheSoftmax) {
  const auto [kv, hd] = GetParam();
  // Heads whose decode blocks hold whole super-blocks of 256 also form their output's codes.
  EXPECT_EQ(backend::cuda::attention_codes_fit(hd, 8, 2), true);
  EXPECT_EQ(backend::cuda::attention_codes_fit(hd, 3, 3), hd >= 256);
  for (const auto& [n_head, n_head_kv] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{3, 3}}) {
    check_decode_attention(kv, hd, n_head, n_head_kv);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The decode launch forming the heads itself (AttentionArgs::pre): q and k as the products wrote them,
// each normalised over its head and rotated here on the host (double precision), the newest key and
// value stored by the launch at each row's slot (NaN bytes before, so a read before the store shows)
// and every row's output the softmax over its keys, the newest included. Rows of three sequences
// (one token each, as decode steps send them), keys split in parts and not.
void check_formed_heads(TensorType kv, int hd, int n_head, int n_head_kv, bool neox, int n_rot, bool norm, bool weights) {
  SCOPED_TRACE(fmt::format("{} heads on {} KV heads, {} rotation of {}, norm {} weights {}", n_head, n_head_kv, neox ? "neox" : "pairwise",
                           n_rot, norm, weights));
  constexpr int kB = backend::cuda::kKvBlock;
  const int kw = n_head_kv * hd, n = 3;
  const std::vector<int32_t> pos = {1000, 5, 70};
  const int nb = 1001 / kB + 1;
  std::vector<int32_t> tables(static_cast<size_t>(3 * nb));
  for (int s = 0; s < 3; ++s)
    for (int b = 0; b < nb; ++b) tables[static_cast<size_t>(s * nb + b)] = 3 * b + (s + 1) % 3;  // interleaved blocks
  const std::vector<int32_t> table_at = {0, nb, 2 * nb};
  std::vector<int32_t> slot(n);
  for (int r = 0; r < n; ++r) {
    const int p = pos[static_cast<size_t>(r)];
    slot[static_cast<size_t>(r)] = tables[static_cast<size_t>(table_at[static_cast<size_t>(r)] + p / kB)] * kB + p % kB;
  }
  const size_t rb = quant::row_size(kv, kw), slots = static_cast<size_t>(3 * nb) * kB;
  std::mt19937 rng(77);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint8_t> kc(slots * rb, 0xff), vc(slots * rb, 0xff);
  std::vector<float> row(static_cast<size_t>(kw));
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < pos[static_cast<size_t>(r)]; ++j) {
      const size_t sl = static_cast<size_t>(tables[static_cast<size_t>(table_at[static_cast<size_t>(r)] + j / kB)]) * kB + static_cast<size_t>(j % kB);
      for (int w = 0; w < 2; ++w) {
        for (float& v : row) v = dist(rng);
        quant::quantize_row(kv, row.data(), (w ? vc.data() : kc.data()) + sl * rb, kw);
      }
    }
  std::vector<float> q(static_cast<size_t>(n * n_head * hd)), k(static_cast<size_t>(n * kw)), v(k.size());
  for (float& x : q) x = 2.0f * dist(rng);
  for (float& x : k) x = 2.0f * dist(rng);
  for (float& x : v) x = dist(rng);
  std::vector<float> wq(static_cast<size_t>(hd)), wk(static_cast<size_t>(hd)), cs(static_cast<size_t>(n * n_rot));
  for (float& x : wq) x = dist(rng);
  for (float& x : wk) x = dist(rng);
  std::uniform_real_distribution<float> angle(0.0f, 6.2831853f);
  for (size_t i = 0; i < cs.size(); i += 2) {
    const float t = angle(rng);
    cs[i] = std::cos(t), cs[i + 1] = std::sin(t);
  }
  const float offset = 0.5f, eps = 1e-6f;
  Dev dk(kc.size()), dv(vc.size()), dq(q.size() * 4), dkr(k.size() * 4), dvr(v.size() * 4), dpos(n * 4), dat(n * 4), dtab(tables.size() * 4),
      dslot(n * 4), dwq(wq.size() * 4), dwk(wk.size() * 4), dcs(cs.size() * 4), dsink(static_cast<size_t>(n_head) * 4),
      dout(q.size() * 4), dpart(static_cast<size_t>(n * n_head * 7 * (hd + 4)) * 4), dcount(static_cast<size_t>(n * n_head) * 4);
  upload(dq, q.data(), q.size() * 4);
  upload(dkr, k.data(), k.size() * 4);
  upload(dvr, v.data(), v.size() * 4);
  upload(dpos, pos.data(), pos.size() * 4);
  upload(dat, table_at.data(), table_at.size() * 4);
  upload(dtab, tables.data(), tables.size() * 4);
  upload(dslot, slot.data(), slot.size() * 4);
  upload(dwq, wq.data(), wq.size() * 4);
  upload(dwk, wk.data(), wk.size() * 4);
  upload(dcs, cs.data(), cs.size() * 4);
  // The heads as the host forms them: the norm, then the rotation of each pair.
  const auto form = [&](const float* x, const std::vector<float>& w, int r) {
    std::vector<double> y(x, x + hd);
    if (norm) {
      double ss = 0;
      for (double e : y) ss += e * e;
      const double scale = 1.0 / std::sqrt(ss / hd + eps);
      for (int e = 0; e < hd; ++e) y[static_cast<size_t>(e)] *= scale * (weights ? w[static_cast<size_t>(e)] + offset : 1.0);
    }
    const float* c = cs.data() + static_cast<size_t>(r * n_rot);
    for (int j = 0; j < n_rot / 2; ++j) {
      const size_t i0 = static_cast<size_t>(neox ? j : 2 * j), i1 = static_cast<size_t>(neox ? j + n_rot / 2 : 2 * j + 1);
      const double x0 = y[i0], x1 = y[i1];
      y[i0] = x0 * c[2 * j] - x1 * c[2 * j + 1];
      y[i1] = x0 * c[2 * j + 1] + x1 * c[2 * j];
    }
    return y;
  };
  // (Parts of at least 256 keys, as steps of eight rows and more take them: row 0's 1001 keys in four
  // parts, the others' in one.)
  for (const auto& [parts, keys] : {std::pair{1, 0}, std::pair{7, 0}, std::pair{7, 256}}) {
    SCOPED_TRACE(fmt::format("{} parts of at least {} keys", parts, keys));
    upload(dk, kc.data(), kc.size());
    upload(dv, vc.data(), vc.size());
    const AttnBuffers bufs{dq, dk, dv, dpos, dat, dtab, dsink, dout};
    backend::cuda::AttentionArgs a = attention_args(bufs, kv, rb, n, n_head, n_head_kv, hd, AttnCase{0, 0, false});
    a.splits = parts;
    a.part_keys = keys;
    a.part = dpart.as<float>();
    a.count = dcount.as<unsigned>();
    backend::cuda::HeadsArgs& h = a.pre;
    h.nparts = 2;
    h.part[0] = {dq.as<float>(), nullptr, n_head, norm, weights ? dwq.as<float>() : nullptr, eps, offset};
    h.part[1] = {dkr.as<float>(), nullptr, n_head_kv, norm, weights ? dwk.as<float>() : nullptr, eps, offset};
    h.head_dim = hd;
    h.n_rot = n_rot;
    h.neox = neox;
    h.cs = dcs.as<float>();
    h.kc = dk.as<uint8_t>();
    h.vc = dv.as<uint8_t>();
    h.v = dvr.as<float>();
    h.v_heads = n_head_kv;
    h.slots = dslot.as<int32_t>();
    h.row_bytes = rb;
    h.kv_type = static_cast<int>(kv);
    backend::cuda::attention(nullptr, a);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(q.size());
    std::vector<uint8_t> kg(kc.size()), vg(vc.size());
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(kg.data(), dk.p, kg.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(vg.data(), dv.p, vg.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> kf(slots * static_cast<size_t>(kw)), vf(kf.size());
    for (size_t sl = 0; sl < slots; ++sl) {
      quant::dequantize_row(kv, kg.data() + sl * rb, kf.data() + sl * static_cast<size_t>(kw), kw);
      quant::dequantize_row(kv, vg.data() + sl * rb, vf.data() + sl * static_cast<size_t>(kw), kw);
    }
    // The heads formed by their own launch (k_heads_norm_rope: steps whose rows are not each its
    // sequence's one token), then the attention of those: the same output and cache bytes bit for bit.
    {
      Dev dqf(q.size() * 4), dkf(k.size() * 4), dout2(q.size() * 4), dk2(kc.size()), dv2(vc.size());
      upload(dk2, kc.data(), kc.size());
      upload(dv2, vc.data(), vc.size());
      backend::cuda::HeadsArgs h2 = h;
      h2.part[0].out = dqf.as<float>();
      h2.part[1].out = dkf.as<float>();
      h2.kc = dk2.as<uint8_t>();
      h2.vc = dv2.as<uint8_t>();
      backend::cuda::heads_norm_rope(nullptr, h2, n);
      const AttnBuffers bufs2{dqf, dk2, dv2, dpos, dat, dtab, dsink, dout2};
      backend::cuda::AttentionArgs b = attention_args(bufs2, kv, rb, n, n_head, n_head_kv, hd, AttnCase{0, 0, false});
      b.splits = parts;
      b.part_keys = keys;
      b.part = dpart.as<float>();
      b.count = dcount.as<unsigned>();
      backend::cuda::attention(nullptr, b);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> got2(q.size());
      std::vector<uint8_t> kg2(kc.size()), vg2(vc.size());
      ASSERT_EQ(cudaMemcpy(got2.data(), dout2.p, got2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(kg2.data(), dk2.p, kg2.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(vg2.data(), dv2.p, vg2.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_TRUE(kg2 == kg) << "the keys stored by the heads' own launch differ from those the attention stored";
      ASSERT_TRUE(vg2 == vg) << "the values stored by the heads' own launch differ";
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::memcmp(&got[i], &got2[i], 4), 0) << "heads formed by their own launch: element " << i << " " << got2[i] << " against "
                                                        << got[i];
    }
    const double tol = kv == TensorType::F32 ? 2e-5 : 2e-3;
    for (int r = 0; r < n; ++r) {
      const size_t at = static_cast<size_t>(slot[static_cast<size_t>(r)]) * static_cast<size_t>(kw);
      for (int kh = 0; kh < n_head_kv; ++kh) {
        const std::vector<double> want = form(k.data() + static_cast<size_t>((r * n_head_kv + kh) * hd), wk, r);
        for (int e = 0; e < hd; ++e) {
          const size_t i = at + static_cast<size_t>(kh * hd + e);
          ASSERT_NEAR(kf[i], want[static_cast<size_t>(e)], tol * (1 + std::fabs(want[static_cast<size_t>(e)]))) << "row " << r << " key head " << kh << " element " << e;
          ASSERT_NEAR(vf[i], v[static_cast<size_t>((r * n_head_kv + kh) * hd + e)], tol) << "row " << r << " value head " << kh << " element " << e;
        }
      }
      for (int hq = 0; hq < n_head; ++hq) {
        const int kvh = hq / (n_head / n_head_kv);
        const int32_t* table = tables.data() + table_at[static_cast<size_t>(r)];
        const auto key_of = [&](const std::vector<float>& f) {
          return [&f, table, kw, kvh, hd](int j) {
            return f.data() + (static_cast<size_t>(table[j / kB]) * kB + static_cast<size_t>(j % kB)) * static_cast<size_t>(kw) + static_cast<size_t>(kvh * hd);
          };
        };
        const std::vector<double> qd = form(q.data() + static_cast<size_t>((r * n_head + hq) * hd), wq, r);
        const std::vector<float> qf(qd.begin(), qd.end());
        const std::vector<double> want = softmax_ref(qf.data(), pos[static_cast<size_t>(r)], AttnCase{0, 0, false}, a.scale, 0.0f, hd, key_of(kf), key_of(vf));
        for (int e = 0; e < hd; ++e)
          ASSERT_NEAR(got[static_cast<size_t>((r * n_head + hq) * hd + e)], want[static_cast<size_t>(e)], 1e-4)
              << parts << " parts, row " << r << " head " << hq << " element " << e;
      }
    }
  }
}

TEST_P(CudaDecodeAttention, FormsTheHeadsAndStoresTheNewestKey) {
  const auto [kv, hd] = GetParam();
  const bool fits = (kv == TensorType::F32 || kv == TensorType::F16) && hd <= 256;
  ASSERT_EQ(backend::cuda::attention_forms_heads(static_cast<int>(kv), hd, hd, true), fits);
  if (!fits) return;  // (those heads go through their own launch: the fixtures cover them)
  ASSERT_FALSE(backend::cuda::attention_forms_heads(static_cast<int>(kv), hd, hd / 16 + 2, true)) << "a lane across the pair's halves";
  for (const auto& [n_head, n_head_kv] : {std::pair{8, 2}, std::pair{3, 3}}) {
    check_formed_heads(kv, hd, n_head, n_head_kv, true, hd, true, true);
    check_formed_heads(kv, hd, n_head, n_head_kv, true, hd / 4, true, false);
    check_formed_heads(kv, hd, n_head, n_head_kv, false, hd - 2, false, false);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Caches, CudaDecodeAttention,
                         ::testing::Combine(::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0), ::testing::Values(64, 128, 256, 512)),
                         [](const ::testing::TestParamInfo<std::tuple<TensorType, int>>& i) {
                           return fmt::format("{}_{}", gguf::tensor_type_name(std::get<0>(i.param)), std::get<1>(i.param));
                         });

}  // namespace
}  // namespace zinc
