#include "quant/packed.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/knobs.h"
#include "core/system_info.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"

namespace zinc::quant {

namespace {

// ---- codes of the original formats --------------------------------------------------------------

// Element e of a Q6_K super-block, 0..63 (the value is d·scale·(code − 32)): 128-element halves, each
// 32-element quarter a nibble of ql (low nibbles of bytes 0-31, 32-63, then high nibbles) and two bits
// of qh.
inline uint8_t q6k_code(const BlockQ6_K& b, int e) {
  const int n = e / 128, quarter = (e % 128) / 32, l = e % 32;
  const uint8_t ql = b.ql[64 * n + l + (quarter % 2 ? 32 : 0)];
  const uint8_t lo = quarter < 2 ? ql & 15 : ql >> 4;
  const uint8_t hi = (b.qh[32 * n + l] >> (2 * quarter)) & 3;
  return static_cast<uint8_t>(lo | hi << 4);
}

// ---- repacking one group of kPackRows rows ------------------------------------------------------
// Four codes at a time, as 32-bit words: loading, shifting and masking bytes together.

inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void store32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
// Bytes b of the packed nibble register: nibbles `shift` of p[b] (low) and of p[4 + b] (high).
inline uint32_t nibbles4(const uint8_t* p, int shift) {
  return ((load32(p) >> shift) & 0x0f0f0f0fu) | ((load32(p + 4) >> shift) & 0x0f0f0f0fu) << 4;
}

void pack_q8_0(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst) {
  auto* out = reinterpret_cast<PackQ8_0*>(dst);
  for (int64_t i = 0; i < cols / 32; ++i) {
    PackQ8_0& p = out[i];
    for (int r = 0; r < kPackRows; ++r) {
      const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(src + static_cast<size_t>(r) * row_bytes)[i];
      p.d[r] = b.d;
      // + 128 on a byte is its top bit flipped.
      for (int j = 0; j < 8; ++j) store32(&p.qs[j][4 * r], load32(reinterpret_cast<const uint8_t*>(b.qs) + 4 * j) ^ 0x80808080u);
    }
  }
}

// Q4_0, IQ4_NL (B: their block, P: PackQ4_0) and MXFP4 (PackMXFP4): element j of a block is nibble j
// of its 16 bytes (low nibbles first).
template <class B, class P>
void pack_nibbles32(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst) {
  auto* out = reinterpret_cast<P*>(dst);
  for (int64_t i = 0; i < cols / 32; ++i) {
    P& p = out[i];
    for (int r = 0; r < kPackRows; ++r) {
      const B& b = reinterpret_cast<const B*>(src + static_cast<size_t>(r) * row_bytes)[i];
      if constexpr (std::is_same_v<P, PackMXFP4>) p.e[r] = b.e;
      else p.d[r] = b.d;
      // Elements 0-15 are the low nibbles of qs, 16-31 the high ones.
      for (int q = 0; q < 4; ++q) store32(&p.qs[q][4 * r], nibbles4(b.qs + 8 * (q % 2), q < 2 ? 0 : 4));
    }
  }
}

// Q4_K and Q5_K (B: BlockQ4_K or BlockQ5_K, P: PackQ4_K or PackQ5_K).
template <class B, class P>
void pack_q4_5_k(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst) {
  constexpr bool kFive = std::is_same_v<B, BlockQ5_K>;
  auto* out = reinterpret_cast<P*>(dst);
  for (int64_t i = 0; i < cols / 256; ++i) {
    P& p = out[i];
    for (int r = 0; r < kPackRows; ++r) {
      const B& b = reinterpret_cast<const B*>(src + static_cast<size_t>(r) * row_bytes)[i];
      p.d[r] = b.d;
      p.dmin[r] = b.dmin;
      for (int j = 0; j < 8; ++j) kquant_scale_min(j, b.scales, &p.sc[j][r], &p.mn[j / 2][2 * r + j % 2]);
      // Sub-block s is the low (s even) or high nibbles of bytes 32·(s/2) .. + 31 of qs; packed, its
      // elements 8q + [0, 4) go to low nibbles and 8q + [4, 8) to high ones. Q5_K's fifth bit of element
      // l is bit s of qh[l].
      for (int s = 0; s < 8; ++s) {
        for (int q = 0; q < 4; ++q) store32(&p.qs[s][q][4 * r], nibbles4(b.qs + 32 * (s / 2) + 8 * q, s % 2 ? 4 : 0));
        if constexpr (kFive) {
          for (int k = 0; k < 4; ++k) {
            uint8_t bits = 0;
            for (int j = 0; j < 8; ++j) bits |= static_cast<uint8_t>(((b.qh[4 * j + k] >> s) & 1) << j);
            p.qs[s][4][4 * r + k] = bits;
          }
        }
      }
    }
  }
}

void pack_iq4_xs(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst) {
  auto* out = reinterpret_cast<PackIQ4_XS*>(dst);
  for (int64_t i = 0; i < cols / 256; ++i) {
    PackIQ4_XS& p = out[i];
    for (int r = 0; r < kPackRows; ++r) {
      const BlockIQ4_XS& b = reinterpret_cast<const BlockIQ4_XS*>(src + static_cast<size_t>(r) * row_bytes)[i];
      p.d[r] = b.d;
      // Sub-block s: bytes 16s .. 16s + 15 of qs, elements 0-15 their low nibbles, 16-31 their high ones.
      for (int s = 0; s < 8; ++s) {
        const int ls = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xf) | (((b.scales_h >> (2 * s)) & 3) << 4);
        p.sc[s][r] = static_cast<int8_t>(ls - 32);
        for (int q = 0; q < 4; ++q) store32(&p.qs[s][q][4 * r], nibbles4(b.qs + 16 * s + 8 * (q % 2), q < 2 ? 0 : 4));
      }
    }
  }
}

void pack_q6_k(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst) {
  auto* out = reinterpret_cast<PackQ6_K*>(dst);
  for (int64_t i = 0; i < cols / 256; ++i) {
    PackQ6_K& p = out[i];
    for (int r = 0; r < kPackRows; ++r) {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(src + static_cast<size_t>(r) * row_bytes)[i];
      p.d[r] = b.d;
      uint8_t code[256];
      for (int e = 0; e < 256; ++e) code[e] = q6k_code(b, e);
      for (int s = 0; s < 16; ++s) {
        p.sc[s][r] = b.scales[s];
        p.scp[s / 2][2 * r + s % 2] = b.scales[s];
        const uint8_t* c = code + 16 * s;
        for (int k = 0; k < 4; ++k) {
          const uint8_t split = c[8 + k];
          p.q[s][0][4 * r + k] = static_cast<uint8_t>(c[k] | (split >> 4) << 6);
          p.q[s][1][4 * r + k] = static_cast<uint8_t>(c[4 + k] | ((split >> 2) & 3) << 6);
          p.q[s][2][4 * r + k] = static_cast<uint8_t>(c[12 + k] | (split & 3) << 6);
        }
      }
    }
  }
}

// Q2_K and Q3_K: the low 2 bits of element 4g + b of sub-block s (elements 16s .. 16s + 15) sit at bits
// 2j of qs[32n + 16(s % 2) + 4g + b] (n = s / 8, j = (s % 8) / 2); packed, bits 2g of byte b.
inline uint32_t crumbs4(const uint8_t* qs, int s) {
  const uint8_t* base = qs + 32 * (s / 8) + 16 * (s % 2);
  const int j = (s % 8) / 2;
  uint32_t v = 0;
  for (int g = 0; g < 4; ++g) v |= ((load32(base + 4 * g) >> (2 * j)) & 0x03030303u) << (2 * g);
  return v;
}

void pack_q2_k(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst) {
  auto* out = reinterpret_cast<PackQ2_K*>(dst);
  for (int64_t i = 0; i < cols / 256; ++i) {
    PackQ2_K& p = out[i];
    for (int r = 0; r < kPackRows; ++r) {
      const BlockQ2_K& b = reinterpret_cast<const BlockQ2_K*>(src + static_cast<size_t>(r) * row_bytes)[i];
      p.d[r] = b.d;
      p.dmin[r] = b.dmin;
      for (int s = 0; s < 16; ++s) {
        p.sm[s / 2][2 * r + s % 2] = b.scales[s];
        store32(&p.qs[s][4 * r], crumbs4(b.qs, s));
      }
    }
  }
}

void pack_q3_k(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst) {
  auto* out = reinterpret_cast<PackQ3_K*>(dst);
  for (int64_t i = 0; i < cols / 256; ++i) {
    PackQ3_K& p = out[i];
    for (int r = 0; r < kPackRows; ++r) {
      const BlockQ3_K& b = reinterpret_cast<const BlockQ3_K*>(src + static_cast<size_t>(r) * row_bytes)[i];
      p.d[r] = b.d;
      uint8_t sc[16];
      q3k_scales(b.scales, sc);
      for (int s = 0; s < 16; ++s) {
        p.sc[s][r] = static_cast<int8_t>(sc[s] - 32);
        store32(&p.q[s / 2][s % 2][4 * r], crumbs4(b.qs, s));
      }
      // The third bit of element 32p + 4j + b is bit p of hmask[4j + b].
      for (int pr = 0; pr < 8; ++pr) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) v |= ((load32(b.hmask + 4 * j) >> pr) & 0x01010101u) << j;
        store32(&p.q[pr][2][4 * r], v);
      }
    }
  }
}

using PackFn = void (*)(const uint8_t* src, size_t row_bytes, int64_t cols, uint8_t* dst);

PackFn pack_fn(TensorType t) {
  switch (t) {
    case TensorType::Q8_0: return pack_q8_0;
    case TensorType::Q4_0: return pack_nibbles32<BlockQ4_0, PackQ4_0>;
    case TensorType::IQ4_NL: return pack_nibbles32<BlockIQ4_NL, PackQ4_0>;
    case TensorType::MXFP4: return pack_nibbles32<BlockMXFP4, PackMXFP4>;
    case TensorType::Q4_K: return pack_q4_5_k<BlockQ4_K, PackQ4_K>;
    case TensorType::Q5_K: return pack_q4_5_k<BlockQ5_K, PackQ5_K>;
    case TensorType::IQ4_XS: return pack_iq4_xs;
    case TensorType::Q6_K: return pack_q6_k;
    case TensorType::Q2_K: return pack_q2_k;
    case TensorType::Q3_K: return pack_q3_k;
    default: return nullptr;
  }
}

// The kernels of the instruction set dot_kernel() uses (fixed for the process).
PackedTileFn tile_fn(TensorType t, int nt) {
  static const std::string isa = dot_isa_in_use();
  if (isa == "avx512") return packed_tile_avx512(t, nt);
  if (isa == "avx2") return packed_tile_avx2(t, nt);
  static const bool dotprod = cpu_info().arm_dotprod;
  if (isa == "neon" && dotprod) return packed_tile_neon(t, nt);
  return nullptr;
}

// The scalar packed activations: quantize_activation()'s blocks with their sums.
void quantize_packed_scalar(TensorType t, const float* x, uint8_t* out, int64_t n) {
  thread_local std::vector<uint8_t> tmp;
  tmp.resize(activation_row_size(t, n));
  quantize_activation(t, x, tmp.data(), n);
  if (dot_activation_type(t) == TensorType::Q8_0) {
    const auto* in = reinterpret_cast<const BlockQ8_0*>(tmp.data());
    auto* o = reinterpret_cast<BlockQ8_0P*>(out);
    for (int64_t i = 0; i < n / 32; ++i) {
      int32_t sum = 0;
      for (int e = 0; e < 32; ++e) sum += in[i].qs[e];
      o[i].d = fp16_to_f32(in[i].d);
      o[i].neg_sum128 = -128 * sum;
      std::memcpy(o[i].qs, in[i].qs, 32);
    }
    return;
  }
  const auto* in = reinterpret_cast<const BlockQ8_K*>(tmp.data());
  auto* o = reinterpret_cast<BlockQ8_KP*>(out);
  for (int64_t i = 0; i < n / 256; ++i) {
    o[i].d = in[i].d;
    std::memcpy(o[i].qs, in[i].qs, 256);
    std::memcpy(o[i].bsums, in[i].bsums, sizeof(o[i].bsums));
    for (int s = 0; s < 8; ++s) o[i].bsum32[s] = static_cast<int16_t>(in[i].bsums[2 * s] + in[i].bsums[2 * s + 1]);
  }
}

}  // namespace

bool packed_amx_in_use(TensorType weight) {
  static const bool on = [] {
    const char* v = knob("ZINC_CPU_AMX");
    if (v && std::string(v) == "0") return false;
    return dot_isa_in_use() == "avx512" && cpu_info().amx_int8 && amx_permitted();
  }();
  return on && packed_tile_amx(weight) != nullptr;
}

size_t packed_activation_row_size(TensorType t, int64_t n) {
  return dot_activation_type(t) == TensorType::Q8_0 ? static_cast<size_t>(n / 32) * sizeof(BlockQ8_0P) : static_cast<size_t>(n / 256) * sizeof(BlockQ8_KP);
}

void quantize_packed_activation(TensorType t, const float* x, uint8_t* out, int64_t n) {
  static const bool avx2 = dot_isa_in_use() == "avx2" || dot_isa_in_use() == "avx512";  // AVX-512 CPUs have AVX2
  if (!avx2) return quantize_packed_scalar(t, x, out, n);
  if (dot_activation_type(t) == TensorType::Q8_0) quantize_q8_0p_avx2(x, reinterpret_cast<BlockQ8_0P*>(out), n / 32);
  else quantize_q8_kp_avx2(x, reinterpret_cast<BlockQ8_KP*>(out), n / 256);
}

size_t packed_group_size(TensorType type, int64_t n) {
  switch (type) {
    case TensorType::Q8_0: return static_cast<size_t>(n / 32) * sizeof(PackQ8_0);
    case TensorType::Q4_0: case TensorType::IQ4_NL: return static_cast<size_t>(n / 32) * sizeof(PackQ4_0);
    case TensorType::MXFP4: return static_cast<size_t>(n / 32) * sizeof(PackMXFP4);
    case TensorType::Q4_K: return static_cast<size_t>(n / 256) * sizeof(PackQ4_K);
    case TensorType::Q5_K: return static_cast<size_t>(n / 256) * sizeof(PackQ5_K);
    case TensorType::IQ4_XS: return static_cast<size_t>(n / 256) * sizeof(PackIQ4_XS);
    case TensorType::Q6_K: return static_cast<size_t>(n / 256) * sizeof(PackQ6_K);
    case TensorType::Q2_K: return static_cast<size_t>(n / 256) * sizeof(PackQ2_K);
    case TensorType::Q3_K: return static_cast<size_t>(n / 256) * sizeof(PackQ3_K);
    default: throw Error(fmt::format("no packed layout for {} weights", gguf::tensor_type_name(type)));
  }
}

bool can_pack(TensorType type, int64_t rows, int64_t cols) {
  if (!pack_fn(type) || rows <= 0 || rows % kPackRows != 0 || cols <= 0 || cols % block_size(type) != 0) return false;
  return tile_fn(type, 1) != nullptr;
}

PackedRows PackedRows::slice(int64_t first, int64_t n) const {
  return {type, n, cols, data + static_cast<size_t>(first / kPackRows) * packed_group_size(type, cols)};
}

PackedMatrix::PackedMatrix(TensorType type, const void* w, int64_t rows, int64_t cols, ThreadPool& pool)
    : type_(type), rows_(rows), cols_(cols) {
  if (!can_pack(type, rows, cols)) {
    throw Error(fmt::format("cannot pack {} weights of {} × {}", gguf::tensor_type_name(type), rows, cols));
  }
  const size_t group = packed_group_size(type, cols);
  data_ = BigBuffer(group * static_cast<size_t>(rows / kPackRows));
  uint8_t* p = data_.data();
  const PackFn fn = pack_fn(type);
  const size_t row_bytes = row_size(type, cols);
  const auto* src = static_cast<const uint8_t*>(w);
  pool.parallel_for(rows / kPackRows, [&](int64_t b, int64_t e) {
    for (int64_t g = b; g < e; ++g) fn(src + static_cast<size_t>(g * kPackRows) * row_bytes, row_bytes, cols, p + static_cast<size_t>(g) * group);
  });
}

void matmul_packed(const PackedRows& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool, uint64_t x_key) {
  const int64_t cols = w.cols, rows = w.rows, groups = rows / kPackRows;
  const size_t arow = packed_activation_row_size(w.type, cols), group = packed_group_size(w.type, cols);
  // This thread's activation rows, and what they hold (x_key's x for weights of `type`).
  thread_local std::vector<uint8_t> act_buf;
  thread_local struct {
    uint64_t key = 0;
    TensorType type = TensorType::F32;
    const float* x = nullptr;
    int64_t n = 0, cols = 0;
  } held;
  const size_t act_bytes = arow * static_cast<size_t>(n_tokens);
  const bool reuse = x_key != 0 && held.key == x_key && held.type == w.type && held.x == x && held.n == n_tokens && held.cols == cols;
  if (!reuse) {
    if (act_buf.size() < act_bytes) act_buf.resize(act_bytes);
    uint8_t* act = act_buf.data();
    pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) quantize_packed_activation(w.type, x + t * cols, act + static_cast<size_t>(t) * arow, cols);
    });
    held = {x_key, w.type, x, n_tokens, cols};
  }
  uint8_t* act = act_buf.data();
  PackedTileFn tiles[kPackTokens + 1] = {};
  for (int nt = 1; nt <= kPackTokens; ++nt) tiles[nt] = tile_fn(w.type, nt);
  // Prompts: kAmxTokens at a time on AMX where it runs (the same results), the rest as below.
  const PackedTileFn amx = n_tokens >= kAmxTokens && packed_amx_in_use(w.type) ? packed_tile_amx(w.type) : nullptr;
  // Tokens [t0, t1) of group g, kPackTokens at a time.
  auto run = [&](int64_t g, int64_t t0, int64_t t1) {
    if (amx) {
      for (; t0 + kAmxTokens <= t1; t0 += kAmxTokens)
        amx(w.data + static_cast<size_t>(g) * group, cols, act + static_cast<size_t>(t0) * arow, arow, y + t0 * rows + g * kPackRows, rows);
    }
    for (int64_t t = t0; t < t1; t += kPackTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kPackTokens, t1 - t));
      tiles[nt](w.data + static_cast<size_t>(g) * group, cols, act + static_cast<size_t>(t) * arow, arow,
                y + t * rows + g * kPackRows, rows);
    }
  };
  if (n_tokens <= kPackTokens) {
    // Decode and small steps: groups split statically (each is well under a microsecond of work).
    pool.parallel_for(groups, [&](int64_t b, int64_t e) {
      for (int64_t g = b; g < e; ++g) run(g, 0, n_tokens);
    });
    return;
  }
  // Prefill: chunks of kChunk tokens × one group handed out one at a time, chunk by chunk, so that a
  // chunk's activations stay in cache while the groups' weights stream past them.
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (n_tokens + kChunk - 1) / kChunk, items = chunks * groups;
  std::atomic<int64_t> next{0};
  pool.parallel_for(static_cast<int64_t>(pool.size()), [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
      const int64_t c = i / groups, g = i % groups;
      run(g, c * kChunk, std::min(n_tokens, (c + 1) * kChunk));
    }
  });
}

}  // namespace zinc::quant
