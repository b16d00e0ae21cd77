// Scalar reference dot products: the definition every SIMD kernel is tested against. Integer sums per
// (sub-)block, then one float multiply-add with the block scales, as the fast paths do.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace zinc::quant {

namespace {

using A0 = BlockQ8_0;
using A1 = BlockQ8_1;
using AK = BlockQ8_K;

float dot_f32(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return static_cast<float>(s);
}
float dot_f16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(fp16_to_f32(x[i])) * y[i];
  return static_cast<float>(s);
}
float dot_bf16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(bf16_to_f32(x[i])) * y[i];
  return static_cast<float>(s);
}

// 32-element formats against Q8_0: code(b, j) is the signed integer weight code of element j.
template <class B, class Code>
float dot_q8_0_family(const void* w, const void* a, int64_t n, Code code, float (*scale)(const B&)) {
  const auto* x = static_cast<const B*>(w);
  const auto* y = static_cast<const A0*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += code(x[i], j) * y[i].qs[j];
    s += scale(x[i]) * fp16_to_f32(y[i].d) * static_cast<float>(sumi);
  }
  return s;
}

int nib(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4); }
int q5(const uint8_t* qs, const uint8_t* qh_bytes, int j) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  return nib(qs, j) | static_cast<int>(((qh >> j) & 1) << 4);
}

float dot_q4_0(const void* w, const void* a, int64_t n) {
  return dot_q8_0_family<BlockQ4_0>(w, a, n, [](const BlockQ4_0& b, int j) { return nib(b.qs, j) - 8; },
                                    [](const BlockQ4_0& b) { return fp16_to_f32(b.d); });
}
float dot_q5_0(const void* w, const void* a, int64_t n) {
  return dot_q8_0_family<BlockQ5_0>(w, a, n, [](const BlockQ5_0& b, int j) { return q5(b.qs, b.qh, j) - 16; },
                                    [](const BlockQ5_0& b) { return fp16_to_f32(b.d); });
}
float dot_q8_0(const void* w, const void* a, int64_t n) {
  return dot_q8_0_family<BlockQ8_0>(w, a, n, [](const BlockQ8_0& b, int j) { return static_cast<int>(b.qs[j]); },
                                    [](const BlockQ8_0& b) { return fp16_to_f32(b.d); });
}
float dot_iq4_nl(const void* w, const void* a, int64_t n) {
  return dot_q8_0_family<BlockIQ4_NL>(
      w, a, n, [](const BlockIQ4_NL& b, int j) { return static_cast<int>(kIQ4NLValues[nib(b.qs, j)]); },
      [](const BlockIQ4_NL& b) { return fp16_to_f32(b.d); });
}
float dot_mxfp4(const void* w, const void* a, int64_t n) {
  return dot_q8_0_family<BlockMXFP4>(
      w, a, n, [](const BlockMXFP4& b, int j) { return static_cast<int>(kMXFP4Values[nib(b.qs, j)]); },
      [](const BlockMXFP4& b) { return e8m0_to_f32_half(b.e); });
}

// Affine 32-element formats against Q8_1: x = d*q + m, so x·a = d*da*Σq·a + m*(da*Σa) = ... + m*s.
template <class B, class Code>
float dot_q8_1_family(const void* w, const void* a, int64_t n, Code code) {
  const auto* x = static_cast<const B*>(w);
  const auto* y = static_cast<const A1*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += code(x[i], j) * y[i].qs[j];
    s += fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d) * static_cast<float>(sumi) + fp16_to_f32(x[i].m) * fp16_to_f32(y[i].s);
  }
  return s;
}
float dot_q4_1(const void* w, const void* a, int64_t n) {
  return dot_q8_1_family<BlockQ4_1>(w, a, n, [](const BlockQ4_1& b, int j) { return nib(b.qs, j); });
}
float dot_q5_1(const void* w, const void* a, int64_t n) {
  return dot_q8_1_family<BlockQ5_1>(w, a, n, [](const BlockQ5_1& b, int j) { return q5(b.qs, b.qh, j); });
}

// K-quants against Q8_K. Element e of a super-block: code and sub-block as in dequantize.cpp.
float dot_q2_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const AK*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sum_scaled = 0, sum_mins = 0;
    for (int sb = 0; sb < 16; ++sb) {
      const int nn = sb / 8, j = (sb % 8) / 2, h = sb % 2;
      int sumi = 0;
      for (int l = 0; l < 16; ++l) {
        const int q = (x[i].qs[nn * 32 + h * 16 + l] >> (2 * j)) & 3;
        sumi += q * y[i].qs[nn * 128 + j * 32 + h * 16 + l];
      }
      sum_scaled += (x[i].scales[sb] & 0xf) * sumi;
      // Sub-block sb covers elements nn*128 + j*32 + h*16 .. +16, which is bsums group (that start)/16.
      sum_mins += (x[i].scales[sb] >> 4) * y[i].bsums[(nn * 128 + j * 32 + h * 16) / 16];
    }
    s += y[i].d * (fp16_to_f32(x[i].d) * static_cast<float>(sum_scaled) - fp16_to_f32(x[i].dmin) * static_cast<float>(sum_mins));
  }
  return s;
}

float dot_q3_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const AK*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[16];
    q3k_scales(x[i].scales, sc);
    int sum = 0;
    for (int sb = 0; sb < 16; ++sb) {
      const int nn = sb / 8, j = (sb % 8) / 2, h = sb % 2;
      int sumi = 0;
      for (int l = 0; l < 16; ++l) {
        const int lo = (x[i].qs[nn * 32 + h * 16 + l] >> (2 * j)) & 3;
        const int hi = (x[i].hmask[h * 16 + l] >> (4 * nn + j)) & 1;
        sumi += (lo - (hi ? 0 : 4)) * y[i].qs[nn * 128 + j * 32 + h * 16 + l];
      }
      sum += (sc[sb] - 32) * sumi;
    }
    s += y[i].d * fp16_to_f32(x[i].d) * static_cast<float>(sum);
  }
  return s;
}

template <bool kFive, class B>
float dot_q45_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const B*>(w);
  const auto* y = static_cast<const AK*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sum_scaled = 0, sum_mins = 0;
    for (int sb = 0; sb < 8; ++sb) {
      const int c = sb / 2, h = sb % 2;
      uint8_t sc, m;
      kquant_scale_min(sb, x[i].scales, &sc, &m);
      int sumi = 0;
      for (int l = 0; l < 32; ++l) {
        int q = (x[i].qs[c * 32 + l] >> (4 * h)) & 0xf;
        if constexpr (kFive) q |= ((x[i].qh[l] >> sb) & 1) << 4;
        sumi += q * y[i].qs[sb * 32 + l];
      }
      sum_scaled += sc * sumi;
      sum_mins += m * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
    }
    s += y[i].d * (fp16_to_f32(x[i].d) * static_cast<float>(sum_scaled) - fp16_to_f32(x[i].dmin) * static_cast<float>(sum_mins));
  }
  return s;
}
float dot_q4_k(const void* w, const void* a, int64_t n) { return dot_q45_k<false, BlockQ4_K>(w, a, n); }
float dot_q5_k(const void* w, const void* a, int64_t n) { return dot_q45_k<true, BlockQ5_K>(w, a, n); }

float dot_q6_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const AK*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sum = 0;
    for (int sb = 0; sb < 16; ++sb) {
      int sumi = 0;
      for (int t = 0; t < 16; ++t) {
        const int e = sb * 16 + t;
        const int nn = e / 128, k = (e % 128) / 32, l = e % 32;
        const int lo = (x[i].ql[nn * 64 + (k & 1) * 32 + l] >> (4 * (k >> 1))) & 0xf;
        const int hi = (x[i].qh[nn * 32 + l] >> (2 * k)) & 3;
        sumi += ((lo | (hi << 4)) - 32) * y[i].qs[e];
      }
      // Elements sb*16..sb*16+15 belong to sub-block nn*8 + 2k + l/16 of the storage order.
      const int e0 = sb * 16, nn = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
      sum += x[i].scales[nn * 8 + 2 * k + l0 / 16] * sumi;
    }
    s += y[i].d * fp16_to_f32(x[i].d) * static_cast<float>(sum);
  }
  return s;
}

float dot_iq4_xs(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const AK*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sum = 0;
    for (int sb = 0; sb < 8; ++sb) {
      const int ls = ((x[i].scales_l[sb / 2] >> (4 * (sb % 2))) & 0xf) | (((x[i].scales_h >> (2 * sb)) & 3) << 4);
      int sumi = 0;
      for (int j = 0; j < 32; ++j) sumi += kIQ4NLValues[nib(x[i].qs + 16 * sb, j)] * y[i].qs[32 * sb + j];
      sum += (ls - 32) * sumi;
    }
    s += y[i].d * fp16_to_f32(x[i].d) * static_cast<float>(sum);
  }
  return s;
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float amax = abs_max(x, kQK);
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(code_round_away(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = f32_to_fp16(d);
    y[i].s = f32_to_fp16(d * static_cast<float>(sum));
  }
}

}  // namespace

bool has_dot(TensorType w) { return dot_fn_scalar(w) != nullptr; }

TensorType dot_activation_type(TensorType w) {
  switch (w) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: return TensorType::F32;
    case TensorType::Q4_1: case TensorType::Q5_1: return TensorType::Q8_1;
    case TensorType::Q2_K: case TensorType::Q3_K: case TensorType::Q4_K: case TensorType::Q5_K:
    case TensorType::Q6_K: case TensorType::IQ4_XS: return TensorType::Q8_K;
    default: return TensorType::Q8_0;
  }
}

size_t activation_row_size(TensorType w, int64_t n) { return row_size(dot_activation_type(w), n); }

void quantize_activation(TensorType w, const float* x, void* act, int64_t n) {
  const TensorType t = dot_activation_type(w);
  if (t == TensorType::Q8_1) {
    if (n % kQK != 0) throw Error(fmt::format("activation length {} is not a multiple of 32", n));
    quantize_q8_1(x, static_cast<BlockQ8_1*>(act), n / kQK);
    return;
  }
  quantize_row(t, x, act, n);
}

DotFn dot_fn_scalar(TensorType w) {
  switch (w) {
    case TensorType::F32: return dot_f32;
    case TensorType::F16: return dot_f16;
    case TensorType::BF16: return dot_bf16;
    case TensorType::Q4_0: return dot_q4_0;
    case TensorType::Q4_1: return dot_q4_1;
    case TensorType::Q5_0: return dot_q5_0;
    case TensorType::Q5_1: return dot_q5_1;
    case TensorType::Q8_0: return dot_q8_0;
    case TensorType::Q2_K: return dot_q2_k;
    case TensorType::Q3_K: return dot_q3_k;
    case TensorType::Q4_K: return dot_q4_k;
    case TensorType::Q5_K: return dot_q5_k;
    case TensorType::Q6_K: return dot_q6_k;
    case TensorType::IQ4_NL: return dot_iq4_nl;
    case TensorType::IQ4_XS: return dot_iq4_xs;
    case TensorType::MXFP4: return dot_mxfp4;
    default: return nullptr;
  }
}

float dot_ref(TensorType w, const void* wr, const void* act, int64_t n) {
  const DotFn f = dot_fn_scalar(w);
  if (!f) throw Error(fmt::format("no dot product for {} weights", gguf::tensor_type_name(w)));
  return f(wr, act, n);
}

}  // namespace zinc::quant
