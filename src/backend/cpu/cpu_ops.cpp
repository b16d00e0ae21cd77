#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace zinc::backend::cpu {

void rms_norm(const float* x, const float* w, float* out, int64_t width, int64_t group, int64_t n_tokens, float eps,
              float offset) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * width;
    float* orow = out + t * width;
    for (int64_t g0 = 0; g0 < width; g0 += group) {
      // Accumulated in double (rows of thousands of squares), eight running sums so the additions do
      // not wait on one another.
      double part[8] = {};
      int64_t i = 0;
      for (; i + 8 <= group; i += 8)
        for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(xr[g0 + i + k]) * xr[g0 + i + k];
      for (; i < group; ++i) part[0] += static_cast<double>(xr[g0 + i]) * xr[g0 + i];
      const double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(group)) + eps);
      for (i = 0; i < group; ++i) {
        const float v = xr[g0 + i] * scale;
        orow[g0 + i] = w ? v * (w[i] + offset) : v;  // the weight spans one group
      }
    }
  }
}

void rope_cos_sin(int n_rot, const graph::RopeParams& p, const float* factors, int32_t pos, float* cs) {
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(n_rot));
  // YaRN: pairs below `low` keep their original angle, pairs above `high` are interpolated, a linear
  // ramp in between.
  float low = 0, high = 0;
  if (p.ext_factor != 0.0f) {
    const auto corr_dim = [&](float beta) {
      return static_cast<float>(n_rot) * std::log(static_cast<float>(p.n_ctx_orig) / (beta * 2.0f * 3.14159265358979f)) /
             (2.0f * std::log(p.base));
    };
    low = corr_dim(p.beta_fast);
    high = corr_dim(p.beta_slow);
    if (p.yarn_truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(0.0f, low);
    high = std::min(static_cast<float>(n_rot - 1), high);
  }
  // The unscaled angle pos * base^(-2i/n_rot), built by repeated multiplication as the reference does.
  float theta_extrap = static_cast<float>(pos);
  for (int i = 0; i < n_rot / 2; ++i) {
    const float extrap = factors ? theta_extrap / factors[i] : theta_extrap;
    float theta = p.freq_scale * extrap;
    if (p.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
      const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      theta = theta * (1.0f - mix) + extrap * mix;
    }
    cs[2 * i] = std::cos(theta) * p.attn_factor;
    cs[2 * i + 1] = std::sin(theta) * p.attn_factor;
    theta_extrap *= theta_scale;
  }
}

void rope(const float* x, float* out, int64_t n_tokens, int n_head, int head_dim, int n_rot, graph::RopeMode mode,
          const graph::RopeParams& p, const float* factors, int32_t pos0) {
  const int64_t width = static_cast<int64_t>(n_head) * head_dim;
  std::vector<float> cs(static_cast<size_t>(n_rot));  // cos, sin per pair
  for (int64_t t = 0; t < n_tokens; ++t) {
    rope_cos_sin(n_rot, p, factors, pos0 + static_cast<int32_t>(t), cs.data());
    const float* xr = x + t * width;
    float* orow = out + t * width;
    for (int h = 0; h < n_head; ++h) {
      const float* xh = xr + h * head_dim;
      float* oh = orow + h * head_dim;
      for (int i = 0; i < n_rot / 2; ++i) {
        const int a = mode == graph::RopeMode::Normal ? 2 * i : i;
        const int b = mode == graph::RopeMode::Normal ? 2 * i + 1 : i + n_rot / 2;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = xh[a], x1 = xh[b];
        oh[a] = x0 * c - x1 * s;
        oh[b] = x0 * s + x1 * c;
      }
      for (int i = n_rot; i < head_dim; ++i) oh[i] = xh[i];
    }
  }
}

void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

void softcap(const float* x, float* out, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) out[i] = cap * std::tanh(x[i] / cap);
}

}  // namespace zinc::backend::cpu
