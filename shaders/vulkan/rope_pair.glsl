// A rotation's pairs (rope.comp, rope_heads.comp, mul_mv_k.comp's rotating variants): for element d of a
// head (d < n_rot), its partner's d, whether it is the pair's first, and the index of its (cos, sin)
// pair in the rotation table. NeoX pairs d with d + n_rot / 2; the normal form pairs 2i with 2i + 1.
struct RopePair {
  uint partner;
  bool first;
  uint i;
};

RopePair rope_pair(uint d, uint n_rot, bool neox) {
  RopePair r;
  if (neox) {
    const uint half_rot = n_rot / 2u;
    r.first = d < half_rot;
    r.i = r.first ? d : d - half_rot;
    r.partner = r.first ? d + half_rot : d - half_rot;
  } else {
    r.first = (d & 1u) == 0u;
    r.i = d >> 1;
    r.partner = r.first ? d + 1u : d - 1u;
  }
  return r;
}
