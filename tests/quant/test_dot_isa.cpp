// Every SIMD kernel table the running CPU can execute (AVX2, AVX-512/VNNI, NEON), every weight type it
// implements, against the scalar reference dot_ref(). Rows are built byte by byte, not only through the
// quantizers: codes take every value their bits allow (including patterns no quantizer writes, such as
// Q8_0 -128 or Q6_K scale -128), scales may be zero, activations sit at ±127. The allowed difference is
// float summation order: 1e-5 × Σ|w·a| (plus Σ|min terms| for formats that subtract a minimum).
// A table that returns nullptr for a type is reported as skipped, never as passed. The tile kernels
// (several weight and activation rows per call) are held to the same reference, pair by pair.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/system_info.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "quant_codes.h"

namespace zinc::quant {
namespace {

using gguf::TensorType;

struct Isa {
  const char* name;
  DotFn (*table)(TensorType);
  DotTileFn (*tile_table)(TensorType, int tokens);  // nullptr: the instruction set has no tile kernels
  bool (*runs_here)(const CpuInfo&);
};

const Isa kIsas[] = {
    {"avx2", dot_fn_avx2, dot_tile_fn_avx2, [](const CpuInfo& c) { return c.avx2 && c.fma && c.f16c; }},
    // The AVX-512 file is compiled with VNNI and DQ as well; every CPU with AVX512-VNNI has DQ.
    {"avx512", dot_fn_avx512, dot_tile_fn_avx512,
     [](const CpuInfo& c) { return c.avx512f && c.avx512bw && c.avx512vl && c.avx512vnni && c.fma && c.f16c; }},
    {"neon", dot_fn_neon, nullptr, [](const CpuInfo& c) { return c.neon; }},
};

const TensorType kTypes[] = {TensorType::F32,  TensorType::F16,    TensorType::BF16,   TensorType::Q4_0,
                             TensorType::Q4_1, TensorType::Q5_0,   TensorType::Q5_1,   TensorType::Q8_0,
                             TensorType::Q2_K, TensorType::Q3_K,   TensorType::Q4_K,   TensorType::Q5_K,
                             TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4};

bool is_float(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16; }

// How weight codes and activation codes are drawn.
enum class Codes { kRandom, kAllZeroBits, kAllOneBits, kAlternating };
enum class Acts { kRandom, kPlus127, kMinus127, kAlternating127 };
enum class Scales { kRandom, kZero, kUnit };

struct Row {
  std::vector<uint8_t> w, act;
};

uint16_t random_fp16(std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::bernoulli_distribution neg(0.25);
  const float v = u(rng);
  return f32_to_fp16(neg(rng) ? -v : v);
}

// Weight bytes of n elements: codes by pattern, then every scale field overwritten (finite values only).
std::vector<uint8_t> make_weights(TensorType t, int64_t n, Codes codes, Scales scales, std::mt19937& rng) {
  std::vector<uint8_t> w(row_size(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < w.size(); ++i) {
    switch (codes) {
      case Codes::kRandom: w[i] = static_cast<uint8_t>(byte(rng)); break;
      case Codes::kAllZeroBits: w[i] = 0x00; break;
      case Codes::kAllOneBits: w[i] = 0xff; break;
      case Codes::kAlternating: w[i] = (i / 3) % 2 ? 0xff : 0x00; break;
    }
  }
  const int64_t nb = n / block_size(t);
  auto d = [&](float lo, float hi) -> uint16_t {
    if (scales == Scales::kZero) return 0;
    if (scales == Scales::kUnit) return f32_to_fp16(1.0f);
    return random_fp16(rng, lo, hi);
  };
  auto patch = [&](auto* blocks, auto&& fn) {
    for (int64_t i = 0; i < nb; ++i) fn(blocks[i]);
  };
  switch (t) {
    case TensorType::F32: {
      std::normal_distribution<float> g(0.0f, 1.0f);
      auto* f = reinterpret_cast<float*>(w.data());
      for (int64_t i = 0; i < n; ++i) {
        f[i] = codes == Codes::kRandom ? g(rng) : codes == Codes::kAllOneBits ? 3.0e4f : codes == Codes::kAlternating ? (i % 2 ? -1e-3f : 7.5f) : 0.0f;
        if (scales == Scales::kZero) f[i] = 0;
      }
      break;
    }
    case TensorType::F16:
    case TensorType::BF16: {
      std::normal_distribution<float> g(0.0f, 1.0f);
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      for (int64_t i = 0; i < n; ++i) {
        float v = codes == Codes::kRandom ? g(rng) : codes == Codes::kAllOneBits ? 65504.0f : codes == Codes::kAlternating ? (i % 2 ? -6.0e-8f : 1000.0f) : 0.0f;
        if (codes == Codes::kRandom && i % 11 == 0) v *= 1e-6f;  // F16 subnormals
        if (scales == Scales::kZero) v = 0;
        h[i] = t == TensorType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      }
      break;
    }
    case TensorType::Q4_0: patch(reinterpret_cast<BlockQ4_0*>(w.data()), [&](BlockQ4_0& b) { b.d = d(0.01f, 2.0f); }); break;
    case TensorType::Q5_0: patch(reinterpret_cast<BlockQ5_0*>(w.data()), [&](BlockQ5_0& b) { b.d = d(0.01f, 2.0f); }); break;
    case TensorType::Q8_0: patch(reinterpret_cast<BlockQ8_0*>(w.data()), [&](BlockQ8_0& b) { b.d = d(0.001f, 0.1f); }); break;
    case TensorType::IQ4_NL: patch(reinterpret_cast<BlockIQ4_NL*>(w.data()), [&](BlockIQ4_NL& b) { b.d = d(0.001f, 0.1f); }); break;
    case TensorType::Q4_1:
      patch(reinterpret_cast<BlockQ4_1*>(w.data()), [&](BlockQ4_1& b) { b.d = d(0.01f, 1.0f); b.m = d(0.5f, 8.0f); });
      break;
    case TensorType::Q5_1:
      patch(reinterpret_cast<BlockQ5_1*>(w.data()), [&](BlockQ5_1& b) { b.d = d(0.01f, 1.0f); b.m = d(0.5f, 16.0f); });
      break;
    case TensorType::MXFP4: {
      std::uniform_int_distribution<int> e(110, 140);
      patch(reinterpret_cast<BlockMXFP4*>(w.data()), [&](BlockMXFP4& b) {
        b.e = static_cast<uint8_t>(scales == Scales::kZero ? 0 : scales == Scales::kUnit ? 127 : e(rng));
      });
      break;
    }
    case TensorType::Q2_K:
      patch(reinterpret_cast<BlockQ2_K*>(w.data()), [&](BlockQ2_K& b) { b.d = d(0.001f, 0.1f); b.dmin = d(0.001f, 0.1f); });
      break;
    case TensorType::Q3_K: patch(reinterpret_cast<BlockQ3_K*>(w.data()), [&](BlockQ3_K& b) { b.d = d(0.001f, 0.1f); }); break;
    case TensorType::Q4_K:
      patch(reinterpret_cast<BlockQ4_K*>(w.data()), [&](BlockQ4_K& b) { b.d = d(0.001f, 0.1f); b.dmin = d(0.001f, 0.1f); });
      break;
    case TensorType::Q5_K:
      patch(reinterpret_cast<BlockQ5_K*>(w.data()), [&](BlockQ5_K& b) { b.d = d(0.001f, 0.1f); b.dmin = d(0.001f, 0.1f); });
      break;
    case TensorType::Q6_K: patch(reinterpret_cast<BlockQ6_K*>(w.data()), [&](BlockQ6_K& b) { b.d = d(0.001f, 0.1f); }); break;
    case TensorType::IQ4_XS: patch(reinterpret_cast<BlockIQ4_XS*>(w.data()), [&](BlockIQ4_XS& b) { b.d = d(0.001f, 0.1f); }); break;
    default: ADD_FAILURE() << "no generator for " << gguf::tensor_type_name(t);
  }
  return w;
}

int8_t act_code(Acts acts, int64_t i, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(-127, 127);
  switch (acts) {
    case Acts::kRandom: return static_cast<int8_t>(code(rng));
    case Acts::kPlus127: return 127;
    case Acts::kMinus127: return -127;
    case Acts::kAlternating127: return static_cast<int8_t>(i % 2 ? -127 : 127);
  }
  return 0;
}

// Activation row in the format paired with t: codes by pattern, consistent block sums.
std::vector<uint8_t> make_activations(TensorType t, int64_t n, Acts acts, std::mt19937& rng) {
  std::vector<uint8_t> a(activation_row_size(t, n));
  switch (dot_activation_type(t)) {
    case TensorType::F32: {
      std::normal_distribution<float> g(0.0f, 1.0f);
      auto* f = reinterpret_cast<float*>(a.data());
      for (int64_t i = 0; i < n; ++i) {
        f[i] = acts == Acts::kRandom ? g(rng) : acts == Acts::kPlus127 ? 127.0f : acts == Acts::kMinus127 ? -127.0f : (i % 2 ? -127.0f : 127.0f);
      }
      break;
    }
    case TensorType::Q8_0: {
      auto* b = reinterpret_cast<BlockQ8_0*>(a.data());
      for (int64_t i = 0; i < n / kQK; ++i) {
        b[i].d = random_fp16(rng, 0.001f, 0.05f);
        for (int j = 0; j < kQK; ++j) b[i].qs[j] = act_code(acts, i * kQK + j, rng);
      }
      break;
    }
    case TensorType::Q8_1: {
      auto* b = reinterpret_cast<BlockQ8_1*>(a.data());
      for (int64_t i = 0; i < n / kQK; ++i) {
        b[i].d = random_fp16(rng, 0.001f, 0.05f);
        int sum = 0;
        for (int j = 0; j < kQK; ++j) sum += b[i].qs[j] = act_code(acts, i * kQK + j, rng);
        b[i].s = f32_to_fp16(fp16_to_f32(b[i].d) * static_cast<float>(sum));
      }
      break;
    }
    case TensorType::Q8_K: {
      auto* b = reinterpret_cast<BlockQ8_K*>(a.data());
      std::uniform_real_distribution<float> u(0.001f, 0.05f);
      for (int64_t i = 0; i < n / kQKK; ++i) {
        b[i].d = u(rng);
        for (int g = 0; g < kQKK / 16; ++g) {
          int sum = 0;
          for (int j = 0; j < 16; ++j) sum += b[i].qs[16 * g + j] = act_code(acts, i * kQKK + 16 * g + j, rng);
          b[i].bsums[g] = static_cast<int16_t>(sum);
        }
      }
      break;
    }
    default: ADD_FAILURE() << "no activation generator for " << gguf::tensor_type_name(t);
  }
  return a;
}

std::vector<float> dequantized_activation(TensorType t, const std::vector<uint8_t>& act, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (dot_activation_type(t) == TensorType::Q8_1) {
    const auto* b = reinterpret_cast<const BlockQ8_1*>(act.data());
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(b[i / kQK].d) * b[i / kQK].qs[i % kQK];
  } else {
    dequantize_row(dot_activation_type(t), act.data(), out.data(), n);
  }
  return out;
}

// Scale of the rounding error any summation order may make: Σ|w·a|, plus the separately summed
// minimum terms of the affine formats (their sum can cancel against the scaled codes).
double magnitude(TensorType t, const Row& r, int64_t n) {
  std::vector<float> wd(static_cast<size_t>(n));
  dequantize_row(t, r.w.data(), wd.data(), n);
  const auto ad = dequantized_activation(t, r.act, n);
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m += std::fabs(static_cast<double>(wd[i]) * ad[i]);
  auto mins = [&](auto* x, auto&& min_of) {  // Σ |dmin·m_sb·a| over K-quant sub-blocks
    for (int64_t i = 0; i < n; ++i) m += std::fabs(static_cast<double>(min_of(x[i / kQKK], static_cast<int>(i % kQKK))) * ad[i]);
  };
  switch (t) {
    case TensorType::Q4_1:
    case TensorType::Q5_1: {
      const auto* y = reinterpret_cast<const BlockQ8_1*>(r.act.data());
      const size_t bs = t == TensorType::Q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ5_1);
      for (int64_t i = 0; i < n / kQK; ++i) {
        uint16_t mm;
        std::memcpy(&mm, r.w.data() + static_cast<size_t>(i) * bs + 2, 2);
        m += std::fabs(static_cast<double>(fp16_to_f32(mm)) * fp16_to_f32(y[i].s));
      }
      break;
    }
    case TensorType::Q2_K:
      mins(reinterpret_cast<const BlockQ2_K*>(r.w.data()),
           [](const BlockQ2_K& b, int e) { return fp16_to_f32(b.dmin) * static_cast<float>(b.scales[e / 16] >> 4); });
      break;
    case TensorType::Q4_K:
    case TensorType::Q5_K: {
      const bool five = t == TensorType::Q5_K;
      const size_t bs = five ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* blk = r.w.data() + static_cast<size_t>(i / kQKK) * bs;
        uint16_t dmin;
        std::memcpy(&dmin, blk + 2, 2);
        uint8_t sc, mn;
        kquant_scale_min(static_cast<int>(i % kQKK) / 32, blk + 4, &sc, &mn);
        m += std::fabs(static_cast<double>(fp16_to_f32(dmin)) * mn * ad[i]);
      }
      break;
    }
    default: break;
  }
  return m;
}

void expect_matches_reference(const Isa& isa, DotFn fn, TensorType t, const Row& r, int64_t n, const std::string& what) {
  const double ref = dot_ref(t, r.w.data(), r.act.data(), n);
  const double got = fn(r.w.data(), r.act.data(), n);
  // Each side within the rounding bound of the exact value (quant_codes.h), so within twice of each other.
  const double tol = 2 * test::dot_rounding_bound(t, n, magnitude(t, r, n));
  ASSERT_TRUE(std::isfinite(ref)) << what;
  EXPECT_NEAR(got, ref, tol) << isa.name << " " << gguf::tensor_type_name(t) << " n=" << n << " " << what;
}

struct Param {
  int isa;
  TensorType type;
};
void PrintTo(const Param& p, std::ostream* os) { *os << kIsas[p.isa].name << " " << gguf::tensor_type_name(p.type); }

class DotKernels : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const Isa& isa = kIsas[GetParam().isa];
    if (!isa.runs_here(cpu_info())) GTEST_SKIP() << "this CPU does not run " << isa.name;
    fn_ = isa.table(GetParam().type);
    if (!fn_) GTEST_SKIP() << isa.name << " has no kernel for " << gguf::tensor_type_name(GetParam().type);
  }
  std::vector<int64_t> lengths() const {
    const TensorType t = GetParam().type;
    if (is_float(t)) return {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1023, 4096};
    std::vector<int64_t> out;
    for (int64_t b : {1, 2, 3, 5, 7, 16, 33}) out.push_back(b * block_size(t));
    return out;
  }
  DotFn fn_ = nullptr;
};

TEST_P(DotKernels, RandomCodesMatchTheReference) {
  const Isa& isa = kIsas[GetParam().isa];
  const TensorType t = GetParam().type;
  for (unsigned seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed * 1000 + static_cast<unsigned>(t));
    for (int64_t n : lengths()) {
      const Row r{make_weights(t, n, Codes::kRandom, Scales::kRandom, rng), make_activations(t, n, Acts::kRandom, rng)};
      expect_matches_reference(isa, fn_, t, r, n, "random seed " + std::to_string(seed));
    }
  }
}

TEST_P(DotKernels, QuantizedRowsMatchTheReference) {
  const Isa& isa = kIsas[GetParam().isa];
  const TensorType t = GetParam().type;
  std::mt19937 rng(77);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t n : lengths()) {
    if (n % block_size(t) != 0 || !can_quantize(t)) continue;
    std::vector<float> wf(static_cast<size_t>(n)), xf(static_cast<size_t>(n));
    for (auto& v : wf) v = g(rng);
    for (auto& v : xf) v = 0.5f * g(rng);
    Row r;
    r.w.resize(row_size(t, n));
    quantize_row(t, wf.data(), r.w.data(), n);
    r.act.resize(activation_row_size(t, n));
    quantize_activation(t, xf.data(), r.act.data(), n);
    expect_matches_reference(isa, fn_, t, r, n, "quantized");
  }
}

TEST_P(DotKernels, ExtremeCodesAndScalesMatchTheReference) {
  const Isa& isa = kIsas[GetParam().isa];
  const TensorType t = GetParam().type;
  std::mt19937 rng(11);
  const int64_t lens[] = {is_float(t) ? 1023 : 33 * block_size(t), is_float(t) ? 17 : block_size(t)};
  for (int64_t n : lens) {
    for (Codes c : {Codes::kRandom, Codes::kAllZeroBits, Codes::kAllOneBits, Codes::kAlternating}) {
      for (Scales s : {Scales::kRandom, Scales::kZero, Scales::kUnit}) {
        for (Acts a : {Acts::kRandom, Acts::kPlus127, Acts::kMinus127, Acts::kAlternating127}) {
          const Row r{make_weights(t, n, c, s, rng), make_activations(t, n, a, rng)};
          expect_matches_reference(isa, fn_, t, r, n,
                                   "codes " + std::to_string(static_cast<int>(c)) + " scales " + std::to_string(static_cast<int>(s)) +
                                       " acts " + std::to_string(static_cast<int>(a)));
          if (s == Scales::kZero && !is_float(t) && t != TensorType::MXFP4) {  // E8M0 has no zero
            EXPECT_EQ(fn_(r.w.data(), r.act.data(), n), 0.0f) << isa.name << " " << gguf::tensor_type_name(t) << " zero scales";
          }
        }
      }
    }
  }
}

// ---- tile kernels: kDotTileRows weight rows × kDotTileTokens activation rows -------------------------
//
// Every (weight row, activation row) result is compared with dot_ref on that pair. The rows of a tile
// differ from each other (each is drawn separately, and the extreme cases give each row another
// pattern), and they sit in buffers with garbage between them (the strides are larger than a row), so
// a kernel that mixes up rows, or steps by the row size instead of the stride, gets wrong answers.

struct Tile {
  std::vector<uint8_t> w, act;  // rows at w_stride / act_stride bytes
  size_t w_stride = 0, act_stride = 0;
  std::vector<Row> pairs;       // pairs[r * kDotTileTokens + t]: weight row r with activation row t
};

// gen_w(r) and gen_act(t) make row r / t; gaps between rows are filled with 0xa5.
template <class GenW, class GenAct>
Tile make_tile(TensorType t, int64_t n, GenW gen_w, GenAct gen_act) {
  Tile tile;
  tile.w_stride = row_size(t, n) + 48;
  tile.act_stride = activation_row_size(t, n) + 80;
  tile.w.assign(tile.w_stride * kDotTileRows, 0xa5);
  tile.act.assign(tile.act_stride * kDotTileTokens, 0xa5);
  std::vector<std::vector<uint8_t>> ws, as;
  for (int r = 0; r < kDotTileRows; ++r) {
    ws.push_back(gen_w(r));
    std::memcpy(tile.w.data() + tile.w_stride * static_cast<size_t>(r), ws.back().data(), ws.back().size());
  }
  for (int k = 0; k < kDotTileTokens; ++k) {
    as.push_back(gen_act(k));
    std::memcpy(tile.act.data() + tile.act_stride * static_cast<size_t>(k), as.back().data(), as.back().size());
  }
  for (int r = 0; r < kDotTileRows; ++r)
    for (int k = 0; k < kDotTileTokens; ++k) tile.pairs.push_back(Row{ws[static_cast<size_t>(r)], as[static_cast<size_t>(k)]});
  return tile;
}

// A tile kernel of `tokens` activation rows (kDotTileTokens or kDotFewTokens: the first rows of the tile).
void expect_tile_matches_reference(const Isa& isa, DotTileFn fn, int tokens, TensorType t, const Tile& tile, int64_t n,
                                   const std::string& what) {
  float out[kDotTileRows * kDotTileTokens];
  fn(tile.w.data(), tile.w_stride, tile.act.data(), tile.act_stride, n, out);
  for (int r = 0; r < kDotTileRows; ++r) {
    for (int k = 0; k < tokens; ++k) {
      const Row& pair = tile.pairs[static_cast<size_t>(r * kDotTileTokens + k)];
      const double ref = dot_ref(t, pair.w.data(), pair.act.data(), n);
      const double tol = 2 * test::dot_rounding_bound(t, n, magnitude(t, pair, n));
      ASSERT_TRUE(std::isfinite(ref)) << what;
      EXPECT_NEAR(out[r * tokens + k], ref, tol)
          << isa.name << " " << gguf::tensor_type_name(t) << " tile of " << tokens << " n=" << n << " weight row " << r
          << " activation row " << k << " " << what;
    }
  }
}

class DotTileKernels : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const Isa& isa = kIsas[GetParam().isa];
    if (!isa.runs_here(cpu_info())) GTEST_SKIP() << "this CPU does not run " << isa.name;
    if (!isa.tile_table) GTEST_SKIP() << isa.name << " has no tile kernels";
    fn_ = isa.tile_table(GetParam().type, kDotTileTokens);
    fn_few_ = isa.tile_table(GetParam().type, kDotFewTokens);
    if (!fn_) GTEST_SKIP() << isa.name << " has no tile kernel for " << gguf::tensor_type_name(GetParam().type);
    EXPECT_NE(fn_few_, nullptr) << isa.name << ": a type with a tile of " << kDotTileTokens << " has one of " << kDotFewTokens;
  }
  // Both tile widths against the reference.
  void expect_tiles(TensorType t, const Tile& tile, int64_t n, const std::string& what) {
    const Isa& isa = kIsas[GetParam().isa];
    expect_tile_matches_reference(isa, fn_, kDotTileTokens, t, tile, n, what);
    if (fn_few_) expect_tile_matches_reference(isa, fn_few_, kDotFewTokens, t, tile, n, what);
  }
  DotTileFn fn_ = nullptr, fn_few_ = nullptr;
};

TEST_P(DotTileKernels, RandomCodesMatchTheReference) {
  const TensorType t = GetParam().type;
  for (unsigned seed : {1u, 2u}) {
    std::mt19937 rng(seed * 1000 + static_cast<unsigned>(t));
    // Lengths that leave block tails after groups of 4 and 8 blocks as well as exact multiples.
    for (int64_t blocks : {1, 2, 3, 5, 7, 8, 16, 33}) {
      const int64_t n = blocks * block_size(t);
      const Tile tile = make_tile(
          t, n, [&](int) { return make_weights(t, n, Codes::kRandom, Scales::kRandom, rng); },
          [&](int) { return make_activations(t, n, Acts::kRandom, rng); });
      expect_tiles(t, tile, n, "random seed " + std::to_string(seed));
    }
  }
}

TEST_P(DotTileKernels, QuantizedRowsMatchTheReference) {
  const TensorType t = GetParam().type;
  if (!can_quantize(t)) GTEST_SKIP() << "no quantizer for " << gguf::tensor_type_name(t);
  std::mt19937 rng(78);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t blocks : {1, 9, 16}) {
    const int64_t n = blocks * block_size(t);
    auto gaussian = [&](float scale) {
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& e : v) e = scale * g(rng);
      return v;
    };
    const Tile tile = make_tile(
        t, n,
        [&](int) {
          std::vector<uint8_t> w(row_size(t, n));
          quantize_row(t, gaussian(1.0f).data(), w.data(), n);
          return w;
        },
        [&](int) {
          std::vector<uint8_t> a(activation_row_size(t, n));
          quantize_activation(t, gaussian(0.5f).data(), a.data(), n);
          return a;
        });
    expect_tiles(t, tile, n, "quantized");
  }
}

TEST_P(DotTileKernels, ExtremeCodesAndScalesMatchTheReference) {
  const TensorType t = GetParam().type;
  std::mt19937 rng(12);
  const Codes codes[] = {Codes::kRandom, Codes::kAllZeroBits, Codes::kAllOneBits, Codes::kAlternating};
  const Scales scales[] = {Scales::kRandom, Scales::kZero, Scales::kUnit};
  const Acts acts[] = {Acts::kRandom, Acts::kPlus127, Acts::kMinus127, Acts::kAlternating127};
  for (int64_t n : {33 * block_size(t), 8 * block_size(t), block_size(t)}) {
    // Every combination of patterns appears, and within a tile each row has a pattern of its own.
    for (int c = 0; c < 4; ++c) {
      for (int s = 0; s < 3; ++s) {
        for (int a = 0; a < 4; ++a) {
          const Tile tile = make_tile(
              t, n, [&](int r) { return make_weights(t, n, codes[(c + r) % 4], scales[(s + r) % 3], rng); },
              [&](int k) { return make_activations(t, n, acts[(a + k) % 4], rng); });
          expect_tiles(t, tile, n, "codes " + std::to_string(c) + " scales " + std::to_string(s) + " acts " + std::to_string(a));
        }
      }
    }
  }
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (int i = 0; i < static_cast<int>(std::size(kIsas)); ++i)
    for (TensorType t : kTypes) out.push_back({i, t});
  return out;
}

// The (instruction set, type) pairs that have a tile kernel; the others use the single-row kernel (tested
// above) and are left out rather than listed as skipped.
std::vector<Param> tile_params() {
  std::vector<Param> out;
  for (const Param& p : all_params()) {
    const Isa& isa = kIsas[p.isa];
    if (!is_float(p.type) && isa.tile_table && isa.tile_table(p.type, kDotTileTokens)) out.push_back(p);
  }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& tp) {
  return std::string(kIsas[tp.param.isa].name) + "_" + std::string(gguf::tensor_type_name(tp.param.type));
}

INSTANTIATE_TEST_SUITE_P(DotIsa, DotKernels, ::testing::ValuesIn(all_params()), param_name);
INSTANTIATE_TEST_SUITE_P(DotIsa, DotTileKernels, ::testing::ValuesIn(tile_params()), param_name);
// Tile kernels are x86's (AVX2, AVX-512); elsewhere (NEON, tests/cross/neon.sh) the suite has no case.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DotTileKernels);

}  // namespace
}  // namespace zinc::quant
