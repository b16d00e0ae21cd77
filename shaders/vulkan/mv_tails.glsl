// The tails decode's q, k and v products take (mul_mv_k.comp's rope_ and vst_ variants, mul_mv_q8.comp's
// drope_ and dvst_): the rotation of each head by the last of its workgroups, and a workgroup's rows
// appended to the V cache. The including shader defines TAIL_ROWS (a workgroup's rows) and declares
// y (coherent), cs, nw, count (MUL_MV_ROPE), kc and step, and the push constants' nrows, head_dim,
// n_rot, flags, count_base, eps and offset, then includes f16_rne.glsl, kv_rows.glsl and rope_pair.glsl.

#if defined(MUL_MV_ROPE)
shared float head_s[128];  // (heads of at most 128: the shared memory every workgroup holds stays small)
shared float part_s[16];
shared bool tail_last;

// Once every workgroup of the head holding row0 has written its rows: by the last of them, the head's
// norm, rotation and cache append, as rope_heads.comp does them for token 0 (the norm's sums over
// invocations 0..63 in its order), each invocation then taking a pair of adjacent elements.
void rope_tail(uint row0, uint tid) {
  const uint hd = p.head_dim, h = row0 / hd, base = h * hd;
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) {
    const uint at = p.count_base + h;
    tail_last = atomicAdd(count[at], 1u) == hd / TAIL_ROWS - 1u;
    if (tail_last) count[at] = 0u;
  }
  barrier();
  if (!tail_last) return;  // uniform: the workgroup's shared flag
  memoryBarrierBuffer();
  barrier();  // (the fused GLU read stale rows on lavapipe without one here)
  const bool lane = tid < 64u;
  float s = 0.0;
  if (lane) {
    for (uint e = tid; e < hd; e += 64u) {
      const float xe = y[base + e];
      head_s[e] = xe;
      s += xe * xe;
    }
  }
  if ((p.flags & 2u) != 0u) {
    s = subgroupAdd(s);
    if (subgroupElect() && lane) part_s[gl_SubgroupID] = s;
  }
  barrier();
  const uint d = 2u * tid;
  if (d >= hd) return;  // (no barrier below)
  vec2 r = vec2(head_s[d], head_s[d + 1u]);
  if ((p.flags & 2u) != 0u) {
    float total = 0.0;
    for (uint i = 0u; i < 64u / gl_SubgroupSize; ++i) total += part_s[i];
    const float scale = inversesqrt(total / float(hd) + p.eps);
    const vec2 we = (p.flags & 4u) != 0u ? vec2(nw[d] + p.offset, nw[d + 1u] + p.offset) : vec2(1.0);
    r = vec2(r.x * scale * we.x, r.y * scale * we.y);
  }
  if (d < p.n_rot) {
    // The partners' values normalised as these are (each invocation from the rows staged above).
    const RopePair q0 = rope_pair(d, p.n_rot, (p.flags & 1u) != 0u), q1 = rope_pair(d + 1u, p.n_rot, (p.flags & 1u) != 0u);
    vec2 pv = vec2(head_s[q0.partner], head_s[q1.partner]);
    if ((p.flags & 2u) != 0u) {
      float total = 0.0;
      for (uint i = 0u; i < 64u / gl_SubgroupSize; ++i) total += part_s[i];
      const float scale = inversesqrt(total / float(hd) + p.eps);
      const vec2 we = (p.flags & 4u) != 0u ? vec2(nw[q0.partner] + p.offset, nw[q1.partner] + p.offset) : vec2(1.0);
      pv = vec2(pv.x * scale * we.x, pv.y * scale * we.y);
    }
    const vec2 c0 = vec2(cs[2u * q0.i], cs[2u * q0.i + 1u]), c1 = vec2(cs[2u * q1.i], cs[2u * q1.i + 1u]);
    r = vec2(q0.first ? r.x * c0.x - pv.x * c0.y : pv.x * c0.y + r.x * c0.x,
             q1.first ? r.y * c1.x - pv.y * c1.y : pv.y * c1.y + r.y * c1.x);
  }
  y[base + d] = r.x;
  y[base + d + 1u] = r.y;
  if ((p.flags & 8u) != 0u) {
    const uint row = cache_row(step[0]) * p.nrows + base;
    if ((p.flags & 16u) != 0u) {
      kc[row + d] = floatBitsToUint(r.x);
      kc[row + d + 1u] = floatBitsToUint(r.y);
    } else {
      kc[(row + d) / 2u] = pack_half2_rne(r);
    }
  }
}
#endif

#if defined(MUL_MV_VSTORE)
shared float vrow[TAIL_ROWS];

// The workgroup's rows (staged in vrow by their invocations) appended to the V cache at n_past: halves
// rounded to nearest even in pairs, or floats where flags & 16.
void append_rows(uint wg_row0, uint tid, uint wg_size) {
  barrier();
  const uint crow = cache_row(step[0]) * p.nrows + wg_row0;
  if ((p.flags & 16u) != 0u) {
    for (uint i = tid; i < TAIL_ROWS; i += wg_size) kc[crow + i] = floatBitsToUint(vrow[i]);
  } else {
    for (uint i = tid; i < TAIL_ROWS / 2u; i += wg_size) kc[crow / 2u + i] = pack_half2_rne(vec2(vrow[2u * i], vrow[2u * i + 1u]));
  }
}
#endif
