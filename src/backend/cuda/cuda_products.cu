// The CUDA backend's matrix products (declared in cuda_kernels.h): embedding rows, products against
// float32 activations (any weight type, dec8), prompt tiles on tensor cores (f16, and integer against
// 8-bit activation codes), and a mixture's prompt grouped by expert; the products of few rows against
// codes are in cuda_codes.cu. Products accumulate in float32.
#include <cuda_fp16.h>
#include <mma.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_device.cuh"

namespace zinc::backend::cuda {

bool uses_codes(int type) { return type == kQ4_K || type == kQ5_K || type == kQ6_K; }
// The prompt products on integer tensor cores (k_mul_mm_q8) take these.
bool int8_tiles(int type) { return type == kQ4_K || type == kQ5_K || type == kQ6_K; }

bool g_int8_prompts = true;
void set_int8_prompts(bool on) { g_int8_prompts = on; }
int g_float_tile = 0;  // 32 or 64: every prompt product of float weights on those tiles; 0: by the shape
void set_float_tiles(int rows) { g_float_tile = rows == 32 || rows == 64 ? rows : 0; }
int g_tiles_min = kCodesTokens + 1;  // the fewest rows a prompt product takes the tiles with
void set_prompt_tiles_min(int n) { g_tiles_min = n > 0 ? n : kCodesTokens + 1; }
bool prompt_tiles(int type, int64_t n) { return int8_tiles(type) && g_int8_prompts && n >= g_tiles_min && n <= 65535; }
namespace {

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
              for (int i = 0; i < 8; ++i) sum = __fmaf_rn(w[8 * k + i], xv[8 * k + i], sum);
            } else {
              const float4* xp = reinterpret_cast<const float4*>(xs[t] + P::run(u, k));
              const float4 a = xp[0], b = xp[1];
              // (Each product added in turn, as one token's are: a row the same bit for bit in a step
              // of any tokens.)
              const float xv4[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
              for (int i = 0; i < 8; ++i) sum = __fmaf_rn(w[8 * k + i], xv4[i], sum);
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
template <int T, int NT, int R>
__global__ void __launch_bounds__(kMvWarps * kWarp) k_mul_mv(const uint8_t* w, size_t row_bytes, size_t expert_bytes, int64_t first,
                                                             int64_t rows, int64_t cols, const float* x, int64_t xs, int x_div,
                                                             const int32_t* ids, int n, float* out, int64_t os, const float* bias,
                                                             int64_t bias_stride) {
  pdl_trigger();
  pdl_wait();
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

// Tiles of 64 rows x 64 tokens over steps of 32 columns: each of the 256 threads decodes one group of
// eight weights and loads eight activations into shared memory, then computes 4 x 4 outputs; the next
// step's are read into registers meanwhile (a float router's prompt product of 256 rows took 104 us a
// launch, every step waiting on its loads: qwen3.6-35b-a3b pp512 5758 -> 5892 on an H200).
// Tiles of 32 x 32 (each thread 2 x 2 outputs, the same sums) where 64 x 64 ones would leave most
// multiprocessors idle: a float router of 256 rows for 512 tokens took 103 us on 32 blocks.
constexpr int kTm = 64, kTn = 64, kTk = 32;
template <int T, int TM = kTm, int TN = kTn>
__global__ void __launch_bounds__(256) k_mul_mm(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                                                const float* x, int64_t xs, int n, float* out, int64_t os, const float* bias) {
  static_assert(TM % 16 == 0 && TN % 16 == 0 && TM <= 64 && TN <= 64, "16 x 16 threads, up to 64 rows and tokens");
  constexpr int RI = TM / 16, RJ = TN / 16;
  __shared__ float ws[kTk][TM + 4];
  __shared__ float xsh[kTk][TN + 4];
  const int tid = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * TM;
  const int n0 = blockIdx.y * TN;
  const int lr = tid / 4, lg = tid % 4;  // the row (token) and group this thread loads
  const int tr = tid / 16, tc = tid % 16;
  float acc[RI][RJ] = {};
  // The next step's weights and activations are read into registers while this step's products run.
  float vw[8], vx[8];
  const auto fetch = [&](int64_t k0) {
    if (lr < TM && m0 + lr < rows) dec8<T>(w + (m0 + lr) * row_bytes, k0 / 8 + lg, vw);
    else for (int i = 0; i < 8; ++i) vw[i] = 0;
    if (lr < TN && n0 + lr < n) {
      const float4* xp = reinterpret_cast<const float4*>(x + static_cast<int64_t>(n0 + lr) * xs + k0 + lg * 8);
      const float4 a = xp[0], b = xp[1];
      vx[0] = a.x, vx[1] = a.y, vx[2] = a.z, vx[3] = a.w, vx[4] = b.x, vx[5] = b.y, vx[6] = b.z, vx[7] = b.w;
    } else {
      for (int i = 0; i < 8; ++i) vx[i] = 0;
    }
  };
  fetch(0);
  for (int64_t k0 = 0; k0 < cols; k0 += kTk) {
    if (lr < TM)
      for (int i = 0; i < 8; ++i) ws[lg * 8 + i][lr] = vw[i];
    if (lr < TN)
      for (int i = 0; i < 8; ++i) xsh[lg * 8 + i][lr] = vx[i];
    __syncthreads();
    if (k0 + kTk < cols) fetch(k0 + kTk);
#pragma unroll 8
    for (int kk = 0; kk < kTk; ++kk) {
      float av[RI], bv[RJ];
      if constexpr (RI == 4) {
        const float4 a = *reinterpret_cast<const float4*>(&ws[kk][tr * 4]);
        av[0] = a.x, av[1] = a.y, av[2] = a.z, av[3] = a.w;
      } else {
        for (int i = 0; i < RI; ++i) av[i] = ws[kk][tr * RI + i];
      }
      if constexpr (RJ == 4) {
        const float4 b = *reinterpret_cast<const float4*>(&xsh[kk][tc * 4]);
        bv[0] = b.x, bv[1] = b.y, bv[2] = b.z, bv[3] = b.w;
      } else {
        for (int j = 0; j < RJ; ++j) bv[j] = xsh[kk][tc * RJ + j];
      }
      for (int i = 0; i < RI; ++i)
        for (int j = 0; j < RJ; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int j = 0; j < RJ; ++j) {
    const int t = n0 + tc * RJ + j;
    if (t >= n) break;
    for (int i = 0; i < RI; ++i) {
      const int64_t r = m0 + tr * RI + i;
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

// ---- prompts against 8-bit activation codes on integer tensor cores (Q4_K, Q5_K, Q6_K) ----------
//
// Tiles of 128 rows x 64 tokens over one super-block (256 columns) a step. A step's weights are
// unpacked into signed bytes in shared memory (Q4_K codes 0..15, Q5_K 0..31; Q6_K codes minus 32) beside their
// sub-block scales, the activations' codes (as mul_mat's decode reads them: Q8_K, a scale per 256, a
// sum per 32) beside them; eight warps (4 x 2) each take 32 rows x 32 tokens with integer matrix
// instructions, one per sub-block (Q4_K, Q5_K: 16x8x32 over its 32 columns; Q6_K: 16x8x16 over its 16),
// whose sums are multiplied by the sub-block's integer scale and added as integers, as the CPU's dot
// product forms a super-block; then the super-block's float scales (and the Q4_K/Q5_K minimums' term, the
// minimums times the activations' sums of 32) go into float32 sums. Grouped tiles as k_mul_mm_tc's.
// The next step's activations (and the weights as stored) are copied into shared memory while a
// step computes (asynchronous 16-byte copies): a step waits on memory only where the copies ran longer
// than the step before it.
constexpr int kMqM = 128, kMqN = 64, kMqLd = 256 + 16;  // bytes per shared row
// A tile's super-blocks split over `ways` blocks (blockIdx.z the part): each writes its sums to its
// slot of `part` (kMqM x kMqN floats a tile and part), and the last of a tile to finish (by its
// counter, reset for the next launch) adds the parts in their order, so the results do not depend on
// which finished first. ways 1: none.
struct MqSplit {
  float* part = nullptr;
  unsigned* count = nullptr;
  int ways = 1;
};
struct MqShared {
  int8_t w[kMqM][kMqLd];
  // Two steps' codes, 16-byte chunk k of token t at chunk k ^ (t % 8) (a fragment's eight tokens on
  // distinct banks).
  __align__(16) int8_t x[2][kMqN][256];
  __align__(16) uint32_t sc[kMqM][4];  // Q4_K: scales (bytes 0..7) and minimums (8..15); Q6_K: the 16 signed scales
  float wd[kMqM], wm[kMqM];  // d (and dmin) of each row's super-block
  float xd[2][kMqN];
  __align__(16) uint32_t xs[2][kMqN][4];  // the activations' eight sums of 32 (int16 pairs)
  int32_t slot[kMqN];
  // Then, past the struct, the next step's blocks as stored, kMqM rows of mq_raw_row<T>() bytes:
  // Q4_K's 144, Q5_K's 176; Q6_K's 210 from the 16-byte boundary below each (at its address % 16, 14 chunks).
  __device__ uint8_t* raw(int r, int stride) { return reinterpret_cast<uint8_t*>(this + 1) + r * stride; }
};
template <int T>
__host__ __device__ constexpr int mq_raw_row() { return T == kQ4_K ? 144 : T == kQ5_K ? 176 : 224; }
template <int T>
constexpr size_t mq_shared() { return sizeof(MqShared) + kMqM * mq_raw_row<T>(); }
static_assert(sizeof(MqShared) % 16 == 0);

// 16 bytes from a 2-byte aligned shared address, as aligned words (Q6_K blocks copied as stored).
__device__ __forceinline__ uint4 lds16_a2(const uint8_t* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto* q = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
  const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;
  const uint32_t w0 = q[0], w1 = q[1], w2 = q[2], w3 = q[3];
  if (sh == 0) return make_uint4(w0, w1, w2, w3);
  const uint32_t w4 = q[4];
  return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh), __funnelshift_r(w3, w4, sh));
}
// Where a Q6_K block at byte `at` of w lies in its copy (from the 16-byte boundary below it).
__device__ __forceinline__ int q6_offset(const uint8_t* w, int64_t at) { return static_cast<int>(reinterpret_cast<uintptr_t>(w + at) & 15); }

// Tile (bx, by): rows by kMqM on, tokens bx kMqN on (grouped: the bx-th tile of the experts' slots).
template <int T>
__device__ __forceinline__ void mm_q8_tile(MqShared& sh, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, const Codes& c, int n,
                                           float* out, int64_t os, const float* bias, const TcGroups& g, unsigned bx, unsigned by,
                                           const MqSplit& split = MqSplit{}) {
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp, gq = lane / 4, tq = lane % 4;
  constexpr int kRaw = mq_raw_row<T>();
  const int64_t m0 = static_cast<int64_t>(by) * kMqM;
  int n0 = static_cast<int>(bx) * kMqN, count = n - n0;
  if (g.order) {
    int tile = static_cast<int>(bx), e = 0;
    for (; e < g.n_expert; ++e) {
      const int cnt = g.offsets[e + 1] - g.offsets[e], tiles = (cnt + kMqN - 1) / kMqN;
      if (tile < tiles) break;
      tile -= tiles;
    }
    if (e == g.n_expert) return;
    n0 = g.offsets[e] + tile * kMqN;
    count = g.offsets[e + 1] - n0;
    w += static_cast<int64_t>(e) * g.expert_bytes + g.first * static_cast<int64_t>(row_bytes);
    if (bias) bias += static_cast<int64_t>(e) * g.bias_stride;
  }
  count = min(count, kMqN);
  if (tid < kMqN) sh.slot[tid] = tid >= count ? -1 : g.order ? g.order[n0 + tid] : n0 + tid;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  float acc[2][4][4] = {};
  const int64_t blocks = cols / 256;
  // Step b's copies: the codes, scales and sums of the tokens (past the tile's: the first token's, their
  // results not written), and Q4_K's blocks (rows past the weights: the last row's).
  const auto token_row = [&](int t) -> int64_t { return sh.slot[t] >= 0 ? sh.slot[t] : sh.slot[0]; };
  const auto copy = [&](int64_t b) {
    const int st = static_cast<int>(b % 2);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int item = tid + 256 * j, t = item / 16, part = item % 16;
      cp_async16(&sh.x[st][t][16 * (part ^ (t % 8))], c.q + token_row(t) * cols + b * 256 + 16 * part);
    }
    if (tid < kMqN) cp_async16(sh.xs[st][tid], c.s + token_row(tid) * (cols / 32) + b * 8);
    else if (tid < 2 * kMqN) cp_async4(&sh.xd[st][tid - kMqN], c.d + token_row(tid - kMqN) * (cols / 256) + b);
    if constexpr (T == kQ4_K || T == kQ5_K) {
      constexpr int kChunks = kRaw / 16;  // (whole blocks: 144 and 176 bytes)
      for (int item = tid; item < kMqM * kChunks; item += 256) {
        const int r = item / kChunks, part = item % kChunks;
        cp_async16(sh.raw(r, kRaw) + 16 * part, w + min(m0 + r, rows - 1) * row_bytes + b * kRaw + 16 * part);
      }
    } else {
      // (Past a block: at most 15 bytes, within the 16 every weight's allocation has after its end.)
      for (int item = tid; item < kMqM * 14; item += 256) {
        const int r = item / 14, part = item % 14;
        const auto at = reinterpret_cast<uintptr_t>(w + min(m0 + r, rows - 1) * row_bytes + b * 210) & ~uintptr_t{15};
        cp_async16(sh.raw(r, kRaw) + 16 * part, reinterpret_cast<const uint8_t*>(at) + 16 * part);
      }
    }
    cp_async_commit();
  };
  // This block's super-blocks: all, or its part's share.
  const int64_t b_first = blocks * blockIdx.z / split.ways, b_end = blocks * (blockIdx.z + 1) / split.ways;
  __syncthreads();  // (the slots written)
  if (b_first < b_end) copy(b_first);
  for (int64_t b = b_first; b < b_end; ++b) {
    const int st = static_cast<int>(b % 2);
    cp_async_wait<0>();
    __syncthreads();  // the previous step's reads done, this step's copies landed
    // Weights: Q4_K and Q5_K 8 pieces of 16 code bytes a row (4 a thread; Q5_K: each code's fifth bit
    // from qh byte 16 (part % 2) + i, bit 2c for the low nibble, 2c + 1 for the high), Q6_K 4 pieces of
    // 64 values (2 a thread).
    if constexpr (T == kQ4_K || T == kQ5_K) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int item = tid + 256 * j, r = item / 8, part = item % 8;
        const uint4 q = *reinterpret_cast<const uint4*>(sh.raw(r, kRaw) + (T == kQ4_K ? 16 : 48) + 16 * part);
        const int c0 = (part / 2) * 64 + (part % 2) * 16;
        uint4 lo = make_uint4(q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu);
        uint4 hi = make_uint4((q.x >> 4) & 0x0F0F0F0Fu, (q.y >> 4) & 0x0F0F0F0Fu, (q.z >> 4) & 0x0F0F0F0Fu, (q.w >> 4) & 0x0F0F0F0Fu);
        if constexpr (T == kQ5_K) {
          const uint4 h = *reinterpret_cast<const uint4*>(sh.raw(r, kRaw) + 16 + 16 * (part % 2));
          const int b0 = 2 * (part / 2);
          const auto bit = [](uint32_t v, int at) { return ((v >> at) & 0x01010101u) << 4; };
          lo = make_uint4(lo.x | bit(h.x, b0), lo.y | bit(h.y, b0), lo.z | bit(h.z, b0), lo.w | bit(h.w, b0));
          hi = make_uint4(hi.x | bit(h.x, b0 + 1), hi.y | bit(h.y, b0 + 1), hi.z | bit(h.z, b0 + 1), hi.w | bit(h.w, b0 + 1));
        }
        *reinterpret_cast<uint4*>(&sh.w[r][c0]) = lo;
        *reinterpret_cast<uint4*>(&sh.w[r][c0 + 32]) = hi;
      }
      if (tid < kMqM) {
        const int r = tid;
        const uint4 h = *reinterpret_cast<const uint4*>(sh.raw(r, kRaw));
        sh.wd[r] = half_bits(static_cast<uint16_t>(h.x & 0xffff));
        sh.wm[r] = half_bits(static_cast<uint16_t>(h.x >> 16));
        // Scales: bytes 0..3 low 6 bits of y, bytes 4..7 low nibbles of w with the top 2 bits of y;
        // minimums: z's low 6 bits, then w's high nibbles with z's top 2 bits.
        sh.sc[r][0] = h.y & 0x3f3f3f3fu;
        sh.sc[r][1] = (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
        sh.sc[r][2] = h.z & 0x3f3f3f3fu;
        sh.sc[r][3] = ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int item = tid + 256 * j, r = item / 4, half = (item % 4) / 2, l0 = (item % 2) * 16;
        const uint8_t* blk = sh.raw(r, kRaw) + q6_offset(w, min(m0 + r, rows - 1) * row_bytes + b * 210);
        const uint4 la = lds16_a2(blk + 64 * half + l0), lb = lds16_a2(blk + 64 * half + 32 + l0), qh = lds16_a2(blk + 128 + 32 * half + l0);
        const uint32_t A[4] = {la.x, la.y, la.z, la.w}, Bq[4] = {lb.x, lb.y, lb.z, lb.w}, H[4] = {qh.x, qh.y, qh.z, qh.w};
        uint32_t v[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          v[0][i] = __vsub4((A[i] & 0x0F0F0F0Fu) | ((H[i] << 4) & 0x30303030u), 0x20202020u);
          v[1][i] = __vsub4((Bq[i] & 0x0F0F0F0Fu) | ((H[i] << 2) & 0x30303030u), 0x20202020u);
          v[2][i] = __vsub4(((A[i] >> 4) & 0x0F0F0F0Fu) | (H[i] & 0x30303030u), 0x20202020u);
          v[3][i] = __vsub4(((Bq[i] >> 4) & 0x0F0F0F0Fu) | ((H[i] >> 2) & 0x30303030u), 0x20202020u);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k)
          *reinterpret_cast<uint4*>(&sh.w[r][128 * half + 32 * k + l0]) = make_uint4(v[k][0], v[k][1], v[k][2], v[k][3]);
      }
      if (tid < kMqM) {
        const int r = tid;
        const uint8_t* blk = sh.raw(r, kRaw) + q6_offset(w, min(m0 + r, rows - 1) * row_bytes + b * 210);
        *reinterpret_cast<uint4*>(sh.sc[r]) = lds16_a2(blk + 192);
        sh.wd[r] = half_bits(*reinterpret_cast<const uint16_t*>(blk + 208));
      }
    }
    __syncthreads();  // the weights unpacked (Q4_K: their copy's buffer free)
    if (b + 1 < b_end) copy(b + 1);
    // The super-block's integer sums, each sub-block's products times its scale.
    int isum[2][4][4] = {};
    if constexpr (T == kQ4_K || T == kQ5_K) {
      uint32_t scw[2][2][2];  // [m tile][row half][word]: the eight scales of the thread's rows
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          scw[i][h][0] = sh.sc[wm + 16 * i + gq + 8 * h][0];
          scw[i][h][1] = sh.sc[wm + 16 * i + gq + 8 * h][1];
        }
#pragma unroll 2
      for (int s = 0; s < 8; ++s) {
        // Fragments by ldmatrix: a tile's 16 rows' 32 bytes (lane l: row l % 16, bytes 16 (l / 16) on);
        // two 8-token tiles' 32 bytes (lane l: tile j + l / 16, token l % 8, chunk 2 s + (l / 8) % 2).
        uint32_t a[2][4], bf[4][2];
#pragma unroll
        for (int i = 0; i < 2; ++i) ldmatrix_x4(a[i], &sh.w[wm + 16 * i + lane % 16][32 * s + 16 * (lane / 16)]);
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
          const int t = wn + 8 * (j + lane / 16) + lane % 8, chunk = 2 * s + (lane / 8) % 2;
          uint32_t r[4];
          ldmatrix_x4(r, &sh.x[st][t][16 * (chunk ^ (t % 8))]);
          bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int s0 = static_cast<int>((scw[i][0][s / 4] >> (8 * (s % 4))) & 0xff);
          const int s1 = static_cast<int>((scw[i][1][s / 4] >> (8 * (s % 4))) & 0xff);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int p[4] = {0, 0, 0, 0};
            mma_s8_k32(p, a[i], bf[j][0], bf[j][1]);
            isum[i][j][0] += s0 * p[0];
            isum[i][j][1] += s0 * p[1];
            isum[i][j][2] += s1 * p[2];
            isum[i][j][3] += s1 * p[3];
          }
        }
      }
      // Float scales; the minimums' term: sum over sub-blocks of minimum times the codes' sum.
      // (Each token's sums and scale read once, each row's once: tokens outer.)
      float d[2][2], dm[2][2];
      int mn[2][2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm + 16 * i + gq + 8 * h;
          d[i][h] = sh.wd[r], dm[i][h] = sh.wm[r];
          mn[i][h][0] = static_cast<int>(sh.sc[r][2]), mn[i][h][1] = static_cast<int>(sh.sc[r][3]);
        }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int t = wn + 8 * j + 2 * tq + q;
          const uint4 xs = *reinterpret_cast<const uint4*>(sh.xs[st][t]);
          const float xd = sh.xd[st][t];
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              int m = __dp2a_lo(static_cast<int>(xs.x), mn[i][h][0], 0);
              m = __dp2a_hi(static_cast<int>(xs.y), mn[i][h][0], m);
              m = __dp2a_lo(static_cast<int>(xs.z), mn[i][h][1], m);
              m = __dp2a_hi(static_cast<int>(xs.w), mn[i][h][1], m);
              acc[i][j][2 * h + q] += xd * (d[i][h] * static_cast<float>(isum[i][j][2 * h + q]) - dm[i][h] * static_cast<float>(m));
            }
        }
    } else {
#pragma unroll 2
      for (int s = 0; s < 16; ++s) {
        // Fragments by ldmatrix: the warp's 32 rows' 16 bytes (lane l: row l), and its four 8-token
        // tiles' chunk s (lane l: token l).
        uint32_t a4[4], bf[4];
        int sc[2][2];
        ldmatrix_x4(a4, &sh.w[wm + lane][16 * s]);
        ldmatrix_x4(bf, &sh.x[st][wn + lane][16 * (s ^ (lane % 8))]);
        const uint32_t a[2][2] = {{a4[0], a4[1]}, {a4[2], a4[3]}};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          sc[i][0] = reinterpret_cast<const int8_t*>(sh.sc[wm + 16 * i + gq])[s];
          sc[i][1] = reinterpret_cast<const int8_t*>(sh.sc[wm + 16 * i + gq + 8])[s];
        }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int p[4] = {0, 0, 0, 0};
            mma_s8_k16(p, a[i][0], a[i][1], bf[j]);
            isum[i][j][0] += sc[i][0] * p[0];
            isum[i][j][1] += sc[i][0] * p[1];
            isum[i][j][2] += sc[i][1] * p[2];
            isum[i][j][3] += sc[i][1] * p[3];
          }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float d = sh.wd[wm + 16 * i + gq + 8 * h];
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q)
              acc[i][j][2 * h + q] += sh.xd[st][wn + 8 * j + 2 * tq + q] * d * static_cast<float>(isum[i][j][2 * h + q]);
        }
    }
  }
  if (split.ways > 1) {
    // This part's sums into its slot (element e of thread tid at e * 256 + tid), then the last part of
    // the tile to finish adds every part's in order.
    const size_t tile = static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    float* mine = split.part + (tile * split.ways + blockIdx.z) * (kMqM * kMqN);
#pragma unroll
    for (int e = 0; e < 32; ++e) __stcg(mine + e * 256 + tid, (&acc[0][0][0])[e]);
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (tid == 0) {
      last = atomicAdd(split.count + tile, 1u) == static_cast<unsigned>(split.ways - 1);
      if (last) split.count[tile] = 0;  // (for the next launch: every part has counted)
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float* parts = split.part + tile * split.ways * (kMqM * kMqN);
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      float v = __ldcg(parts + e * 256 + tid);
      for (int k = 1; k < split.ways; ++k) v += __ldcg(parts + k * (kMqM * kMqN) + e * 256 + tid);
      (&acc[0][0][0])[e] = v;
    }
  }
  // Results: element (row wm + 16 i + gq + 8 h, token wn + 8 j + 2 tq + q).
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int slot = sh.slot[wn + 8 * j + 2 * tq + q];
      if (slot < 0) continue;
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = m0 + wm + 16 * i + gq + 8 * h;
          if (r < rows) out[static_cast<int64_t>(slot) * os + r] = acc[i][j][2 * h + q] + (bias ? bias[r] : 0.0f);
        }
    }
}

template <int T>
__global__ void __launch_bounds__(256, 2) k_mul_mm_q8(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, Codes c, int n,
                                                      float* out, int64_t os, const float* bias, TcGroups g, MqSplit split) {
  extern __shared__ __align__(16) uint8_t mq_raw[];
  mm_q8_tile<T>(*reinterpret_cast<MqShared*>(mq_raw), w, row_bytes, rows, cols, c, n, out, os, bias, g, blockIdx.x, blockIdx.y, split);
}

// Up to three products of the same codes in one launch (a prompt's q, k and v): blockIdx.y the row tiles
// of the first product, then the second's, ...; each product Q4_K, Q5_K or Q6_K.
struct MqSegs {
  CodesSeg seg[3];
  int nseg;
};
__global__ void __launch_bounds__(256, 2) k_mul_mm_q8_segs(const MqSegs a, int64_t cols, Codes c, int n, MqSplit split) {
  extern __shared__ __align__(16) uint8_t mq_raw[];
  unsigned by = blockIdx.y;
  int i = 0;
  while (i + 1 < a.nseg && by >= a.seg[i].blocks) by -= a.seg[i].blocks, ++i;
  const CodesSeg& g = a.seg[i];
  MqShared& sh = *reinterpret_cast<MqShared*>(mq_raw);
  if (g.type == kQ4_K) mm_q8_tile<kQ4_K>(sh, g.w, g.row_bytes, g.rows, cols, c, n, g.out, g.os, g.bias, TcGroups{}, blockIdx.x, by, split);
  else if (g.type == kQ5_K) mm_q8_tile<kQ5_K>(sh, g.w, g.row_bytes, g.rows, cols, c, n, g.out, g.os, g.bias, TcGroups{}, blockIdx.x, by, split);
  else mm_q8_tile<kQ6_K>(sh, g.w, g.row_bytes, g.rows, cols, c, n, g.out, g.os, g.bias, TcGroups{}, blockIdx.x, by, split);
}

// The calling thread's context's scratch for split tiles (set_split_scratch), and the measurements' choice.
thread_local SplitScratch t_split{};
int g_split_ways = -1;  // -1: by the shape; 1: never split; 2, 4, 8, 16: that many parts

// The parts each of `tiles` tiles of `steps` super-blocks is split into: where the tiles would leave
// most multiprocessors with one block or none (at most one tile each), as many parts as keep every
// block resident at once (two a multiprocessor) with at least two steps each; one where the scratch
// is short (or for grouped tiles). A block's step costs the same whatever its tokens (the
// multiprocessor's instructions bound it), so more tiles than multiprocessors split measured slower:
// on an H200, zinc_cuda_matvec_bench, us unsplit -> split: down 4096x12288 Q6_K (32 row tiles)
// 219.8 -> 122.9 at 72 tokens, 213.1 -> 114.9 at 128; k 1024x4096 Q4_K at 256 55.2 -> 43.8; gate
// 12288x4096 Q4_K (96 row tiles) at 128 tokens 88.7 -> 98.8 (four parts), q, k and v in one launch at
// 512 155.8 -> 178.7 (two).
MqSplit split_for(int64_t tiles, int64_t steps) {
  const SplitScratch& sc = t_split;
  MqSplit m;
  if (!sc.part || g_split_ways == 1 || tiles > sc.counters) return m;
  const int64_t sms = sm_count();
  const auto fits = [&](int w) { return static_cast<size_t>(tiles * w) * kMqM * kMqN * sizeof(float) <= sc.bytes; };
  int ways = 1;
  if (g_split_ways > 1) {
    ways = fits(g_split_ways) ? g_split_ways : 1;
  } else if (tiles <= sms) {
    for (int next = 2; next <= 16 && tiles * next <= 2 * sms && 2 * next <= steps && fits(next); next *= 2) ways = next;
  }
  if (ways > 1) m = MqSplit{static_cast<float*>(sc.part), sc.count, ways};
  return m;
}

template <int T>
void launch_mul_mm_q8(Stream s, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, const Codes& c, int n, unsigned token_tiles,
                      float* out, int64_t os, const float* bias, const TcGroups& g) {
  static const bool sized = [] {
    return cudaFuncSetAttribute(k_mul_mm_q8<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(mq_shared<T>())) == cudaSuccess;
  }();
  (void)sized;
  const auto row_tiles = static_cast<unsigned>((rows + kMqM - 1) / kMqM);
  const MqSplit split = g.order ? MqSplit{} : split_for(static_cast<int64_t>(token_tiles) * row_tiles, cols / 256);
  const dim3 grid(token_tiles, row_tiles, static_cast<unsigned>(split.ways));
  k_mul_mm_q8<T><<<grid, 256, mq_shared<T>(), s>>>(w, row_bytes, rows, cols, c, n, out, os, bias, g, split);
}
}  // namespace

void set_split_scratch(const SplitScratch& scratch) { t_split = scratch; }
void set_split_ways(int ways) { g_split_ways = ways == 1 || ways == 2 || ways == 4 || ways == 8 || ways == 16 ? ways : -1; }

void mul_mm_codes_tiles(Stream s, const Product* p, int count, int64_t cols, void* q8, int n) {
  static const bool sized = [] {
    return cudaFuncSetAttribute(k_mul_mm_q8_segs, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(mq_shared<kQ6_K>())) == cudaSuccess;
  }();
  (void)sized;
  MqSegs a{};
  unsigned tiles = 0;
  bool q6 = false, q5 = false;  // (Q4_K or Q5_K segments alone: their smaller copies' rows)
  for (int i = 0; i < count; ++i) {
    a.seg[i] = {static_cast<const uint8_t*>(p[i].w), p[i].row_bytes, p[i].rows, p[i].out_stride, p[i].out, p[i].bias, p[i].type,
                static_cast<unsigned>((p[i].rows + kMqM - 1) / kMqM)};
    tiles += a.seg[i].blocks;
    q6 |= p[i].type == kQ6_K;
    q5 |= p[i].type == kQ5_K;
  }
  a.nseg = count;
  const auto token_tiles = static_cast<unsigned>((n + kMqN - 1) / kMqN);
  const MqSplit split = split_for(static_cast<int64_t>(token_tiles) * tiles, cols / 256);
  const dim3 grid(token_tiles, tiles, static_cast<unsigned>(split.ways));
  k_mul_mm_q8_segs<<<grid, 256, q6 ? mq_shared<kQ6_K>() : q5 ? mq_shared<kQ5_K>() : mq_shared<kQ4_K>(), s>>>(a, cols, codes_layout(q8, n, cols), n,
                                                                                                       split);
}
namespace {

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
                    const float* bias, int64_t bias_stride, void* q8, bool q8_ready, Chain chain) {
  const auto* wb = static_cast<const uint8_t*>(w);
  if constexpr (T == kQ4_K || T == kQ5_K || T == kQ6_K) {
    if (q8 && !ids && first == 0 && prompt_tiles(T, n)) {
      // A prompt: against codes on integer tensor cores.
      const Codes c = codes_layout(q8, n, cols);
      if (!q8_ready) quantize_codes(s, x, xs, 1, cols, n, q8);
      launch_mul_mm_q8<T>(s, wb, row_bytes, rows, cols, c, n, static_cast<unsigned>((n + kMqN - 1) / kMqN), out, os, bias, TcGroups{});
      return;
    }
  }
  if constexpr (T == kQ4_K || T == kQ5_K || T == kQ6_K) {
    // Up to kCodesTokens tokens (decode of several sequences, short prompts), or expert slots: against
    // 8-bit codes.
    if (q8 && (ids || n <= kCodesTokens)) {
      const Product p{T, w, row_bytes, expert_bytes, first, rows, out, os, bias, bias_stride};
      mul_mat_codes(s, &p, 1, cols, x, xs, x_div, ids, n, q8, q8_ready, Glu::None, 0, 0, chain);
      return;
    }
  }
  const dim3 block(kMvWarps * kWarp);
  const auto row_blocks = [&](int r) { return static_cast<unsigned>((rows + r - 1) / r); };
  if (ids) {
    launch(k_mul_mv<T, 1, 4>, dim3(row_blocks(4), n), block, s, wb, row_bytes, expert_bytes, first, rows, cols, x, xs, x_div, ids, n, out, os,
           bias, bias_stride);
  } else if (n > 8 && first == 0 && T != kF32 && T != kF16 && T != kBF16) {
    k_mul_mm_tc<T, 128><<<dim3(static_cast<unsigned>((rows + kTcM - 1) / kTcM), (n + 127) / 128), 256, 0, s>>>(wb, row_bytes, rows, cols,
                                                                                                      x, xs, n, out, os, bias, TcGroups{});
  } else if (n > 8 && first == 0 && rows >= 4) {
    // (A row or three, such as a shared expert's gate, take the one-row blocks below: a tile of 64 rows
    // took as long for one row as for 256: qwen3.6-35b-a3b pp512 5892 -> 6174 on an H200.)
    const int64_t tiles = (rows + kTm - 1) / kTm * ((n + kTn - 1) / kTn);
    bool small = false;
    if constexpr (T == kF32 || T == kF16 || T == kBF16) {
      if (g_float_tile == 32 || (g_float_tile == 0 && tiles < 128)) {
        k_mul_mm<T, 32, 32><<<dim3(static_cast<unsigned>((rows + 31) / 32), (n + 31) / 32), 256, 0, s>>>(wb, row_bytes, rows, cols, x, xs,
                                                                                                         n, out, os, bias);
        small = true;
      }
    }
    if (!small) {
      k_mul_mm<T><<<dim3(static_cast<unsigned>((rows + kTm - 1) / kTm), (n + kTn - 1) / kTn), 256, 0, s>>>(wb, row_bytes, rows, cols,
                                                                                                        x, xs, n, out, os, bias);
    }
  } else if (n >= 8) {
    launch(k_mul_mv<T, 8, 1>, dim3(row_blocks(1), (n + 7) / 8), block, s, wb, row_bytes, size_t{0}, first, rows, cols, x, xs, 1, nullptr, n,
           out, os, bias, int64_t{0});
  } else if (n >= 4) {
    launch(k_mul_mv<T, 4, 1>, dim3(row_blocks(1), (n + 3) / 4), block, s, wb, row_bytes, size_t{0}, first, rows, cols, x, xs, 1, nullptr, n,
           out, os, bias, int64_t{0});
  } else if (n == 2) {
    launch(k_mul_mv<T, 2, 1>, dim3(row_blocks(1), 1), block, s, wb, row_bytes, size_t{0}, first, rows, cols, x, xs, 1, nullptr, n, out, os,
           bias, int64_t{0});
  } else {
    launch(k_mul_mv<T, 1, 4>, dim3(row_blocks(4), n), block, s, wb, row_bytes, size_t{0}, first, rows, cols, x, xs, 1, nullptr, n, out, os,
           bias, int64_t{0});
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
                const float* bias, int64_t bias_stride, void* q8, bool q8_ready, Chain chain) {
  switch (type) {
#define ZINC_CASE(T) \
  case T: launch_mul_mat<T>(s, w, row_bytes, expert_bytes, first, rows, cols, x, x_stride, x_div, ids, n, out, out_stride, bias, bias_stride, q8, q8_ready, chain); break;
    ZINC_CUDA_TYPES(ZINC_CASE)
#undef ZINC_CASE
    default: break;
  }
}

void mul_mat(Stream s, int type, const void* w, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int n,
             float* out, int64_t out_stride, const float* bias, void* q8, bool q8_ready) {
  mul_mat_id(s, type, w, row_bytes, 0, 0, rows, cols, x, x_stride, 1, nullptr, n, out, out_stride, bias, 0, q8, q8_ready);
}


void moe_group(Stream s, const int32_t* ids, int slots, int n_expert, int32_t* order, int32_t* offsets) {
  k_moe_group<<<1, 1024, 0, s>>>(ids, slots, n_expert, order, offsets);
}

bool grouped_mul_mat_supported(int type) { return type != kF32 && type != kF16 && type != kBF16 && weight_type_supported(type); }

void grouped_mul_mat(Stream s, int type, const void* w, size_t row_bytes, size_t expert_bytes, int64_t first, int64_t rows, int64_t cols,
                     const float* x, int64_t x_stride, int x_div, const int32_t* order, const int32_t* offsets, int n_expert, int slots,
                     float* out, int64_t out_stride, const float* bias, int64_t bias_stride, void* q8, bool q8_ready) {
  TcGroups g;
  g.order = order;
  g.offsets = offsets;
  g.n_expert = n_expert;
  g.x_div = x_div;
  g.expert_bytes = expert_bytes;
  g.first = first;
  g.bias_stride = bias_stride;
  // Tiles of 64 slots: an expert's last tile is partly empty, at most n_expert of them.
  const auto token_tiles = static_cast<unsigned>((slots + 63) / 64 + n_expert);
  if (q8 && int8_tiles(type) && g_int8_prompts && slots <= 65535) {
    const Codes c = codes_layout(q8, slots, cols);
    if (!q8_ready) quantize_codes(s, x, x_stride, x_div, cols, slots, q8);
    const auto* w8 = static_cast<const uint8_t*>(w);
    if (type == kQ4_K) launch_mul_mm_q8<kQ4_K>(s, w8, row_bytes, rows, cols, c, slots, token_tiles, out, out_stride, bias, g);
    else if (type == kQ5_K) launch_mul_mm_q8<kQ5_K>(s, w8, row_bytes, rows, cols, c, slots, token_tiles, out, out_stride, bias, g);
    else launch_mul_mm_q8<kQ6_K>(s, w8, row_bytes, rows, cols, c, slots, token_tiles, out, out_stride, bias, g);
    return;
  }
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

}  // namespace zinc::backend::cuda
