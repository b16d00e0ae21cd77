// NEON kernels of the packed matrix products (packed.h), with the dot-product extension (SDOT): each group
// of 16 rows runs as four quads of 4 rows. A quad's 16 bytes of a packed register hold 4 consecutive
// codes of each of its rows, and vdotq_laneq_s32 multiplies them by 4 activation codes of one token,
// picked by lane from a loaded register. Codes are multiplied as signed bytes (Q8_0's stored + 128
// flipped back, the 4-bit formats' values from a 16-entry table), so only the K-quants' offsets and
// minimums go through the activation sums. One token (decode) runs the four quads in one pass over the
// blocks; more tokens run quad by quad, up to 4 tokens per pass. The operations per quad do not depend on
// how many quads or tokens share a pass, so a token's results do not depend on its tile.
// Compiled with -march=armv8.2-a+dotprod; the dispatcher calls it only when the CPU reports the extension.
#include "quant/packed.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)

#include <arm_neon.h>

#include <cstring>
#include <type_traits>

#include "quant/blocks.h"

namespace zinc::quant {

namespace {

inline float32x4_t f16x4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline float32x4_t u8x4_f32(const uint8_t* p) { return vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(p))))); }
inline float32x4_t s8x4_f32(const int8_t* p) { return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vld1_s8(p))))); }
inline int8x16_t s8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

template <class B>
inline const B& act_block(const uint8_t* act, size_t stride, int t, int64_t i) {
  return reinterpret_cast<const B*>(act + stride * static_cast<size_t>(t))[i];
}

// sum + Σ_j c[j]·(activation codes 4j .. 4j + 3) over N code registers (N a multiple of 4).
template <int N>
inline int32x4_t dot_codes(int32x4_t sum, const int8x16_t* c, const int8_t* a) {
  for (int k = 0; k < N / 4; ++k) {
    const int8x16_t av = vld1q_s8(a + 16 * k);
    sum = vdotq_laneq_s32(sum, c[4 * k], av, 0);
    sum = vdotq_laneq_s32(sum, c[4 * k + 1], av, 1);
    sum = vdotq_laneq_s32(sum, c[4 * k + 2], av, 2);
    sum = vdotq_laneq_s32(sum, c[4 * k + 3], av, 3);
  }
  return sum;
}

// Σ over pairs p of a sub-block pair's bytes (lane 2r + k: row r, sub-block 2p + k, widened) times the
// activation's sums of those sub-blocks (sums[2p], sums[2p + 1]), per row of the quad.
inline int32x4_t pair_dot(int32x4_t m, uint8x8_t bytes, const int16_t* sums) {
  int32_t pair;
  std::memcpy(&pair, sums, 4);
  const int16x8_t b = vreinterpretq_s16_u16(vmovl_u8(bytes)), s = vreinterpretq_s16_s32(vdupq_n_s32(pair));
  return vaddq_s32(m, vpaddq_s32(vmull_s16(vget_low_s16(b), vget_low_s16(s)), vmull_high_s16(b, s)));
}

// A pass's float sums: quads [q0, q0 + NQ) × NT tokens, stored to y[t·y_stride + 4q + r].
template <int NT, int NQ>
struct Acc {
  float32x4_t v[NQ][NT];
  Acc() {
    for (auto& a : v)
      for (auto& x : a) x = vdupq_n_f32(0.0f);
  }
  float32x4_t* operator[](int qq) { return v[qq]; }
  void store(float* y, int64_t y_stride, int q0) const {
    for (int qq = 0; qq < NQ; ++qq)
      for (int t = 0; t < NT; ++t) vst1q_f32(y + t * y_stride + 4 * (q0 + qq), v[qq][t]);
  }
};

// The kernels: run<NT, NQ>(w, n, q0, ...) sums quads [q0, q0 + NQ) × NT tokens.
struct Q8_0N {
  template <int NT, int NQ>
  static void run(const uint8_t* w, int64_t n, int q0, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
    const auto* blocks = reinterpret_cast<const PackQ8_0*>(w);
    const uint8x16_t m80 = vdupq_n_u8(0x80);
    Acc<NT, NQ> acc;
    for (int64_t i = 0; i < n / 32; ++i) {
      const PackQ8_0& b = blocks[i];
      for (int qq = 0; qq < NQ; ++qq) {
        const int q = q0 + qq;
        int8x16_t c[8];
        for (int j = 0; j < 8; ++j) c[j] = s8(veorq_u8(vld1q_u8(b.qs[j] + 16 * q), m80));
        const float32x4_t dw = f16x4(b.d + 4 * q);
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_0P& a = act_block<BlockQ8_0P>(act, stride, t, i);
          acc[qq][t] = vfmaq_f32(acc[qq][t], vcvtq_f32_s32(dot_codes<8>(vdupq_n_s32(0), c, a.qs)), vmulq_n_f32(dw, a.d));
        }
      }
    }
    acc.store(y, y_stride, q0);
  }
};

// Q4_0, IQ4_NL and MXFP4: each nibble mapped to its signed value by a table lookup. Scales: fp16, or
// E8M0 as MXFP4 uses it (2^(e−128), subnormal for e < 2).
template <TensorType T>
struct Nibble32N {
  using P = std::conditional_t<T == TensorType::MXFP4, PackMXFP4, PackQ4_0>;
  static int8x16_t table() {
    int8_t v[16];
    for (int k = 0; k < 16; ++k) v[k] = static_cast<int8_t>(T == TensorType::Q4_0 ? k - 8 : T == TensorType::IQ4_NL ? kIQ4NLValues[k] : kMXFP4Values[k]);
    return vld1q_s8(v);
  }
  static float32x4_t scales(const P& b, int q) {
    if constexpr (T == TensorType::MXFP4) {
      uint8_t e[8] = {};
      std::memcpy(e, b.e + 4 * q, 4);
      const uint32x4_t x = vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(e))));
      const uint32x4_t normal = vshlq_n_u32(vsubq_u32(x, vdupq_n_u32(1)), 23);
      const uint32x4_t sub = vshlq_u32(vdupq_n_u32(0x00200000), vreinterpretq_s32_u32(x));
      return vreinterpretq_f32_u32(vbslq_u32(vcltq_u32(x, vdupq_n_u32(2)), sub, normal));
    } else {
      return f16x4(b.d + 4 * q);
    }
  }
  template <int NT, int NQ>
  static void run(const uint8_t* w, int64_t n, int q0, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
    const auto* blocks = reinterpret_cast<const P*>(w);
    const int8x16_t lut = table();
    const uint8x16_t m15 = vdupq_n_u8(0x0f);
    Acc<NT, NQ> acc;
    for (int64_t i = 0; i < n / 32; ++i) {
      const P& b = blocks[i];
      for (int qq = 0; qq < NQ; ++qq) {
        const int q = q0 + qq;
        int8x16_t c[8];  // c[j]: values of elements 4j .. 4j + 3 of each row
        for (int k = 0; k < 4; ++k) {
          const uint8x16_t v = vld1q_u8(b.qs[k] + 16 * q);
          c[2 * k] = vqtbl1q_s8(lut, vandq_u8(v, m15));
          c[2 * k + 1] = vqtbl1q_s8(lut, vshrq_n_u8(v, 4));
        }
        const float32x4_t dw = scales(b, q);
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_0P& a = act_block<BlockQ8_0P>(act, stride, t, i);
          acc[qq][t] = vfmaq_f32(acc[qq][t], vcvtq_f32_s32(dot_codes<8>(vdupq_n_s32(0), c, a.qs)), vmulq_n_f32(dw, a.d));
        }
      }
    }
    acc.store(y, y_stride, q0);
  }
};

// Q4_K and Q5_K (P: PackQ4_K or PackQ5_K): nibbles, Q5_K's fifth bit j of each byte moved to bit 4 of
// code register j; minimums through the activation's 32-element sums.
template <class P>
struct Q45_KN {
  template <int NT, int NQ>
  static void run(const uint8_t* w, int64_t n, int q0, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
    constexpr bool kFive = std::is_same_v<P, PackQ5_K>;
    const auto* blocks = reinterpret_cast<const P*>(w);
    const uint8x16_t m15 = vdupq_n_u8(0x0f), m16 = vdupq_n_u8(0x10);
    Acc<NT, NQ> acc;
    for (int64_t i = 0; i < n / 256; ++i) {
      const P& b = blocks[i];
      for (int qq = 0; qq < NQ; ++qq) {
        const int q = q0 + qq;
        const float32x4_t dw = f16x4(b.d + 4 * q);
        float32x4_t blk[NT];
        for (auto& v : blk) v = vdupq_n_f32(0.0f);
        for (int s = 0; s < 8; ++s) {
          const float32x4_t sc = vmulq_f32(u8x4_f32(b.sc[s] + 4 * q), dw);
          int8x16_t c[8];
          for (int k = 0; k < 4; ++k) {
            const uint8x16_t v = vld1q_u8(b.qs[s][k] + 16 * q);
            c[2 * k] = s8(vandq_u8(v, m15));
            c[2 * k + 1] = s8(vshrq_n_u8(v, 4));
          }
          if constexpr (kFive) {
            const uint8x16_t h = vld1q_u8(b.qs[s][4] + 16 * q);
            for (int j = 0; j < 8; ++j) c[j] = s8(vorrq_u8(vreinterpretq_u8_s8(c[j]), vandq_u8(vshlq_u8(h, vdupq_n_s8(static_cast<int8_t>(4 - j))), m16)));
          }
          for (int t = 0; t < NT; ++t) {
            const int32x4_t sum = dot_codes<8>(vdupq_n_s32(0), c, act_block<BlockQ8_KP>(act, stride, t, i).qs + 32 * s);
            blk[t] = vfmaq_f32(blk[t], vcvtq_f32_s32(sum), sc);
          }
        }
        const float32x4_t dm = f16x4(b.dmin + 4 * q);
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_KP& a = act_block<BlockQ8_KP>(act, stride, t, i);
          int32x4_t m = vdupq_n_s32(0);
          for (int p = 0; p < 4; ++p) m = pair_dot(m, vld1_u8(b.mn[p] + 8 * q), a.bsum32 + 2 * p);
          acc[qq][t] = vfmaq_n_f32(acc[qq][t], vfmsq_f32(blk[t], vcvtq_f32_s32(m), dm), a.d);
        }
      }
    }
    acc.store(y, y_stride, q0);
  }
};

// IQ4_XS: the IQ4_NL values by table, a signed scale per 32-element sub-block.
struct IQ4_XSN {
  template <int NT, int NQ>
  static void run(const uint8_t* w, int64_t n, int q0, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
    const auto* blocks = reinterpret_cast<const PackIQ4_XS*>(w);
    const int8x16_t lut = vld1q_s8(kIQ4NLValues);
    const uint8x16_t m15 = vdupq_n_u8(0x0f);
    Acc<NT, NQ> acc;
    for (int64_t i = 0; i < n / 256; ++i) {
      const PackIQ4_XS& b = blocks[i];
      for (int qq = 0; qq < NQ; ++qq) {
        const int q = q0 + qq;
        const float32x4_t dw = f16x4(b.d + 4 * q);
        float32x4_t blk[NT];
        for (auto& v : blk) v = vdupq_n_f32(0.0f);
        for (int s = 0; s < 8; ++s) {
          const float32x4_t sc = vmulq_f32(s8x4_f32(b.sc[s] + 4 * q), dw);
          int8x16_t c[8];
          for (int k = 0; k < 4; ++k) {
            const uint8x16_t v = vld1q_u8(b.qs[s][k] + 16 * q);
            c[2 * k] = vqtbl1q_s8(lut, vandq_u8(v, m15));
            c[2 * k + 1] = vqtbl1q_s8(lut, vshrq_n_u8(v, 4));
          }
          for (int t = 0; t < NT; ++t) {
            const int32x4_t sum = dot_codes<8>(vdupq_n_s32(0), c, act_block<BlockQ8_KP>(act, stride, t, i).qs + 32 * s);
            blk[t] = vfmaq_f32(blk[t], vcvtq_f32_s32(sum), sc);
          }
        }
        for (int t = 0; t < NT; ++t) acc[qq][t] = vfmaq_n_f32(acc[qq][t], blk[t], act_block<BlockQ8_KP>(act, stride, t, i).d);
      }
    }
    acc.store(y, y_stride, q0);
  }
};

// Q6_K: three registers per 16-element sub-block, the fourth group's code gathered from their top bits;
// codes are stored + 32, so each sub-block's sum starts at −32·Σa.
struct Q6_KN {
  template <int NT, int NQ>
  static void run(const uint8_t* w, int64_t n, int q0, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
    const auto* blocks = reinterpret_cast<const PackQ6_K*>(w);
    const uint8x16_t m63 = vdupq_n_u8(0x3f);
    Acc<NT, NQ> acc;
    for (int64_t i = 0; i < n / 256; ++i) {
      const PackQ6_K& b = blocks[i];
      for (int qq = 0; qq < NQ; ++qq) {
        const int q = q0 + qq;
        const float32x4_t dw = f16x4(b.d + 4 * q);
        float32x4_t blk[NT];
        for (auto& v : blk) v = vdupq_n_f32(0.0f);
        for (int s = 0; s < 16; ++s) {
          const float32x4_t sc = vmulq_f32(s8x4_f32(b.sc[s] + 4 * q), dw);
          const uint8x16_t r0 = vld1q_u8(b.q[s][0] + 16 * q), r1 = vld1q_u8(b.q[s][1] + 16 * q), r2 = vld1q_u8(b.q[s][2] + 16 * q);
          // Bits 6-7 of r0, r1, r2 are bits 4-5, 2-3, 0-1 of the third group's code.
          const uint8x16_t split = vshrq_n_u8(vsriq_n_u8(vsriq_n_u8(r0, r1, 2), r2, 4), 2);
          const int8x16_t c[4] = {s8(vandq_u8(r0, m63)), s8(vandq_u8(r1, m63)), s8(split), s8(vandq_u8(r2, m63))};
          for (int t = 0; t < NT; ++t) {
            const BlockQ8_KP& a = act_block<BlockQ8_KP>(act, stride, t, i);
            const int32x4_t sum = dot_codes<4>(vdupq_n_s32(-32 * a.bsums[s]), c, a.qs + 16 * s);
            blk[t] = vfmaq_f32(blk[t], vcvtq_f32_s32(sum), sc);
          }
        }
        for (int t = 0; t < NT; ++t) acc[qq][t] = vfmaq_n_f32(acc[qq][t], blk[t], act_block<BlockQ8_KP>(act, stride, t, i).d);
      }
    }
    acc.store(y, y_stride, q0);
  }
};

// Q2_K: 2-bit codes, a 4-bit scale and minimum per 16-element sub-block from one byte; Q3_K: codes 0..7
// (the third bit merged in per register), value code − 4, a signed scale per sub-block.
template <class P>
struct Q23_KN {
  template <int NT, int NQ>
  static void run(const uint8_t* w, int64_t n, int q0, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
    constexpr bool kThree = std::is_same_v<P, PackQ3_K>;
    const auto* blocks = reinterpret_cast<const P*>(w);
    const uint8x16_t m3 = vdupq_n_u8(3), m4 = vdupq_n_u8(4);
    Acc<NT, NQ> acc;
    for (int64_t i = 0; i < n / 256; ++i) {
      const P& b = blocks[i];
      for (int qq = 0; qq < NQ; ++qq) {
        const int q = q0 + qq;
        const float32x4_t dw = f16x4(b.d + 4 * q);
        float32x4_t blk[NT];
        for (auto& v : blk) v = vdupq_n_f32(0.0f);
        for (int p = 0; p < 8; ++p) {
          float32x4_t sc[2];
          uint8x16_t lo[2], h = vdupq_n_u8(0);
          if constexpr (kThree) {
            for (int k = 0; k < 2; ++k) {
              sc[k] = vmulq_f32(s8x4_f32(b.sc[2 * p + k] + 4 * q), dw);
              lo[k] = vld1q_u8(b.q[p][k] + 16 * q);
            }
            h = vld1q_u8(b.q[p][2] + 16 * q);
          } else {
            const uint8x8_t x = vand_u8(vld1_u8(b.sm[p] + 8 * q), vdup_n_u8(0x0f));  // row r: bytes 2r, 2r + 1
            const uint8x8_t xs[2] = {vuzp1_u8(x, x), vuzp2_u8(x, x)};
            for (int k = 0; k < 2; ++k) {
              sc[k] = vmulq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(xs[k])))), dw);
              lo[k] = vld1q_u8(b.qs[2 * p + k] + 16 * q);
            }
          }
          for (int k = 0; k < 2; ++k) {
            const int s = 2 * p + k;
            int8x16_t c[4];
            for (int g = 0; g < 4; ++g) {
              uint8x16_t v = vandq_u8(vshlq_u8(lo[k], vdupq_n_s8(static_cast<int8_t>(-2 * g))), m3);
              if constexpr (kThree) v = vorrq_u8(v, vandq_u8(vshlq_u8(h, vdupq_n_s8(static_cast<int8_t>(2 - (4 * k + g)))), m4));
              c[g] = s8(v);
            }
            for (int t = 0; t < NT; ++t) {
              const BlockQ8_KP& a = act_block<BlockQ8_KP>(act, stride, t, i);
              const int32x4_t sum = dot_codes<4>(vdupq_n_s32(kThree ? -4 * a.bsums[s] : 0), c, a.qs + 16 * s);
              blk[t] = vfmaq_f32(blk[t], vcvtq_f32_s32(sum), sc[k]);
            }
          }
        }
        if constexpr (kThree) {
          for (int t = 0; t < NT; ++t) acc[qq][t] = vfmaq_n_f32(acc[qq][t], blk[t], act_block<BlockQ8_KP>(act, stride, t, i).d);
        } else {
          const float32x4_t dm = f16x4(b.dmin + 4 * q);
          for (int t = 0; t < NT; ++t) {
            const BlockQ8_KP& a = act_block<BlockQ8_KP>(act, stride, t, i);
            int32x4_t m = vdupq_n_s32(0);
            for (int p = 0; p < 8; ++p) m = pair_dot(m, vshr_n_u8(vld1_u8(b.sm[p] + 8 * q), 4), a.bsums + 2 * p);
            acc[qq][t] = vfmaq_n_f32(acc[qq][t], vfmsq_f32(blk[t], vcvtq_f32_s32(m), dm), a.d);
          }
        }
      }
    }
    acc.store(y, y_stride, q0);
  }
};

// A group: one token with the four quads in one pass; more tokens quad by quad, 4 tokens per pass.
template <class K, int NT>
void tile(const uint8_t* w, int64_t n, const uint8_t* act, size_t stride, float* y, int64_t y_stride) {
  if constexpr (NT == 1) {
    K::template run<1, 4>(w, n, 0, act, stride, y, y_stride);
  } else {
    constexpr int kFirst = NT > 4 ? 4 : NT;
    for (int q = 0; q < 4; ++q) {
      K::template run<kFirst, 1>(w, n, q, act, stride, y, y_stride);
      if constexpr (NT > 4) K::template run<NT - 4, 1>(w, n, q, act + 4 * stride, stride, y + 4 * y_stride, y_stride);
    }
  }
}

template <class K>
PackedTileFn by_tokens(int nt) {
  switch (nt) {
    case 1: return tile<K, 1>;
    case 2: return tile<K, 2>;
    case 3: return tile<K, 3>;
    case 4: return tile<K, 4>;
    case 5: return tile<K, 5>;
    case 6: return tile<K, 6>;
    case 7: return tile<K, 7>;
    case 8: return tile<K, 8>;
    default: return nullptr;
  }
}
static_assert(kPackTokens == 8 && kPackRows == 16);

}  // namespace

PackedTileFn packed_tile_neon(TensorType t, int nt) {
  switch (t) {
    case TensorType::Q8_0: return by_tokens<Q8_0N>(nt);
    case TensorType::Q4_0: return by_tokens<Nibble32N<TensorType::Q4_0>>(nt);
    case TensorType::IQ4_NL: return by_tokens<Nibble32N<TensorType::IQ4_NL>>(nt);
    case TensorType::MXFP4: return by_tokens<Nibble32N<TensorType::MXFP4>>(nt);
    case TensorType::Q4_K: return by_tokens<Q45_KN<PackQ4_K>>(nt);
    case TensorType::Q5_K: return by_tokens<Q45_KN<PackQ5_K>>(nt);
    case TensorType::IQ4_XS: return by_tokens<IQ4_XSN>(nt);
    case TensorType::Q6_K: return by_tokens<Q6_KN>(nt);
    case TensorType::Q2_K: return by_tokens<Q23_KN<PackQ2_K>>(nt);
    case TensorType::Q3_K: return by_tokens<Q23_KN<PackQ3_K>>(nt);
    default: return nullptr;
  }
}

}  // namespace zinc::quant

#else

namespace zinc::quant {
PackedTileFn packed_tile_neon(TensorType, int) { return nullptr; }
}  // namespace zinc::quant

#endif
