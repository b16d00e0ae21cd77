// A whole-row RMSNorm left to the product that reads its row (Plan::mm_norm): the norm's partial sums
// of h^2 (norm_blocks a token, written by mul_mv_k.comp's MUL_MV_NORM or rms_norm_row's factored form)
// added in block order, the scale 1 / sqrt(sum / ncols + norm_eps). For mul_mv_k.comp and mul_mv.comp:
// the includer defines WG and NTOK, the buffer npart, the push constants p.norm_blocks, p.ncols and
// p.norm_eps, and norm_token(set, t), the token of its set's t-th row.
// A set's sums are loaded as it starts (np_load, one or two an invocation), stored in shared memory
// before the product's reduction barrier (np_stage) and added after it (np_scale), so no invocation
// waits for them before its first weight loads (qwen3-30b-a3b on an H100: each reader took ~1.7 us a
// layer longer when it added them there). A set of more than 2 WG sums is added from npart at the end.

float norm_scale_of(float total) {
  precise const float mean = total / float(p.ncols) + p.norm_eps;
  return 1.0 / sqrt(mean);
}

shared float np_sh[2u * WG];  // the set's partial sums, in the order np_scale adds them

struct NormPartials {
  vec2 v;      // invocation tid's sums tid and tid + WG of the set
  bool early;  // the set's sums fit 2 WG
};

NormPartials np_load(uint set, uint tid) {
  NormPartials np;
  const uint n = p.norm_blocks * NTOK;
  np.early = n <= 2u * WG;
  np.v = vec2(0.0);
  [[unroll]] for (uint k = 0u; k < 2u; ++k) {
    const uint i = tid + k * WG;
    if (np.early && i < n) np.v[k] = npart[norm_token(set, i / p.norm_blocks) * p.norm_blocks + i % p.norm_blocks];
  }
  return np;
}

void np_stage(NormPartials np, uint tid) {
  [[unroll]] for (uint k = 0u; k < 2u; ++k) {
    if (np.early && tid + k * WG < p.norm_blocks * NTOK) np_sh[tid + k * WG] = np.v[k];
  }
}

// The scale of the set's t-th row (1 where no norm is left to the product), after the barrier that
// follows np_stage.
float np_scale(NormPartials np, uint set, uint t) {
  if (p.norm_blocks == 0u) return 1.0;
  float total = 0.0;
  if (np.early) {
    for (uint i = 0u; i < p.norm_blocks; ++i) total += np_sh[t * p.norm_blocks + i];
  } else {
    const uint tok = norm_token(set, t);
    for (uint i = 0u; i < p.norm_blocks; ++i) total += npart[tok * p.norm_blocks + i];
  }
  return norm_scale_of(total);
}
