// Shared by ZINC_RT's kernels (included, never built alone). Static: each kernel file its own copy
// (the host build links the files together). No device library: everything here is built from the
// AMDGPU builtins and plain arithmetic.

// An IEEE half's value from its 16 bits (exact: every half is a float).
static float f16_bits_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0u) {
    const float v = (float)m * 0x1p-24f;  // zero or subnormal
    return sign ? -v : v;
  }
  if (e == 31u) return as_float(sign | 0x7f800000u | (m << 13));
  return as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// The half at byte `off` of a block (2-byte aligned), as a float.
static float half_at(__global const uchar* blk, uint off) { return f16_bits_to_float((uint)blk[off] | ((uint)blk[off + 1u] << 8)); }

// Every work-item of the workgroup here, and its local-memory writes seen by the others.
static void workgroup_barrier(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// Q4_K: sub-block j's 6-bit scale (first) and min (second) (src/quant/blocks.h kquant_scale_min; the
// packed bytes from byte 4 of the block).
static uint2 q4_k_scale_min(__global const uchar* blk, uint j) {
  __global const uchar* sc = blk + 4;
  if (j < 4u) return (uint2)(sc[j] & 63u, sc[j + 4u] & 63u);
  return (uint2)((sc[j + 4u] & 0xfu) | ((sc[j - 4u] >> 6) << 4), (sc[j + 4u] >> 4) | ((sc[j] >> 6) << 4));
}

// Q4_K: element e's 4-bit code. Chunk e / 64 of 32 nibble bytes (from byte 16) holds it, the low
// nibble for the chunk's first 32 elements, the high one for the next 32; its sub-block is e / 32.
static uint q4_k_code(__global const uchar* blk, uint e) { return (blk[16u + (e / 64u) * 32u + e % 32u] >> (4u * ((e / 32u) & 1u))) & 0xfu; }

// Q6_K: element e's code minus 32, and the scale of its 16. Element e lies in half nn = e / 128, run
// kk = (e % 128) / 32 at l = e % 32: its low nibble in ql[nn * 64 + (kk & 1) * 32 + l] (the high nibble
// for kk >= 2), its two high bits in qh (byte 128 on) [nn * 32 + l] at 2 kk; its scale (byte 192 on)
// nn * 8 + 2 kk + l / 16.
static int q6_k_code(__global const uchar* blk, uint e) {
  const uint nn = e / 128u, kk = (e % 128u) / 32u, l = e % 32u;
  const int lo = (blk[nn * 64u + (kk & 1u) * 32u + l] >> (4u * (kk >> 1))) & 0xf, hi = (blk[128u + nn * 32u + l] >> (2u * kk)) & 3;
  return (lo | (hi << 4)) - 32;
}
static int q6_k_scale(__global const uchar* blk, uint e) {
  const uint nn = e / 128u, kk = (e % 128u) / 32u, l = e % 32u;
  return (int)(char)blk[192u + nn * 8u + 2u * kk + l / 16u];
}

// A float's IEEE half, rounded to nearest even (src/quant/fp16.cpp f32_to_fp16: NaN stays a quiet NaN,
// what rounds past the largest half is infinity, subnormals rounded from the whole mantissa).
static ushort float_to_f16_bits(float f) {
  const uint u = as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (ushort)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00u);
  if (a >= 0x38800000u) return (ushort)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
  if (a < 0x33000001u) return (ushort)sign;
  const uint shift = 126u - (a >> 23), mant = (a & 0x7fffffu) | 0x800000u, mid = 1u << (shift - 1u), rest = mant & ((1u << shift) - 1u);
  uint q = mant >> shift;
  if (rest > mid || (rest == mid && (q & 1u))) ++q;
  return (ushort)(sign | q);
}
