#version 450
// Q4_K matrix-vector product for one token (decode), a row per workgroup of 32 invocations: each
// invocation takes half a super-block (128 elements: 64 bytes of nibbles read as four 16-byte loads,
// plus the block's 16-byte header of d, dmin and the packed 6-bit scales), multiplies the nibbles by x
// per 32-element sub-block (sum q*x and sum x, then d*scale*sum(q x) - dmin*min*sum(x)), and the
// workgroup adds its invocations' sums (subgroup adds; shared memory only where a subgroup is smaller
// than the workgroup). Wide loads and no barriers on 32-wide subgroups: the weight streams at close to
// the memory's rate, which is what decode is made of.
//
// Bindings: 0 W (raw Q4_K blocks, rows of row_bytes, 16-byte aligned), 1 x (nblocks*256 floats as
// vec4), 2 y (nrows floats), 3 bias (nrows floats, read when has_bias). Grid: x*y >= nrows workgroups.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly restrict buffer W4 { uvec4 w4[]; };
layout(std430, binding = 1) readonly restrict buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) writeonly restrict buffer Y { float y[]; };
layout(std430, binding = 3) readonly restrict buffer Bias { float bias[]; };
layout(push_constant) uniform Params {
  uint nblocks;    // super-blocks per row
  uint nrows;
  uint row_bytes;  // 144 * nblocks
  uint has_bias;
} p;

shared float partial[32];

const float kMagic = 8388608.0;  // 2^23: a byte b in the mantissa of 2^23 is the float 2^23 + b

vec4 nibbles(uint v, uint shift) {
  const uint b = (v >> shift) & 0x0f0f0f0fu;
  return vec4(uintBitsToFloat((b & 0xffu) | 0x4b000000u), uintBitsToFloat(((b >> 8) & 0xffu) | 0x4b000000u),
              uintBitsToFloat(((b >> 16) & 0xffu) | 0x4b000000u), uintBitsToFloat((b >> 24) | 0x4b000000u)) - kMagic;
}

uint byte_at(uvec4 v, uint i) { return (v[i >> 2] >> (8u * (i & 3u))) & 0xffu; }

// Scale and min of sub-block j (0..7) from the 12 packed bytes at header bytes 4..15.
void scale_min(uvec4 hdr, uint j, out float sc, out float mn) {
  if (j < 4u) {
    sc = float(byte_at(hdr, 4u + j) & 63u);
    mn = float(byte_at(hdr, 8u + j) & 63u);
  } else {
    sc = float((byte_at(hdr, 8u + j) & 15u) | ((byte_at(hdr, j) >> 6) << 4));
    mn = float((byte_at(hdr, 8u + j) >> 4) | ((byte_at(hdr, 4u + j) >> 6) << 4));
  }
}

void main() {
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= p.nrows) return;  // uniform across the workgroup
  const uint lid = gl_LocalInvocationID.x;
  const uint row16 = row * (p.row_bytes >> 4);
  float acc = 0.0;
  for (uint half_i = lid; half_i < 2u * p.nblocks; half_i += 32u) {
    const uint blk = half_i >> 1, h = half_i & 1u;
    const uint b16 = row16 + blk * 9u;  // 144 bytes = 9 uvec4
    const uvec4 hdr = w4[b16];
    const vec2 dm = unpackHalf2x16(hdr.x);
    const uint x0 = (blk * 256u + h * 128u) >> 2;  // vec4 index of the half's first element
    // Chunk c (64 elements) of this half: bytes 32c'..32c'+31 of qs (c' = 2h + c), low nibbles are
    // elements 0..31 of the chunk, high nibbles 32..63.
    [[unroll]] for (uint c = 0u; c < 2u; ++c) {
      const uvec4 qa = w4[b16 + 1u + (2u * h + c) * 2u], qb = w4[b16 + 2u + (2u * h + c) * 2u];
      const uint xc = x0 + c * 16u;
      float s_lo = 0.0, s_hi = 0.0, x_lo = 0.0, x_hi = 0.0;
      [[unroll]] for (uint k = 0u; k < 4u; ++k) {
        const vec4 xl0 = x4[xc + k], xl1 = x4[xc + 4u + k];
        const vec4 xh0 = x4[xc + 8u + k], xh1 = x4[xc + 12u + k];
        s_lo += dot(nibbles(qa[k], 0u), xl0) + dot(nibbles(qb[k], 0u), xl1);
        s_hi += dot(nibbles(qa[k], 4u), xh0) + dot(nibbles(qb[k], 4u), xh1);
        x_lo += dot(xl0 + xl1, vec4(1.0));
        x_hi += dot(xh0 + xh1, vec4(1.0));
      }
      const uint j = 2u * (2u * h + c);  // sub-blocks j (low nibbles) and j + 1 (high)
      float sc0, mn0, sc1, mn1;
      scale_min(hdr, j, sc0, mn0);
      scale_min(hdr, j + 1u, sc1, mn1);
      acc += dm.x * (sc0 * s_lo + sc1 * s_hi) - dm.y * (mn0 * x_lo + mn1 * x_hi);
    }
  }
  acc = subgroupAdd(acc);
  if (gl_NumSubgroups == 1u) {
    if (lid == 0u) y[row] = acc + (p.has_bias != 0u ? bias[row] : 0.0);
    return;
  }
  if (subgroupElect()) partial[gl_SubgroupID] = acc;
  barrier();
  if (lid == 0u) {
    float t = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) t += partial[i];
    y[row] = t + (p.has_bias != 0u ? bias[row] : 0.0);
  }
}
