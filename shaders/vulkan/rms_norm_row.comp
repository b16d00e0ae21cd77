#version 450
//! variant f64 SUM_F64
//! variant f64_add SUM_F64,ADD_INPUT
//! variant f32 SUM_F32
//! variant f32_add SUM_F32,ADD_INPUT
//! variant f64_gadd SUM_F64,ADD_INPUT,ADD_GATED
//! variant f32_gadd SUM_F32,ADD_INPUT,ADD_GATED
// RMSNorm of whole rows (graph Op::RmsNorm over the model width): y = x / sqrt(mean(x^2) + eps) *
// (w + offset), one workgroup per row. Each invocation loads its CHUNKS vec4s of the row at once (the
// loads overlap instead of following each other through a loop) and keeps them in registers for the
// scaling, so the row is read once. Two optional fusions, each saving a dispatch in decode:
//  - ADD_INPUT: the row is a + b (the residual sum before the norm), written to s as well;
//  - ADD_GATED (with ADD_INPUT): the row is a + (b + ga * sigmoid(gg)), a gated row added to b before
//    the residual add (a shared expert's gated output added to the experts' output, then to the
//    residual: eltwise.comp's sigmoid_mul_add and this kernel's add in one dispatch, the same roundings;
//    gg one value per row where gate_row, else a row like ga);
//  - q8k_stride > 0: y is also quantized to Q8_K (q8k.glsl: the layout and arithmetic, rows
//    q8k_stride words apart in xq) for the K-quant products that read it;
//  - q8_words > 0: y is also quantized as quantize_q8.comp quantizes the activations of the 32-element
//    formats' products (q8_format 0: ACT_Q8_0, 1: ACT_Q8_1; rows q8_words words apart in xq, the same
//    bytes): the eight invocations holding a block of 32 share its max and code sum by shuffles.
//    Needs width a multiple of 32 and subgroups of 8 invocations or more; not with q8k_stride.
//  - factored (ADD_INPUT and Q8_K output only): the norm left to the K-quant kernels that read it, as
//    mul_mv_k.comp's MUL_MV_NORM leaves it in a one-token step: y is not written, the codes are those
//    of the unscaled weighted row s * (w + offset), and partials (binding 6) gets each row's sums of
//    s^2 per 256 values in that kernel's order (per invocation its 4 values' squares in order, the
//    subgroup's sum, the block's subgroups in order), so that every row of a step of several tokens
//    has the codes and sums of a one-token step. Needs subgroups of at most 64 invocations dividing 64.
// SUM_F64 reproduces the CPU backend bit for bit (rms_norm.comp says how); SUM_F32 is the float sum.
// Needs width a multiple of 4 (of 256 with the Q8_K output) and at most CHUNKS * WGS * 4; the Q8_K
// output needs full subgroups of 4 invocations or more.
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#if defined(SUM_F64)
#extension GL_ARB_gpu_shader_fp64 : require
#define ACC double
#define ACC4 dvec4
#else
#define ACC float
#define ACC4 vec4
#endif
#include "q8k.glsl"
layout(local_size_x_id = 1) in;
layout(constant_id = 0) const uint CHUNKS = 4;  // WGS * 4-float chunks per row
layout(constant_id = 1) const uint WGS = 256;   // invocations: 64, 128, 256, 512 or 1024
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W { vec4 w4[]; };
layout(std430, binding = 2) writeonly buffer Y { vec4 y4[]; };
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
#include "f16_rne.glsl"
#define Q8_ACT_WRITER
#include "q8_act.glsl"
#if defined(ADD_INPUT)
layout(std430, binding = 4) readonly buffer B { vec4 b4[]; };
layout(std430, binding = 5) writeonly buffer S { vec4 s4[]; };
layout(std430, binding = 6) writeonly buffer P { float partials[]; };
#endif
#if defined(ADD_GATED)
layout(std430, binding = 7) readonly buffer GA { vec4 ga4[]; };
layout(std430, binding = 8) readonly buffer GG { float gg[]; };
#endif
layout(push_constant) uniform Params {
  uint width;
  uint has_weight;  // 0: no weight (w is not read)
  float eps;
  float offset;     // added to every weight
  uint q8k_stride;  // words per quantized row; 0: no Q8_K output (xq is not written)
  uint q8_words;    // words per row of 32-element activation codes; 0: none
  uint q8_format;   // their format: 0 ACT_Q8_0, 1 ACT_Q8_1
  uint factored;    // 1: the factored form (ADD_INPUT, Q8_K output)
  uint gate_row;    // ADD_GATED: 1: one gate value per row, 0: a gate per element
} p;

const uint BPC = WGS / 64u;  // Q8_K blocks per chunk
shared ACC partial[WGS];
shared uint part_max[CHUNKS * WGS / 4u];  // per chunk and run of invocations (runs of 4 or more)
shared float block_d[CHUNKS * BPC], block_id[CHUNKS * BPC];
shared float row_scale;
shared float part_ss[CHUNKS * WGS];  // per chunk and subgroup (sized for subgroups of one invocation)

void main() {
  const uint lid = gl_LocalInvocationID.x, row = gl_WorkGroupID.x, n4 = p.width / 4u, base = row * n4;
  vec4 v[CHUNKS], wv[CHUNKS];
  [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
    const uint i = c * WGS + lid;
    v[c] = i < n4 ? x4[base + i] : vec4(0.0);
    wv[c] = p.has_weight != 0u && i < n4 ? w4[i] + p.offset : vec4(1.0);  // loaded with the row, used after the sum
#if defined(ADD_INPUT)
    if (i < n4) {
#if defined(ADD_GATED)
      const uint e = 4u * (base + i);
      const vec4 g = p.gate_row != 0u ? vec4(gg[row]) : vec4(gg[e], gg[e + 1u], gg[e + 2u], gg[e + 3u]);
      precise const vec4 gated = ga4[base + i] / (1.0 + exp(-g));  // eltwise.comp's a * sigmoid(b)
      precise const vec4 t = b4[base + i] + gated;
      v[c] += t;
#else
      v[c] += b4[base + i];
#endif
      s4[base + i] = v[c];
    }
#endif
  }
  ACC s = ACC(0);
  [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
    const ACC4 a = ACC4(v[c]);
    s += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
  }
  s = subgroupAdd(s);
  if (subgroupElect()) partial[gl_SubgroupID] = s;
  barrier();
  if (lid == 0u) {
    ACC total = ACC(0);
    for (uint i = 0u; i < gl_NumSubgroups; ++i) total += partial[i];
#if defined(SUM_F64)
    const float mean = float(total / double(p.width)) + p.eps;
    const float root = float(sqrt(double(mean)));  // correctly rounded float square root
    row_scale = float(1.0lf / double(root));       // correctly rounded float reciprocal
#else
    row_scale = inversesqrt(total / float(p.width) + p.eps);
#endif
  }
  barrier();
  const float scale = row_scale;
#if defined(ADD_INPUT)
  if (p.factored != 0u) {  // uniform
    // Each block's sum of squares as mul_mv_k.comp's norm_tail adds it, then the unscaled row.
    const uint nsg = WGS / gl_SubgroupSize;
    [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
      precise const float sq = v[c].x * v[c].x + v[c].y * v[c].y + v[c].z * v[c].z + v[c].w * v[c].w;
      const float ss = subgroupAdd(sq);
      if (subgroupElect()) part_ss[c * nsg + gl_SubgroupID] = ss;
    }
    barrier();
    if (lid < CHUNKS * BPC && (lid / BPC) * WGS + (lid % BPC) * 64u < n4) {
      const uint per = 64u / gl_SubgroupSize, first = (lid / BPC) * nsg + (lid % BPC) * per;
      float t = 0.0;
      for (uint g = 0u; g < per; ++g) t += part_ss[first + g];
      partials[row * (p.width / 256u) + lid] = t;  // (block lid of the row)
    }
    [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
      precise const vec4 r = v[c] * wv[c];
      v[c] = r;
    }
  } else
#endif
  {
    [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
      const uint i = c * WGS + lid;
      precise const vec4 r = v[c] * scale * wv[c];  // the CPU's order: (x * scale) * w
      v[c] = r;
      if (i < n4) y4[base + i] = r;
    }
  }
  if (p.q8_words != 0u) {  // uniform
    // Chunk c's invocation lid holds elements 4 i.. (i = c WGS + lid): word i % 8 of block i / 8.
    const uint qb = row * p.q8_words;
    [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
      const uint i = c * WGS + lid;
      q8_act_write(v[c], i % 8u, qb + (i / 8u) * 9u, p.q8_format, i < n4);
    }
    return;
  }
  if (p.q8k_stride == 0u) return;  // uniform: the whole workgroup leaves

  // Q8_K: chunk c's invocation lid holds elements 4 lid.. of block 4c + lid / 64. max |y| over the 64
  // invocations of a block: within runs of `span` invocations by shuffles, then per block from the
  // runs' maxima in shared memory by one invocation, which also divides out d and 1 / d for all.
  const uint span = min(gl_SubgroupSize, 64u), runs = WGS / span;
  [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
    uint m = max(max(q8k_abs_bits(v[c].x), q8k_abs_bits(v[c].y)), max(q8k_abs_bits(v[c].z), q8k_abs_bits(v[c].w)));
    for (uint off = 1u; off < span; off <<= 1) m = max(m, subgroupShuffleXor(m, off));
    if (lid % span == 0u) part_max[c * runs + lid / span] = m;
  }
  barrier();
  if (lid < CHUNKS * BPC) {
    const uint per = 64u / span, first = (lid / BPC) * runs + (lid % BPC) * per;  // block lid's runs
    uint m = 0u;
    for (uint g = 0u; g < per; ++g) m = max(m, part_max[first + g]);
    float id;
    block_d[lid] = q8k_scale(m, id);
    block_id[lid] = id;
  }
  barrier();
  const uint qb = row * p.q8k_stride;
  [[unroll]] for (uint c = 0u; c < CHUNKS; ++c) {
    const uint i = c * WGS + lid, blk = i / 64u;
    const float d = block_d[blk], id = block_id[blk];
    const ivec4 k = ivec4(q8k_code(v[c].x, id), q8k_code(v[c].y, id), q8k_code(v[c].z, id), q8k_code(v[c].w, id));
    int sum = k.x + k.y + k.z + k.w;  // 16 codes: 4 invocations
    sum += subgroupShuffleXor(sum, 1u);
    sum += subgroupShuffleXor(sum, 2u);
    if (i < n4) {
      q[qb + i] = q8k_pack(k);
      if ((lid & 3u) == 0u) q[qb + n4 + i / 4u] = uint(sum);
      if ((lid & 63u) == 0u) q[qb + n4 + p.width / 16u + blk] = floatBitsToUint(d);
    }
  }
}
