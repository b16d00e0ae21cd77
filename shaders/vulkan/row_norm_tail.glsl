// The residual add and whole-row RMSNorm after a decode product, done by the last workgroup of the
// product's dispatch to finish (mul_mv_k.comp's art_ variants, mul_mv_q8.comp's didcr_): the work of
// rms_norm_row.comp's f64_add variant on one token's row, with its arithmetic (the sum of squares in
// double, the CPU's scale and order of roundings, the 32-element formats' codes as it writes them),
// looping over the row instead of holding it in registers. Where a row is no multiple of 256 (so the
// K-quant norm tail, mul_mv_k.comp's MUL_MV_NORM, cannot take it) this saves the norm's dispatch and
// the barrier before it.
//
// The includer enables GL_ARB_gpu_shader_fp64 and declares: ra4 (the product's rows as vec4, coherent),
// rb4 (the residual), rs4 (the sum out), ry4 (the norm out), rw4 (the norm's weights), rq (uint: the
// codes out), rcount (uint, coherent: one counter a token, zero before and after), the push constants'
// nrows (the width), norm_eps, norm_offset, norm_has_w, out_stride (words per row of codes; 0: none),
// q8_format (0 ACT_Q8_0, 1 ACT_Q8_1) and arrivals (the workgroups that call this per token); and
// includes f16_rne.glsl and div_rn.glsl first.
#define Q8_ACT_WRITER
#define q rq
#include "q8_act.glsl"
#undef q

shared double rn_part[256];  // per subgroup (sized for subgroups of one invocation in 256)
shared float rn_scale;
shared bool rn_last;

// Called by every invocation of each arriving workgroup once its rows of token tok are written.
void row_norm_tail(uint tok, uint tid, uint nthreads) {
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) {
    rn_last = atomicAdd(rcount[tok], 1u) == p.arrivals - 1u;
    if (rn_last) rcount[tok] = 0u;
  }
  barrier();
  if (!rn_last) return;  // uniform: the workgroup's shared flag
  memoryBarrierBuffer();
  barrier();
  const uint n4 = p.nrows / 4u, base = tok * n4;
  double s = 0.0lf;
  for (uint i = tid; i < n4; i += nthreads) {
    const vec4 v = ra4[base + i] + rb4[base + i];
    rs4[base + i] = v;
    const dvec4 a = dvec4(v);
    s += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
  }
  s = subgroupAdd(s);
  if (subgroupElect()) rn_part[gl_SubgroupID] = s;
  barrier();
  if (tid == 0u) {
    double total = 0.0lf;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) total += rn_part[i];
    const float mean = float(total / double(p.nrows)) + p.norm_eps;
    const float root = float(sqrt(double(mean)));  // correctly rounded float square root
    rn_scale = float(1.0lf / double(root));        // correctly rounded float reciprocal
  }
  barrier();
  const float scale = rn_scale;
  // Whole rounds over the row (the codes' shuffles take every invocation of a subgroup): invocation
  // tid of round c holds elements 4 i.. (i = c nthreads + tid), word i % 8 of block i / 8.
  for (uint c = 0u; c * nthreads < n4; ++c) {
    const uint i = c * nthreads + tid;
    vec4 r = vec4(0.0);
    if (i < n4) {
      const vec4 wv = p.norm_has_w != 0u ? rw4[i] + p.norm_offset : vec4(1.0);
      precise const vec4 t = rs4[base + i] * scale * wv;  // the CPU's order: (x * scale) * w
      r = t;
      ry4[base + i] = r;
    }
    if (p.out_stride != 0u) q8_act_write(r, i % 8u, tok * p.out_stride + (i / 8u) * 9u, p.q8_format, i < n4);
  }
}
