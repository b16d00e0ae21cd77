// Workgroup-wide reductions built from subgroup operations: each subgroup reduces its lanes, one lane
// per subgroup leaves the result in shared memory, and every invocation then reads the (few) subgroup
// results. Correct for any subgroup size the device picks (gl_NumSubgroups, gl_SubgroupID), so the
// includer needs no specialisation for it. The includer defines WG_SIZE (its invocations per
// workgroup) and enables GL_KHR_shader_subgroup_basic and GL_KHR_shader_subgroup_arithmetic. Every
// invocation of the workgroup must call these together (they contain barriers); each returns the same
// value to all of them.

shared uint wg_key_[WG_SIZE];  // one slot per subgroup (sized for subgroups of one lane)
shared uint wg_idx_[WG_SIZE];
shared float wg_val_[WG_SIZE];

// An unsigned key that orders floats as the CPU's `x > best` scans do: larger float, larger key; -0 and
// +0 equal; NaN (never the best) below -inf. Key 0 is left free for "no candidate".
uint order_key(float x) {
  uint b = floatBitsToUint(x);
  if (isnan(x)) return 1u;
  if ((b & 0x7fffffffu) == 0u) b = 0u;
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// The best (key, index) pair: the largest key, among equal keys the lowest index.
uvec2 wg_best(uint key, uint idx) {
  const uint k = subgroupMax(key);
  const uint i = subgroupMin(key == k ? idx : 0xffffffffu);
  if (subgroupElect()) {
    wg_key_[gl_SubgroupID] = k;
    wg_idx_[gl_SubgroupID] = i;
  }
  barrier();
  uint bk = wg_key_[0], bi = wg_idx_[0];
  for (uint s = 1u; s < gl_NumSubgroups; ++s) {
    const uint ks = wg_key_[s], is = wg_idx_[s];
    if (ks > bk || (ks == bk && is < bi)) {
      bk = ks;
      bi = is;
    }
  }
  barrier();  // the slots are free again for the next call
  return uvec2(bk, bi);
}

float wg_sum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) wg_val_[gl_SubgroupID] = v;
  barrier();
  float s = wg_val_[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) s += wg_val_[i];
  barrier();
  return s;
}

float wg_max(float v) {
  v = subgroupMax(v);
  if (subgroupElect()) wg_val_[gl_SubgroupID] = v;
  barrier();
  float m = wg_val_[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) m = max(m, wg_val_[i]);
  barrier();
  return m;
}
