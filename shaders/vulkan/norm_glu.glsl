// A per-head RMSNorm and the SwiGLU that reads it over one block of 256 elements, one element an
// invocation of a workgroup of 256 (rms_norm_glu.comp; delta_net.comp's NORM_GLU tail): y = x /
// sqrt(mean over the head(x^2) + eps) * (w + offset), o = silu(z) * y, and with q8k_stride > 0 o's
// Q8_K codes (q8k.glsl's q8k_write_block256, included before this). Each head's sum of squares is each
// subgroup's sum over the head's elements (zeros elsewhere), then the subgroups' sums in order. The
// includer defines NG_X(i), NG_W(i), NG_Z(i) (reads) and NG_Y(i, v), NG_O(i, v) (writes).
shared float ng_partial[256];  // head h, subgroup s: ng_partial[h * gl_NumSubgroups + s]
shared float ng_head_scale[256];

// Element i (its row's i % width) by invocation lid; heads of `group` floats, dividing 256.
void norm_glu_block(uint lid, uint i, uint group, bool has_w, float eps, float offset, uint width, uint q8k_stride) {
  const uint heads = 256u / group, head = lid / group;
  const float xv = NG_X(i);
  for (uint h = 0u; h < heads; ++h) {
    const float s = subgroupAdd(head == h ? xv * xv : 0.0);
    if (subgroupElect()) ng_partial[h * gl_NumSubgroups + gl_SubgroupID] = s;
  }
  barrier();
  if (lid % group == 0u) {
    float total = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; ++s) total += ng_partial[head * gl_NumSubgroups + s];
    ng_head_scale[head] = inversesqrt(total / float(group) + eps);
  }
  barrier();
  const float wi = has_w ? NG_W(lid % group) + offset : 1.0;
  const float yv = xv * ng_head_scale[head] * wi;
  NG_Y(i, yv);
  const float g = NG_Z(i);
  const float v = g / (1.0 + exp(-g)) * yv;
  NG_O(i, v);
  if (q8k_stride == 0u) return;  // no codes (the same for every invocation)
  q8k_write_block256(v, lid, (i / width) * q8k_stride, width, i % width);  // (q8k.glsl)
}
