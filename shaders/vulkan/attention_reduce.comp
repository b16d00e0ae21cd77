#version 450
// The merge of flash-decoding's splits (after attention.comp with n_split > 1): for each query row
// (token t, head h) the splits' (m_s, l_s, acc_s) combine as M = max(m_s, sink), L = sum l_s e^(m_s - M)
// (+ e^(sink - M)), out = sum acc_s e^(m_s - M) / L. Splits with l = 0 saw no key and are skipped
// (their acc is never read). One workgroup per row, one invocation per head dim (looping past 128).
// Reads (n_split * 2 + live splits * head_dim) floats per row and writes head_dim.
// Bindings: 0 scratch: (m, l) [n_split][n_rows] then acc [n_split][n_rows][head_dim]; 1 sinks [n_head];
// 2 out [n_rows][head_dim] (= [n_tokens][n_head * head_dim]). Grid: x * y >= n_rows.
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Scratch { float sc[]; };
layout(std430, binding = 0) readonly buffer Scratch2 { vec2 sc2[]; };
layout(std430, binding = 1) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
  uint n_split;
  uint n_rows;     // n_tokens * n_head
  uint n_head;
  uint head_dim;
  uint has_sinks;
} p;

void main() {
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= p.n_rows) return;
  float m = -1.0e38;
  for (uint s = 0u; s < p.n_split; ++s) {
    const vec2 ml = sc2[s * p.n_rows + row];
    if (ml.y > 0.0) m = max(m, ml.x);
  }
  float sink_w = 0.0;
  if (p.has_sinks != 0u) {
    const float sink = sinks[row % p.n_head], m2 = max(m, sink);
    sink_w = exp(sink - m2);
    m = m2;
  }
  float l = sink_w;
  for (uint s = 0u; s < p.n_split; ++s) {
    const vec2 ml = sc2[s * p.n_rows + row];
    if (ml.y > 0.0) l += ml.y * exp(ml.x - m);
  }
  const float inv = 1.0 / l;
  const uint acc0 = 2u * p.n_split * p.n_rows;
  for (uint d = gl_LocalInvocationID.x; d < p.head_dim; d += 128u) {
    float a = 0.0;
    for (uint s = 0u; s < p.n_split; ++s) {
      const vec2 ml = sc2[s * p.n_rows + row];
      if (ml.y > 0.0) a += sc[acc0 + (s * p.n_rows + row) * p.head_dim + d] * exp(ml.x - m);
    }
    o[row * p.head_dim + d] = a * inv;
  }
}
