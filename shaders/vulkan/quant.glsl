// Dequantization of GGUF weight rows, shared by the kernels that read weights (mul_mv, get_rows,
// mul_mm_q). The includer defines one TYPE_* (TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q4_0, TYPE_Q4_1,
// TYPE_Q5_0, TYPE_Q5_1, TYPE_Q8_0, TYPE_Q2_K, TYPE_Q3_K, TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K,
// TYPE_IQ4_NL, TYPE_IQ4_XS, TYPE_MXFP4) and gets:
//
//   binding 0            the weight's raw GGUF bytes, read as uint / uvec2 / uvec4 (no 8- or 16-bit
//                        storage needed). Rows start at any byte offset their block size allows; a
//                        few reads touch the whole 32-bit word holding a row's last byte, so the
//                        buffer must extend to a multiple of 4 bytes past the weight's end.
//   UE, UR               a row is cut into units of UE elements (4: F32, F16, BF16; 16: Q2_K..Q6_K;
//                        8: the rest): the piece one invocation decodes at a time, UR = UE / 4 runs
//                        of 4 consecutive columns. Units are laid out so that the invocations of a
//                        row's consecutive units read x in runs of at least 64 contiguous bytes per
//                        load (a warp touches at most 8 cache lines per vec4 load).
//   unit_load(rb, u, q, a, b)  unit u of the row whose bytes start at rb: run k holds columns
//                        unit_col(u, k) .. +3 with values a[k] * q[k] + b[k] (q: small integers or
//                        codebook entries, exact in float; a, b: the block's scale and offset), so a
//                        dot product can multiply by a once per run. b is only set where HAS_B is
//                        defined (the types with a min or offset per block).
//   quant_init()         call first thing in main(), in uniform control flow: fills the codebook of
//                        the IQ4 and MXFP4 types in shared memory (a barrier), nothing for the rest.
//
// The definition of every format is src/quant/dequantize.cpp; the values here are the same floats
// up to one rounding (a fused multiply-add for the types with an offset).
//
// Bytes to floats: a byte v placed in the mantissa of 2^23 (bits 0x4B0000vv) is the float 2^23 + v,
// so float(v) - bias is one OR and one subtract, both exact, with the format's bias folded in (no
// integer-to-float conversion, which runs at a fraction of the FMA rate on NVIDIA).
#extension GL_EXT_control_flow_attributes : enable

layout(std430, binding = 0) readonly restrict buffer Wbuf { uint w[]; };
layout(std430, binding = 0) readonly restrict buffer Wbuf2 { uvec2 w2[]; };
layout(std430, binding = 0) readonly restrict buffer Wbuf4 { uvec4 w4[]; };

const float kMagic = 8388608.0;  // 2^23

// The four bytes of v as floats, minus bias.
vec4 bytes_f(uint v, float bias) {
  return vec4(uintBitsToFloat((v & 0xffu) | 0x4b000000u), uintBitsToFloat(((v >> 8) & 0xffu) | 0x4b000000u),
              uintBitsToFloat(((v >> 16) & 0xffu) | 0x4b000000u), uintBitsToFloat((v >> 24) | 0x4b000000u)) -
         (kMagic + bias);
}

// 32 bits at any byte offset: the two words it straddles, funnel-shifted (a word read twice when it
// does not straddle, so nothing past the word holding the last byte is read).
uint w32(uint off) {
  const uint i = off >> 2, s = (off & 3u) << 3;
  const uint lo = w[i], hi = w[i + uint(s != 0u)];
  return (lo >> s) | ((hi << 1) << (31u - s));
}
// 16 bits at an even byte offset; 8 bits at any.
uint w16(uint off) { return (w[off >> 2] >> ((off & 2u) << 3)) & 0xffffu; }
uint w8(uint off) { return (w[off >> 2] >> ((off & 3u) << 3)) & 0xffu; }
float f16(uint h) { return unpackHalf2x16(h).x; }
// float(v) - bias for v < 2^23, by the same mantissa trick (scales and mins).
float u2f(uint v, float bias) { return uintBitsToFloat(v | 0x4b000000u) - (kMagic + bias); }
uint byte_of(uint v, uint i) { return (v >> (i << 3)) & 0xffu; }

#if defined(TYPE_IQ4_NL) || defined(TYPE_IQ4_XS) || defined(TYPE_MXFP4)
#define HAS_CODEBOOK
#if defined(CODEBOOK_AT)
#define codebook CODEBOOK_AT  // 16 floats of the includer's shared memory (declared before this file)
#else
shared float codebook[16];
#endif
// The element of each nibble of the low nibbles (shift 0) or high nibbles (shift 4) of v.
vec4 nibbles_cb(uint v, uint shift) {
  return vec4(codebook[(v >> shift) & 15u], codebook[(v >> (shift + 8u)) & 15u], codebook[(v >> (shift + 16u)) & 15u],
              codebook[(v >> (shift + 24u)) & 15u]);
}
#endif

void quant_init() {
#if defined(TYPE_IQ4_NL) || defined(TYPE_IQ4_XS)
  // kIQ4NLValues
  const float kValues[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0,
                                      53.0, 69.0, 89.0, 113.0);
#elif defined(TYPE_MXFP4)
  // kMXFP4Values: E2M1, doubled
  const float kValues[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0,
                                      -12.0);
#endif
#if defined(HAS_CODEBOOK)
  if (gl_LocalInvocationIndex < 16u) codebook[gl_LocalInvocationIndex] = kValues[gl_LocalInvocationIndex];
  barrier();
#endif
}

// ---- Geometry: QK elements and BLOCK_BYTES bytes per block, UE elements per unit. ----
#if defined(TYPE_F32)
#define QK 4u
#define BLOCK_BYTES 16u
#define UE 4u
#elif defined(TYPE_F16) || defined(TYPE_BF16)
#define QK 4u
#define BLOCK_BYTES 8u
#define UE 4u
#elif defined(TYPE_Q4_0) || defined(TYPE_IQ4_NL)
#define QK 32u
#define BLOCK_BYTES 18u
#define UE 8u
#elif defined(TYPE_Q4_1)
#define QK 32u
#define BLOCK_BYTES 20u
#define UE 8u
#define HAS_B
#elif defined(TYPE_Q5_0)
#define QK 32u
#define BLOCK_BYTES 22u
#define UE 8u
#elif defined(TYPE_Q5_1)
#define QK 32u
#define BLOCK_BYTES 24u
#define UE 8u
#define HAS_B
#elif defined(TYPE_Q8_0)
#define QK 32u
#define BLOCK_BYTES 34u
#define UE 8u
#elif defined(TYPE_MXFP4)
#define QK 32u
#define BLOCK_BYTES 17u
#define UE 8u
#elif defined(TYPE_Q2_K)
#define QK 256u
#define BLOCK_BYTES 84u
#define UE 16u
#define HAS_B
#elif defined(TYPE_Q3_K)
#define QK 256u
#define BLOCK_BYTES 110u
#define UE 16u
#elif defined(TYPE_Q4_K)
#define QK 256u
#define BLOCK_BYTES 144u
#define UE 16u
#define HAS_B
#elif defined(TYPE_Q5_K)
#define QK 256u
#define BLOCK_BYTES 176u
#define UE 16u
#define HAS_B
#elif defined(TYPE_Q6_K)
#define QK 256u
#define BLOCK_BYTES 210u
#define UE 16u
#elif defined(TYPE_IQ4_XS)
#define QK 256u
#define BLOCK_BYTES 136u
#define UE 8u
#else
#error "define one TYPE_*"
#endif
#define UR (UE / 4u)
#define UPB (QK / UE)  // units per block

// First column of run k of unit u.
uint unit_col(uint u, uint k) {
  const uint base = (u / UPB) * QK, j = u % UPB;
#if defined(TYPE_F32) || defined(TYPE_F16) || defined(TYPE_BF16) || defined(TYPE_Q8_0)
  // Consecutive runs (Q8_0: byte i of qs is element i).
  return u * UE + 4u * k;
#elif defined(TYPE_Q4_0) || defined(TYPE_Q4_1) || defined(TYPE_Q5_0) || defined(TYPE_Q5_1) || \
    defined(TYPE_IQ4_NL) || defined(TYPE_MXFP4)
  // Byte i of qs holds elements i (low nibble) and i + 16 (high): unit j = bytes 4j..4j+3.
  return base + 4u * j + 16u * k;
#elif defined(TYPE_Q2_K) || defined(TYPE_Q3_K)
  // Byte n*32 + h*16 + l of qs holds element n*128 + k*32 + h*16 + l in bits 2k; unit j = n, h and
  // bytes l0..l0+3.
  const uint n = j >> 3, h = (j >> 2) & 1u, l0 = (j & 3u) << 2;
  return base + n * 128u + k * 32u + h * 16u + l0;
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  // Byte c*32 + l of qs holds element c*64 + l (low nibble) and c*64 + 32 + l (high); unit j = c and
  // the words at bytes 4i and 16 + 4i (i = j & 3, so that the four units of a c read x in runs of 64
  // bytes); runs: low nibbles of the two words, then the high ones.
  const uint c = j >> 2, i = j & 3u;
  return base + c * 64u + (k >> 1) * 32u + (k & 1u) * 16u + 4u * i;
#elif defined(TYPE_Q6_K)
  // ql byte n*64 + (k&1)*32 + l holds element n*128 + k*32 + l (nibble k>>1), qh byte n*32 + l its
  // two high bits (at 2k); unit j = n and bytes l0..l0+3.
  const uint n = j >> 3, l0 = (j & 7u) << 2;
  return base + n * 128u + k * 32u + l0;
#elif defined(TYPE_IQ4_XS)
  // Sub-block s: qs byte 16s + i holds elements 32s + i (low nibble) and 32s + 16 + i (high); unit j =
  // s and the word at 4 * (j & 3), as in the 32-element formats.
  return base + (j >> 2) * 32u + 4u * (j & 3u) + 16u * k;
#endif
}

#if defined(TYPE_Q4_0) || defined(TYPE_Q5_0) || defined(TYPE_Q8_0) || defined(TYPE_IQ4_NL) || defined(TYPE_MXFP4)
// The 32-element formats whose blocks are not word-aligned, in two parts: the block's head
// (block_head) and a unit from its 4-byte chunks of quants (unit_from; QS_AT: the block byte where
// unit 0's quants begin, UB: quant bytes a unit). unit_load reads a unit's chunks with w32; a kernel
// that decodes several consecutive units of one block (SPAN_UNITS) reads the head once and the
// units' chunks as one run of whole words (a span of G units of Q5_0: 2 + G + 1 loads).
//   Q4_0, 18 bytes: fp16 d, 16 bytes of nibbles; x = d * (q - 8).
//   Q5_0, 22 bytes: fp16 d, 4 bytes qh (bit i: the fifth bit of element i), 16 bytes of nibbles;
//         x = d * (q - 16). Four bits of qh go to bit 4 of four bytes by a multiply
//         (h * 0x00204081 = h | h << 7 | h << 14 | h << 21).
//   Q8_0, 34 bytes: fp16 d, 32 signed bytes; x = d * q. XOR 0x80 makes a signed byte b the unsigned
//         b + 128.
//   IQ4_NL, 18 bytes: fp16 d, 16 bytes of nibbles indexing kIQ4NLValues; x = d * value.
//   MXFP4, 17 bytes: E8M0 exponent e, 16 bytes of nibbles indexing kMXFP4Values (E2M1, doubled);
//         x = 2^(e-127) / 2 * value (e < 2: a subnormal scale).
#define SPAN_UNITS
#if defined(TYPE_Q8_0)
#define QS_AT 2u
#define UB 8u
#elif defined(TYPE_Q5_0)
#define QS_AT 6u
#define UB 4u
#elif defined(TYPE_MXFP4)
#define QS_AT 1u
#define UB 4u
#else
#define QS_AT 2u
#define UB 4u
#endif
// The scale of the block at byte o and (Q5_0) its qh word: two loads (Q5_0 blocks start at even bytes).
void block_head(uint o, out float d, out uint qh) {
  qh = 0u;
#if defined(TYPE_MXFP4)
  const uint e = w8(o);
  d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
#elif defined(TYPE_Q5_0)
  const uint i = o >> 2, s = (o & 2u) << 3, lo = w[i], hi = w[i + 1u];
  d = f16((lo >> s) & 0xffffu);
  qh = s == 0u ? (lo >> 16) | (hi << 16) : hi;
#else
  d = f16(w16(o));
#endif
}
// Unit j of a block from its quant chunks (c0; Q8_0: c0, c1) and head, as unit_load's q and a.
void unit_from(uint j, uint c0, uint c1, float d, uint qh, out vec4 q[UR], out float a[UR]) {
  a[0] = a[1] = d;
#if defined(TYPE_Q8_0)
  q[0] = bytes_f(c0 ^ 0x80808080u, 128.0);
  q[1] = bytes_f(c1 ^ 0x80808080u, 128.0);
#elif defined(TYPE_Q5_0)
  const uint hl = ((((qh >> (4u * j)) & 15u) * 0x00204081u) & 0x01010101u) << 4;
  const uint hh = ((((qh >> (16u + 4u * j)) & 15u) * 0x00204081u) & 0x01010101u) << 4;
  q[0] = bytes_f((c0 & 0x0f0f0f0fu) | hl, 16.0);
  q[1] = bytes_f(((c0 >> 4) & 0x0f0f0f0fu) | hh, 16.0);
#elif defined(TYPE_Q4_0)
  q[0] = bytes_f(c0 & 0x0f0f0f0fu, 8.0);
  q[1] = bytes_f((c0 >> 4) & 0x0f0f0f0fu, 8.0);
#else
  q[0] = nibbles_cb(c0, 0u);
  q[1] = nibbles_cb(c0, 4u);
#endif
}
#endif

// Unit u of the row at byte rb: run k = a[k] * q[k] (+ b[k] with HAS_B).
void unit_load(uint rb, uint u, out vec4 q[UR], out float a[UR], out float b[UR]) {
  const uint j = u % UPB, o = rb + (u / UPB) * BLOCK_BYTES;  // o: the block's first byte
#if defined(TYPE_F32)
  q[0] = uintBitsToFloat(w4[o >> 4]);
  a[0] = 1.0;
#elif defined(TYPE_F16)
  const uvec2 v = w2[o >> 3];
  q[0] = vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y));
  a[0] = 1.0;
#elif defined(TYPE_BF16)
  const uvec2 v = w2[o >> 3];
  q[0] = uintBitsToFloat(uvec4(v.x << 16, v.x & 0xffff0000u, v.y << 16, v.y & 0xffff0000u));
  a[0] = 1.0;
#elif defined(SPAN_UNITS)
  // Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4: block_head and unit_from above.
  float d;
  uint qh;
  block_head(o, d, qh);
  const uint c = o + QS_AT + UB * j;
#if defined(TYPE_Q8_0)
  unit_from(j, w32(c), w32(c + 4u), d, qh, q, a);
#else
  unit_from(j, w32(c), 0u, d, qh, q, a);
#endif
#elif defined(TYPE_Q4_1)
  // 20 bytes: fp16 d and m, 16 bytes of nibbles; x = d * q + m.
  const vec2 dm = unpackHalf2x16(w[o >> 2]);
  const uint qs = w[(o >> 2) + 1u + j];
  q[0] = bytes_f(qs & 0x0f0f0f0fu, 0.0);
  q[1] = bytes_f((qs >> 4) & 0x0f0f0f0fu, 0.0);
  a[0] = a[1] = dm.x;
  b[0] = b[1] = dm.y;
#elif defined(TYPE_Q5_1)
  // 24 bytes: fp16 d and m, 4 bytes qh (bit i: the fifth bit of element i), 16 bytes of nibbles;
  // x = d * q + m. Four bits of qh go to bit 4 of four bytes by a multiply (as Q5_0's in unit_from).
  const uvec2 dmh = w2[o >> 3];  // 24-byte blocks: 8-aligned
  const uint qh = dmh.y, qs = w[(o >> 2) + 2u + j];
  const vec2 dm = unpackHalf2x16(dmh.x);
  a[0] = a[1] = dm.x;
  b[0] = b[1] = dm.y;
  const uint hl = ((((qh >> (4u * j)) & 15u) * 0x00204081u) & 0x01010101u) << 4;
  const uint hh = ((((qh >> (16u + 4u * j)) & 15u) * 0x00204081u) & 0x01010101u) << 4;
  q[0] = bytes_f((qs & 0x0f0f0f0fu) | hl, 0.0);
  q[1] = bytes_f(((qs >> 4) & 0x0f0f0f0fu) | hh, 0.0);
#elif defined(TYPE_Q2_K)
  // 84 bytes: 16 scale bytes (low nibble: scale, high: min, per 16 elements), 64 bytes of 2-bit q,
  // fp16 d and dmin; x = d * (sc & 15) * q - dmin * (sc >> 4). Run k is sub-block 8n + 2k + h: scale
  // byte h + 2k of the 8 at 8n.
  const uint n = j >> 3, h = (j >> 2) & 1u, l0 = (j & 3u) << 2;
  const uint ob = o >> 2;  // 84-byte blocks: 4-aligned
  const uint qs = w[ob + 4u + n * 8u + h * 4u + (l0 >> 2)];
  const uint sc01 = w[ob + n * 2u], sc23 = w[ob + n * 2u + 1u];
  const vec2 dd = unpackHalf2x16(w[ob + 20u]);
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const uint sc = byte_of(k < 2u ? sc01 : sc23, h + 2u * (k & 1u));
    q[k] = bytes_f((qs >> (2u * k)) & 0x03030303u, 0.0);
    a[k] = dd.x * u2f(sc & 15u, 0.0);
    b[k] = -(dd.y * u2f(sc >> 4, 0.0));
  }
#elif defined(TYPE_Q3_K)
  // 110 bytes: hmask[32] (bit 4n+k of byte h*16+l: the third bit), 64 bytes of 2-bit q, 12 bytes of
  // packed 6-bit scales, fp16 d; x = d * (s - 32) * (q - 4 * !high). Scale i (0..15) is the nibble
  // (i >> 3) of byte (i & 7) of the first 8, with 2 high bits from byte 8 + (i & 3) at 2 * (i >> 2).
  const uint n = j >> 3, h = (j >> 2) & 1u, l0 = (j & 3u) << 2;
  const uint qs = w32(o + 32u + n * 32u + h * 16u + l0), hm = w32(o + h * 16u + l0);
  const uint s0 = w32(o + 96u), s1 = w32(o + 100u), s2 = w32(o + 104u);
  const float d = f16(w16(o + 108u));
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const uint i = 8u * n + 2u * k + h, g = i >> 2, bi = i & 3u;
    const uint lo4 = (((g & 1u) != 0u ? s1 : s0) >> (8u * bi + 4u * (g >> 1))) & 15u;
    const uint hi2 = (s2 >> (8u * bi + 2u * g)) & 3u;
    q[k] = bytes_f(((qs >> (2u * k)) & 0x03030303u) | (((hm >> (4u * n + k)) & 0x01010101u) << 2), 4.0);
    a[k] = d * u2f(lo4 | (hi2 << 4), 32.0);
  }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  // Q4_K, 144 bytes: fp16 d and dmin, 12 bytes of packed 6-bit scales and mins (8 sub-blocks of 32),
  // 128 bytes of nibbles; x = d * s * q - dmin * m. Q5_K, 176 bytes: the same with qh[32] (bit 2c + h
  // of byte l: the fifth bit of element c*64 + h*32 + l) before the nibbles. Both are 16-aligned.
  const uint c = j >> 2, i = j & 3u;
  const uvec4 hdr = w4[o >> 4];  // d | dmin << 16, scale bytes 0..11
#if defined(TYPE_Q4_K)
  const uint qa = w[(o >> 2) + 4u + c * 8u + i], qb = w[(o >> 2) + 8u + c * 8u + i];
  const uint ha = 0u, hb = 0u, ga = 0u, gb = 0u;
#else
  const uint qa = w[(o >> 2) + 12u + c * 8u + i], qb = w[(o >> 2) + 16u + c * 8u + i];
  const uint qha = w[(o >> 2) + 4u + i], qhb = w[(o >> 2) + 8u + i];  // qh bytes 4i.., 16 + 4i..
  const uint ha = ((qha >> (2u * c)) & 0x01010101u) << 4, hb = ((qhb >> (2u * c)) & 0x01010101u) << 4;
  const uint ga = ((qha >> (2u * c + 1u)) & 0x01010101u) << 4, gb = ((qhb >> (2u * c + 1u)) & 0x01010101u) << 4;
#endif
  // Scales and mins of sub-blocks 2c and 2c + 1 (kquant_scale_min in src/quant/blocks.h) as the two
  // low bytes of sp and mp: 6 bits of bytes 2c.. (c < 2), or 4 bits of bytes 8 + 2c - 4.. with the top
  // two bits of bytes 2c - 4.. moved to bits 4-5.
  const uint sh = 16u * (c & 1u);
  const uint lo_s = (hdr.y >> sh) & 0x3f3fu, lo_m = (hdr.z >> sh) & 0x3f3fu;
  const uint hi_s = ((hdr.w >> sh) & 0x0f0fu) | ((hdr.y >> (sh + 2u)) & 0x3030u);
  const uint hi_m = ((hdr.w >> (sh + 4u)) & 0x0f0fu) | ((hdr.z >> (sh + 2u)) & 0x3030u);
  const uint sp = c < 2u ? lo_s : hi_s, mp = c < 2u ? lo_m : hi_m;
  const vec2 dd = unpackHalf2x16(hdr.x);
  a[0] = a[1] = dd.x * u2f(sp & 0xffu, 0.0);
  a[2] = a[3] = dd.x * u2f(sp >> 8, 0.0);
  b[0] = b[1] = -(dd.y * u2f(mp & 0xffu, 0.0));
  b[2] = b[3] = -(dd.y * u2f(mp >> 8, 0.0));
  q[0] = bytes_f((qa & 0x0f0f0f0fu) | ha, 0.0);
  q[1] = bytes_f((qb & 0x0f0f0f0fu) | hb, 0.0);
  q[2] = bytes_f(((qa >> 4) & 0x0f0f0f0fu) | ga, 0.0);
  q[3] = bytes_f(((qb >> 4) & 0x0f0f0f0fu) | gb, 0.0);
#elif defined(TYPE_Q6_K)
  // 210 bytes: ql[128] (low nibbles), qh[64] (2 high bits), 16 signed scales, fp16 d;
  // x = d * scale * (q - 32). Run k: nibble k >> 1 of the ql word at (k & 1) * 32, bits 2k of qh,
  // scale n*8 + 2k + l0/16.
  const uint n = j >> 3, l0 = (j & 7u) << 2;
  const uint qla = w32(o + n * 64u + l0), qlb = w32(o + n * 64u + 32u + l0), qh = w32(o + 128u + n * 32u + l0);
  const uint so = o + 192u + n * 8u + (l0 >> 4);
  const uint sc01 = w32(so), sc23 = w32(so + 4u);  // scales for k = 0, 1 at bytes 0, 2; 2, 3 likewise
  const float d = f16(w16(o + 208u));
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const uint lo = (((k & 1u) != 0u ? qlb : qla) >> (4u * (k >> 1))) & 0x0f0f0f0fu;
    q[k] = bytes_f(lo | (((qh >> (2u * k)) & 0x03030303u) << 4), 32.0);
    a[k] = d * u2f(byte_of(k < 2u ? sc01 : sc23, 2u * (k & 1u)) ^ 0x80u, 128.0);  // a signed byte
  }
#elif defined(TYPE_IQ4_XS)
  // 136 bytes: fp16 d, scales_h (2 high bits per sub-block), scales_l[4] (a nibble per sub-block),
  // 128 bytes of nibbles indexing kIQ4NLValues; x = d * (ls - 32) * value. 8-aligned.
  const uint s = j >> 2;
  const uvec2 hdr = w2[o >> 3];
  const uint qs = w[(o >> 2) + 2u + 4u * s + (j & 3u)];
  const uint ls = ((byte_of(hdr.y, s >> 1) >> (4u * (s & 1u))) & 15u) | (((hdr.x >> (16u + 2u * s)) & 3u) << 4);
  q[0] = nibbles_cb(qs, 0u);
  q[1] = nibbles_cb(qs, 4u);
  a[0] = a[1] = f16(hdr.x & 0xffffu) * u2f(ls, 32.0);
#endif
}
