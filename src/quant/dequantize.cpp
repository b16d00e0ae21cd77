// Reference dequantization: the definition of every block format, written for clarity. Fast paths
// (CPU SIMD, GPU shaders) are tested against these functions.
#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/quant.h"

namespace zinc::quant {

namespace {

void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0xf) - 8) * d;
      y[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void deq_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0xf) * d + m;
      y[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b[i].qs[j] & 0xf) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void deq_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b[i].qs[j] & 0xf) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// K-quants with 16-element sub-blocks index element e = n*128 + j*32 + h*16 + l as: byte n*32+h*16+l of
// qs, bits 2j..2j+1, sub-block 8n+2j+h.
void deq_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    for (int n = 0; n < 2; ++n) {
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {
          const uint8_t sc = b[i].scales[8 * n + 2 * j + h];
          const float dl = d * static_cast<float>(sc & 0xf), ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            const int q = (b[i].qs[n * 32 + h * 16 + l] >> (2 * j)) & 3;
            y[n * 128 + j * 32 + h * 16 + l] = dl * static_cast<float>(q) - ml;
          }
        }
      }
    }
  }
}

void deq_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = fp16_to_f32(b[i].d);
    uint8_t sc[16];
    q3k_scales(b[i].scales, sc);
    for (int n = 0; n < 2; ++n) {
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {
          const float dl = d * static_cast<float>(sc[8 * n + 2 * j + h] - 32);
          for (int l = 0; l < 16; ++l) {
            const int lo = (b[i].qs[n * 32 + h * 16 + l] >> (2 * j)) & 3;
            const int high = (b[i].hmask[h * 16 + l] >> (4 * n + j)) & 1;
            y[n * 128 + j * 32 + h * 16 + l] = dl * static_cast<float>(lo - (high ? 0 : 4));
          }
        }
      }
    }
  }
}

// Q4_K/Q5_K: element e = c*64 + h*32 + l uses nibble h of qs byte c*32+l and sub-block 2c+h.
void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < 2; ++h) {
        uint8_t s, m;
        kquant_scale_min(2 * c + h, b[i].scales, &s, &m);
        const float dl = d * s, ml = dmin * m;
        for (int l = 0; l < 32; ++l) {
          const int q = (b[i].qs[c * 32 + l] >> (4 * h)) & 0xf;
          y[c * 64 + h * 32 + l] = dl * static_cast<float>(q) - ml;
        }
      }
    }
  }
}

void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < 2; ++h) {
        uint8_t s, m;
        kquant_scale_min(2 * c + h, b[i].scales, &s, &m);
        const float dl = d * s, ml = dmin * m;
        for (int l = 0; l < 32; ++l) {
          const int q = ((b[i].qs[c * 32 + l] >> (4 * h)) & 0xf) | (((b[i].qh[l] >> (2 * c + h)) & 1) << 4);
          y[c * 64 + h * 32 + l] = dl * static_cast<float>(q) - ml;
        }
      }
    }
  }
}

// Q6_K: element e = n*128 + k*32 + l: low nibble of ql byte n*64 + (k&1)*32 + l (high nibble for k>=2),
// 2 bits of qh byte n*32+l at 2k, sub-block n*8 + 2k + l/16.
void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = fp16_to_f32(b[i].d);
    for (int n = 0; n < 2; ++n) {
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 32; ++l) {
          const int lo = (b[i].ql[n * 64 + (k & 1) * 32 + l] >> (4 * (k >> 1))) & 0xf;
          const int hi = (b[i].qh[n * 32 + l] >> (2 * k)) & 3;
          const int q = (lo | (hi << 4)) - 32;
          y[n * 128 + k * 32 + l] = d * static_cast<float>(b[i].scales[n * 8 + 2 * k + l / 16]) * static_cast<float>(q);
        }
      }
    }
  }
}

void deq_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    for (int j = 0; j < kQKK; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
  }
}

void deq_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(kIQ4NLValues[b[i].qs[j] & 0xf]);
      y[j + 16] = d * static_cast<float>(kIQ4NLValues[b[i].qs[j] >> 4]);
    }
  }
}

void deq_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = fp16_to_f32(b[i].d);
    for (int s = 0; s < 8; ++s) {
      const int ls = ((b[i].scales_l[s / 2] >> (4 * (s % 2))) & 0xf) | (((b[i].scales_h >> (2 * s)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = b[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[32 * s + j] = dl * static_cast<float>(kIQ4NLValues[qs[j] & 0xf]);
        y[32 * s + j + 16] = dl * static_cast<float>(kIQ4NLValues[qs[j] >> 4]);
      }
    }
  }
}

void deq_mxfp4(const BlockMXFP4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = e8m0_to_f32_half(b[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(kMXFP4Values[b[i].qs[j] & 0xf]) * d;
      y[j + 16] = static_cast<float>(kMXFP4Values[b[i].qs[j] >> 4]) * d;
    }
  }
}

}  // namespace

void dequantize_row(TensorType type, const void* src, float* y, int64_t n) {
  const int64_t bs = block_size(type);
  if (n % bs != 0) {
    throw Error(fmt::format("cannot dequantize {} elements of {}: not a multiple of its block size {}", n,
                            gguf::tensor_type_name(type), bs));
  }
  const int64_t nb = n / bs;
  switch (type) {
    case TensorType::F32: std::memcpy(y, src, static_cast<size_t>(n) * 4); return;
    case TensorType::F16: {
      // A table of all 65536 halves, filled from fp16_to_f32: the same values, without the bit twiddling.
      static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t i = 0; i < 65536; ++i) t[i] = fp16_to_f32(static_cast<uint16_t>(i));
        return t;
      }();
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = table[h[i]];
      return;
    }
    case TensorType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(h[i]);
      return;
    }
    case TensorType::Q4_0: return deq_q4_0(static_cast<const BlockQ4_0*>(src), y, nb);
    case TensorType::Q4_1: return deq_q4_1(static_cast<const BlockQ4_1*>(src), y, nb);
    case TensorType::Q5_0: return deq_q5_0(static_cast<const BlockQ5_0*>(src), y, nb);
    case TensorType::Q5_1: return deq_q5_1(static_cast<const BlockQ5_1*>(src), y, nb);
    case TensorType::Q8_0: return deq_q8_0(static_cast<const BlockQ8_0*>(src), y, nb);
    case TensorType::Q2_K: return deq_q2_k(static_cast<const BlockQ2_K*>(src), y, nb);
    case TensorType::Q3_K: return deq_q3_k(static_cast<const BlockQ3_K*>(src), y, nb);
    case TensorType::Q4_K: return deq_q4_k(static_cast<const BlockQ4_K*>(src), y, nb);
    case TensorType::Q5_K: return deq_q5_k(static_cast<const BlockQ5_K*>(src), y, nb);
    case TensorType::Q6_K: return deq_q6_k(static_cast<const BlockQ6_K*>(src), y, nb);
    case TensorType::Q8_K: return deq_q8_k(static_cast<const BlockQ8_K*>(src), y, nb);
    case TensorType::IQ4_NL: return deq_iq4_nl(static_cast<const BlockIQ4_NL*>(src), y, nb);
    case TensorType::IQ4_XS: return deq_iq4_xs(static_cast<const BlockIQ4_XS*>(src), y, nb);
    case TensorType::MXFP4: return deq_mxfp4(static_cast<const BlockMXFP4*>(src), y, nb);
    default:
      throw Error(fmt::format("dequantizing {} is not supported", gguf::tensor_type_name(type)));
  }
}

}  // namespace zinc::quant
