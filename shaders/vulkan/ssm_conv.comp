#version 450
// Short causal depthwise convolution over time, then SiLU (graph Op::SsmConv; cpu::ssm_conv is the
// reference): out[t][c] = silu(sum_j w[c][j] * r[t + j][c]) over the rows r = (state, x), the state
// holding the kernel - 1 input rows before this step, oldest first; afterwards the state holds the
// last kernel - 1 rows of (state, x).
// One invocation per (channel, block of `block` tokens), walking its tokens in order. block >=
// kernel - 1, so only block 0 reads the state, and the invocation of block 0 also rewrites its
// channel's state column after its own reads: no other invocation touches that column, so one
// dispatch suffices (x and out must not alias; the state is updated in place).
// Bindings: 0 x [n_tokens][width], 1 w [width][kernel] (GGUF {kernel, width}, F32), 2 state
// [kernel - 1][width], 3 out [n_tokens][width], 4 kept: with keep_stride > 0, the state after each token
// t (rows t + 1 .. t + kernel - 1 of (state, x)) also written at kept[t * keep_stride...] (a
// speculative step's states, to go back to one of them). Grid: (ceil(width / 128), ceil(n_tokens / block)).
// Moves about 8 bytes per output plus the state (8 * (kernel - 1) bytes per channel) and w.
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wc { float w[]; };
layout(std430, binding = 2) buffer S { float state[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 4) writeonly buffer Kp { float kept[]; };
layout(push_constant) uniform Params {
  uint width;
  uint kernel;
  uint n_tokens;
  uint block;  // tokens per invocation, >= kernel - 1
  uint keep_stride;  // floats between the kept states of consecutive tokens (0: none kept)
} p;

// Row r of the sequence (state, x) at channel c.
float row(uint r, uint c) {
  const uint hist = p.kernel - 1u;
  return r < hist ? state[r * p.width + c] : x[(r - hist) * p.width + c];
}

void main() {
  const uint c = gl_GlobalInvocationID.x;
  if (c >= p.width) return;
  const uint t0 = gl_WorkGroupID.y * p.block, t1 = min(t0 + p.block, p.n_tokens);
  for (uint t = t0; t < t1; ++t) {
    precise float s = 0.0;  // (no contraction: mul_mv_k.comp's MUL_MV_CONV sums the same way)
    for (uint j = 0u; j < p.kernel; ++j) s += w[c * p.kernel + j] * row(t + j, c);
    o[t * p.width + c] = s / (1.0 + exp(-s));
    // Rows t + 1 + r >= kernel - 1 of any block but 0 are x's; block 0 rewrites the state only below.
    if (p.keep_stride != 0u) {
      for (uint r = 0u; r + 1u < p.kernel; ++r) kept[t * p.keep_stride + r * p.width + c] = row(t + 1u + r, c);
    }
  }
  if (gl_WorkGroupID.y != 0u) return;
  // Ascending r reads row n_tokens + r > r before anything at or after it is overwritten.
  for (uint r = 0u; r + 1u < p.kernel; ++r) state[r * p.width + c] = row(p.n_tokens + r, c);
}
