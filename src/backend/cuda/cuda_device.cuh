// Device helpers shared by the CUDA kernel sources (cuda_kernels.cu: norms, rotations, routing;
// cuda_attention.cu: the KV cache and attention; cuda_recurrent.cu: recurrent layers; cuda_products.cu
// and cuda_codes.cu: the matrix products). Weight blocks are decoded eight elements at a time (dec8):
// every block format splits into groups of eight consecutive elements that share one scale, so a group
// is a few byte loads and multiplies whatever the type. Everything here has internal linkage except the
// programmatic-launch switch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_kernels.h"

namespace zinc::backend::cuda {

extern bool g_pdl_allowed;  // set_programmatic_launch

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

// Two halves of a 32-bit word (the lower first) as floats.
__device__ __forceinline__ void halves(uint32_t w, float* v) {
  v[0] = half_bits(static_cast<uint16_t>(w & 0xffff));
  v[1] = half_bits(static_cast<uint16_t>(w >> 16));
}
// Two Q8_0 codes of a 16-bit word (the lower first) times their block's scale d.
__device__ __forceinline__ void q8_pair(uint16_t two, float d, float* v) {
  v[0] = static_cast<float>(static_cast<int8_t>(two & 0xff)) * d;
  v[1] = static_cast<float>(static_cast<int8_t>(two >> 8)) * d;
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
        halves(w[i], v + 2 * i);
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
      for (int i = 0; i < 4; ++i) q8_pair(h[1 + 4 * j + i], d, v + 2 * i);
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

// The sum over each group of Width consecutive lanes (the whole warp by default), in every lane of it.
template <int Width = kWarp>
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = Width / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
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


// The device's multiprocessors (100 where the runtime does not say).
[[maybe_unused]] int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 100;
    }
    return v;
  }();
  return n;
}

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

// Asynchronous copies into shared memory (sm_80 on): 16 bytes through L2 only, or 16 and 4 bytes
// through L1 as well; a group of them closed, and a wait until at most N groups are still in flight.
__device__ __forceinline__ uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(dst)), "l"(src));
}
// The same, or (have false) 16 zero bytes and nothing read.
__device__ __forceinline__ void cp_async16_zfill(void* dst, const void* src, bool have) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)), "l"(src), "r"(have ? 16 : 0));
}
__device__ __forceinline__ void cp_async16_l1(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(shared_address(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(shared_address(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A launch that may overlap the previous kernel of the stream (pdl_on); the kernel must pdl_wait.
// launch_shared: with `shared` bytes of dynamic shared memory.
template <class... P, class... A>
void launch_shared(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, Stream s, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = shared;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_on(s) ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(std::forward<A>(args))...);
}
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, Stream s, A&&... args) {
  launch_shared(kernel, grid, block, 0, s, std::forward<A>(args)...);
}

// One of up to three products of a launch reading the same activation codes (a prompt's q, k and v):
// its Q4_K, Q5_K or Q6_K weights, rows and output, and the blocks (row tiles) of the launch it takes.
struct CodesSeg {
  const uint8_t* w;
  size_t row_bytes;
  int64_t rows, os;
  float* out;
  const float* bias;
  int type;
  unsigned blocks;
};

// A kernel allowed all the shared memory a block may opt in to; returns the dynamic bytes it may take.
template <class K>
int allow_most_shared(K kernel) {
  int dev = 0, optin = 0, limit = 0;
  cudaFuncAttributes at{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
      cudaFuncGetAttributes(&at, kernel) == cudaSuccess) {
    limit = optin - static_cast<int>(at.sharedSizeBytes);
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit) != cudaSuccess) limit = 0;
  }
  (void)cudaGetLastError();
  return limit;
}

// Activation rows as the CPU quantizes them for K-quant dot products (Q8_K): per 256 elements
// d = amax / 127 and codes round-to-nearest-even(x / d) in [-127, 127]; beside them the sum of each
// 32 codes (the Q4_K minimums' term). Layout (codes_layout): codes [n][cols], scales [n][cols / 256],
// sums [n][cols / 32] from the next 16 bytes (a super-block's 8 sums one 16-byte read).
struct Codes {
  int8_t* q;
  float* d;
  int16_t* s;
};
__host__ __device__ inline Codes codes_layout(void* base, int64_t n, int64_t cols) {
  auto* q = static_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(q + n * cols);
  const uintptr_t s = (reinterpret_cast<uintptr_t>(d + n * (cols / 256)) + 15) & ~uintptr_t{15};
  return {q, d, reinterpret_cast<int16_t*>(s)};
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

// The codes of super-block b of a row from its 256 values at x (global or shared memory), by a warp.
__device__ __forceinline__ void store_codes_of(const float* x, int64_t row, int64_t b, int64_t cols, const Codes& c) {
  const float4* p = reinterpret_cast<const float4*>(x + (threadIdx.x % kWarp) * 8);
  const float4 u = p[0], w = p[1];
  const float v[8] = {u.x, u.y, u.z, u.w, w.x, w.y, w.z, w.w};
  store_codes(v, row, b, cols, c);
}

// Element i of a cache row of F32 or F16 values (the heads' launch and the decode attention store them).
__device__ __forceinline__ void store_kv(uint8_t* row, int64_t i, float v, int type) {
  if (type == kF32) reinterpret_cast<float*>(row)[i] = v;
  else reinterpret_cast<__half*>(row)[i] = __float2half_rn(v);
}

// Blocks of the products of few rows (cuda_products.cu, cuda_codes.cu): four warps.
constexpr int kMvWarps = 4;

// Weight bytes are read once: loads that leave L1 to the activations' codes.
__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Integer matrix instructions: c += a (16 rows x 32 or 16 codes) times b (the codes of 8 tokens).
__device__ __forceinline__ void mma_s8_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// Four 8x8 matrices of 16-bit pairs from shared memory (lane l gives matrix l / 8's row l % 8): the
// fragments of a 16x32-byte tile of rows (or of two 8-token tiles' 32 bytes) for the integer products.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
#endif
}
__device__ __forceinline__ void mma_s8_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a0), "r"(a1), "r"(b0));
#endif
}

#define ZINC_CUDA_TYPES(X) \
  X(kF32) X(kF16) X(kBF16) X(kQ4_0) X(kQ4_1) X(kQ5_0) X(kQ5_1) X(kQ8_0) X(kQ2_K) X(kQ3_K) X(kQ4_K) X(kQ5_K) X(kQ6_K) \
  X(kIQ4_NL) X(kIQ4_XS) X(kMXFP4)

inline unsigned grid_for(int64_t n, int block = 256) {
  const int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

// The gated activations of a gate value x and an up value y (GeGLU: the tanh form).
__device__ __forceinline__ float glu_value(bool gelu, float x, float y) {
  return gelu ? 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x))) * y
              : x / (1.0f + expf(-x)) * y;
}

}  // namespace

}  // namespace zinc::backend::cuda
