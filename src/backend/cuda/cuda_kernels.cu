// The CUDA backend's kernels (declared in cuda_kernels.h). Weight blocks are decoded eight elements at
// a time (dec8): every block format splits into groups of eight consecutive elements that share one
// scale, so a group is a few byte loads and multiplies whatever the type. Products accumulate in
// float32; activations stay float32 throughout.
#include <cuda_fp16.h>
#include <mma.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_kernels.h"

namespace zinc::backend::cuda {

namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float half_bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t ld16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

__constant__ int8_t kIq4Table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
__constant__ int8_t kMxfp4Table[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

__device__ __forceinline__ float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return __uint_as_float(bits);
}

__device__ __forceinline__ void kquant_scale_min(int j, const uint8_t* q, int& s, int& m) {
  if (j < 4) {
    s = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    s = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Byte k of a word as a float, without an integer conversion (a quarter-rate instruction): the byte
// placed in the mantissa of 2^23, then 2^23 subtracted (exact).
__device__ __forceinline__ float byte_float(uint32_t word, int k) {
  return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u | static_cast<uint32_t>(k))) - 8388608.0f;
}
// Byte i (0..11) of three words, chosen by selects (an array indexed at run time would live in local memory).
__device__ __forceinline__ uint32_t byte_of(const uint32_t* w, int i) {
  const uint32_t word = i < 4 ? w[0] : i < 8 ? w[1] : w[2];
  return (word >> (8 * (i & 3))) & 0xff;
}

// Elements 8g .. 8g + 7 of a row of type T into v (the definitions of src/quant/dequantize.cpp).
template <int T>
__device__ __forceinline__ void dec8(const uint8_t* row, int64_t g, float* v) {
  if constexpr (T == kF32) {
    const float4* p = reinterpret_cast<const float4*>(row) + 2 * g;
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else if constexpr (T == kF16 || T == kBF16) {
    const uint4 u = reinterpret_cast<const uint4*>(row)[g];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == kF16) {
        v[2 * i] = half_bits(static_cast<uint16_t>(w[i] & 0xffff));
        v[2 * i + 1] = half_bits(static_cast<uint16_t>(w[i] >> 16));
      } else {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    }
  } else if constexpr (T == kQ4_0 || T == kQ4_1 || T == kQ5_0 || T == kQ5_1 || T == kQ8_0 || T == kIQ4_NL ||
                       T == kMXFP4) {
    constexpr int bytes = T == kQ4_0 || T == kIQ4_NL ? 18 : T == kQ4_1 ? 20 : T == kQ5_0 ? 22 : T == kQ5_1 ? 24 : T == kQ8_0 ? 34 : 17;
    const uint8_t* b = row + (g >> 2) * bytes;
    const int j = static_cast<int>(g & 3);  // elements 8j .. 8j + 7 of the block
    if constexpr (T == kQ8_0) {  // 34-byte blocks: 16-bit aligned
      const auto* h = reinterpret_cast<const uint16_t*>(b);
      const float d = half_bits(h[0]);
      for (int i = 0; i < 4; ++i) {
        const uint16_t two = h[1 + 4 * j + i];
        v[2 * i] = static_cast<float>(static_cast<int8_t>(two & 0xff)) * d;
        v[2 * i + 1] = static_cast<float>(static_cast<int8_t>(two >> 8)) * d;
      }
    } else if constexpr (T == kMXFP4) {
      const float d = e8m0_half(b[0]);
      const uint8_t* qs = b + 1 + 8 * (j & 1);
      for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(kMxfp4Table[(qs[i] >> (4 * (j >> 1))) & 0xf]) * d;
    } else if constexpr (T == kIQ4_NL) {
      const float d = half_bits(ld16(b));
      const uint8_t* qs = b + 2 + 8 * (j & 1);
      for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(kIq4Table[(qs[i] >> (4 * (j >> 1))) & 0xf]) * d;
    } else {
      const bool has_min = T == kQ4_1 || T == kQ5_1, five = T == kQ5_0 || T == kQ5_1;
      const float d = half_bits(ld16(b)), m = has_min ? half_bits(ld16(b + 2)) : 0.0f;
      const uint8_t* qs = b + (has_min ? 4 : 2) + (five ? 4 : 0) + 8 * (j & 1);
      const uint32_t qh = five ? ld32(b + (has_min ? 4 : 2)) : 0;
      for (int i = 0; i < 8; ++i) {
        int q = (qs[i] >> (4 * (j >> 1))) & 0xf;
        if (five) q |= static_cast<int>((qh >> (8 * j + i)) & 1) << 4;
        v[i] = has_min ? static_cast<float>(q) * d + m : static_cast<float>(q - (five ? 16 : 8)) * d;
      }
    }
  } else {
    constexpr int bytes = T == kQ2_K ? 84 : T == kQ3_K ? 110 : T == kQ4_K ? 144 : T == kQ5_K ? 176 : T == kQ6_K ? 210 : 136;
    const uint8_t* b = row + (g >> 5) * bytes;
    const int e0 = static_cast<int>(g & 31) * 8;  // the group's first element in the super-block
    if constexpr (T == kQ2_K || T == kQ3_K) {
      // e = n*128 + j*32 + h*16 + l: byte n*32 + h*16 + l of qs, bits 2j, sub-block 8n + 2j + h.
      const int n = e0 >> 7, j = (e0 >> 5) & 3, h = (e0 >> 4) & 1, l0 = e0 & 15;
      const uint8_t* qs = b + (T == kQ2_K ? 16 : 32) + n * 32 + h * 16 + l0;
      if constexpr (T == kQ2_K) {
        const float d = half_bits(ld16(b + 80)), dmin = half_bits(ld16(b + 82));
        const uint8_t sc = b[8 * n + 2 * j + h];
        const float dl = d * static_cast<float>(sc & 0xf), ml = dmin * static_cast<float>(sc >> 4);
        for (int i = 0; i < 8; ++i) v[i] = dl * static_cast<float>((qs[i] >> (2 * j)) & 3) - ml;
      } else {
        const uint8_t* p = b + 96;
        const int s = 8 * n + 2 * j + h, jj = s & 3;
        int sc;
        if (s < 4) sc = (p[jj] & 0xf) | (((p[8 + jj] >> 0) & 3) << 4);
        else if (s < 8) sc = (p[4 + jj] & 0xf) | (((p[8 + jj] >> 2) & 3) << 4);
        else if (s < 12) sc = (p[jj] >> 4) | (((p[8 + jj] >> 4) & 3) << 4);
        else sc = (p[4 + jj] >> 4) | (((p[8 + jj] >> 6) & 3) << 4);
        const float dl = half_bits(ld16(b + 108)) * static_cast<float>(sc - 32);
        const uint8_t* hm = b + h * 16 + l0;
        for (int i = 0; i < 8; ++i) {
          const int lo = (qs[i] >> (2 * j)) & 3, high = (hm[i] >> (4 * n + j)) & 1;
          v[i] = dl * static_cast<float>(lo - (high ? 0 : 4));
        }
      }
    } else if constexpr (T == kQ4_K || T == kQ5_K) {
      // e = c*64 + h*32 + l: nibble h of qs byte c*32 + l, sub-block 2c + h.
      const int c = e0 >> 6, h = (e0 >> 5) & 1, l0 = e0 & 31;
      int s, m;
      kquant_scale_min(2 * c + h, b + 4, s, m);
      const float dl = half_bits(ld16(b)) * static_cast<float>(s), ml = half_bits(ld16(b + 2)) * static_cast<float>(m);
      const uint8_t* qs = b + (T == kQ4_K ? 16 : 48) + c * 32 + l0;
      for (int i = 0; i < 8; ++i) {
        int q = (qs[i] >> (4 * h)) & 0xf;
        if constexpr (T == kQ5_K) q |= ((b[16 + l0 + i] >> (2 * c + h)) & 1) << 4;
        v[i] = dl * static_cast<float>(q) - ml;
      }
    } else if constexpr (T == kQ6_K) {
      // e = n*128 + k*32 + l: nibble k>>1 of ql byte n*64 + (k&1)*32 + l, 2 bits of qh byte n*32 + l at
      // 2k, sub-block n*8 + 2k + l/16.
      const int n = e0 >> 7, k = (e0 >> 5) & 3, l0 = e0 & 31;
      const float dl = half_bits(ld16(b + 208)) * static_cast<float>(static_cast<int8_t>(b[192 + n * 8 + 2 * k + l0 / 16]));
      const uint8_t* ql = b + n * 64 + (k & 1) * 32 + l0;
      const uint8_t* qh = b + 128 + n * 32 + l0;
      for (int i = 0; i < 8; ++i) {
        const int q = (((ql[i] >> (4 * (k >> 1))) & 0xf) | (((qh[i] >> (2 * k)) & 3) << 4)) - 32;
        v[i] = dl * static_cast<float>(q);
      }
    } else {  // IQ4_XS: element 32s + j of sub-block s (j < 16: low nibble of qs[16s + j], else high)
      const int s = e0 >> 5, half = (e0 >> 4) & 1, j0 = e0 & 15;
      const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xf) | (((ld16(b + 2) >> (2 * s)) & 3) << 4);
      const float dl = half_bits(ld16(b)) * static_cast<float>(ls - 32);
      const uint8_t* qs = b + 8 + 16 * s + j0;
      for (int i = 0; i < 8; ++i) v[i] = dl * static_cast<float>(kIq4Table[(qs[i] >> (4 * half)) & 0xf]);
    }
  }
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Programmatic dependent launch (sm_90 on): the kernels of a decode step launched with it may start
// while the previous one finishes; each waits (pdl_wait) before it reads what an earlier kernel wrote
// or writes anything, and lets the next one start (pdl_trigger) as soon as all its blocks run. The
// products load their first weights before waiting: weights do not depend on earlier kernels.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

bool g_pdl_allowed = true;  // set_programmatic_launch

bool pdl_on(Stream s) {
  static const bool sm90 = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return sm90 && g_pdl_allowed && s != nullptr;
}

// A launch that may overlap the previous kernel of the stream (pdl_on); the kernel must pdl_wait.
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, Stream s, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_on(s) ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(std::forward<A>(args))...);
}

// ---- embedding and products -------------------------------------------------------------------

template <int T>
__global__ void k_embed(const uint8_t* w, size_t row_bytes, const int32_t* ids, int64_t groups, float scale, float* out) {
  const int t = blockIdx.y;
  const uint8_t* row = w + static_cast<size_t>(ids[t]) * row_bytes;
  for (int64_t g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
    float v[8];
    dec8<T>(row, g, v);
    float* o = out + static_cast<int64_t>(t) * groups * 8 + g * 8;
    for (int i = 0; i < 8; ++i) o[i] = v[i] * scale;
  }
}

// A row split into pieces for the mat-vec kernels: a piece is kRuns runs of eight consecutive weights;
// a lane loads a piece's raw bytes (load), then decodes them into floats (decode). Q4_K and Q6_K take
// wide pieces (one load of packed codes for 16 or 32 weights, their scales once); other types decode
// a group of eight with dec8.
template <int T>
struct Piece {
  static constexpr int kRuns = 1;
  struct Raw {
    float v[8];
  };
  __device__ static int64_t count(int64_t cols) { return cols / 8; }
  __device__ static int64_t run(int64_t u, int) { return u * 8; }
  __device__ static void load(const uint8_t* row, int64_t u, Raw& r) { dec8<T>(row, u, r.v); }
  __device__ static void decode(const Raw& r, int64_t, float* w) {
    for (int i = 0; i < 8; ++i) w[i] = r.v[i];
  }
};

// Piece u: super-block u / 16, c = (u / 4) % 4, bytes l0 = 8 (u % 4) of that c's 32 code bytes:
// elements c*64 + l0 + i (low nibbles, sub-block 2c) and c*64 + 32 + l0 + i (high, sub-block 2c + 1).
template <>
struct Piece<kQ4_K> {
  static constexpr int kRuns = 2;
  struct Raw {
    uint32_t dm, sc[3];
    uint2 q;
  };
  __device__ static int64_t count(int64_t cols) { return cols / 256 * 16; }
  __device__ static int64_t run(int64_t u, int k) { return (u >> 4) * 256 + (static_cast<int>(u >> 2) & 3) * 64 + (u & 3) * 8 + k * 32; }
  __device__ static void load(const uint8_t* row, int64_t u, Raw& r) {
    const uint8_t* b = row + (u >> 4) * 144;
    const int c = static_cast<int>(u >> 2) & 3, l0 = static_cast<int>(u & 3) * 8;
    r.dm = *reinterpret_cast<const uint32_t*>(b);
    const auto* s32 = reinterpret_cast<const uint32_t*>(b + 4);
    r.sc[0] = s32[0], r.sc[1] = s32[1], r.sc[2] = s32[2];
    r.q = *reinterpret_cast<const uint2*>(b + 16 + c * 32 + l0);
  }
  // Sub-block j's 6-bit scale and min (kquant_scale_min on the three words).
  __device__ static void scale_min(const uint32_t* sc, int j, float& s, float& m) {
    uint32_t si, mi;
    if (j < 4) {
      si = byte_of(sc, j) & 63;
      mi = byte_of(sc, j + 4) & 63;
    } else {
      si = (byte_of(sc, j + 4) & 0xf) | ((byte_of(sc, j - 4) >> 6) << 4);
      mi = (byte_of(sc, j + 4) >> 4) | ((byte_of(sc, j) >> 6) << 4);
    }
    s = __uint_as_float(0x4B000000u | si) - 8388608.0f;
    m = __uint_as_float(0x4B000000u | mi) - 8388608.0f;
  }
  __device__ static void decode(const Raw& r, int64_t u, float* w) {
    const int c = static_cast<int>(u >> 2) & 3;
    float s0, m0, s1, m1;
    scale_min(r.sc, 2 * c, s0, m0);
    scale_min(r.sc, 2 * c + 1, s1, m1);
    const float d = half_bits(static_cast<uint16_t>(r.dm & 0xffff)), dmin = half_bits(static_cast<uint16_t>(r.dm >> 16));
    const float d0 = d * s0, n0 = dmin * m0, d1 = d * s1, n1 = dmin * m1;
    const uint32_t lo[2] = {r.q.x & 0x0F0F0F0Fu, r.q.y & 0x0F0F0F0Fu}, hi[2] = {(r.q.x >> 4) & 0x0F0F0F0Fu, (r.q.y >> 4) & 0x0F0F0F0Fu};
    for (int i = 0; i < 8; ++i) {
      w[i] = d0 * byte_float(lo[i / 4], i & 3) - n0;
      w[8 + i] = d1 * byte_float(hi[i / 4], i & 3) - n1;
    }
  }
};

// Piece u: super-block u / 8, n = (u / 4) % 2, l0 = 8 (u % 4): elements n*128 + k*32 + l0 + i for
// k = 0..3 (low nibbles of ql bytes n*64 + l0 + i for k = 0, of n*64 + 32 + l0 + i for k = 1, their
// high nibbles for k = 2, 3; bits 2k of qh byte n*32 + l0 + i). 210-byte blocks: 16-bit loads.
template <>
struct Piece<kQ6_K> {
  static constexpr int kRuns = 4;
  struct Raw {
    uint32_t lo0[2], lo1[2], hi[2], sc;
    uint16_t d;
  };
  __device__ static int64_t count(int64_t cols) { return cols / 256 * 8; }
  __device__ static int64_t run(int64_t u, int k) { return (u >> 3) * 256 + (static_cast<int>(u >> 2) & 1) * 128 + (u & 3) * 8 + k * 32; }
  __device__ static void load(const uint8_t* row, int64_t u, Raw& r) {
    const uint8_t* b = row + (u >> 3) * 210;
    const int n = static_cast<int>(u >> 2) & 1, l0 = static_cast<int>(u & 3) * 8;
    const auto* p0 = reinterpret_cast<const uint16_t*>(b + n * 64 + l0);
    const auto* p1 = reinterpret_cast<const uint16_t*>(b + n * 64 + 32 + l0);
    const auto* ph = reinterpret_cast<const uint16_t*>(b + 128 + n * 32 + l0);
    for (int h = 0; h < 2; ++h) {
      r.lo0[h] = p0[2 * h] | static_cast<uint32_t>(p0[2 * h + 1]) << 16;
      r.lo1[h] = p1[2 * h] | static_cast<uint32_t>(p1[2 * h + 1]) << 16;
      r.hi[h] = ph[2 * h] | static_cast<uint32_t>(ph[2 * h + 1]) << 16;
    }
    // The piece's four scales: bytes n*8 + 2k + l0/16 for k = 0..3.
    const auto* ps = reinterpret_cast<const uint16_t*>(b + 192 + n * 8);
    const int hb = 8 * (l0 / 16);
    r.sc = ((ps[0] >> hb) & 0xffu) | ((ps[1] >> hb) & 0xffu) << 8 | ((ps[2] >> hb) & 0xffu) << 16 | ((ps[3] >> hb) & 0xffu) << 24;
    r.d = *reinterpret_cast<const uint16_t*>(b + 208);
  }
  __device__ static void decode(const Raw& r, int64_t, float* w) {
    const float d = half_bits(r.d);
    float dk[4];
    for (int k = 0; k < 4; ++k) dk[k] = d * static_cast<float>(static_cast<int8_t>((r.sc >> (8 * k)) & 0xff));
    for (int h = 0; h < 2; ++h) {
      // Four 6-bit codes per word for each k: low or high nibbles of ql, two bits of qh above them.
      const uint32_t q[4] = {(r.lo0[h] & 0x0F0F0F0Fu) | ((r.hi[h] & 0x03030303u) << 4),
                             (r.lo1[h] & 0x0F0F0F0Fu) | (((r.hi[h] >> 2) & 0x03030303u) << 4),
                             ((r.lo0[h] >> 4) & 0x0F0F0F0Fu) | (((r.hi[h] >> 4) & 0x03030303u) << 4),
                             ((r.lo1[h] >> 4) & 0x0F0F0F0Fu) | (((r.hi[h] >> 6) & 0x03030303u) << 4)};
      for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 4; ++i) w[8 * k + 4 * h + i] = dk[k] * (byte_float(q[k], i) - 32.0f);
    }
  }
};

// One warp's share of R rows · NT activation rows (t < nt), added to acc[r][t]. Each lane loads B
// pieces of every row before decoding any (bytes in flight to cover the memory's latency); one
// token's activations are read once for all R rows.
template <int T, int NT, int R, int B>
__device__ __forceinline__ void rows_dot(const uint8_t* const* wr, int64_t cols, const float* const* xs, int nt, float (*acc)[NT],
                                         int start, int stride) {
  using P = Piece<T>;
  const int64_t pieces = P::count(cols);
  for (int64_t u0 = start; u0 < pieces; u0 += static_cast<int64_t>(stride) * B) {
    typename P::Raw raw[B][R];
#pragma unroll
    for (int j = 0; j < B; ++j) {
      if (u0 + j * stride >= pieces) break;
#pragma unroll
      for (int r = 0; r < R; ++r) P::load(wr[r], u0 + j * stride, raw[j][r]);
    }
#pragma unroll
    for (int j = 0; j < B; ++j) {
      const int64_t u = u0 + j * stride;
      if (u >= pieces) break;
      float xv[P::kRuns * 8];
      if constexpr (NT == 1) {
#pragma unroll
        for (int k = 0; k < P::kRuns; ++k) {
          const float4* xp = reinterpret_cast<const float4*>(xs[0] + P::run(u, k));
          const float4 a = xp[0], b = xp[1];
          xv[8 * k] = a.x, xv[8 * k + 1] = a.y, xv[8 * k + 2] = a.z, xv[8 * k + 3] = a.w;
          xv[8 * k + 4] = b.x, xv[8 * k + 5] = b.y, xv[8 * k + 6] = b.z, xv[8 * k + 7] = b.w;
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float w[P::kRuns * 8];
        P::decode(raw[j][r], u, w);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= nt) break;
          float sum = 0;
#pragma unroll
          for (int k = 0; k < P::kRuns; ++k) {
            if constexpr (NT == 1) {
              for (int i = 0; i < 8; ++i) sum += w[8 * k + i] * xv[8 * k + i];
            } else {
              const float4* xp = reinterpret_cast<const float4*>(xs[t] + P::run(u, k));
              const float4 a = xp[0], b = xp[1];
              sum += w[8 * k] * a.x + w[8 * k + 1] * a.y + w[8 * k + 2] * a.z + w[8 * k + 3] * a.w + w[8 * k + 4] * b.x +
                     w[8 * k + 5] * b.y + w[8 * k + 6] * b.z + w[8 * k + 7] * b.w;
            }
          }
          acc[r][t] += sum;
        }
      }
    }
  }
}

// One block per R output rows and NT tokens (each decoded weight used NT times, each token's
// activations for R rows); its warps split the row's pieces, their sums added in shared memory. With
// ids, one token per block and its rows' expert.
constexpr int kMvWarps = 4;
template <int T, int NT, int R>
__global__ void __launch_bounds__(kMvWarps * kWarp) k_mul_mv(const uint8_t* w, size_t row_bytes, size_t expert_bytes, int64_t first,
                                                             int64_t rows, int64_t cols, const float* x, int64_t xs, int x_div,
                                                             const int32_t* ids, int n, float* out, int64_t os, const float* bias,
                                                             int64_t bias_stride) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * R;
  const int t0 = blockIdx.y * NT;
  const int64_t e = ids ? ids[t0] : 0;
  const uint8_t* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = w + e * expert_bytes + (first + min(r0 + r, rows - 1)) * row_bytes;
  const float* xr[NT];
  for (int t = 0; t < NT; ++t) xr[t] = x + ((t0 + t) / x_div) * xs;
  float acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = 0;
  constexpr int kB = R > 1 ? (Piece<T>::kRuns > 2 ? 1 : 2) : 4;
  rows_dot<T, NT, R, kB>(wr, cols, xr, n - t0, acc, threadIdx.x, kMvWarps * kWarp);
  __shared__ float part[kMvWarps][R * NT];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < NT; ++t) {
      const float sum = warp_sum(acc[r][t]);
      if (lane == 0) part[warp][r * NT + t] = sum;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < R * NT; i += blockDim.x) {
    const int r = i / NT, t = i % NT;
    float sum = 0;
    for (int k = 0; k < kMvWarps; ++k) sum += part[k][i];
    if (t0 + t < n && r0 + r < rows) out[(t0 + t) * os + r0 + r] = sum + (bias ? bias[e * bias_stride + r0 + r] : 0.0f);
  }
}

// ---- decode against 8-bit activation codes (Q4_K, Q6_K) ----------------------------------------

// Activation rows as the CPU quantizes them for K-quant dot products (Q8_K): per 256 elements
// d = amax / 127 and codes round-to-nearest-even(x / d) in [-127, 127]; beside them the sum of each
// 32 codes (the Q4_K minimums' term). Layout (codes_layout): codes [n][cols], scales [n][cols / 256],
// sums [n][cols / 32].
struct Codes {
  int8_t* q;
  float* d;
  int16_t* s;
};
__host__ __device__ inline Codes codes_layout(void* base, int64_t n, int64_t cols) {
  auto* q = static_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(q + n * cols);
  return {q, d, reinterpret_cast<int16_t*>(d + n * (cols / 256))};
}

// The codes of one super-block held by a warp, eight values per lane (lane l: elements 8l .. 8l + 7),
// stored with its scale and its four-lane sums.
__device__ __forceinline__ void store_codes(const float* v, int64_t row, int64_t b, int64_t cols, const Codes& c) {
  const int lane = threadIdx.x % kWarp;
  float amax = 0;
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = warp_max(amax);
  const float dd = amax / 127;
  const float id = dd != 0 ? 1.0f / dd : 0.0f;
  uint32_t packed[2] = {0, 0};
  int sum = 0;
  for (int i = 0; i < 8; ++i) {
    const int q = static_cast<int>(rintf(fminf(127.0f, fmaxf(-127.0f, v[i] * id))));
    sum += q;
    packed[i / 4] |= (static_cast<uint32_t>(q) & 0xffu) << (8 * (i % 4));
  }
  *reinterpret_cast<uint2*>(c.q + row * cols + b * 256 + lane * 8) = make_uint2(packed[0], packed[1]);
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (lane % 4 == 0) c.s[row * (cols / 32) + b * 8 + lane / 4] = static_cast<int16_t>(sum);
  if (lane == 0) c.d[row * (cols / 256) + b] = dd;
}

// One warp per (row, super-block), a row read x_div rows of codes apart (expert slots of one token).
__global__ void k_quantize_q8k(const float* x, int64_t xs, int x_div, int64_t cols, Codes c) {
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.y, b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (b >= cols / 256) return;
  const float4* p = reinterpret_cast<const float4*>(x + (row / x_div) * xs + b * 256 + (threadIdx.x % kWarp) * 8);
  const float4 a = p[0], e = p[1];
  const float v[8] = {a.x, a.y, a.z, a.w, e.x, e.y, e.z, e.w};
  store_codes(v, row, b, cols, c);
}

__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) { return __dp4a(static_cast<int>(a), static_cast<int>(b), c); }

// Weight bytes are read once: loads that leave L1 to the activations' codes.
__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// A super-block is read by eight lanes (l8 = lane % 8), a warp's four groups on four consecutive
// super-blocks; a warp reads R rows at once, each step's activation codes loaded once for all of them.
// Q4_K: lane l8 holds code bytes 16 l8 .. 16 l8 + 15 (c = l8 / 2: low nibbles are elements
// 64c + 16(l8 % 2) + i of sub-block 2c, high nibbles the same 32 further, sub-block 2c + 1) and the
// 16-byte head (d, dmin, the twelve scale bytes). Offsets within a row are 32-bit.
struct Q4kLane {
  static constexpr int kBytes = 144;
  struct Lane {
    int act, sum, sh;  // the lane's codes (low half) and sub-block sums within a super-block; 16 (c % 2)
    bool low, first;   // c < 2; the lane that adds the minimums' term (l8 even)
    __device__ explicit Lane(int l8)
        : act((l8 >> 1) * 64 + (l8 & 1) * 16), sum(2 * (l8 >> 1)), sh(16 * ((l8 >> 1) & 1)), low(l8 < 4), first((l8 & 1) == 0) {}
  };
  // One token's activations for the lane's 32 elements of a super-block.
  struct Act {
    int4 lo, hi;
    int x0, x1;
    float dx;
  };
  __device__ static Act act(const Lane& ln, int b, const Codes& c, int cols, int t) {
    Act a;
    const int8_t* p = c.q + (t * cols + b * 256 + ln.act);
    a.lo = *reinterpret_cast<const int4*>(p);
    a.hi = *reinterpret_cast<const int4*>(p + 32);
    const uint32_t xs = *reinterpret_cast<const uint32_t*>(c.s + (t * (cols / 32) + b * 8 + ln.sum));
    a.x0 = static_cast<int16_t>(xs & 0xffff);
    a.x1 = static_cast<int16_t>(xs >> 16);
    a.dx = c.d[t * (cols / 256) + b];
    return a;
  }
  uint4 head, q;
  __device__ void load(const uint8_t* blk, int l8) {
    head = ld_stream(blk);
    q = ld_stream(blk + 16 + 16 * l8);
  }
  // The lane's part of the super-block's product with one token, as the CPU's dot product forms a
  // block (integer sums of scales times code products, and of minimums times code sums, then the two
  // float scales).
  __device__ float part(const Lane& ln, const Act& a) const {
    // Scales and minimums of sub-blocks 2c, 2c + 1 as the two low bytes of sp and mp.
    const uint32_t lo_s = (head.y >> ln.sh) & 0x3f3fu, lo_m = (head.z >> ln.sh) & 0x3f3fu;
    const uint32_t hi_s = ((head.w >> ln.sh) & 0x0f0fu) | ((head.y >> (ln.sh + 2)) & 0x3030u);
    const uint32_t hi_m = ((head.w >> (ln.sh + 4)) & 0x0f0fu) | ((head.z >> (ln.sh + 2)) & 0x3030u);
    const uint32_t sp = ln.low ? lo_s : hi_s, mp = ln.first ? (ln.low ? lo_m : hi_m) : 0u;
    const int sl = dp4a((q.w & 0x0F0F0F0Fu), a.lo.w,
                        dp4a((q.z & 0x0F0F0F0Fu), a.lo.z, dp4a((q.y & 0x0F0F0F0Fu), a.lo.y, dp4a(q.x & 0x0F0F0F0Fu, a.lo.x, 0))));
    const int shh = dp4a((q.w >> 4) & 0x0F0F0F0Fu, a.hi.w,
                         dp4a((q.z >> 4) & 0x0F0F0F0Fu, a.hi.z, dp4a((q.y >> 4) & 0x0F0F0F0Fu, a.hi.y, dp4a((q.x >> 4) & 0x0F0F0F0Fu, a.hi.x, 0))));
    const int isum = static_cast<int>(sp & 0xff) * sl + static_cast<int>(sp >> 8) * shh;
    const int imin = static_cast<int>(mp & 0xff) * a.x0 + static_cast<int>(mp >> 8) * a.x1;
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&head.x));
    return a.dx * (dm.x * static_cast<float>(isum) - dm.y * static_cast<float>(imin));
  }
};

// Q6_K: lane l8 holds elements 128n + 32k + l0 + i (n = l8 / 4, l0 = 8 (l8 % 4), k = 0..3, i < 8):
// low nibbles (k = 0, 1) and high nibbles (k = 2, 3) of ql bytes 64n + 32(k % 2) + l0 + i, bits 2k of
// qh byte 32n + l0 + i; scale byte 8n + 2k + l0 / 16. 210-byte blocks are only 2-byte aligned: each
// 8 bytes come from three aligned words (cached: the lanes of a block share their lines).
__device__ __forceinline__ uint2 ld8_aligned2(const uint8_t* p) {
  const auto* w = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  const uint32_t sh = (reinterpret_cast<uintptr_t>(p) & 2) * 8;
  const uint32_t w0 = __ldg(w), w1 = __ldg(w + 1), w2 = __ldg(w + 2);
  return make_uint2(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh));
}
struct Q6kLane {
  static constexpr int kBytes = 210;
  struct Lane {
    int act, hs;  // the lane's codes within a super-block; the shift of its scale bytes
    __device__ explicit Lane(int l8) : act((l8 >> 2) * 128 + (l8 & 3) * 8), hs(((l8 & 3) >> 1) * 8) {}
  };
  struct Act {
    uint2 k[4];
    float dx;
  };
  __device__ static Act act(const Lane& ln, int b, const Codes& c, int cols, int t) {
    Act a;
    const int8_t* p = c.q + (t * cols + b * 256 + ln.act);
    for (int k = 0; k < 4; ++k) a.k[k] = *reinterpret_cast<const uint2*>(p + 32 * k);
    a.dx = c.d[t * (cols / 256) + b];
    return a;
  }
  uint2 la, lb, qh, sc;
  uint32_t d;
  __device__ void load(const uint8_t* blk, int l8) {
    const int n = l8 >> 2, l0 = (l8 & 3) * 8;
    la = ld8_aligned2(blk + n * 64 + l0);
    lb = ld8_aligned2(blk + n * 64 + 32 + l0);
    qh = ld8_aligned2(blk + 128 + n * 32 + l0);
    sc = ld8_aligned2(blk + 192 + n * 8);
    d = __ldg(reinterpret_cast<const unsigned short*>(blk + 208));
  }
  __device__ float part(const Lane& ln, const Act& a) const {
    const uint32_t wa[2] = {la.x, la.y}, wb[2] = {lb.x, lb.y}, wh[2] = {qh.x, qh.y}, ws[2] = {sc.x, sc.y};
    int tot = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int dot = 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // Four codes minus 32 as signed bytes: nibble k / 2 of ql (a for even k, b for odd), two bits
        // of qh at 2k above them.
        const uint32_t l = k & 1 ? wb[h] : wa[h];
        const uint32_t code = ((k < 2 ? l : l >> 4) & 0x0F0F0F0Fu) | (((wh[h] >> (2 * k)) & 0x03030303u) << 4);
        dot = dp4a(__vsub4(code, 0x20202020u), h ? a.k[k].y : a.k[k].x, dot);
      }
      // Scale k: byte 2k + l0 / 16 of the eight (words 0, 1 hold k = 0, 1 and k = 2, 3).
      tot += static_cast<int8_t>((ws[k >> 1] >> (16 * (k & 1) + ln.hs)) & 0xff) * dot;
    }
    return a.dx * half_bits(static_cast<uint16_t>(d)) * static_cast<float>(tot);
  }
};

// A warp's share of R rows (each nsb super-blocks): super-blocks 4 (ks + S u) + lane / 8 for u = 0, 1,
// ...; U steps loaded before any is used (bytes in flight). c: the codes from row t0 on.
template <class L, int NT, int S, int R>
__device__ __forceinline__ void rows_codes(const uint8_t* const* rows, int nsb, int ks, const Codes& c, int cols, int nt, float (*acc)[NT]) {
  constexpr int U = sizeof(L) * R > 64 ? 1 : sizeof(L) * R > 32 ? 2 : 4;
  const int lane = threadIdx.x % kWarp, l8 = lane & 7;
  const typename L::Lane ln(l8);
  bool waited = false;
  for (int b0 = ks * 4 + lane / 8; b0 < nsb; b0 += 4 * S * U) {
    L raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * 4 * S;
      if (b < nsb) {
#pragma unroll
        for (int r = 0; r < R; ++r) raw[u][r].load(rows[r] + b * L::kBytes, l8);
      }
    }
    if (!waited) pdl_wait(), waited = true;  // the codes are the previous kernels' output
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * 4 * S;
      if (b >= nsb) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= nt) break;
        const typename L::Act a = L::act(ln, b, c, cols, t);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] += raw[u][r].part(ln, a);
      }
    }
  }
}

// Up to three products reading the same codes in one launch (q, k and v; gate and up), each segment
// its own weights, rows and output; with GLU, the first two segments (gate, up, the same rows) are
// computed by the same warps and combined into the first's output. Blocks of kMvWarps warps, S warps
// per group of RW rows (short rows in flight on more warps); NT tokens per block; with ids, one slot
// per block and its rows' expert.
struct MvSeg {
  const uint8_t* w;
  size_t row_bytes, expert_bytes;
  int64_t first, rows, os;
  float* out;
  const float* bias;
  int64_t bias_stride;
  int type;
  unsigned blocks;
};
struct MvArgs {
  MvSeg seg[3];
  int nseg;
  Codes c;
  int64_t cols;
  const int32_t* ids;
  int n;
  Glu glu;
};

template <int NT, int S, int RW, bool GLU>
__global__ void __launch_bounds__(kMvWarps * kWarp) k_mv_codes(const MvArgs a) {
  pdl_trigger();
  if (a.ids) pdl_wait();
  unsigned bx = blockIdx.x;
  int si = 0;
  while (si + 1 < a.nseg && bx >= a.seg[si].blocks) bx -= a.seg[si].blocks, ++si;
  const MvSeg& g = a.seg[si];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = (static_cast<int64_t>(bx) * (kMvWarps / S) + warp / S) * RW;
  const int ks = warp % S;
  const int t0 = blockIdx.y * NT, nt = min(NT, a.n - t0);
  const int64_t e = a.ids ? a.ids[t0] : 0;
  constexpr int P = GLU ? 2 : 1, R = RW * P;  // row i of product p: acc[p * RW + i]
  float acc[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = 0;
  if (r0 < g.rows) {
    const uint8_t* rows[R];
    for (int p = 0; p < P; ++p) {
      const MvSeg& gp = a.seg[GLU ? p : si];
      for (int i = 0; i < RW; ++i) rows[p * RW + i] = gp.w + e * gp.expert_bytes + (gp.first + min(r0 + i, g.rows - 1)) * gp.row_bytes;
    }
    const int cols = static_cast<int>(a.cols);
    const Codes c{a.c.q + static_cast<int64_t>(t0) * cols, a.c.d + t0 * (cols / 256), a.c.s + t0 * (cols / 32)};
    if (g.type == kQ4_K) rows_codes<Q4kLane, NT, S, R>(rows, cols / 256, ks, c, cols, nt, acc);
    else rows_codes<Q6kLane, NT, S, R>(rows, cols / 256, ks, c, cols, nt, acc);
  }
  pdl_wait();  // (again: warps with no rows, lanes with no super-blocks)
  __shared__ float part[kMvWarps][R * NT];
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < NT; ++t) {
      const float v = warp_sum(acc[i][t]);
      if (lane == 0) part[warp][i * NT + t] = v;
    }
  }
  if constexpr (S > 1) __syncthreads();
  else __syncwarp();
  if (ks != 0 || lane >= nt * RW) return;
  const int t = lane % NT, i = lane / NT;  // lane: token t of row r0 + i
  const int64_t r = r0 + i;
  if (t >= nt || r >= g.rows) return;
  float y[P];
  for (int p = 0; p < P; ++p) {
    float v = 0;
    for (int k = 0; k < S; ++k) v += part[warp + k][(p * RW + i) * NT + t];
    const MvSeg& gp = a.seg[GLU ? p : si];
    y[p] = v + (gp.bias ? gp.bias[e * gp.bias_stride + r] : 0.0f);
  }
  float out = y[0];
  if constexpr (GLU) {
    const float x = y[0];
    out = a.glu == Glu::GeGLU ? 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x))) * y[1]
                              : x / (1.0f + expf(-x)) * y[1];
  }
  g.out[(t0 + t) * g.os + r] = out;
}

// The launch shape: RW rows per warp (sharing each step's activation loads) and S warps per group of
// rows (each a share of the super-blocks), measured with zinc_cuda_matvec_bench on an H200 for one
// token: at least 4096 rows (counting expert slots), four rows a warp and two warps for rows of 4096
// columns or more (gate and up together: two rows of each, one warp); 1024 to 4096 rows, two rows and
// four warps; fewer, one row. Several tokens: one row a warp.
template <int NT, bool GLU>
void launch_mv_codes(Stream s, MvArgs& a, int split, int rows_per_warp) {
  const int P = GLU ? 1 : a.nseg;
  int64_t rows = 0;
  for (int i = 0; i < P; ++i) rows += a.seg[i].rows;
  const int64_t groups_y = (a.n + NT - 1) / NT;
  const int64_t nsb = a.cols / 256, work = rows * (a.ids ? groups_y : 1);
  int RW = 1, S = 1;
  if (work >= 4096) {
    RW = GLU ? 2 : 4;
    S = GLU || nsb < 16 ? 1 : 2;
  } else if (work >= 1024) {
    RW = 2;
    S = nsb >= 16 ? 4 : nsb >= 8 ? 2 : 1;
  } else {
    while (S < 4 && nsb / (2 * S) >= 8) S *= 2;
  }
  if (rows_per_warp > 0) RW = rows_per_warp;
  if (GLU && RW > 2) RW = 2;
  if (NT > 1 || (RW != 1 && RW != 2 && RW != 4)) RW = 1;
  if (split == 1 || split == 2 || split == 4) S = split;
  unsigned blocks = 0;
  for (int i = 0; i < a.nseg; ++i) {
    a.seg[i].blocks = static_cast<unsigned>((a.seg[i].rows + RW * (kMvWarps / S) - 1) / (RW * (kMvWarps / S)));
    if (i < P) blocks += a.seg[i].blocks;
  }
  if (GLU) a.nseg = 1;  // the second segment is read through seg[1] by the first's warps
  const dim3 grid(blocks, static_cast<unsigned>(groups_y)), block(kMvWarps * kWarp);
#define ZINC_MV(SS, RR) \
  if (S == SS && RW == RR) return launch(k_mv_codes<NT, SS, RR, GLU>, grid, block, s, a);
  ZINC_MV(1, 1) ZINC_MV(2, 1) ZINC_MV(4, 1)
  if constexpr (NT == 1) {
    ZINC_MV(1, 2) ZINC_MV(2, 2) ZINC_MV(4, 2)
    if constexpr (!GLU) { ZINC_MV(1, 4) ZINC_MV(2, 4) ZINC_MV(4, 4) }
  }
#undef ZINC_MV
}

void mv_codes(Stream s, MvArgs& a, const float* x, int64_t xs, int x_div, void* q8, bool q8_ready, int split, int rows_per_warp) {
  a.c = codes_layout(q8, a.n, a.cols);
  if (!q8_ready) {
    launch(k_quantize_q8k, dim3(static_cast<unsigned>((a.cols / 256 + 7) / 8), a.n), dim3(256), s, x, xs, x_div, a.cols, a.c);
  }
  const bool glu = a.glu != Glu::None;
  if (a.ids || a.n == 1) glu ? launch_mv_codes<1, true>(s, a, split, rows_per_warp) : launch_mv_codes<1, false>(s, a, split, rows_per_warp);
  else if (a.n == 2) glu ? launch_mv_codes<2, true>(s, a, split, 1) : launch_mv_codes<2, false>(s, a, split, 1);
  else if (a.n <= 4) glu ? launch_mv_codes<4, true>(s, a, split, 1) : launch_mv_codes<4, false>(s, a, split, 1);
  else glu ? launch_mv_codes<8, true>(s, a, split, 1) : launch_mv_codes<8, false>(s, a, split, 1);
}

// Tiles of 64 rows x 64 tokens over steps of 32 columns: each of the 256 threads decodes one group of
// eight weights and loads eight activations into shared memory, then computes 4 x 4 outputs.
constexpr int kTm = 64, kTn = 64, kTk = 32;
template <int T>
__global__ void __launch_bounds__(256) k_mul_mm(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                                                const float* x, int64_t xs, int n, float* out, int64_t os, const float* bias) {
  __shared__ float ws[kTk][kTm + 4];
  __shared__ float xsh[kTk][kTn + 4];
  const int tid = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTm;
  const int n0 = blockIdx.y * kTn;
  const int lr = tid / 4, lg = tid % 4;  // the row (token) and group this thread loads
  const int tr = tid / 16, tc = tid % 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < cols; k0 += kTk) {
    float v[8];
    if (m0 + lr < rows) dec8<T>(w + (m0 + lr) * row_bytes, k0 / 8 + lg, v);
    else for (int i = 0; i < 8; ++i) v[i] = 0;
    for (int i = 0; i < 8; ++i) ws[lg * 8 + i][lr] = v[i];
    if (n0 + lr < n) {
      const float4* xp = reinterpret_cast<const float4*>(x + static_cast<int64_t>(n0 + lr) * xs + k0 + lg * 8);
      const float4 a = xp[0], b = xp[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
      for (int i = 0; i < 8; ++i) v[i] = 0;
    }
    for (int i = 0; i < 8; ++i) xsh[lg * 8 + i][lr] = v[i];
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTk; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&ws[kk][tr * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&xsh[kk][tc * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int j = 0; j < 4; ++j) {
    const int t = n0 + tc * 4 + j;
    if (t >= n) break;
    for (int i = 0; i < 4; ++i) {
      const int64_t r = m0 + tr * 4 + i;
      if (r < rows) out[t * os + r] = acc[i][j] + (bias ? bias[r] : 0.0f);
    }
  }
}

// Prompts on tensor cores (quantized weights): tiles of 128 rows x TN tokens (128 or 64) over steps
// of 32 columns, weights decoded to f16 and activations rounded to f16 in shared memory, products
// accumulated in float32 by 16x16x16 matrix instructions (8 warps, each 32 rows x TN/2 tokens). The
// next step's weights and activations are read into registers while the current step's products run
// (two shared buffers, one barrier a step); the results leave through a per-warp 16 x 16 stage with
// the bias. Activations lose the bits f16 does not hold (relative 2^-11), as on the Vulkan backend's
// cooperative-matrix path; float weights keep k_mul_mm.
//
// Grouped (a mixture's prompt, g.order given): the expert slots sorted by expert (moe_group); block
// row y is tile y of the concatenated experts' tiles, its tokens slots order[base + j] of one expert
// (x row slot / x_div, out row slot), its weights that expert's.
struct TcGroups {
  const int32_t* order = nullptr;    // slots by expert
  const int32_t* offsets = nullptr;  // expert e's slots: order[offsets[e] .. offsets[e + 1])
  int n_expert = 0, x_div = 1;
  size_t expert_bytes = 0;
  int64_t first = 0, bias_stride = 0;
};
constexpr int kTcM = 128, kTcK = 32, kTcLd = 40;  // halves per shared row: 32 + 8
template <int T, int TN>
__global__ void __launch_bounds__(256) k_mul_mm_tc(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                                                   int64_t xs, int n, float* out, int64_t os, const float* bias, TcGroups g) {
  using namespace nvcuda;
  constexpr int FJ = TN / 32;  // fragments of 16 tokens per warp
  __shared__ __align__(32) half ws[2][kTcM][kTcLd];
  __shared__ __align__(32) half xh[2][TN][kTcLd];
  __shared__ int32_t slot_of[TN];
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTcM;
  int n0 = blockIdx.y * TN, count = n - n0;
  if (g.order) {
    // Tile blockIdx.y of the experts' tiles in order.
    int tile = blockIdx.y, e = 0;
    for (; e < g.n_expert; ++e) {
      const int c = g.offsets[e + 1] - g.offsets[e], tiles = (c + TN - 1) / TN;
      if (tile < tiles) break;
      tile -= tiles;
    }
    if (e == g.n_expert) return;
    n0 = g.offsets[e] + tile * TN;
    count = g.offsets[e + 1] - n0;
    w += static_cast<int64_t>(e) * g.expert_bytes + g.first * static_cast<int64_t>(row_bytes);
    if (bias) bias += static_cast<int64_t>(e) * g.bias_stride;
  }
  count = min(count, TN);
  for (int j = tid; j < TN; j += blockDim.x) slot_of[j] = j >= count ? -1 : g.order ? g.order[n0 + j] : n0 + j;
  __syncthreads();
  const int wm = (warp / 2) * 32, wn = (warp % 2) * (TN / 2);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][FJ];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < FJ; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  // A step's share per thread: two groups of eight weights (rows r, r + 64 of group gi) and TN / 32
  // float4s of activations (tokens xt + 32 q, quarter xq).
  const int wr = tid / 4, wg = tid % 4, xt = tid / 8, xq = tid % 8;
  constexpr int XQ = TN / 32;
  int64_t xrow[XQ];
#pragma unroll
  for (int q = 0; q < XQ; ++q) {
    const int slot = slot_of[xt + 32 * q];
    xrow[q] = slot < 0 ? -1 : static_cast<int64_t>(slot / g.x_div) * xs;
  }
  float v[2][8];
  float4 a[XQ];
  const auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = m0 + wr + 64 * h;
      if (r < rows) dec8<T>(w + r * row_bytes, k0 / 8 + wg, v[h]);
      else for (int i = 0; i < 8; ++i) v[h][i] = 0;
    }
#pragma unroll
    for (int q = 0; q < XQ; ++q) a[q] = xrow[q] >= 0 ? *reinterpret_cast<const float4*>(x + xrow[q] + k0 + xq * 4) : make_float4(0, 0, 0, 0);
  };
  const auto put = [&](int b) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 8; i += 2) *reinterpret_cast<half2*>(&ws[b][wr + 64 * h][wg * 8 + i]) = __floats2half2_rn(v[h][i], v[h][i + 1]);
#pragma unroll
    for (int q = 0; q < XQ; ++q) {
      *reinterpret_cast<half2*>(&xh[b][xt + 32 * q][xq * 4]) = __floats2half2_rn(a[q].x, a[q].y);
      *reinterpret_cast<half2*>(&xh[b][xt + 32 * q][xq * 4 + 2]) = __floats2half2_rn(a[q].z, a[q].w);
    }
  };
  fetch(0);
  put(0);
  __syncthreads();
  int cur = 0;
  for (int64_t k0 = 0; k0 < cols; k0 += kTcK) {
    const bool more = k0 + kTcK < cols;
    if (more) fetch(k0 + kTcK);
#pragma unroll
    for (int kk = 0; kk < kTcK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb[FJ];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &ws[cur][wm + 16 * i][kk], kTcLd);
#pragma unroll
      for (int j = 0; j < FJ; ++j) wmma::load_matrix_sync(fb[j], &xh[cur][wn + 16 * j][kk], kTcLd);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < FJ; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    if (more) put(cur ^ 1);
    __syncthreads();
    cur ^= 1;
  }
  // Each 16 x 16 result through the warp's stage (token-major), then written with the bias.
  float* stage = reinterpret_cast<float*>(&ws[0][0][0]) + warp * 256;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < FJ; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_col_major);  // stage[t * 16 + r]
      __syncwarp();
      for (int e = lane; e < 256; e += kWarp) {
        const int t = e / 16, rr = e % 16;
        const int slot = slot_of[wn + 16 * j + t];
        const int64_t r = m0 + wm + 16 * i + rr;
        if (slot >= 0 && r < rows) out[static_cast<int64_t>(slot) * os + r] = stage[e] + (bias ? bias[r] : 0.0f);
      }
      __syncwarp();
    }
  }
}

// A mixture's slots sorted by expert: counts, their prefix sums (offsets[0 .. n_expert]), then each
// slot placed after the earlier ones of its expert (the order within an expert does not matter: each
// slot's row of a product is computed alone). One block.
__global__ void __launch_bounds__(1024) k_moe_group(const int32_t* ids, int slots, int n_expert, int32_t* order, int32_t* offsets) {
  __shared__ int32_t cnt[1024];
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < slots; i += blockDim.x) atomicAdd(&cnt[ids[i]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0;
    for (int e = 0; e < n_expert; ++e) {
      const int c = cnt[e];
      offsets[e] = at;
      cnt[e] = at;
      at += c;
    }
    offsets[n_expert] = at;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < slots; i += blockDim.x) order[atomicAdd(&cnt[ids[i]], 1)] = i;
}

template <int T>
void launch_mul_mat(Stream s, const void* w, size_t row_bytes, size_t expert_bytes, int64_t first, int64_t rows, int64_t cols,
                    const float* x, int64_t xs, int x_div, const int32_t* ids, int n, float* out, int64_t os,
                    const float* bias, int64_t bias_stride, void* q8, bool q8_ready) {
  const auto* wb = static_cast<const uint8_t*>(w);
  if constexpr (T == kQ4_K || T == kQ6_K) {
    // One token per sequence (decode) or one per expert slot: against 8-bit codes.
    // Up to 8 tokens (decode of a few sequences), or expert slots: against 8-bit codes.
    if (q8 && (ids || n <= 8)) {
      MvArgs a{};
      a.seg[0] = {wb, row_bytes, expert_bytes, first, rows, os, out, bias, bias_stride, T, 0};
      a.nseg = 1;
      a.cols = cols;
      a.ids = ids;
      a.n = n;
      a.glu = Glu::None;
      mv_codes(s, a, x, xs, x_div, q8, q8_ready, 0, 0);
      return;
    }
  }
  const dim3 block(kMvWarps * kWarp);
  const auto row_blocks = [&](int r) { return static_cast<unsigned>((rows + r - 1) / r); };
  if (ids) {
    k_mul_mv<T, 1, 4><<<dim3(row_blocks(4), n), block, 0, s>>>(wb, row_bytes, expert_bytes, first, rows, cols, x, xs, x_div, ids, n,
                                                               out, os, bias, bias_stride);
  } else if (n > 8 && first == 0 && T != kF32 && T != kF16 && T != kBF16) {
    k_mul_mm_tc<T, 128><<<dim3(static_cast<unsigned>((rows + kTcM - 1) / kTcM), (n + 127) / 128), 256, 0, s>>>(wb, row_bytes, rows, cols,
                                                                                                      x, xs, n, out, os, bias, TcGroups{});
  } else if (n > 8 && first == 0) {
    k_mul_mm<T><<<dim3(static_cast<unsigned>((rows + kTm - 1) / kTm), (n + kTn - 1) / kTn), 256, 0, s>>>(wb, row_bytes, rows, cols,
                                                                                                      x, xs, n, out, os, bias);
  } else if (n >= 8) {
    k_mul_mv<T, 8, 1><<<dim3(row_blocks(1), (n + 7) / 8), block, 0, s>>>(wb, row_bytes, 0, first, rows, cols, x, xs, 1, nullptr, n, out,
                                                                         os, bias, 0);
  } else if (n >= 4) {
    k_mul_mv<T, 4, 1><<<dim3(row_blocks(1), (n + 3) / 4), block, 0, s>>>(wb, row_bytes, 0, first, rows, cols, x, xs, 1, nullptr, n, out,
                                                                         os, bias, 0);
  } else if (n == 2) {
    k_mul_mv<T, 2, 1><<<dim3(row_blocks(1), 1), block, 0, s>>>(wb, row_bytes, 0, first, rows, cols, x, xs, 1, nullptr, n, out, os, bias, 0);
  } else {
    k_mul_mv<T, 1, 4><<<dim3(row_blocks(4), n), block, 0, s>>>(wb, row_bytes, 0, first, rows, cols, x, xs, 1, nullptr, n, out, os, bias, 0);
  }
}

#define ZINC_CUDA_TYPES(X) \
  X(kF32) X(kF16) X(kBF16) X(kQ4_0) X(kQ4_1) X(kQ5_0) X(kQ5_1) X(kQ8_0) X(kQ2_K) X(kQ3_K) X(kQ4_K) X(kQ5_K) X(kQ6_K) \
  X(kIQ4_NL) X(kIQ4_XS) X(kMXFP4)

// ---- small ops ----------------------------------------------------------------------------------

__global__ void k_rms_norm(const float* x, const float* w, float* out, int64_t width, int64_t group, float eps, float offset) {
  // One block per (row, group).
  const int64_t groups = width / group;
  const int64_t row = blockIdx.x / groups, gi = blockIdx.x % groups;
  const float* xr = x + row * width + gi * group;
  float* o = out + row * width + gi * group;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) ss += xr[i] * xr[i];
  __shared__ float part[32];
  ss = warp_sum(ss);
  if (threadIdx.x % kWarp == 0) part[threadIdx.x / kWarp] = ss;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    float t = threadIdx.x < blockDim.x / kWarp ? part[threadIdx.x] : 0.0f;
    t = warp_sum(t);
    if (threadIdx.x == 0) part[0] = t;
  }
  __syncthreads();
  const float scale = 1.0f / sqrtf(part[0] / static_cast<float>(group) + eps);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) o[i] = w ? xr[i] * scale * (w[i] + offset) : xr[i] * scale;
}

// Rows whose width is a multiple of 256 (at most kNormWarps * kNormPer super-blocks): h = a (+ b),
// written to sum when given; out = h / rms(h) * (w + offset); with codes, out's activation codes as
// k_quantize_q8k makes them. One block of kNormWarps warps per row, warp i the super-blocks i,
// i + kNormWarps, ..., eight elements per lane held in registers between the passes.
constexpr int kNormWarps = 8, kNormPer = 8;
__global__ void __launch_bounds__(kNormWarps * kWarp) k_add_rms_norm(const float* a, const float* b, float* sum, const float* w,
                                                                     float* out, int64_t width, float eps, float offset, Codes c,
                                                                     bool codes) {
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t nsb = width / 256;
  float v[kNormPer][8];
  float ss = 0;
#pragma unroll
  for (int i = 0; i < kNormPer; ++i) {
    const int64_t sb = warp + i * kNormWarps;
    if (sb >= nsb) break;
    const int64_t at = row * width + sb * 256 + lane * 8;
    float4 x0 = *reinterpret_cast<const float4*>(a + at), x1 = *reinterpret_cast<const float4*>(a + at + 4);
    if (b) {
      const float4 y0 = *reinterpret_cast<const float4*>(b + at), y1 = *reinterpret_cast<const float4*>(b + at + 4);
      x0 = make_float4(x0.x + y0.x, x0.y + y0.y, x0.z + y0.z, x0.w + y0.w);
      x1 = make_float4(x1.x + y1.x, x1.y + y1.y, x1.z + y1.z, x1.w + y1.w);
    }
    if (sum) {
      *reinterpret_cast<float4*>(sum + at) = x0;
      *reinterpret_cast<float4*>(sum + at + 4) = x1;
    }
    v[i][0] = x0.x, v[i][1] = x0.y, v[i][2] = x0.z, v[i][3] = x0.w, v[i][4] = x1.x, v[i][5] = x1.y, v[i][6] = x1.z, v[i][7] = x1.w;
    for (int j = 0; j < 8; ++j) ss += v[i][j] * v[i][j];
  }
  __shared__ float part[kNormWarps];
  ss = warp_sum(ss);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  ss = 0;
  for (int k = 0; k < kNormWarps; ++k) ss += part[k];
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(width) + eps);
#pragma unroll
  for (int i = 0; i < kNormPer; ++i) {
    const int64_t sb = warp + i * kNormWarps;
    if (sb >= nsb) break;
    const int64_t col = sb * 256 + lane * 8;
    float o[8];
    for (int j = 0; j < 8; ++j) o[j] = w ? v[i][j] * scale * (w[col + j] + offset) : v[i][j] * scale;
    *reinterpret_cast<float4*>(out + row * width + col) = make_float4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<float4*>(out + row * width + col + 4) = make_float4(o[4], o[5], o[6], o[7]);
    if (codes) store_codes(o, row, sb, width, c);
  }
}

// One block per (row, head), a thread per rotated pair (and the dims past n_rot copied).
__global__ void k_rope(const float* x, float* out, const float* cs, int n_head, int head_dim, int n_rot, bool neox) {
  const int t = blockIdx.x / n_head, h = blockIdx.x % n_head;
  const int64_t at = (static_cast<int64_t>(t) * n_head + h) * head_dim;
  const float* xh = x + at;
  float* oh = out + at;
  const float* c = cs + static_cast<int64_t>(t) * n_rot;
  const int half = n_rot / 2;
  for (int pair = threadIdx.x; pair < half; pair += blockDim.x) {
    const int a = neox ? pair : 2 * pair, b = neox ? pair + half : 2 * pair + 1;
    const float cv = c[2 * pair], sv = c[2 * pair + 1], x0 = xh[a], x1 = xh[b];
    oh[a] = x0 * cv - x1 * sv;
    oh[b] = x0 * sv + x1 * cv;
  }
  for (int i = n_rot + threadIdx.x; i < head_dim; i += blockDim.x) oh[i] = xh[i];
}

// Heads of one or two activations (q and k) in one launch: each head optionally normalised (a norm
// over the head, times w + offset), then rotated by the step's table. One block per (head, row), its
// head staged in shared memory between the norm and the rotation (head_dim at most 1024).
__device__ __forceinline__ void store_kv(uint8_t* row, int64_t i, float v, int type) {
  if (type == kF32) reinterpret_cast<float*>(row)[i] = v;
  else reinterpret_cast<__half*>(row)[i] = __float2half_rn(v);
}

__global__ void __launch_bounds__(128) k_heads_norm_rope(HeadsArgs a) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.y;
  const int heads = a.part[0].n_head + (a.nparts > 1 ? a.part[1].n_head : 0);
  if (static_cast<int>(blockIdx.x) >= heads) {  // a head of v into the cache
    const int64_t hv = blockIdx.x - heads;
    const float* src = a.v + (static_cast<int64_t>(t) * a.v_heads + hv) * a.head_dim;
    uint8_t* row = a.vc + static_cast<size_t>(a.slots[t]) * a.row_bytes;
    for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) store_kv(row, hv * a.head_dim + i, src[i], a.kv_type);
    return;
  }
  int h = blockIdx.x, p = 0;
  if (h >= a.part[0].n_head) h -= a.part[0].n_head, p = 1;
  const HeadsPart& part = a.part[p];
  const int64_t at = (static_cast<int64_t>(t) * part.n_head + h) * a.head_dim;
  const float* x = part.in + at;
  __shared__ float v[1024];
  __shared__ float red[4];
  float ss = 0;
  for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
    const float e = x[i];
    v[i] = e;
    ss += e * e;
  }
  float scale = 1.0f;
  if (part.norm) {
    ss = warp_sum(ss);
    if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = ss;
    __syncthreads();
    ss = 0;
    for (int k = 0; k < static_cast<int>(blockDim.x / kWarp); ++k) ss += red[k];
    scale = 1.0f / sqrtf(ss / static_cast<float>(a.head_dim) + part.eps);
  } else {
    __syncthreads();
  }
  const auto normed = [&](int i) { return part.norm ? (part.w ? v[i] * scale * (part.w[i] + part.offset) : v[i] * scale) : v[i]; };
  float* o = part.out + at;
  const float* c = a.cs + static_cast<int64_t>(t) * a.n_rot;
  const int half = a.n_rot / 2;
  // The second part's heads (k) also into the cache row of the token's slot when kc is given.
  uint8_t* kv = p == 1 && a.kc ? a.kc + static_cast<size_t>(a.slots[t]) * a.row_bytes : nullptr;
  const int64_t kv_at = static_cast<int64_t>(h) * a.head_dim;
  for (int pair = threadIdx.x; pair < half; pair += blockDim.x) {
    const int i0 = a.neox ? pair : 2 * pair, i1 = a.neox ? pair + half : 2 * pair + 1;
    const float cv = c[2 * pair], sv = c[2 * pair + 1], x0 = normed(i0), x1 = normed(i1);
    const float y0 = x0 * cv - x1 * sv, y1 = x0 * sv + x1 * cv;
    o[i0] = y0;
    o[i1] = y1;
    if (kv) store_kv(kv, kv_at + i0, y0, a.kv_type), store_kv(kv, kv_at + i1, y1, a.kv_type);
  }
  for (int i = a.n_rot + threadIdx.x; i < a.head_dim; i += blockDim.x) {
    const float y = normed(i);
    o[i] = y;
    if (kv) store_kv(kv, kv_at + i, y, a.kv_type);
  }
}

__global__ void k_elementwise(Elementwise op, const float* a, const float* b, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = a[i], y = b[i];
    float r;
    switch (op) {
      case Elementwise::Add: r = x + y; break;
      case Elementwise::Mul: r = x * y; break;
      case Elementwise::SwiGLU: r = x / (1.0f + expf(-x)) * y; break;
      case Elementwise::GeGLU:
        r = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x))) * y;
        break;
      default: {
        const float g = fminf(x, limit), u = fminf(fmaxf(y, -limit), limit);
        r = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
      }
    }
    out[i] = r;
  }
}

__global__ void k_softcap(const float* x, float* out, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = cap * tanhf(x[i] / cap);
}

__global__ void k_sigmoid_mul(const float* a, const float* b, float* out, int64_t width, int64_t bw, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    out[i] = a[i] / (1.0f + expf(-b[t * bw + (bw == 1 ? 0 : c)]));
  }
}

__global__ void k_scale(const float* x, const float* w, bool one, float* out, int64_t width, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = x[i] * w[one ? 0 : i % width];
}

__global__ void k_copy_cols(const float* x, int64_t in_width, int64_t at, int64_t stride, int groups, float* out, int64_t out_width,
                            int64_t out_at, int64_t width, int64_t n) {
  const int64_t per_row = width * groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * per_row; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, c = i % per_row, gi = c / width, j = c % width;
    out[t * out_width + out_at + c] = x[t * in_width + gi * stride + at + j];
  }
}

__global__ void k_gather_rows(const float* x, const int32_t* rows, int64_t width, float* out) {
  const int64_t r = blockIdx.y;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < width; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[r * width + i] = x[static_cast<int64_t>(rows[r]) * width + i];
}

unsigned grid_for(int64_t n, int block = 256) {
  const int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

// ---- KV cache and attention ---------------------------------------------------------------------

// One block per (row, K or V): the row stored at its slot. Q8_0: a warp per block of 32 elements.
__global__ void k_kv_append(int kv_type, const float* k, const float* v, int64_t kw, const int32_t* slots, size_t row_bytes,
                            uint8_t* kc, uint8_t* vc) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x;
  const bool is_v = blockIdx.y == 1;
  const float* src = (is_v ? v : k) + static_cast<int64_t>(t) * kw;
  uint8_t* dst = (is_v ? vc : kc) + static_cast<size_t>(slots[t]) * row_bytes;
  if (kv_type == kF32) {
    for (int64_t i = threadIdx.x; i < kw; i += blockDim.x) reinterpret_cast<float*>(dst)[i] = src[i];
  } else if (kv_type == kF16) {
    for (int64_t i = threadIdx.x; i < kw; i += blockDim.x) reinterpret_cast<__half*>(dst)[i] = __float2half_rn(src[i]);
  } else {  // Q8_0, as the reference quantizer rounds: d = amax / 127, q = round(x / d) away from zero
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
    for (int64_t b = warp; b < kw / 32; b += warps) {
      const float x = src[b * 32 + lane];
      const float amax = warp_max(fabsf(x));
      const float d = amax / 127;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      uint8_t* blk = dst + b * 34;
      if (lane == 0) {
        const uint16_t h = __half_as_ushort(__float2half_rn(d));
        blk[0] = static_cast<uint8_t>(h & 0xff);
        blk[1] = static_cast<uint8_t>(h >> 8);
      }
      blk[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x * id)));
    }
  }
}

template <int KV>
__device__ __forceinline__ float kv_elem(const uint8_t* row, int i) {
  if constexpr (KV == kF32) return reinterpret_cast<const float*>(row)[i];
  else if constexpr (KV == kF16) return half_bits(reinterpret_cast<const uint16_t*>(row)[i]);
  else {
    const uint8_t* b = row + (i / 32) * 34;
    return half_bits(ld16(b)) * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
  }
}

// One block of kAttnWarps warps per (query head, row); each warp an online softmax over every
// kAttnWarps-th visible key, lane l holding elements l + 32 i of the head; the warps merged at the end.
constexpr int kAttnWarps = 4;
template <int P, int KV>
__global__ void __launch_bounds__(kAttnWarps * kWarp) k_attention(AttentionArgs a) {
  pdl_trigger();
  pdl_wait();
  const int h = blockIdx.x, r = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int group = a.n_head / a.n_head_kv, kvh = h / group, hd = a.head_dim;
  const int pos = a.pos[r];
  const int lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int32_t* table = a.tables + a.table_at[r];
  const float* q = a.q + static_cast<int64_t>(r) * a.q_stride + static_cast<int64_t>(h) * hd;
  float qv[P], acc[P];
  for (int i = 0; i < P; ++i) {
    const int c = lane + 32 * i;
    qv[i] = c < hd ? q[c] : 0.0f;
    acc[i] = 0;
  }
  float mx = -INFINITY, l = 0;
  const auto* kc = static_cast<const uint8_t*>(a.k);
  const auto* vc = static_cast<const uint8_t*>(a.v);
  const int base = kvh * hd;
  for (int j = lo + warp; j <= pos; j += kAttnWarps) {
    const size_t slot = static_cast<size_t>(table[j / kKvBlock]) * kKvBlock + j % kKvBlock;
    const uint8_t* kr = kc + slot * a.row_bytes;
    float dot = 0;
    for (int i = 0; i < P; ++i) {
      const int c = lane + 32 * i;
      if (c < hd) dot += qv[i] * kv_elem<KV>(kr, base + c);
    }
    float s = warp_sum(dot) * a.scale;
    if (a.softcap > 0) s = a.softcap * tanhf(s / a.softcap);
    const float m_new = fmaxf(mx, s);
    const float corr = expf(mx - m_new), p = expf(s - m_new);
    l = l * corr + p;
    const uint8_t* vr = vc + slot * a.row_bytes;
    for (int i = 0; i < P; ++i) {
      const int c = lane + 32 * i;
      acc[i] = acc[i] * corr + (c < hd ? p * kv_elem<KV>(vr, base + c) : 0.0f);
    }
    mx = m_new;
  }
  __shared__ float wm[kAttnWarps], wl[kAttnWarps];
  __shared__ float wacc[kAttnWarps][32 * P];
  if (lane == 0) {
    wm[warp] = mx;
    wl[warp] = l;
  }
  for (int i = 0; i < P; ++i) wacc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, wm[w]);
  const float sink = a.sinks ? a.sinks[h] : -INFINITY;
  M = fmaxf(M, sink);
  float L = a.sinks ? expf(sink - M) : 0.0f;
  float f[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M);
    L += wl[w] * f[w];
  }
  float* o = a.out + static_cast<int64_t>(r) * a.q_stride + static_cast<int64_t>(h) * hd;
  for (int c = threadIdx.x; c < hd; c += blockDim.x) {
    float sum = 0;
    for (int w = 0; w < kAttnWarps; ++w) sum += wacc[w][c] * f[w];
    o[c] = sum / L;
  }
}

template <int KV>
void launch_attention(Stream s, const AttentionArgs& a) {
  const dim3 grid(a.n_head, a.n);
  const int p = (a.head_dim + 31) / 32;
  if (p <= 1) launch(k_attention<1, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else if (p <= 2) launch(k_attention<2, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else if (p <= 4) launch(k_attention<4, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else if (p <= 8) launch(k_attention<8, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else launch(k_attention<16, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
}

// ---- mixture of experts -------------------------------------------------------------------------

// One warp per token: the routing of cpu_backend.cpp's moe() (same operations; the softmax's sum in
// another order), lane l holding experts l + 32 j; the top k chosen one at a time by a warp-wide
// argmax (larger weight first, the lower expert on ties).
__global__ void k_moe_route(float* logits, int n, int ne, int k, bool topk_first, bool norm, float logit_scale,
                            const float* router_b, const float* expert_scale, int32_t* ids, float* weights) {
  const int t = blockIdx.x, lane = threadIdx.x;
  if (t >= n) return;
  float* l = logits + static_cast<int64_t>(t) * ne;
  float mx = -INFINITY;
  for (int e = lane; e < ne; e += kWarp) {
    float v = l[e];
    if (logit_scale != 1.0f) v *= logit_scale;
    if (router_b) v += router_b[e];
    l[e] = v;
    mx = fmaxf(mx, v);
  }
  if (!topk_first) {
    mx = warp_max(mx);
    float sum = 0;
    for (int e = lane; e < ne; e += kWarp) sum += l[e] = expf(l[e] - mx);
    sum = warp_sum(sum);
    for (int e = lane; e < ne; e += kWarp) l[e] /= sum;
  }
  __syncwarp();
  __shared__ int sel[64];
  uint32_t taken = 0;  // bit j: expert lane + 32 j chosen
  for (int i = 0; i < k; ++i) {
    float bv = -INFINITY;
    int be = ne;
    for (int j = 0, e = lane; e < ne; ++j, e += kWarp) {
      if (taken >> j & 1u) continue;
      const float v = l[e];
      if (be == ne || v > bv) bv = v, be = e;  // e rises: ties keep the lower expert
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (oe < ne && (be == ne || ov > bv || (ov == bv && oe < be))) bv = ov, be = oe;
    }
    if (be % kWarp == lane) taken |= 1u << (be / kWarp);
    if (lane == 0) sel[i] = be;
  }
  __syncwarp();
  if (lane != 0) return;
  if (topk_first) {
    const float m0 = l[sel[0]];
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += l[sel[i]] = expf(l[sel[i]] - m0);
    for (int i = 0; i < k; ++i) l[sel[i]] /= sum;
  }
  float top = 0;
  for (int i = 0; i < k; ++i) top += l[sel[i]];
  // The slots in increasing expert order (the order the CPU sums them in).
  for (int i = 1; i < k; ++i)
    for (int j = i; j > 0 && sel[j - 1] > sel[j]; --j) {
      const int x = sel[j];
      sel[j] = sel[j - 1];
      sel[j - 1] = x;
    }
  for (int i = 0; i < k; ++i) {
    const int e = sel[i];
    const float wt = norm ? l[e] / top : l[e];
    ids[t * k + i] = e;
    weights[t * k + i] = expert_scale ? wt * expert_scale[e] : wt;
  }
}

__global__ void k_moe_combine(const float* y, const float* weights, int k, int64_t d, float* out) {
  const int t = blockIdx.y;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < d; j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += weights[t * k + i] * y[(static_cast<int64_t>(t) * k + i) * d + j];
    out[t * d + j] = sum;
  }
}

// ---- recurrent layers ---------------------------------------------------------------------------

// One thread per channel, the tokens in order.
__global__ void k_ssm_conv(const float* x, const float* w, float* state, float* out, int64_t width, int kernel, int n,
                           float* kept, size_t kept_stride) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= width) return;
  float win[8];  // the kernel - 1 earlier inputs, oldest first (kernels of up to 8 taps)
  for (int j = 0; j < kernel - 1; ++j) win[j] = state[j * width + c];
  for (int t = 0; t < n; ++t) {
    const float xt = x[static_cast<int64_t>(t) * width + c];
    float sum = 0;
    for (int j = 0; j < kernel - 1; ++j) sum += w[c * kernel + j] * win[j];
    sum += w[c * kernel + kernel - 1] * xt;
    out[static_cast<int64_t>(t) * width + c] = sum / (1.0f + expf(-sum));
    for (int j = 0; j + 1 < kernel - 1; ++j) win[j] = win[j + 1];
    if (kernel > 1) win[kernel - 2] = xt;
    if (kept) {
      for (int j = 0; j < kernel - 1; ++j) kept[t * kept_stride + j * width + c] = win[j];
    }
  }
  for (int j = 0; j < kernel - 1; ++j) state[j * width + c] = win[j];
}

__global__ void k_delta_gates(const float* a, const float* b, const float* A, const float* dt, int hv, int64_t n, float* g, float* beta) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * hv; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int h = static_cast<int>(i % hv);
    const float x = a[i] + dt[h];
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    g[i] = A[h] * softplus;
    beta[i] = 1.0f / (1.0f + expf(-b[i]));
  }
}

// One warp per column j of one v head's state S (dk x dv, row i: key dimension i); lane l holds rows
// l + 32 i. Per token: q and k L2-normalised (q also by 1/sqrt(dk)), S decayed by exp(g), then
// delta = beta (v_j - S[:, j] . k), S[:, j] += k delta, out_j = S[:, j] . q.
template <int P>
__global__ void k_delta_rule(DeltaArgs a) {
  const int hv = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int j = blockIdx.y * (blockDim.x / kWarp) + warp;
  if (j >= a.dv) return;
  const int hk = a.tiled ? hv % a.hk : hv / (a.hv / a.hk);
  const int dk = a.dk;
  float* S = a.state + static_cast<int64_t>(hv) * dk * a.dv;
  float s[P];
  for (int i = 0; i < P; ++i) {
    const int row = lane + 32 * i;
    s[i] = row < dk ? S[static_cast<int64_t>(row) * a.dv + j] : 0.0f;
  }
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  for (int t = 0; t < a.n; ++t) {
    const float* q = a.q + t * a.q_stride + static_cast<int64_t>(hk) * dk;
    const float* k = a.k + t * a.q_stride + static_cast<int64_t>(hk) * dk;
    float qv[P], kv[P], qq = 0, kk = 0;
    for (int i = 0; i < P; ++i) {
      const int row = lane + 32 * i;
      qv[i] = row < dk ? q[row] : 0.0f;
      kv[i] = row < dk ? k[row] : 0.0f;
      qq += qv[i] * qv[i];
      kk += kv[i] * kv[i];
    }
    const float qn = qscale / sqrtf(warp_sum(qq) + 1e-6f), kn = 1.0f / sqrtf(warp_sum(kk) + 1e-6f);
    const float decay = expf(a.g[static_cast<int64_t>(t) * a.hv + hv]), b = a.beta[static_cast<int64_t>(t) * a.hv + hv];
    float sk = 0;
    for (int i = 0; i < P; ++i) {
      s[i] *= decay;
      sk += s[i] * kv[i] * kn;
    }
    const float vj = a.v[t * a.v_stride + static_cast<int64_t>(hv) * a.dv + j];
    const float delta = (vj - warp_sum(sk)) * b;
    float o = 0;
    for (int i = 0; i < P; ++i) {
      s[i] += kv[i] * kn * delta;
      o += s[i] * qv[i] * qn;
    }
    o = warp_sum(o);
    if (lane == 0) a.out[t * a.v_stride + static_cast<int64_t>(hv) * a.dv + j] = o;
    if (a.kept) {
      float* K = a.kept + t * a.kept_stride + static_cast<int64_t>(hv) * dk * a.dv;
      for (int i = 0; i < P; ++i) {
        const int row = lane + 32 * i;
        if (row < dk) K[static_cast<int64_t>(row) * a.dv + j] = s[i];
      }
    }
  }
  for (int i = 0; i < P; ++i) {
    const int row = lane + 32 * i;
    if (row < dk) S[static_cast<int64_t>(row) * a.dv + j] = s[i];
  }
}

}  // namespace

bool weight_type_supported(int type) {
  switch (type) {
#define ZINC_CASE(T) case T:
    ZINC_CUDA_TYPES(ZINC_CASE)
#undef ZINC_CASE
    return true;
    default: return false;
  }
}

std::string last_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

void embed(Stream s, int type, const void* w, size_t row_bytes, const int32_t* ids, int64_t width, int n, float scale, float* out) {
  const dim3 grid(grid_for(width / 8), n);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (type) {
#define ZINC_CASE(T) \
  case T: k_embed<T><<<grid, 256, 0, s>>>(wb, row_bytes, ids, width / 8, scale, out); break;
    ZINC_CUDA_TYPES(ZINC_CASE)
#undef ZINC_CASE
    default: break;
  }
}

void mul_mat_id(Stream s, int type, const void* w, size_t row_bytes, size_t expert_bytes, int64_t first, int64_t rows, int64_t cols,
                const float* x, int64_t x_stride, int x_div, const int32_t* ids, int n, float* out, int64_t out_stride,
                const float* bias, int64_t bias_stride, void* q8, bool q8_ready) {
  switch (type) {
#define ZINC_CASE(T) \
  case T: launch_mul_mat<T>(s, w, row_bytes, expert_bytes, first, rows, cols, x, x_stride, x_div, ids, n, out, out_stride, bias, bias_stride, q8, q8_ready); break;
    ZINC_CUDA_TYPES(ZINC_CASE)
#undef ZINC_CASE
    default: break;
  }
}

void mul_mat(Stream s, int type, const void* w, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int n,
             float* out, int64_t out_stride, const float* bias, void* q8, bool q8_ready) {
  mul_mat_id(s, type, w, row_bytes, 0, 0, rows, cols, x, x_stride, 1, nullptr, n, out, out_stride, bias, 0, q8, q8_ready);
}

bool uses_codes(int type) { return type == kQ4_K || type == kQ6_K; }

void set_programmatic_launch(bool on) { g_pdl_allowed = on; }

void rms_norm(Stream s, const float* x, const float* w, float* out, int64_t width, int64_t group, int n, float eps, float offset) {
  const int64_t blocks = static_cast<int64_t>(n) * (width / group);
  const int threads = group >= 1024 ? 1024 : group >= 256 ? 256 : 64;
  k_rms_norm<<<static_cast<unsigned>(blocks), threads, 0, s>>>(x, w, out, width, group, eps, offset);
}

bool add_rms_norm_fits(int64_t width) { return width % 256 == 0 && width / 256 <= kNormWarps * kNormPer; }

void add_rms_norm(Stream s, const float* a, const float* b, float* sum, const float* w, float* out, int64_t width, int n, float eps,
                  float offset, void* q8) {
  const Codes c = q8 ? codes_layout(q8, n, width) : Codes{};
  launch(k_add_rms_norm, dim3(static_cast<unsigned>(n)), dim3(kNormWarps * kWarp), s, a, b, sum, w, out, width, eps, offset, c, q8 != nullptr);
}

void mul_mat_codes(Stream s, const Product* p, int count, int64_t cols, const float* x, int64_t x_stride, int x_div, const int32_t* ids,
                   int n, void* q8, bool q8_ready, Glu glu, int split, int rows_per_warp) {
  MvArgs a{};
  for (int i = 0; i < count; ++i) {
    a.seg[i] = {static_cast<const uint8_t*>(p[i].w), p[i].row_bytes, p[i].expert_bytes, p[i].first, p[i].rows, p[i].out_stride, p[i].out,
                p[i].bias, p[i].bias_stride, p[i].type, 0};
  }
  a.nseg = count;
  a.cols = cols;
  a.ids = ids;
  a.n = n;
  a.glu = glu;
  mv_codes(s, a, x, x_stride, x_div, q8, q8_ready, split, rows_per_warp);
}

void heads_norm_rope(Stream s, const HeadsArgs& a, int n) {
  const int heads = a.part[0].n_head + (a.nparts > 1 ? a.part[1].n_head : 0) + (a.kc ? a.v_heads : 0);
  launch(k_heads_norm_rope, dim3(static_cast<unsigned>(heads), static_cast<unsigned>(n)), dim3(a.head_dim >= 256 ? 128 : 64), s, a);
}

void rope(Stream s, const float* x, float* out, const float* cs, int n, int n_head, int head_dim, int n_rot, bool neox) {
  k_rope<<<n * n_head, 64, 0, s>>>(x, out, cs, n_head, head_dim, n_rot, neox);
}

void elementwise(Stream s, Elementwise op, const float* a, const float* b, float* out, int64_t n, float alpha, float limit) {
  k_elementwise<<<grid_for(n), 256, 0, s>>>(op, a, b, out, n, alpha, limit);
}

void softcap(Stream s, const float* x, float* out, int64_t n, float cap) { k_softcap<<<grid_for(n), 256, 0, s>>>(x, out, n, cap); }

void sigmoid_mul(Stream s, const float* a, const float* b, float* out, int64_t width, int64_t bw, int n) {
  k_sigmoid_mul<<<grid_for(width * n), 256, 0, s>>>(a, b, out, width, bw, width * n);
}

void scale(Stream s, const float* x, const float* w, bool one, float* out, int64_t width, int n) {
  k_scale<<<grid_for(width * n), 256, 0, s>>>(x, w, one, out, width, width * n);
}

void copy_cols(Stream s, const float* x, int64_t in_width, int64_t at, int64_t stride, int groups, float* out, int64_t out_width,
               int64_t out_at, int64_t width, int n) {
  k_copy_cols<<<grid_for(width * groups * n), 256, 0, s>>>(x, in_width, at, stride, groups, out, out_width, out_at, width, n);
}

void gather_rows(Stream s, const float* x, const int32_t* rows, int64_t width, int n, float* out) {
  k_gather_rows<<<dim3(grid_for(width), n), 256, 0, s>>>(x, rows, width, out);
}

void kv_append(Stream s, int kv_type, const float* k, const float* v, int64_t kv_width, int n, const int32_t* slots, size_t row_bytes,
               void* kc, void* vc) {
  launch(k_kv_append, dim3(n, 2), dim3(256), s, kv_type, k, v, kv_width, slots, row_bytes, static_cast<uint8_t*>(kc), static_cast<uint8_t*>(vc));
}

void attention(Stream s, const AttentionArgs& a) {
  if (a.kv_type == kF32) launch_attention<kF32>(s, a);
  else if (a.kv_type == kF16) launch_attention<kF16>(s, a);
  else launch_attention<kQ8_0>(s, a);
}

void moe_route(Stream s, float* logits, int n, int n_expert, int k, bool topk_first, bool norm, float logit_scale, const float* router_b,
               const float* expert_scale, int32_t* ids, float* weights) {
  k_moe_route<<<n, kWarp, 0, s>>>(logits, n, n_expert, k, topk_first, norm, logit_scale, router_b, expert_scale, ids, weights);
}

void moe_group(Stream s, const int32_t* ids, int slots, int n_expert, int32_t* order, int32_t* offsets) {
  k_moe_group<<<1, 1024, 0, s>>>(ids, slots, n_expert, order, offsets);
}

bool grouped_mul_mat_supported(int type) { return type != kF32 && type != kF16 && type != kBF16 && weight_type_supported(type); }

void grouped_mul_mat(Stream s, int type, const void* w, size_t row_bytes, size_t expert_bytes, int64_t first, int64_t rows, int64_t cols,
                     const float* x, int64_t x_stride, int x_div, const int32_t* order, const int32_t* offsets, int n_expert, int slots,
                     float* out, int64_t out_stride, const float* bias, int64_t bias_stride) {
  TcGroups g;
  g.order = order;
  g.offsets = offsets;
  g.n_expert = n_expert;
  g.x_div = x_div;
  g.expert_bytes = expert_bytes;
  g.first = first;
  g.bias_stride = bias_stride;
  // Tiles of 64 slots: an expert's last tile is partly empty, at most n_expert of them.
  const dim3 grid(static_cast<unsigned>((rows + kTcM - 1) / kTcM), static_cast<unsigned>((slots + 63) / 64 + n_expert));
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (type) {
#define ZINC_CASE(T) \
  case T: k_mul_mm_tc<T, 64><<<grid, 256, 0, s>>>(wb, row_bytes, rows, cols, x, x_stride, slots, out, out_stride, bias, g); break;
    ZINC_CUDA_TYPES(ZINC_CASE)
#undef ZINC_CASE
    default: break;
  }
}

void moe_combine(Stream s, const float* y, const float* weights, int n, int k, int64_t d, float* out) {
  k_moe_combine<<<dim3(grid_for(d), n), 256, 0, s>>>(y, weights, k, d, out);
}

void ssm_conv(Stream s, const float* x, const float* w, float* state, float* out, int64_t width, int kernel, int n, float* kept,
              size_t kept_stride) {
  k_ssm_conv<<<grid_for(width, 128), 128, 0, s>>>(x, w, state, out, width, kernel, n, kept, kept_stride);
}

void delta_gates(Stream s, const float* a, const float* b, const float* A, const float* dt_bias, int hv, int n, float* g, float* beta) {
  k_delta_gates<<<grid_for(static_cast<int64_t>(n) * hv), 256, 0, s>>>(a, b, A, dt_bias, hv, n, g, beta);
}

void delta_rule(Stream s, const DeltaArgs& a) {
  constexpr int warps = 4;
  const dim3 grid(a.hv, (a.dv + warps - 1) / warps);
  const int p = (a.dk + 31) / 32;
  if (p <= 1) k_delta_rule<1><<<grid, warps * kWarp, 0, s>>>(a);
  else if (p <= 2) k_delta_rule<2><<<grid, warps * kWarp, 0, s>>>(a);
  else if (p <= 4) k_delta_rule<4><<<grid, warps * kWarp, 0, s>>>(a);
  else k_delta_rule<8><<<grid, warps * kWarp, 0, s>>>(a);
}

}  // namespace zinc::backend::cuda
