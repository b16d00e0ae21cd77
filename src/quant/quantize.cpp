// Quantizers. The simple formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4) use the format's reference
// rounding, so files match what other tools write. The K-quants and IQ4 formats use an
// error-minimising search: for each sub-block, several candidate scales are tried, the integer codes
// are chosen for each, and the scale (and min) are refitted by least squares; the best candidate wins.
// Sub-block scales are then quantized to their stored precision and the codes recomputed with the
// scales actually stored, so the search optimises what dequantization will produce.
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace zinc::quant {

namespace {

int nearest_int(float f) { return static_cast<int>(std::lrintf(f)); }

// The element of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// ---- simple formats (reference rounding) ----

void q_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float max = signed_absmax(x, kQK);
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const auto q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f))));
      const auto q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f))));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void minmax(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}

void q_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    minmax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const auto q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - mn) * id + 0.5f))));
      const auto q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - mn) * id + 0.5f))));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void store_q5(uint8_t* qs, uint8_t* qh_bytes, const uint8_t* q) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

void q_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float max = signed_absmax(x, kQK);
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) {
      q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
    }
    store_q5(y[i].qs, y[i].qh, q);
  }
}

void q_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    minmax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mn);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>((x[j] - mn) * id + 0.5f);
    store_q5(y[i].qs, y[i].qh, q);
  }
}

void q_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float amax = abs_max(x, kQK);
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(code_round_away(x[j] * id));
  }
}

int mxfp4_index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(kMXFP4Values[0] * d - x);
  for (int k = 1; k < 16; ++k) {
    const float err = std::fabs(kMXFP4Values[k] * d - x);
    if (err < best_err) {
      best = k;
      best_err = err;
    }
  }
  return best;
}

void q_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The largest E2M1 magnitude is 6 = 1.5 * 2^2: choose the exponent that maps amax near it.
    const uint8_t e = amax > 0 ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : 0;
    y[i].e = e;
    const float d = e8m0_to_f32_half(e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i].qs[j] = static_cast<uint8_t>(mxfp4_index(x[j], d) | (mxfp4_index(x[j + 16], d) << 4));
    }
  }
}

// ---- search helpers for K-quants and IQ4 ----

// Symmetric codes q in [qmin, qmax] with x ≈ d*q: tries scales that map the largest magnitude to
// each end of the range (and nudged variants), refits d by least squares, returns the best d.
float fit_symmetric(const float* x, int n, int qmin, int qmax, int8_t* q) {
  const float max = signed_absmax(x, n);
  const float amax = std::fabs(max);
  if (amax < 1e-30f) {
    std::fill(q, q + n, 0);
    return 0.0f;
  }
  float best_d = 0, best_err = FLT_MAX;
  int8_t cand[256];
  for (int side = 0; side < 2; ++side) {
    // side 0 maps max to the negative end (which is one step longer), side 1 to the positive end.
    const float end = side == 0 ? static_cast<float>(qmin) : static_cast<float>(qmax);
    if (end == 0) continue;
    for (int step = -8; step <= 8; ++step) {
      const float target = end + (end < 0 ? -0.1f : 0.1f) * static_cast<float>(step) * 0.5f;
      const float iscale = target / max;
      double sxq = 0, sqq = 0;
      for (int j = 0; j < n; ++j) {
        const int v = std::clamp(nearest_int(iscale * x[j]), qmin, qmax);
        cand[j] = static_cast<int8_t>(v);
        sxq += static_cast<double>(x[j]) * v;
        sqq += static_cast<double>(v) * v;
      }
      if (sqq <= 0) continue;
      const float d = static_cast<float>(sxq / sqq);
      double err = 0;
      for (int j = 0; j < n; ++j) {
        const double e = x[j] - d * cand[j];
        err += e * e;
      }
      if (err < best_err) {
        best_err = static_cast<float>(err);
        best_d = d;
        std::copy(cand, cand + n, q);
      }
    }
  }
  return best_d;
}

// Codes q in [0, qmax] with x ≈ d*q - m, m >= 0. Tries ranges around [min(x,0), max(x)]; for each,
// picks codes, refits (d, m) by least squares (m clamped at 0), then re-derives the codes from the fit
// and refits once more. Returns the best (d, m) and its codes.
void fit_affine(const float* x, int n, int qmax, uint8_t* q, float* d_out, float* m_out) {
  float mn, mx;
  minmax(x, n, &mn, &mx);
  mn = std::min(mn, 0.0f);
  if (mx <= mn) {
    std::fill(q, q + n, 0);
    *d_out = 0;
    *m_out = -mn;
    return;
  }
  float best_err = FLT_MAX, best_d = 0, best_m = -mn;
  uint8_t cand[256];
  // Least-squares fit of x ≈ d*l + b (b = -m <= 0) for the codes in cand; returns the error.
  auto fit = [&](double* d, double* b) {
    double sl = 0, sll = 0, sx = 0, slx = 0;
    for (int j = 0; j < n; ++j) {
      sl += cand[j];
      sll += static_cast<double>(cand[j]) * cand[j];
      sx += x[j];
      slx += static_cast<double>(cand[j]) * x[j];
    }
    const double det = n * sll - sl * sl;
    *d = det > 0 ? (n * slx - sl * sx) / det : 0;
    *b = det > 0 ? (sll * sx - sl * slx) / det : sx / n;
    if (*b > 0) {
      *b = 0;
      *d = sll > 0 ? slx / sll : 0;
    }
    double err = 0;
    for (int j = 0; j < n; ++j) {
      const double e = x[j] - (*d * cand[j] + *b);
      err += e * e;
    }
    return err;
  };
  auto keep = [&](double err, double d, double b) {
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_d = static_cast<float>(d);
      best_m = static_cast<float>(-b);
      std::copy(cand, cand + n, q);
    }
  };
  for (int step = -6; step <= 10; ++step) {
    const float iscale = (static_cast<float>(qmax) + 0.1f * static_cast<float>(step)) / (mx - mn);
    for (int j = 0; j < n; ++j) cand[j] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[j] - mn)), 0, qmax));
    double d = 0, b = 0;
    double err = fit(&d, &b);  // (sequenced before keep reads d and b)
    keep(err, d, b);
    if (d <= 0) continue;
    for (int j = 0; j < n; ++j) {
      cand[j] = static_cast<uint8_t>(std::clamp(nearest_int(static_cast<float>((x[j] - b) / d)), 0, qmax));
    }
    err = fit(&d, &b);
    keep(err, d, b);
  }
  *d_out = best_d;
  *m_out = best_m;
}

// Quantizes the per-sub-block scales `s[0..n)` (all >= 0) to unsigned `bits`-bit integers with one
// float super-scale; returns the super-scale stored as fp16 (its rounded value).
float quantize_scales_unsigned(const float* s, int n, int bits, uint8_t* out) {
  float mx = 0;
  for (int j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  const int top = (1 << bits) - 1;
  if (mx <= 0) {
    std::fill(out, out + n, 0);
    return 0.0f;
  }
  const float super = fp16_to_f32(f32_to_fp16(mx / top));
  const float inv = super > 0 ? 1.0f / super : 0.0f;
  for (int j = 0; j < n; ++j) out[j] = static_cast<uint8_t>(std::clamp(nearest_int(s[j] * inv), 0, top));
  return super;
}

// Shared by Q2_K, Q4_K, Q5_K: affine sub-blocks of `sub` elements with `qmax`, scales/mins quantized
// to `sbits` bits. Writes codes to L (0..qmax) and returns quantized scales/mins and super-scales.
struct AffineSuper {
  uint8_t sc[16], mn[16];
  float d, dmin;
};

AffineSuper fit_affine_super(const float* x, int n_sub, int sub, int qmax, int sbits, uint8_t* L) {
  float scales[16], mins[16];
  for (int s = 0; s < n_sub; ++s) fit_affine(x + s * sub, sub, qmax, L + s * sub, &scales[s], &mins[s]);
  for (int s = 0; s < n_sub; ++s) scales[s] = std::max(scales[s], 0.0f);
  AffineSuper r{};
  r.d = quantize_scales_unsigned(scales, n_sub, sbits, r.sc);
  r.dmin = quantize_scales_unsigned(mins, n_sub, sbits, r.mn);
  // Recompute codes with the scales that will actually be stored. Rounding a sub-block's scale and min
  // to the super-scales' grid can cost much (a block with one outlier has a coarse grid), so the integer
  // scale and min one step either side of the rounded ones are tried too, keeping the least error.
  const int top = (1 << sbits) - 1;
  for (int s = 0; s < n_sub; ++s) {
    const float* xs = x + s * sub;
    double best = DBL_MAX;
    const int sc0 = r.sc[s], mn0 = r.mn[s];
    for (int dsc = -1; dsc <= 1; ++dsc) {
      for (int dmn = -1; dmn <= 1; ++dmn) {
        const int sc = sc0 + dsc, mn = mn0 + dmn;
        if (sc < 0 || sc > top || mn < 0 || mn > top) continue;
        const float d = r.d * static_cast<float>(sc), m = r.dmin * static_cast<float>(mn);
        double err = 0;
        for (int j = 0; j < sub; ++j) {
          const int v = d > 0 ? std::clamp(nearest_int((xs[j] + m) / d), 0, qmax) : 0;
          const double e = static_cast<double>(xs[j]) - (static_cast<double>(d) * v - m);
          err += e * e;
        }
        if (err < best) {
          best = err;
          r.sc[s] = static_cast<uint8_t>(sc);
          r.mn[s] = static_cast<uint8_t>(mn);
        }
      }
    }
    const float d = r.d * r.sc[s], m = r.dmin * r.mn[s];
    for (int j = 0; j < sub; ++j) {
      const int v = d > 0 ? nearest_int((xs[j] + m) / d) : 0;
      L[s * sub + j] = static_cast<uint8_t>(std::clamp(v, 0, qmax));
    }
  }
  return r;
}

void q_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    const AffineSuper a = fit_affine_super(x, 16, 16, 3, 4, L);
    y[i].d = f32_to_fp16(a.d);
    y[i].dmin = f32_to_fp16(a.dmin);
    for (int s = 0; s < 16; ++s) y[i].scales[s] = static_cast<uint8_t>(a.sc[s] | (a.mn[s] << 4));
    std::fill(std::begin(y[i].qs), std::end(y[i].qs), 0);
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int h = 0; h < 2; ++h)
          for (int l = 0; l < 16; ++l)
            y[i].qs[n * 32 + h * 16 + l] |= static_cast<uint8_t>(L[n * 128 + j * 32 + h * 16 + l] << (2 * j));
  }
}

void pack_kquant_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* p) {
  for (int j = 0; j < 4; ++j) {
    p[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    p[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    p[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xf) | ((mn[j + 4] & 0xf) << 4));
  }
}

void q_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    const AffineSuper a = fit_affine_super(x, 8, 32, 15, 6, L);
    y[i].d = f32_to_fp16(a.d);
    y[i].dmin = f32_to_fp16(a.dmin);
    pack_kquant_scales(a.sc, a.mn, y[i].scales);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        y[i].qs[c * 32 + l] = static_cast<uint8_t>(L[c * 64 + l] | (L[c * 64 + 32 + l] << 4));
  }
}

void q_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    const AffineSuper a = fit_affine_super(x, 8, 32, 31, 6, L);
    y[i].d = f32_to_fp16(a.d);
    y[i].dmin = f32_to_fp16(a.dmin);
    pack_kquant_scales(a.sc, a.mn, y[i].scales);
    std::fill(std::begin(y[i].qh), std::end(y[i].qh), 0);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = L[c * 64 + l], hi = L[c * 64 + 32 + l];
        y[i].qs[c * 32 + l] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
        y[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

// Signed sub-block scales (Q3_K, Q6_K): quantized against the largest magnitude.
float quantize_scales_signed(const float* s, int n, int lo, int hi, int* out) {
  const float max = signed_absmax(s, n);
  const float amax = std::fabs(max);
  if (amax <= 0) {
    std::fill(out, out + n, 0);
    return 0.0f;
  }
  // Map the largest magnitude to the longer (negative) end when that keeps its sign.
  const float super = fp16_to_f32(f32_to_fp16(max / static_cast<float>(lo)));
  const float inv = super != 0 ? 1.0f / super : 0.0f;
  for (int j = 0; j < n; ++j) out[j] = std::clamp(nearest_int(s[j] * inv), lo, hi);
  return super;
}

// Rounding each sub-block's scale to the super-scale's grid can cost much (a block with one outlier has a
// coarse grid): the integer scale one step either side of the rounded one `q` is tried too, and the one
// whose nearest codes give the least error kept. `decode(x, dl)` is the value of x's nearest code at step dl.
template <class Decode>
int refine_scale(const float* x, int n, float d, int q, int lo, int hi, Decode decode) {
  double best = DBL_MAX;
  int best_q = q;
  for (int c = std::max(lo, q - 1); c <= std::min(hi, q + 1); ++c) {
    const float dl = d * static_cast<float>(c);
    double err = 0;
    if (dl == 0) {
      for (int j = 0; j < n; ++j) err += static_cast<double>(x[j]) * x[j];
    } else {
      for (int j = 0; j < n; ++j) {
        const double e = static_cast<double>(x[j]) - decode(x[j], dl);
        err += e * e;
      }
    }
    if (err < best) best = err, best_q = c;
  }
  return best_q;
}

void q_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    for (int s = 0; s < 16; ++s) scales[s] = fit_symmetric(x + 16 * s, 16, -4, 3, L + 16 * s);
    int sq[16];
    const float d = quantize_scales_signed(scales, 16, -32, 31, sq);
    y[i].d = f32_to_fp16(d);
    uint8_t u[16];
    for (int s = 0; s < 16; ++s) {
      sq[s] = refine_scale(x + 16 * s, 16, d, sq[s], -32, 31, [](float v, float dl) {
        return static_cast<double>(dl) * std::clamp(nearest_int(v / dl), -4, 3);
      });
      u[s] = static_cast<uint8_t>(sq[s] + 32);
      const float dl = d * static_cast<float>(sq[s]);
      for (int j = 0; j < 16; ++j) {
        L[16 * s + j] = static_cast<int8_t>(dl != 0 ? std::clamp(nearest_int(x[16 * s + j] / dl), -4, 3) : 0);
      }
    }
    for (int j = 0; j < 4; ++j) {
      y[i].scales[j] = static_cast<uint8_t>((u[j] & 0xf) | ((u[8 + j] & 0xf) << 4));
      y[i].scales[4 + j] = static_cast<uint8_t>((u[4 + j] & 0xf) | ((u[12 + j] & 0xf) << 4));
      y[i].scales[8 + j] = static_cast<uint8_t>((u[j] >> 4) | ((u[4 + j] >> 4) << 2) | ((u[8 + j] >> 4) << 4) |
                                                ((u[12 + j] >> 4) << 6));
    }
    std::fill(std::begin(y[i].qs), std::end(y[i].qs), 0);
    std::fill(std::begin(y[i].hmask), std::end(y[i].hmask), 0);
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int h = 0; h < 2; ++h)
          for (int l = 0; l < 16; ++l) {
            const int v = L[n * 128 + j * 32 + h * 16 + l] + 4;  // 0..7
            y[i].qs[n * 32 + h * 16 + l] |= static_cast<uint8_t>((v & 3) << (2 * j));
            if (v & 4) y[i].hmask[h * 16 + l] |= static_cast<uint8_t>(1 << (4 * n + j));
          }
  }
}

void q_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    for (int s = 0; s < 16; ++s) scales[s] = fit_symmetric(x + 16 * s, 16, -32, 31, L + 16 * s);
    int sq[16];
    const float d = quantize_scales_signed(scales, 16, -128, 127, sq);
    y[i].d = f32_to_fp16(d);
    for (int s = 0; s < 16; ++s) {
      sq[s] = refine_scale(x + 16 * s, 16, d, sq[s], -128, 127, [](float v, float dl) {
        return static_cast<double>(dl) * std::clamp(nearest_int(v / dl), -32, 31);
      });
      y[i].scales[s] = static_cast<int8_t>(sq[s]);
      const float dl = d * static_cast<float>(sq[s]);
      for (int j = 0; j < 16; ++j) {
        L[16 * s + j] = static_cast<int8_t>(dl != 0 ? std::clamp(nearest_int(x[16 * s + j] / dl), -32, 31) : 0);
      }
    }
    std::fill(std::begin(y[i].ql), std::end(y[i].ql), 0);
    std::fill(std::begin(y[i].qh), std::end(y[i].qh), 0);
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 32; ++l) {
          const int v = L[n * 128 + k * 32 + l] + 32;  // 0..63
          y[i].ql[n * 64 + (k & 1) * 32 + l] |= static_cast<uint8_t>((v & 0xf) << (4 * (k >> 1)));
          y[i].qh[n * 32 + l] |= static_cast<uint8_t>((v >> 4) << (2 * k));
        }
  }
}

void q_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    const float amax = abs_max(x, kQKK);
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = d;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = static_cast<int8_t>(code_round_even(x[j] * id));
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

// IQ4: codes index the non-linear codebook. For a block, try scales that map the largest magnitude
// onto either end of the codebook (and nearby), pick codes by nearest value, refit d by least squares.
int iq4_index(float v) {
  // Codebook is sorted: binary search for the nearest value.
  int lo = 0, hi = 15;
  if (v <= kIQ4NLValues[0]) return 0;
  if (v >= kIQ4NLValues[15]) return 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < kIQ4NLValues[mid]) hi = mid;
    else lo = mid;
  }
  return v - kIQ4NLValues[lo] < kIQ4NLValues[hi] - v ? lo : hi;
}

float fit_iq4(const float* x, int n, uint8_t* q) {
  const float max = signed_absmax(x, n);
  const float amax = std::fabs(max);
  if (amax < 1e-30f) {
    std::fill(q, q + n, 8);  // code 8 is +1, the smallest magnitude; d = 0 makes it zero
    return 0.0f;
  }
  float best_err = FLT_MAX, best_d = 0;
  uint8_t cand[32];
  for (int step = -10; step <= 10; ++step) {
    const float d0 = max / (-127.0f + 0.5f * static_cast<float>(step));
    for (int side = 0; side < 2; ++side) {
      const float d = side == 0 ? d0 : -d0 * 127.0f / 113.0f;
      const float id = 1.0f / d;
      double sxv = 0, svv = 0;
      for (int j = 0; j < n; ++j) {
        cand[j] = static_cast<uint8_t>(iq4_index(x[j] * id));
        const double v = kIQ4NLValues[cand[j]];
        sxv += x[j] * v;
        svv += v * v;
      }
      const float dfit = static_cast<float>(sxv / svv);
      double err = 0;
      for (int j = 0; j < n; ++j) {
        const double e = x[j] - dfit * kIQ4NLValues[cand[j]];
        err += e * e;
      }
      if (err < best_err) {
        best_err = static_cast<float>(err);
        best_d = dfit;
        std::copy(cand, cand + n, q);
      }
    }
  }
  return best_d;
}

void q_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    uint8_t q[kQK];
    const float d = fit_iq4(x, kQK, q);
    y[i].d = f32_to_fp16(d);
    const float dq = fp16_to_f32(y[i].d);
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(dq != 0 ? iq4_index(x[j] / dq) : 8);
    for (int j = 0; j < kQK / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

void q_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t q[kQKK];
    float scales[8];
    for (int s = 0; s < 8; ++s) scales[s] = fit_iq4(x + 32 * s, 32, q + 32 * s);
    int sq[8];
    const float d = quantize_scales_signed(scales, 8, -32, 31, sq);
    y[i].d = f32_to_fp16(d);
    y[i].scales_h = 0;
    std::fill(std::begin(y[i].scales_l), std::end(y[i].scales_l), 0);
    for (int s = 0; s < 8; ++s) {
      sq[s] = refine_scale(x + 32 * s, 32, d, sq[s], -32, 31, [](float v, float dl) {
        return static_cast<double>(dl) * kIQ4NLValues[iq4_index(v / dl)];
      });
      const int ls = sq[s] + 32;
      y[i].scales_l[s / 2] |= static_cast<uint8_t>((ls & 0xf) << (4 * (s % 2)));
      y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | ((ls >> 4) << (2 * s)));
      const float dl = d * static_cast<float>(sq[s]);
      for (int j = 0; j < 32; ++j) q[32 * s + j] = static_cast<uint8_t>(dl != 0 ? iq4_index(x[32 * s + j] / dl) : 8);
      for (int j = 0; j < 16; ++j) y[i].qs[16 * s + j] = static_cast<uint8_t>(q[32 * s + j] | (q[32 * s + j + 16] << 4));
    }
  }
}

}  // namespace

void quantize_row(TensorType type, const float* x, void* dst, int64_t n) {
  const int64_t bs = block_size(type);
  if (n % bs != 0) {
    throw Error(fmt::format("cannot quantize {} elements to {}: not a multiple of its block size {}", n,
                            gguf::tensor_type_name(type), bs));
  }
  const int64_t nb = n / bs;
  switch (type) {
    case TensorType::F32: std::memcpy(dst, x, static_cast<size_t>(n) * 4); return;
    case TensorType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(x[i]);
      return;
    }
    case TensorType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    case TensorType::Q4_0: return q_q4_0(x, static_cast<BlockQ4_0*>(dst), nb);
    case TensorType::Q4_1: return q_q4_1(x, static_cast<BlockQ4_1*>(dst), nb);
    case TensorType::Q5_0: return q_q5_0(x, static_cast<BlockQ5_0*>(dst), nb);
    case TensorType::Q5_1: return q_q5_1(x, static_cast<BlockQ5_1*>(dst), nb);
    case TensorType::Q8_0: return q_q8_0(x, static_cast<BlockQ8_0*>(dst), nb);
    case TensorType::Q2_K: return q_q2_k(x, static_cast<BlockQ2_K*>(dst), nb);
    case TensorType::Q3_K: return q_q3_k(x, static_cast<BlockQ3_K*>(dst), nb);
    case TensorType::Q4_K: return q_q4_k(x, static_cast<BlockQ4_K*>(dst), nb);
    case TensorType::Q5_K: return q_q5_k(x, static_cast<BlockQ5_K*>(dst), nb);
    case TensorType::Q6_K: return q_q6_k(x, static_cast<BlockQ6_K*>(dst), nb);
    case TensorType::Q8_K: return q_q8_k(x, static_cast<BlockQ8_K*>(dst), nb);
    case TensorType::IQ4_NL: return q_iq4_nl(x, static_cast<BlockIQ4_NL*>(dst), nb);
    case TensorType::IQ4_XS: return q_iq4_xs(x, static_cast<BlockIQ4_XS*>(dst), nb);
    case TensorType::MXFP4: return q_mxfp4(x, static_cast<BlockMXFP4*>(dst), nb);
    default:
      throw Error(fmt::format("quantizing to {} is not supported", gguf::tensor_type_name(type)));
  }
}

}  // namespace zinc::quant
