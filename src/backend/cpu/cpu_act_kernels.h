// The gated activations (cpu_ops.h: swiglu, geglu) in vectors, included by the per-instruction-set
// attention sources after cpu_attention_kernels.h (its vector types, helpers and vexp; internal
// linkage, so the copies never mix). Every element, the last partial vector's too, goes through the
// same vector code, so an element's value does not depend on where a call's range starts (prefill in
// chunks equals decode token by token).
#pragma once

namespace zinc::backend::cpu {
namespace {

template <class V, bool kGelu>
[[gnu::always_inline]] inline V gated(V g, V u) {
  if constexpr (kGelu) {
    // 0.5 g (1 + tanh(y)) u, tanh(y) = 1 − 2 / (e^2y + 1).
    const V y = 0.79788456080286535587989211986876f * g * (1.0f + 0.044715f * g * g);
    return 0.5f * g * (2.0f - 2.0f / (vexp<Vectors>(2.0f * y) + 1.0f)) * u;
  } else {
    return g / (1.0f + vexp<Vectors>(-g)) * u;
  }
}

template <bool kGelu>
void gated_rows(const float* gate, const float* up, float* out, int64_t n) {
  using V = Vectors::F;
  constexpr int W = lanes<V>();
  int64_t i = 0;
  for (; i + W <= n; i += W) store<V>(out + i, gated<V, kGelu>(load<V>(gate + i), load<V>(up + i)));
  if (i < n) {  // the last elements through the same code, padded
    float g[W] = {}, u[W] = {}, o[W];
    std::memcpy(g, gate + i, static_cast<size_t>(n - i) * 4);
    std::memcpy(u, up + i, static_cast<size_t>(n - i) * 4);
    store<V>(o, gated<V, kGelu>(load<V>(g), load<V>(u)));
    std::memcpy(out + i, o, static_cast<size_t>(n - i) * 4);
  }
}

}  // namespace

void ZINC_ATTEND_ISA(swiglu)(const float* gate, const float* up, float* out, int64_t n) { gated_rows<false>(gate, up, out, n); }
void ZINC_ATTEND_ISA(geglu)(const float* gate, const float* up, float* out, int64_t n) { gated_rows<true>(gate, up, out, n); }

}  // namespace zinc::backend::cpu
