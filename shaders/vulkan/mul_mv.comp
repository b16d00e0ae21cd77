#version 450
//! variant f32 TYPE_F32
//! variant f16 TYPE_F16
//! variant q8_0 TYPE_Q8_0
//! variant q4_k TYPE_Q4_K
// Matrix-vector product for decode (graph Op::MatMul with few tokens): y[t][r] = W[r] . x[t] for
// every row r of a weight stored in one GGUF type (one variant per TYPE_* define), x in float. One
// workgroup per (row, token): its invocations take the row's blocks in turn, dequantize them in
// registers and multiply by x, then a shared-memory tree adds the partial sums. Reads each weight
// row once per token; rows are addressed in bytes, so any block size and alignment works.
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Wbuf { uint w[]; };
layout(std430, binding = 1) readonly buffer Xbuf { float x[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };
layout(push_constant) uniform Params {
  uint ncols;      // elements per row (a multiple of the type's block)
  uint nrows;
  uint row_bytes;  // bytes per stored row
} p;

shared float partial[128];

uint byte_at(uint off) { return (w[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }
uint u16_at(uint off) { return byte_at(off) | (byte_at(off + 1u) << 8); }
float f16_at(uint off) { return unpackHalf2x16(u16_at(off)).x; }
float i8_at(uint off) {
  const uint b = byte_at(off);
  return float(int(b) - int((b & 0x80u) << 1));
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.x, tok = gl_WorkGroupID.y;
  const uint base = row * p.row_bytes, xb = tok * p.ncols;
  float s = 0.0;
#if defined(TYPE_F32)
  for (uint i = lid; i < p.ncols; i += 128u) s += uintBitsToFloat(w[(base >> 2) + i]) * x[xb + i];
#elif defined(TYPE_F16)
  for (uint i = lid; i < p.ncols; i += 128u) s += f16_at(base + 2u * i) * x[xb + i];
#elif defined(TYPE_Q8_0)
  // 34-byte blocks: fp16 scale, 32 signed bytes.
  for (uint b = lid; b < p.ncols / 32u; b += 128u) {
    const uint off = base + b * 34u;
    float acc = 0.0;
    for (uint j = 0u; j < 32u; ++j) acc += i8_at(off + 2u + j) * x[xb + b * 32u + j];
    s += f16_at(off) * acc;
  }
#elif defined(TYPE_Q4_K)
  // 144-byte super-blocks of 256: fp16 d and dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes
  // of nibbles. Each invocation takes one 32-element sub-block j: x = d * scale_j * q - dmin * min_j;
  // element c*64 + h*32 + l is nibble h of byte c*32 + l (c = j / 2, h = j % 2).
  for (uint u = lid; u < (p.ncols / 256u) * 8u; u += 128u) {
    const uint b = u >> 3, j = u & 7u, c = j >> 1, h = j & 1u;
    const uint off = base + b * 144u, sc = off + 4u;
    uint scale, mn;
    if (j < 4u) {
      scale = byte_at(sc + j) & 63u;
      mn = byte_at(sc + j + 4u) & 63u;
    } else {
      scale = (byte_at(sc + j + 4u) & 15u) | ((byte_at(sc + j - 4u) >> 6) << 4);
      mn = (byte_at(sc + j + 4u) >> 4) | ((byte_at(sc + j) >> 6) << 4);
    }
    const float dl = f16_at(off) * float(scale), ml = f16_at(off + 2u) * float(mn);
    const uint xo = xb + b * 256u + c * 64u + h * 32u;
    float acc = 0.0, xsum = 0.0;
    for (uint l = 0u; l < 32u; ++l) {
      const float xv = x[xo + l];
      acc += float((byte_at(off + 16u + c * 32u + l) >> (4u * h)) & 15u) * xv;
      xsum += xv;
    }
    s += dl * acc - ml * xsum;
  }
#else
#error "define one TYPE_*"
#endif
  partial[lid] = s;
  barrier();
  for (uint stride = 64u; stride > 0u; stride >>= 1) {
    if (lid < stride) partial[lid] += partial[lid + stride];
    barrier();
  }
  if (lid == 0u) y[tok * p.nrows + row] = partial[0];
}
