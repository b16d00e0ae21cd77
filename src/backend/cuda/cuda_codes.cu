// The CUDA backend's products against 8-bit activation codes of few rows (declared in cuda_kernels.h):
// the codes themselves (quantize_codes), packed dot products (dp4a) for decode and expert slots, and
// integer tensor cores for steps of 3 to kCodesTokens rows and a mixture's slots grouped by expert. Products
// accumulate in float32.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <type_traits>

#include "backend/cuda/cuda_device.cuh"
#include "core/error.h"

namespace zinc::backend::cuda {

int g_mma_min = 0;  // the fewest rows that take k_mv_mma (fewer: k_mv_codes); 0: by the products' types
void set_codes_mma_min(int n) { g_mma_min = std::max(0, n); }
int g_mma_tiles = 0;  // k_mv_mma's tiles of 16 rows a warp without an activation (1, 2); 0: by the tokens
void set_codes_mma_tiles(int tiles) { g_mma_tiles = tiles == 1 || tiles == 2 ? tiles : 0; }
int g_mma_groups = 0;  // k_mv_mma's groups of 8 tokens a warp (1, 2, 4); 0: by the rows
void set_codes_mma_groups(int groups) { g_mma_groups = groups == 1 || groups == 2 || groups == 4 ? groups : 0; }
bool g_mma_stage = true;  // k_mv_mma's codes staged in shared memory
void set_codes_mma_stage(bool on) { g_mma_stage = on; }
int g_mma_weights_stage = 1;  // k_mv_mma's weights copied into shared memory ahead of their use: 0 never, 1 where it pays, 2 where it fits
int g_mma_glu_capped = 1;  // k_mv_mma's gate and up at 16 tokens a warp (8 grouped by expert) held to fewer registers: 0 never, 1 where it pays, 2 always
void set_codes_mma_weights_stage(int mode) { g_mma_weights_stage = std::clamp(mode, 0, 2); }
void set_codes_mma_glu_capped(int mode) { g_mma_glu_capped = std::clamp(mode, 0, 2); }
int g_mma_streams = 0;  // k_mv_mma's streams a warp up to kSameRows tokens (1, 2, 4); 0: by the shapes
void set_codes_mma_streams(int streams) { g_mma_streams = streams == 1 || streams == 2 || streams == 4 ? streams : 0; }

namespace {

#include "backend/cuda/cuda_code_mma.cuh"    // (inside this namespace: a super-block on the tensor cores)
#include "backend/cuda/cuda_code_lanes.cuh"  // (inside this namespace: the lanes' layouts of a super-block)

// A warp's share of R rows (each nsb super-blocks; L::kLanes lanes a super-block, W = 32 / (H kLanes)
// super-blocks a step): super-blocks W (ks + S u) + lane / kLanes for u = 0, 1, ...; U steps loaded
// before any is used (bytes in flight). With H = 2 each half of the warp takes its own R rows (lane:
// the lane within its half). c: the codes from row t0 on.
template <class L, int NT, int S, int R, int H>
__device__ __forceinline__ void rows_codes(const uint8_t* const* rows, int nsb, int ks, const Codes& c, int cols, int nt, float (*acc)[NT]) {
  constexpr int U = sizeof(L) * R > 64 ? 1 : sizeof(L) * R > 32 ? 2 : 4;
  constexpr int W = kWarp / H / L::kLanes;
  const int lane = threadIdx.x % (kWarp / H), l8 = lane % L::kLanes;
  const typename L::Lane ln(l8);
  bool waited = false;
  for (int b0 = ks * W + lane / L::kLanes; b0 < nsb; b0 += W * S * U) {
    L raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * W * S;
      if (b < nsb) {
#pragma unroll
        for (int r = 0; r < R; ++r) raw[u][r].load(rows[r] + b * L::kBytes, l8);
      }
    }
    if (!waited) pdl_wait(), waited = true;  // the codes are the previous kernels' output
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * W * S;
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

// Expert slots' products (k_mv_rows takes those without): up to three products reading the same codes
// in one launch (gate and up), each segment its own weights, rows and output; with GLU, the first two
// segments (gate, up, the same rows) are computed by the same warps and combined into the first's
// output. Blocks of kMvWarps warps, S warps per group of RW rows (short rows in flight on more warps);
// one slot per block and its rows' expert. H = 2 (short rows, such as a mixture's down of 768 columns, where
// Q6_K's would leave 20 of 32 lanes idle and Q4_K's 8): each half-warp its own RW rows, half the
// blocks (on an H200, qwen3-30b-a3b tg128 444 -> 455 for the Q6_K rows, then -> 459 with the Q4_K
// ones too; qwen3.6-35b-a3b 2210 -> 2264).
struct MvSeg {
  const uint8_t* w;
  size_t row_bytes, expert_bytes;
  int64_t first, rows, os;
  float* out;
  const float* bias;
  int64_t bias_stride;
  int type;
  unsigned blocks;
  int split = 0;  // k_mv_rows, k_mv_mma: the warps a row's (a tile's) super-blocks are split over
  // k_mv_mma up to kSameRows tokens: each warp's streams of super-blocks and the lane groups a warp of
  // k_mv_rows (W) whose sums it repeats (0: its warps' sums halved).
  int streams = 1, canon = 0;
};
struct MvArgs {
  MvSeg seg[4];
  int nseg;
  Codes c;
  int64_t cols;
  const int32_t* ids;
  int n;
  Glu glu;
  int x_div;  // slot t's codes: row t / x_div
  // Grouped by expert (k_mv_mma): expert e's slots are order[offsets[e] .. offsets[e + 1]).
  const int32_t* order = nullptr;
  const int32_t* offsets = nullptr;
  int n_expert = 0, per_expert = 0;  // the experts; the most slots one may have
  // With xf (expert slots, one token each, at most kMvQuantCols columns): each block quantizes its
  // slot's row of xf (x_div rows apart, xf_stride floats) into shared memory itself, no codes launch.
  const float* xf = nullptr;
  int64_t xf_stride = 0;
  // Chain::First: the next launch starts only once every block has waited. Chain::Second (with xf;
  // the launch before it was a First): the ids read and the block's rows sent to L2 before the wait.
  bool trigger_late = false, ids_early = false;
  // k_mv_mma with its weights staged in shared memory: the bytes of a row's super-block there (a
  // multiple of 16 holding the widest of the segments' types with its misalignment).
  int wslot = 0;
};
constexpr int kMvQuantCols = kMvWarps * 256;

// One token's gate and up, two rows of each a warp: at most 80 registers (six blocks a multiprocessor,
// some spilled to L1) so a mixture's 768 blocks of eight experts' rows take one wave on 132
// multiprocessors instead of 1.45 at 128 registers (qwen3-30b-a3b tg128 435.5 -> 444, qwen3-8b 426 ->
// 430 on an H200; five blocks, or the same cap on other shapes, measured slower). Half-warp rows of one
// token (a mixture's down): at most 128 registers, four blocks a multiprocessor (its 512 blocks of
// eight slots one wave). 0: no minimum.
template <int NT, int RW, bool GLU, int H>
constexpr int mv_min_blocks() { return NT == 1 && GLU && RW == 2 ? 6 : NT == 1 && H == 2 ? 4 : 0; }

template <int NT, int S, int RW, bool GLU, int H = 1>
__global__ void __launch_bounds__(kMvWarps * kWarp, mv_min_blocks<NT, RW, GLU, H>()) k_mv_codes(const MvArgs a) {
  static_assert(H == 1 || (H == 2 && !GLU), "half-warp row groups: products of one input");
  if (!a.trigger_late) pdl_trigger();
  if (a.ids && !a.ids_early) pdl_wait();
  if (a.trigger_late) pdl_trigger();
  unsigned bx = blockIdx.x;
  int si = 0;
  while (si + 1 < a.nseg && bx >= a.seg[si].blocks) bx -= a.seg[si].blocks, ++si;
  const MvSeg& g = a.seg[si];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = (static_cast<int64_t>(bx) * (kMvWarps / S) + warp / S) * RW * H;
  const int half = lane / (kWarp / H);  // H = 2: this half-warp's rows r0 + RW half ..
  const int ks = warp % S;
  const int t0 = blockIdx.y * NT, nt = min(NT, a.n - t0);
  const int64_t e = !a.ids ? 0 : a.ids_early ? __ldcg(a.ids + t0) : a.ids[t0];
  constexpr int P = GLU ? 2 : 1, R = RW * P;  // row i of product p: acc[p * RW + i]
  float acc[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = 0;
  const int xr = t0 / a.x_div;
  Codes c{a.c.q + static_cast<int64_t>(xr) * a.cols, a.c.d + xr * (a.cols / 256), a.c.s + xr * (a.cols / 32)};
  if constexpr (NT == 1) {
    // The slot's row quantized here (xf): warp w super-block w, as k_quantize_q8k does it.
    __shared__ __align__(16) uint8_t xq[kMvQuantCols + kMvQuantCols / 64 + 16 + kMvQuantCols / 16];
    if (a.ids_early && threadIdx.x == 0) {
      // The block's rows (consecutive) on their way to L2 meanwhile.
      const int64_t b0 = static_cast<int64_t>(bx) * (kMvWarps / S) * RW * H, b1 = min(b0 + (kMvWarps / S) * RW * H, g.rows);
      if (b0 < b1) prefetch_l2(g.w + e * g.expert_bytes + (g.first + b0) * g.row_bytes, (b1 - b0) * g.row_bytes);
    }
    if (a.xf) {
      if (a.ids_early) pdl_wait();
      c = codes_layout(xq, 1, a.cols);
      if (warp < a.cols / 256) store_codes_of(a.xf + xr * a.xf_stride + warp * 256, 0, warp, a.cols, c);
      __syncthreads();
    }
  }
  if (r0 < g.rows) {
    const uint8_t* rows[R];
    for (int p = 0; p < P; ++p) {
      const MvSeg& gp = a.seg[GLU ? p : si];
      for (int i = 0; i < RW; ++i)
        rows[p * RW + i] = gp.w + e * gp.expert_bytes + (gp.first + min(r0 + RW * half + i, g.rows - 1)) * gp.row_bytes;
    }
    const int cols = static_cast<int>(a.cols);
    if (g.type == kQ4_K) rows_codes<Q4kLane, NT, S, R, H>(rows, cols / 256, ks, c, cols, nt, acc);
    else if (g.type == kQ5_K) rows_codes<Q5kLane, NT, S, R, H>(rows, cols / 256, ks, c, cols, nt, acc);
    else rows_codes<Q6kLane, NT, S, R, H>(rows, cols / 256, ks, c, cols, nt, acc);
  }
  pdl_wait();  // (again: warps with no rows, lanes with no super-blocks)
  __shared__ float part[kMvWarps][H * R * NT];
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < NT; ++t) {
      const float v = warp_sum<kWarp / H>(acc[i][t]);
      if (lane % (kWarp / H) == 0) part[warp][(half * R + i) * NT + t] = v;
    }
  }
  if constexpr (S > 1) __syncthreads();
  else __syncwarp();
  if (ks != 0 || lane >= NT * RW * H) return;
  const int t = lane % NT, i = lane / NT;  // lane: token t of row r0 + i (t < nt below)
  const int64_t r = r0 + i;
  if (t >= nt || r >= g.rows) return;
  float y[P];
  for (int p = 0; p < P; ++p) {
    float v = 0;
    for (int k = 0; k < S; ++k) v += part[warp + k][(p * RW + i) * NT + t];
    const MvSeg& gp = a.seg[GLU ? p : si];
    y[p] = v + (gp.bias ? gp.bias[e * gp.bias_stride + r] : 0.0f);
  }
  g.out[(t0 + t) * g.os + r] = GLU ? glu_value(a.glu == Glu::GeGLU, y[0], y[1]) : y[0];
}

// The one-token launch shape (k_mv_codes, k_mv_rows): RW rows per warp (sharing each step's activation
// loads) and S warps per group of rows (each a share of the super-blocks), measured with
// zinc_cuda_matvec_bench on an H200: at least 4096 rows (expert slots: counted as a token's 8), four
// rows a warp and two warps for rows of 4096 columns or more (gate and up together: two rows of each,
// one warp); 1024 to 4096 rows, two rows and four warps where there are 16 super-blocks; fewer, one
// row, as many warps as leave each 8 super-blocks (up to four). A vocabulary's rows (kWideRows and
// more) one warp a row group: the logits' 151936x4096 Q6_K 160.3 -> 150.4 us at one token (blocks
// enough to fill the GPU without splitting a row), and at 8 tokens half the streams for the tensor
// cores to repeat.
constexpr int64_t kWideRows = 65536;
void one_token_shape(int64_t rows, int64_t nsb, bool glu, int& S, int& RW) {
  RW = 1, S = 1;
  if (rows >= 4096) {
    RW = glu ? 2 : 4;
    S = glu || nsb < 16 || rows >= kWideRows ? 1 : 2;
  } else if (rows >= 1024) {
    RW = 2;
    S = nsb >= 16 ? 4 : nsb >= 8 ? 2 : 1;
  } else {
    while (S < 4 && nsb / (2 * S) >= 8) S *= 2;
  }
}

// Expert slots, a block each.
template <bool GLU>
void launch_mv_codes(Stream s, MvArgs& a, int split, int rows_per_warp) {
  const int P = GLU ? 1 : a.nseg;
  int64_t rows = 0;
  for (int i = 0; i < P; ++i) rows += a.seg[i].rows;
  // (Expert slots counted as a token's 8, whatever the step's tokens: a slot's shape, and so the order
  // its row is summed in, that of a step of its token alone.)
  const int64_t nsb = a.cols / 256, work = rows * 8;
  int RW = 1, S = 1;
  one_token_shape(work, nsb, GLU, S, RW);
  if (rows_per_warp > 0) RW = rows_per_warp;
  if (RW != 1 && RW != 2 && RW != 4) RW = 1;
  if (split == 1 || split == 2 || split == 4) S = split;
  if (GLU) RW = std::min(RW, 2);  // (the shapes instantiated)
  // Half-warp row groups for rows of at most four super-blocks (four rows a warp): at most two steps a
  // half-warp.
  const int H = !GLU && S == 1 && RW == 4 && nsb <= 4 ? 2 : 1;
  // Products of one input: the Q6_K ones' blocks first (their rows take longest; last, they would be
  // the launch's tail).
  if (!GLU) std::stable_partition(a.seg, a.seg + a.nseg, [](const MvSeg& g) { return g.type == kQ6_K; });
  unsigned blocks = 0;
  for (int i = 0; i < a.nseg; ++i) {
    a.seg[i].blocks = static_cast<unsigned>((a.seg[i].rows + H * RW * (kMvWarps / S) - 1) / (H * RW * (kMvWarps / S)));
    if (i < P) blocks += a.seg[i].blocks;
  }
  if (GLU) a.nseg = 1;  // the second segment is read through seg[1] by the first's warps
  const dim3 grid(blocks, static_cast<unsigned>(a.n)), block(kMvWarps * kWarp);
#define ZINC_MV(SS, RR) \
  if (S == SS && RW == RR) return launch(k_mv_codes<1, SS, RR, GLU>, grid, block, s, a);
  ZINC_MV(1, 1) ZINC_MV(2, 1) ZINC_MV(4, 1) ZINC_MV(1, 2) ZINC_MV(2, 2) ZINC_MV(4, 2)
  if constexpr (!GLU) {
    if (H == 2) return launch(k_mv_codes<1, 1, 4, false, 2>, grid, block, s, a);
    ZINC_MV(1, 4) ZINC_MV(2, 4) ZINC_MV(4, 4)
  }
#undef ZINC_MV
}

// ---- steps of up to kSameRows rows: each row summed as in a step of its token alone -------------
//
// A row's product is the sum of its super-blocks' values (super_value: exact integer sums, then the
// float scales), summed in one order whatever the step's other rows: T = W S streams (W = 32 / kLanes
// lane groups a warp, S warps a row group, the one-token shape's), stream j = ks W + g taking
// super-blocks j, j + T, ... in order; a warp's W streams added as the warp's lanes exchange them
// (xor 16 first: for W = 4 (a0 + a2) + (a1 + a3)), then the S warps' sums one after the other from 0.
// k_mv_rows (packed dot products) forms it so for any tokens, k_mv_mma (integer tensor cores) for up
// to kSameRows tokens (MvSeg::streams), so a speculative step's rows, and a few sequences' rows
// decoded together, are each that of its token alone bit for bit.

constexpr int kMmaWarps = 8;  // the most warps a tile of k_mv_mma takes

// The first index a lane keeps of scatter_sum<K, M> (l: the lane within its group).
template <int K, int M>
__device__ __forceinline__ int scatter_base(int l) {
  int base = 0, c = M;
#pragma unroll
  for (int m = K / 2; m >= 1 && c > 1; m /= 2) {
    if (l & m) base += c / 2;
    c /= 2;
  }
  return base;
}

// Each lane's M integers summed over its group of K consecutive lanes (exact) and scattered: the lane
// keeps the sums of indices scatter_base + j, j < max(1, M / K) (from its bits within the group).
template <int K, int M>
__device__ __forceinline__ void scatter_sum(int (&v)[M], int l) {
  int c = M;
#pragma unroll
  for (int m = K / 2; m >= 1; m /= 2) {
    if (c > 1) {
      const bool hi = l & m;
      const int h = c / 2;
#pragma unroll
      for (int j = 0; j < M / 2; ++j) {
        if (j >= h) break;
        const int send = hi ? v[j] : v[j + h], keep = hi ? v[j + h] : v[j];
        v[j] = keep + __shfl_xor_sync(0xffffffffu, send, m);
      }
      c = h;
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], m);
    }
  }
}

// The (row, token) sums each lane keeps of a lane group's R NT (scatter_sum).
template <class L, int NT, int R>
constexpr int kOwn = R * NT >= L::kLanes ? R * NT / L::kLanes : 1;

// A warp's R rows (the same for every lane) over its streams' super-blocks (ks W + g, then T further;
// U steps loaded before any is used), NT tokens: each super-block's integer sums per (row, token)
// scattered over the group, each lane forming the values of its share and adding them to its own
// sums, then the groups' sums added across the warp. Returns the lane's first index (row r token t:
// r NT + t); acc: its OWN sums (the warp's, in every group).
// PAIR (gate and up): two streams a warp instead of W (stream q: the groups q, q + 2, ... of each
// step, added in turn by group q), the form the tensor cores' two warps a tile sum without exchanges.
template <class L, int NT, int R, bool PAIR>
__device__ __forceinline__ int rows_streams(const uint8_t* const* rows, bool any, int nsb, int ks, int S, const Codes& c, int cols, int nt,
                                            float (&acc)[kOwn<L, NT, R>]) {
  constexpr int W = kWarp / L::kLanes, M = R * NT, OWN = kOwn<L, NT, R>;
  // (Twice the steps in flight of k_mv_codes: each step's sums wait on the exchanges.)
  constexpr int U = sizeof(L) * R > 128 ? 1 : sizeof(L) * R > 64 ? 2 : 4;
  const int lane = threadIdx.x % kWarp, l8 = lane % L::kLanes, grp = lane / L::kLanes;
  const typename L::Lane ln(l8);
  const int base = scatter_base<L::kLanes, M>(l8);
  bool waited = false;
  for (int b0 = ks * W; any && b0 < nsb; b0 += W * S * U) {
    L raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = min(b0 + u * W * S + grp, nsb - 1);
      if (b0 + u * W * S < nsb) {
#pragma unroll
        for (int r = 0; r < R; ++r) raw[u][r].load(rows[r] + b * L::kBytes, l8);
      }
    }
    if (!waited) pdl_wait(), waited = true;  // the codes are the previous kernels' output
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (b0 + u * W * S >= nsb) break;
      const bool valid = b0 + u * W * S + grp < nsb;
      const int b = min(b0 + u * W * S + grp, nsb - 1);
      typename L::Whole a[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) a[t] = L::whole(ln, b, c, cols, min(t, nt - 1));
      int v[M];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) v[r * NT + t] = raw[u][r].isum(ln, a[t]);
      scatter_sum<L::kLanes, M>(v, l8);
#pragma unroll
      for (int j = 0; j < OWN; ++j) {
        const int i = base + j, ri = i / NT, ti = i % NT;
        typename L::Head h = raw[u][0].head_of();
#pragma unroll
        for (int r = 1; r < R; ++r)
          if (r == ri) h = raw[u][r].head_of();
        typename L::Whole at = a[0];
#pragma unroll
        for (int t = 1; t < NT; ++t)
          if (t == ti) at = a[t];
        const float val = L::value_of(h, at, v[j]);
        if constexpr (PAIR) {
          // Group q (0, 1) adds its value, then those of groups q + 2, q + 4, ... (later super-blocks).
          const int first = b0 + u * W * S + grp % 2;
          if (grp < 2 && first < nsb) acc[j] = __fadd_rn(acc[j], val);
#pragma unroll
          for (int k = 1; k < W / 2; ++k) {
            const float got = __shfl_sync(0xffffffffu, val, (lane + 2 * k * L::kLanes) % kWarp);
            if (grp < 2 && first + 2 * k < nsb) acc[j] = __fadd_rn(acc[j], got);
          }
        } else {
          if (valid) acc[j] = __fadd_rn(acc[j], val);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < OWN; ++j) {
    if constexpr (PAIR) {
      acc[j] = __fadd_rn(acc[j], __shfl_sync(0xffffffffu, acc[j], (lane + L::kLanes) % kWarp));  // group 0: stream 0 + stream 1
    } else {
#pragma unroll
      for (int m = kWarp / 2; m >= L::kLanes; m /= 2) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], m);
    }
  }
  return base;
}

// The warp's sums into part[r NT + t] (the first group's lanes).
template <class L, int NT, int R, bool PAIR>
__device__ __forceinline__ void rows_part(const uint8_t* const* rows, bool any, int nsb, int ks, int S, const Codes& c, int cols, int nt, float* part) {
  constexpr int OWN = kOwn<L, NT, R>;
  float acc[OWN];
#pragma unroll
  for (int j = 0; j < OWN; ++j) acc[j] = 0;
  const int base = rows_streams<L, NT, R, PAIR>(rows, any, nsb, ks, S, c, cols, nt, acc);
  if (threadIdx.x % kWarp < L::kLanes) {
#pragma unroll
    for (int j = 0; j < OWN; ++j) part[base + j] = acc[j];
  }
}

// Products of one input without expert slots (up to four segments as k_mv_codes; GLU: gate and up on
// the same warps, combined into the first's output): RW rows a warp, S (MvSeg::split) warps a row
// group, NT tokens a block. (Gate and up for one token within 128 registers, four blocks a
// multiprocessor, as before the pairs: 146 without the bound.)
template <int NT, int RW, bool GLU>
__global__ void __launch_bounds__(kMvWarps * kWarp, GLU && NT == 1 ? 4 : 0) k_mv_rows(const MvArgs a) {
  pdl_trigger();
  unsigned bx = blockIdx.x;
  int si = 0;
  while (si + 1 < a.nseg && bx >= a.seg[si].blocks) bx -= a.seg[si].blocks, ++si;
  const MvSeg& g = a.seg[si];
  const int S = g.split;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = (static_cast<int64_t>(bx) * (kMvWarps / S) + warp / S) * RW;
  const int ks = warp % S;
  const int t0 = blockIdx.y * NT, nt = min(NT, a.n - t0);
  constexpr int P = GLU ? 2 : 1, R = RW * P;  // row i of product p: index p RW + i
  const int xr = t0 / a.x_div, cols = static_cast<int>(a.cols);
  const Codes c{a.c.q + static_cast<int64_t>(xr) * a.cols, a.c.d + xr * (a.cols / 256), a.c.s + xr * (a.cols / 32)};
  const uint8_t* rows[R];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const MvSeg& gp = a.seg[GLU ? p : si];
#pragma unroll
    for (int i = 0; i < RW; ++i) rows[p * RW + i] = gp.w + (gp.first + min(r0 + i, g.rows - 1)) * gp.row_bytes;
  }
  __shared__ float part[kMvWarps][R * NT];
  const bool any = r0 < g.rows;
  if (g.type == kQ4_K) rows_part<Q4kLane, NT, R, GLU>(rows, any, cols / 256, ks, S, c, cols, nt, part[warp]);
  else if (g.type == kQ5_K) rows_part<Q5kLane, NT, R, GLU>(rows, any, cols / 256, ks, S, c, cols, nt, part[warp]);
  else rows_part<Q6kLane, NT, R, GLU>(rows, any, cols / 256, ks, S, c, cols, nt, part[warp]);
  pdl_wait();  // (again: warps with no rows)
  if (S > 1) __syncthreads();
  else __syncwarp();
  if (ks != 0 || lane >= NT * RW) return;
  const int t = lane % NT, i = lane / NT;  // lane: token t of row r0 + i
  const int64_t r = r0 + i;
  if (t >= nt || r >= g.rows) return;
  float y[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    float v = 0;
    for (int k = 0; k < S; ++k) v += part[warp + k][(p * RW + i) * NT + t];
    const MvSeg& gp = a.seg[GLU ? p : si];
    y[p] = v + (gp.bias ? gp.bias[r] : 0.0f);
  }
  g.out[(t0 + t) * g.os + r] = GLU ? glu_value(a.glu == Glu::GeGLU, y[0], y[1]) : y[0];
}

// The split of a launch without expert slots (rows: of its products, or gate's alone), every token
// count the one-token shape's (split: 1, 2 or 4 for measurements).
int rows_split(int64_t rows, int64_t nsb, bool glu, int split) {
  int S = 1, RW = 1;
  one_token_shape(rows, nsb, glu, S, RW);
  return split == 1 || split == 2 || split == 4 ? split : S;
}

template <int NT, bool GLU>
void launch_mv_rows(Stream s, MvArgs& a, int split, int rows_per_warp) {
  const int P = GLU ? 1 : a.nseg;
  int64_t rows = 0;
  for (int i = 0; i < P; ++i) rows += a.seg[i].rows;
  const int64_t nsb = a.cols / 256;
  int S = 1, RW = 1;
  one_token_shape(rows, nsb, GLU, S, RW);
  if (split == 1 || split == 2 || split == 4) S = split;
  if constexpr (NT > 1) RW = rows >= 1024 ? 2 : 1;  // several tokens: two rows a warp share each step's activation loads
  if (rows_per_warp == 1 || rows_per_warp == 2 || rows_per_warp == 4) RW = rows_per_warp;
  if (GLU || NT > 1) RW = std::min(RW, 2);  // (the shapes instantiated)
  if (!GLU) std::stable_partition(a.seg, a.seg + a.nseg, [](const MvSeg& g) { return g.type == kQ6_K; });
  unsigned blocks = 0;
  for (int i = 0; i < a.nseg; ++i) {
    a.seg[i].split = S;
    a.seg[i].blocks = static_cast<unsigned>((a.seg[i].rows + RW * (kMvWarps / S) - 1) / (RW * (kMvWarps / S)));
    if (i < P) blocks += a.seg[i].blocks;
  }
  if (GLU) a.nseg = 1;  // the second segment is read through seg[1] by the first's warps
  const dim3 grid(blocks, static_cast<unsigned>((a.n + NT - 1) / NT)), block(kMvWarps * kWarp);
  if (RW == 2) return launch(k_mv_rows<NT, 2, GLU>, grid, block, s, a);
  if constexpr (NT == 1 && !GLU) {
    if (RW == 4) return launch(k_mv_rows<1, 4, false>, grid, block, s, a);
  }
  launch(k_mv_rows<NT, 1, GLU>, grid, block, s, a);
}

// ST: a warp's tokens' codes of each super-block staged in shared memory before they are used (16-byte
// asynchronous copies, the next super-block's while this one is computed), instead of each fragment read
// from memory (8 tokens' rows each read: eight cache lines). Per warp: two stages of 8 NJ tokens' rows of
// kStageRow bytes (256 and 16 to spread a fragment's rows over the banks), then the tokens' code rows.
constexpr int kStageRow = 272;
template <int NJ>
struct Stage {
  static constexpr int kTokens = 8 * NJ, kBytes = 2 * kTokens * kStageRow + kTokens * 4;
  uint8_t* base;  // this warp's
  const int* trow;
  __device__ uint8_t* at(int k, int t) const { return base + (k * kTokens + t) * kStageRow; }
  // Super-block b of every token into stage k (lane l: chunk l % 16 of tokens l / 16, + 2, ...).
  __device__ void copy(const Codes& c, int cols, int b, int k) const {
    const int lane = threadIdx.x % kWarp, ch = lane % 16;
#pragma unroll
    for (int i = 0; i < kTokens / 2; ++i) {
      const int t = lane / 16 + 2 * i;
      const int8_t* src = c.q + static_cast<int64_t>(trow[t]) * cols + b * 256 + ch * 16;
      cp_async16_l1(at(k, t) + ch * 16, src);
    }
    cp_async_commit();
  }
};

// A warp's share of its tile's super-blocks (ks, ks + S, ...), U of them loaded before any is used;
// P products of the same rows (gate and up) sharing the activations.
// NS: a warp's streams (MvSeg::streams): its q-th super-block's sums go to acc[q % NS].
template <class W, int NJ, int P, bool ST, int NS>
__device__ __forceinline__ void mma_rows(const uint8_t* const (&rows)[P][2], int nsb, int ks, int S, const MmaTok& tk, const Stage<NJ>& st,
                                         const Codes& c, int cols, float (&acc)[NS][P][NJ][4]) {
  constexpr int U = P == 1 && NJ != 2 ? 2 : 1;  // (16 tokens a warp: within 128 registers)
  constexpr int G = U > NS ? U : NS;              // super-blocks a round (whole steps of U, whole streams)
  const int tq = threadIdx.x % 4, gq = (threadIdx.x % kWarp) / 4;
  bool waited = false;
  int k = 0;  // ST: the stage of the next super-block to compute
  for (int b00 = ks; b00 < nsb; b00 += S * G)
#pragma unroll
  for (int i0 = 0; i0 < G; i0 += U) {
    const int b0 = b00 + i0 * S;
    if (b0 >= nsb) break;
    W raw[U][P];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * S;
      if (b < nsb) {
#pragma unroll
        for (int p = 0; p < P; ++p) raw[u][p].load(rows[p], b, tq);
      }
    }
    if (!waited) {
      pdl_wait(), waited = true;  // the codes are the previous kernels' output
      if constexpr (ST) st.copy(c, cols, ks, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * S;
      if (b >= nsb) break;
      const int8_t* xs[NJ];
      if constexpr (ST) {
        if (b + S < nsb) st.copy(c, cols, b + S, k ^ 1);
        else cp_async_commit();  // (an empty group: the wait below still leaves one in flight)
        cp_async_wait<1>();
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NJ; ++j) xs[j] = reinterpret_cast<const int8_t*>(st.at(k, 8 * j + gq));
      } else {
#pragma unroll
        for (int j = 0; j < NJ; ++j) xs[j] = tk.q[j] + b * 256;
      }
      dot_parts<W, NJ, P>(raw[u], b, tq, xs, tk, c, cols, acc[(i0 + u) % NS]);
      if constexpr (ST) {
        __syncwarp();  // (every lane done with stage k before the next copy into it)
        k ^= 1;
      }
    }
  }
}

// The same with the weights staged too (WS): each super-block's rows copied into the warp's shared
// memory (16-byte asynchronous copies through L2 only) a super-block ahead of their use, in the same
// group as the codes' copies, so that the next super-block's loads are in flight while one is
// computed without holding registers (the first one's weights copied before the wait on the previous
// kernels). wst: the warp's two stages of P x 16 slots of `wslot` bytes; a Q6_K block (2-byte aligned)
// keeps its offset within 16 bytes.
template <class W, int P>
__device__ __forceinline__ void copy_weights(const uint8_t* const (&rows)[P][2], int b, uint8_t* stage, int wslot) {
  const int tq = threadIdx.x % 4, gq = (threadIdx.x % kWarp) / 4;
  constexpr int kChunks = staged_chunks<W>();
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* blk = rows[p][i] + static_cast<int64_t>(b) * W::kBytes;
      uint8_t* to = stage + (p * 16 + gq + 8 * i) * wslot;
#pragma unroll
      for (int m = 0; m < (kChunks + 3) / 4; ++m) copy_staged_chunk<W>(to, blk, tq + 4 * m);
    }
}

template <class W, int NJ, int P, int NS>
__device__ __forceinline__ void mma_rows_staged(const uint8_t* const (&rows)[P][2], int nsb, int ks, int S, const MmaTok& tk, const Stage<NJ>& st,
                                                uint8_t* wst, int wslot, const Codes& c, int cols, float (&acc)[NS][P][NJ][4]) {
  const int tq = threadIdx.x % 4, gq = (threadIdx.x % kWarp) / 4;
  const int wstage = P * 16 * wslot;
  copy_weights<W, P>(rows, ks, wst, wslot);
  pdl_wait();                   // the codes are the previous kernels' output
  st.copy(c, cols, ks, 0);      // (closes the group, the weights' copies with it)
  int k = 0;
  for (int b0 = ks; b0 < nsb; b0 += S * NS)
#pragma unroll
  for (int q = 0; q < NS; ++q) {
    const int b = b0 + q * S;
    if (b >= nsb) break;
    if (b + S < nsb) {
      copy_weights<W, P>(rows, b + S, wst + (k ^ 1) * wstage, wslot);
      st.copy(c, cols, b + S, k ^ 1);
    } else {
      cp_async_commit();  // (an empty group: the wait below still leaves one in flight)
    }
    cp_async_wait<1>();
    __syncwarp();
    const int8_t* xs[NJ];
#pragma unroll
    for (int j = 0; j < NJ; ++j) xs[j] = reinterpret_cast<const int8_t*>(st.at(k, 8 * j + gq));
    // One part at a time (each reading the activations' fragments again): one part's weights in
    // registers, so that gate and up fit in 128 and twice the warps are resident.
#pragma unroll
    for (int p = 0; p < P; ++p) {
      W raw[1];
      const uint8_t* blk[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uintptr_t mis = staged_offset<W>(rows[p][i], b);
        blk[i] = wst + k * wstage + (p * 16 + gq + 8 * i) * wslot + mis;
      }
      raw[0].load_staged(blk, tq);
      dot_parts<W, NJ, 1>(raw, b, tq, xs, tk, c, cols, reinterpret_cast<float(&)[1][NJ][4]>(acc[q][p]));
    }
    __syncwarp();  // (every lane done with stage k before the next copies into it)
    k ^= 1;
  }
}

// Blocks of max(S, kMvWarps) warps: S (1 to kMmaWarps) warps a tile. Without an activation, up to 16
// tokens a warp in at most 128 registers: twice the warps resident, measured faster on an H200 (8 and
// 16 tokens: 10-25%); more tokens a warp spill there, and gate and up with their activation (8 tokens:
// 26 us uncapped, 30 capped).
// R: tiles of 16 rows a warp (without an activation), sharing each load of the activations.
// WS (with ST): the weights staged in shared memory as well (mma_rows_staged; a.wslot bytes a row's
// super-block). CAP: at most that many registers (0: as the bounds allow).
// NS: each warp's streams (MvSeg::streams; 1 but for up to kSameRows tokens).
template <int NJ, bool GLU, int R, bool ST, bool WS = false, int CAP = 0, int NS = 1>
__global__ void __launch_bounds__(kMmaWarps * kWarp, (!GLU && (NJ == 1 || (NJ == 2 && R == 1))) || WS ? 2 : 1) __maxnreg__(CAP > 0 ? CAP : 255)
    k_mv_mma(const MvArgs a) {
  static_assert(R == 1 || !GLU);
  static_assert(ST || !WS);
  extern __shared__ __align__(16) uint8_t mma_stage[];
  pdl_trigger();
  // Ungrouped: blockIdx.x the group of tokens, blockIdx.y the rows (a tile's groups run together and
  // share its weights' reads in L2).
  unsigned bx = a.order ? blockIdx.x : blockIdx.y;
  int si = 0;
  while (si + 1 < a.nseg && bx >= a.seg[si].blocks) bx -= a.seg[si].blocks, ++si;
  const MvSeg& g = a.seg[si];
  const int S = g.split;  // the tile's warps
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, gq = lane / 4, tq = lane % 4;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const int64_t r0 = (static_cast<int64_t>(bx) * (warps / S) + warp / S) * 16 * R;
  const int ks = warp % S;
  int t0 = blockIdx.x * 8 * NJ, count = a.n, base = 0;
  int64_t ex = 0;
  if (a.order) {
    // Grouped by expert: blockIdx.y is the expert, blockIdx.z the group of its slots (the slots and
    // offsets are the previous kernels' output).
    pdl_wait();
    ex = blockIdx.y;
    base = a.offsets[ex];
    count = a.offsets[ex + 1] - base;
    t0 = blockIdx.z * 8 * NJ;
    if (t0 >= count) return;  // (the whole block)
  }
  // Slot t of the block's list: its row of the output, and of the codes (t past the list: the last).
  const auto slot = [&](int t) {
    t = min(t, count - 1);
    return a.order ? a.order[base + t] : t;
  };
  constexpr int P = GLU ? 2 : R;  // the parts: gate and up, or R tiles of rows
  constexpr int streams = NS;
  float acc[NS][P][NJ][4];
#pragma unroll
  for (int i = 0; i < NS; ++i)
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int j = 0; j < NJ; ++j) acc[i][p][j][0] = acc[i][p][j][1] = acc[i][p][j][2] = acc[i][p][j][3] = 0;
  const int cols = static_cast<int>(a.cols);
  if (r0 < g.rows) {
    const uint8_t* rows[P][2];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const MvSeg& gp = a.seg[GLU ? p : si];
      const int64_t rp = GLU ? r0 : r0 + 16 * p;
      for (int i = 0; i < 2; ++i)
        rows[p][i] = gp.w + ex * gp.expert_bytes + (gp.first + min(rp + gq + 8 * i, g.rows - 1)) * gp.row_bytes;
    }
    MmaTok tk;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      tk.q[j] = a.c.q + static_cast<int64_t>(slot(t0 + 8 * j + gq) / a.x_div) * cols;
      tk.qd[j][0] = slot(t0 + 8 * j + 2 * tq) / a.x_div;
      tk.qd[j][1] = slot(t0 + 8 * j + 2 * tq + 1) / a.x_div;
    }
    Stage<NJ> st{};
    // This warp's shared memory: its codes' stages (ST), then its weights' (WS).
    const int st_bytes = ST ? Stage<NJ>::kBytes : 0;
    uint8_t* const mine = mma_stage + warp * (st_bytes + (WS ? 2 * P * 16 * a.wslot : 0));
    if constexpr (ST) {
      st.base = mine;
      int* trow = reinterpret_cast<int*>(st.base + 2 * Stage<NJ>::kTokens * kStageRow);
      if (lane < Stage<NJ>::kTokens) trow[lane] = slot(t0 + lane) / a.x_div;
      __syncwarp();
      st.trow = trow;
    }
    const int nsb = cols / 256;
    if constexpr (WS) {
      uint8_t* const wst = mine + st_bytes;
      if (g.type == kQ4_K) mma_rows_staged<Q45Mma<kQ4_K>, NJ, P, NS>(rows, nsb, ks, S, tk, st, wst, a.wslot, a.c, cols, acc);
      else if (g.type == kQ5_K) mma_rows_staged<Q45Mma<kQ5_K>, NJ, P, NS>(rows, nsb, ks, S, tk, st, wst, a.wslot, a.c, cols, acc);
      else mma_rows_staged<Q6Mma, NJ, P, NS>(rows, nsb, ks, S, tk, st, wst, a.wslot, a.c, cols, acc);
    } else {
      if (g.type == kQ4_K) mma_rows<Q45Mma<kQ4_K>, NJ, P, ST, NS>(rows, nsb, ks, S, tk, st, a.c, cols, acc);
      else if (g.type == kQ5_K) mma_rows<Q45Mma<kQ5_K>, NJ, P, ST, NS>(rows, nsb, ks, S, tk, st, a.c, cols, acc);
      else mma_rows<Q6Mma, NJ, P, ST, NS>(rows, nsb, ks, S, tk, st, a.c, cols, acc);
    }
  }
  pdl_wait();  // (again: warps with no rows or no super-blocks)
  if (g.canon) {
    // The tile's T = S streams streams (stream j: super-blocks j, j + T, ...) added as k_mv_rows adds
    // them: for each of the one-token shape's T / W warps, its W streams as the lanes exchange them,
    // then those sums one after the other (the rows of steps of up to kSameRows tokens each that of
    // its token alone). acc[i]: stream ks + S i (the rotations undone).
    static_assert(NS == 1 || (NJ == 1 && R == 1), "streams: steps of up to kSameRows tokens");
    const int T = S * streams, Wg = g.canon, tile = warp / S;
    const auto tree = [&](const auto& at, int j) {
      return Wg == 4 ? (at(j) + at(j + 2)) + (at(j + 1) + at(j + 3))
                     : ((at(j) + at(j + 4)) + (at(j + 2) + at(j + 6))) + ((at(j + 1) + at(j + 5)) + (at(j + 3) + at(j + 7)));
    };
    float res[P][4];
    if (S == 1) {  // every stream this warp's
#pragma unroll
      for (int p = 0; p < P; ++p)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = 0;
          if constexpr (NS == 4) {
            if (Wg == 4) v += (acc[0][p][0][e] + acc[2][p][0][e]) + (acc[1][p][0][e] + acc[3][p][0][e]);
          }
          res[p][e] = v;
        }
    } else {
      __shared__ float cbuf[kMmaWarps * 4][kWarp];  // (a block's warps times their streams)
#pragma unroll
      for (int p = 0; p < P; ++p)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
#pragma unroll
          for (int i = 0; i < NS; ++i)
            if (i < streams) cbuf[tile * T + ks + S * i][lane] = acc[i][p][0][e];
          __syncthreads();
          if (ks == 0) {
            const auto at = [&](int j) { return cbuf[tile * T + j][lane]; };
            float v = 0;
            for (int k = 0; k < T / Wg; ++k) v += tree(at, k * Wg);
            res[p][e] = v;
          }
          __syncthreads();
        }
    }
    if (ks != 0) return;
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[0][p][0][e] = res[p][e];
  } else if (S > 1) {
    // The tile's S warps' sums halved through shared memory (warps h .. 2h - 1 of the tile to warps
    // 0 .. h - 1) until its first warp holds them.
    __shared__ float part[kMmaWarps / 2][P * NJ * 4][kWarp];
    const int tile = warp / S;
    for (int h = S / 2; h >= 1; h /= 2) {
      if (ks >= h && ks < 2 * h) {
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
          for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) part[tile * (S / 2) + ks - h][(p * NJ + j) * 4 + e][lane] = acc[0][p][j][e];
      }
      __syncthreads();
      if (ks < h) {
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
          for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[0][p][j][e] += part[tile * (S / 2) + ks][(p * NJ + j) * 4 + e][lane];
      }
      __syncthreads();
    }
    if (ks != 0) return;
  }
  // Element e of group j: row r0 + gq + 8 (e / 2) (of tile p: + 16p), token t0 + 8j + 2tq + e % 2.
#pragma unroll
  for (int q = 0; q < (GLU ? 1 : R); ++q)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = r0 + 16 * q + gq + 8 * (e / 2);
      if (r >= g.rows) continue;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int t = t0 + 8 * j + 2 * tq + e % 2;
        if (t >= count) continue;
        float y;
        if constexpr (GLU) {
          float v[2];
#pragma unroll
          for (int p = 0; p < 2; ++p) v[p] = acc[0][p][j][e] + (a.seg[p].bias ? a.seg[p].bias[ex * a.seg[p].bias_stride + r] : 0.0f);
          y = glu_value(a.glu == Glu::GeGLU, v[0], v[1]);
        } else {
          y = acc[0][q][j][e] + (g.bias ? g.bias[ex * g.bias_stride + r] : 0.0f);
        }
        g.out[static_cast<int64_t>(slot(t)) * g.os + r] = y;
      }
    }
}

// Gate and up at 16 tokens a warp with their codes staged: in at most kGluRegs registers (none spilled),
// three blocks of four warps an SM against two at 230. Measured on an H200 (zinc_cuda_matvec_bench 16,
// 2 x 12288 x 4096 Q4_K, us): 38.1 -> 31.8 with two warps a tile (the warps' budget from these
// registers chooses two), though 50.2 with one; 12 tokens 37.0 -> 30.8.
constexpr int kGluRegs = 168;
// And at 8 tokens a warp grouped by expert (a mixture's few slots an expert): in at most kGluRegs1
// (195 as the bounds allow: 8 warps an SM; at 128, 16). zinc_cuda_matvec_bench N 40 1 1 C 0 moe on
// an H100, gate and up of qwen3-30b-a3b's experts, us, uncapped -> 128: 8 rows 65.1 -> 50.3, 16 105.9
// -> 76.2, 32 155.8 -> 114.9, 64 212.6 -> 157.3; at 96 and 80 registers slower again (16 rows 85.9,
// 93.3), and so was capping the down product (128 registers) to those (73.5 -> 91.9, 107.9).
constexpr int kGluRegs1 = 128;
template <int NJ, bool GLU, bool ST>
constexpr int mma_cap() { return GLU && ST ? (NJ == 2 ? kGluRegs : NJ == 1 ? kGluRegs1 : 0) : 0; }

// The warps of a k_mv_mma instantiation the GPU holds at once (its registers and shared memory).
template <int NJ, bool GLU, int R, int CAP = 0>
int64_t mma_resident_warps() {
  static const int64_t warps = [] {
    int blocks = 0;
    constexpr auto kernel = k_mv_mma<NJ, GLU, R, CAP != 0, false, CAP>;
    const size_t shared = CAP != 0 ? static_cast<size_t>(kMvWarps * Stage<NJ>::kBytes) : 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kMvWarps * kWarp, shared) != cudaSuccess || blocks < 1) {
      (void)cudaGetLastError();
      blocks = 2;
    }
    return static_cast<int64_t>(blocks) * kMvWarps * sm_count();
  }();
  return warps;
}

// With the weights staged (k_mv_mma<NJ, GLU, R, true, true>): a warp's shared memory for slots of
// `slot` bytes a row's super-block, and the warps the GPU holds at once for each slot size (0 where a
// block of the most warps does not fit in what a block may opt in to, less its static shared memory;
// that much is allowed once per instantiation).
template <int NJ, bool GLU, int R>
constexpr int staged_warp_bytes(int slot) { return Stage<NJ>::kBytes + 2 * (GLU ? 2 : R) * 16 * slot; }
template <int NJ, bool GLU, int R>
const std::array<int64_t, 3>& staged_resident_warps() {
  static const std::array<int64_t, 3> warps = [] {
    constexpr auto kernel = k_mv_mma<NJ, GLU, R, true, true>;
    std::array<int64_t, 3> w{};
    int dev = 0, optin = 0;
    cudaFuncAttributes at{};
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
        cudaFuncGetAttributes(&at, kernel) == cudaSuccess) {
      const int limit = optin - static_cast<int>(at.sharedSizeBytes);
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit) == cudaSuccess) {
        for (int i = 0; i < 3; ++i) {
          const int bytes = staged_warp_bytes<NJ, GLU, R>(kWSlots[i]);
          if (kMmaWarps * bytes > limit) continue;
          int blocks = 0;
          if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kMvWarps * kWarp, kMvWarps * bytes) != cudaSuccess || blocks < 1)
            blocks = 1;
          w[static_cast<size_t>(i)] = static_cast<int64_t>(blocks) * kMvWarps * sm_count();
        }
      }
    }
    (void)cudaGetLastError();
    return w;
  }();
  return warps;
}

// The launch shape: S warps per 16-row tile (each every S-th super-block), as many as the GPU holds at
// once (one wave: a second, partial one waits a whole warp's time), with at least two super-blocks
// each; without an activation at least two (the warps wait on their loads: more of them in flight read
// faster). Measured with zinc_cuda_matvec_bench on an H200, the best S of 1, 2, 4, 8 in every shape of
// an 8b model at 8, 16 and 32 tokens: eight a tile for q/o and down (4096 rows), four for q, k and v
// together, two for gate (12288), one for gate and up with their activation in one group of tokens
// (193-255 registers: 8 warps an SM; two: 8 tokens 33.3 us against 28.5, 32 tokens 72.9 against 65.2),
// two for them in two groups (64 tokens: 100.8 us against 116.8 with one).
// The codes staged in shared memory (ST) for 8 and 16 tokens a warp, and for 32 with at least four warps
// a tile (each warp two to four super-blocks); measured (us, read from memory -> staged): 16 tokens qkv
// 20.2 -> 15.1, down Q6_K 32.5 -> 26.3, q/o 10.3 -> 9.2; 32 tokens down Q4_K 31.4 -> 27.4, q/o 14.1 ->
// 12.8; but 32 tokens with one or two warps a tile (gate 12288 rows; gate and up) 32.7 -> 35.5 and 59.1
// -> 67.2: there they read from memory.
// One token group's launch with each warp's streams (2 or 4; up to kSameRows tokens): the codes
// staged, the weights too where `ws` (their slots' shared memory in `shared`).
template <bool GLU, int NS>
void launch_mma_ns(bool ws, dim3 grid, dim3 block, size_t shared, Stream s, const MvArgs& a) {
  constexpr auto staged = k_mv_mma<1, GLU, 1, true, true, 0, NS>;
  constexpr auto kernel = k_mv_mma<1, GLU, 1, true, false, 0, NS>;
  static const int staged_limit = allow_most_shared(staged), limit = allow_most_shared(kernel);
  if (ws && shared <= static_cast<size_t>(staged_limit)) return launch_shared(staged, grid, block, shared, s, a);
  MvArgs b = a;
  b.wslot = 0;
  launch_shared(kernel, grid, block, std::min<size_t>(block.x / kWarp * Stage<1>::kBytes, static_cast<size_t>(limit)), s, b);
}
template <bool GLU>
void launch_mma_streams(int streams, bool ws, dim3 grid, dim3 block, size_t shared, Stream s, const MvArgs& a) {
  if (streams == 2) return launch_mma_ns<GLU, 2>(ws, grid, block, shared, s, a);
  launch_mma_ns<GLU, 4>(ws, grid, block, shared, s, a);
}

template <int NJ, bool GLU, int R = 1>
void launch_mv_mma(Stream s, MvArgs& a, int split) {
  const int P = GLU ? 1 : a.nseg;
  int64_t rows = 0;
  for (int i = 0; i < P; ++i) rows += a.seg[i].rows;
  const int64_t tiles = (rows + 16 * R - 1) / (16 * R), nsb = a.cols / 256, groups = a.order ? 1 : (a.n + 8 * NJ - 1) / (8 * NJ);
  // S from the warps resident; at least two where there are eight super-blocks (without the weights
  // staged, not for gate and up in one group: their registers leave too few warps resident).
  const auto choose_s = [&](int64_t budget, bool two) {
    int S = 1;
    while (S < kMmaWarps && tiles * groups * 2 * S <= budget && nsb >= 4 * S) S *= 2;
    if (S == 1 && nsb >= 8 && two) S = 2;
    if (split == 1 || split == 2 || split == 4 || split == 8) S = split;
    return S;
  };
  constexpr bool kStages = NJ <= 2 || !GLU;  // (gate and up at 32 tokens a warp take one or two warps a tile)
  constexpr int kCap = mma_cap<NJ, GLU, kStages>();
  // (Capped where the launch's warps are at least half of those the GPU holds uncapped: measured on
  // qwen3-8b's, not on small ones; at 8 tokens a warp, grouped by expert only.)
  const bool capped = kCap != 0 && g_mma_stage &&
                      (g_mma_glu_capped == 2 ||
                       (g_mma_glu_capped == 1 && (NJ == 1 ? a.order != nullptr : tiles * groups * 2 >= mma_resident_warps<NJ, GLU, R>())));
  int S = choose_s(capped ? mma_resident_warps<NJ, GLU, R, kCap>() : mma_resident_warps<NJ, GLU, R>(), !(GLU && groups == 1));
  // Up to 8 tokens (not grouped by expert), the weights staged too (WS) where the launch's warps are at
  // least half of those the GPU holds and a block of the most warps holds them in shared memory (slots
  // of the segments' widest type). Measured on an H200 (zinc_cuda_matvec_bench 8, us, loaded as used
  // -> staged): gate and up with their activation 28.7 -> 25.4 (128 registers: 16 warps an SM, two a
  // tile), gate 12288x4096 18.1 -> 17.0, down 4096x12288 Q6_K 23.8 -> 21.4, Q4_K 15.6 -> 14.8, q, k
  // and v 12.1 -> 10.8; but with fewer warps (q/o, k, v apart: each warp's copies one super-block ahead
  // against two super-blocks loaded at once) 6.7 -> 7.2, 4.1 -> 5.2, 4.6 -> 7.6, and at 16 tokens a
  // warp slower throughout (gate and up 38.1 -> 43.4). qwen3-8b 8 sequences 2227 -> 2404 tok/s, 3 and 4
  // sequences 865 -> 875 and 1105 -> 1119; a full-depth qwen3.6-27b step verifying 2 and 3 drafted
  // tokens 12.20 -> 11.5-11.8 and 12.7 -> 12.0-12.3 ms.
  int slot = 0, per_warp = 0;
  if constexpr (NJ == 1) {
    if (g_mma_weights_stage && g_mma_stage && !a.order) {
      int k = 0;
      for (int i = 0; i < (GLU ? 2 : a.nseg); ++i) k = std::max(k, a.seg[i].type == kQ6_K ? 2 : a.seg[i].type == kQ5_K ? 1 : 0);
      const int64_t budget = staged_resident_warps<NJ, GLU, R>()[static_cast<size_t>(k)];
      const int ws = budget > 0 ? choose_s(budget, true) : 0;
      if (ws > 0 && (g_mma_weights_stage == 2 || tiles * groups * ws * 2 >= budget)) {
        S = ws;
        slot = kWSlots[k];
        per_warp = staged_warp_bytes<NJ, GLU, R>(slot);
      }
    }
  }
  // Up to kSameRows tokens (not grouped by expert): the warps a tile that k_mv_rows takes a row (each
  // row summed in the same order as in a step of its token alone; the shape's other choices, staged or
  // not, capped or not, keep the order).
  int warps = std::max(S, kMvWarps);
  for (int i = 0; i < a.nseg; ++i) a.seg[i].split = S, a.seg[i].streams = 1, a.seg[i].canon = 0;
  int streams = 1;
  if constexpr (NJ == 1 && R == 1 && GLU) {
    if (!a.order && a.n <= kSameRows && split == 0) {
      // Gate and up: k_mv_rows's two streams a row (PAIR), one a warp of two warps a tile, the second
      // warp's sum added to the first's (no streams to exchange: 8 tokens 36.6 -> 28.4 us a launch in
      // qwen3-8b on an H200).
      for (int i = 0; i < a.nseg; ++i) a.seg[i].split = 2;
      warps = std::max(2, kMvWarps);
    }
  }
  if constexpr (NJ == 1 && R == 1 && !GLU) {
    if (!a.order && a.n <= kSameRows && split == 0) {
      // Each row summed as k_mv_rows sums it with the one-token shape (T = W S streams): at most
      // kMmaWarps warps a tile, each the rest of the streams in turn.
      // The launch's streams a warp (1, 2 or 4): the fewest that leave each segment at most kMmaWarps
      // warps a tile, then more while every segment keeps at least the shape's warps a tile.
      const int Spk = rows_split(rows, nsb, GLU, 0);
      const auto lanes_w = [](const MvSeg& g) { return kWarp / (g.type == kQ6_K ? Q6kLane::kLanes : Q4kLane::kLanes); };
      int t_min = 1 << 30, t_max = 0;
      for (int i = 0; i < a.nseg; ++i) t_min = std::min(t_min, lanes_w(a.seg[i]) * Spk), t_max = std::max(t_max, lanes_w(a.seg[i]) * Spk);
      int ns = 1;
      while (t_max / ns > kMmaWarps) ns *= 2;
      while (ns < 4 && t_min / (2 * ns) >= S) ns *= 2;
      if (g_mma_streams > 0) ns = std::clamp(g_mma_streams, (t_max + kMmaWarps - 1) / kMmaWarps, t_min);
      streams = ns;
      warps = std::max(S, kMvWarps);
      for (int i = 0; i < a.nseg; ++i) {
        a.seg[i].split = lanes_w(a.seg[i]) * Spk / ns;
        a.seg[i].streams = ns;
        a.seg[i].canon = lanes_w(a.seg[i]);
        warps = std::max(warps, a.seg[i].split);
      }
    }
  }
  unsigned blocks = 0;
  for (int i = 0; i < a.nseg; ++i) {
    const int per_block = 16 * R * (warps / a.seg[i].split);
    a.seg[i].blocks = static_cast<unsigned>((a.seg[i].rows + per_block - 1) / per_block);
    if (i < P) blocks += a.seg[i].blocks;
  }
  if (GLU) a.nseg = 1;
  const dim3 grid = a.order ? dim3(blocks, static_cast<unsigned>(a.n_expert), static_cast<unsigned>((a.per_expert + 8 * NJ - 1) / (8 * NJ)))
                            : dim3(static_cast<unsigned>((a.n + 8 * NJ - 1) / (8 * NJ)), blocks);
  a.wslot = slot;
  if constexpr (NJ == 1 && R == 1) {
    if (streams > 1) return launch_mma_streams<GLU>(streams, slot != 0, grid, dim3(warps * kWarp), warps * (slot ? per_warp : Stage<1>::kBytes), s, a);
  }
  if constexpr (NJ == 1) {
    if (slot) return launch_shared(k_mv_mma<NJ, GLU, R, true, true>, grid, dim3(warps * kWarp), warps * per_warp, s, a);
  }
  if (kStages && g_mma_stage && (NJ <= 2 || S >= 4)) {
    constexpr auto kernel = k_mv_mma<NJ, GLU, R, kStages>;
    constexpr auto kernel_capped = k_mv_mma<NJ, GLU, R, kStages, false, kCap>;
    static const bool allowed =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMmaWarps * Stage<NJ>::kBytes) == cudaSuccess &&
        cudaFuncSetAttribute(kernel_capped, cudaFuncAttributeMaxDynamicSharedMemorySize, kMmaWarps * Stage<NJ>::kBytes) == cudaSuccess;
    (void)allowed;
    launch_shared(capped ? kernel_capped : kernel, grid, dim3(warps * kWarp), warps * Stage<NJ>::kBytes, s, a);
  } else {
    launch(k_mv_mma<NJ, GLU, R, false>, grid, dim3(warps * kWarp), s, a);
  }
}
bool codes_in_blocks_fit(int64_t cols) { return cols % 256 == 0 && cols <= kMvQuantCols; }

void mv_codes(Stream s, MvArgs& a, const float* x, int64_t xs, int x_div, void* q8, bool q8_ready, int split, int rows_per_warp,
              Chain chain) {
  // The codes of x's rows (n / x_div of them: expert slots of one token share theirs).
  const int rows = (a.n + x_div - 1) / x_div;
  a.x_div = x_div;
  a.c = codes_layout(q8, rows, a.cols);
  // Expert slots each of its own row (x_div 1: a mixture's down, whose codes no other product reads)
  // over rows of at most kMvQuantCols: each block quantizes its slot's row, no codes launch. (Slots
  // sharing a token's row leave its codes in q8 for the products after them.)
  if (!q8_ready && x_div == 1 && a.ids && !a.order && a.glu == Glu::None && codes_in_blocks_fit(a.cols)) {
    a.xf = x;
    a.xf_stride = xs;
    a.ids_early = chain == Chain::Second;
  } else if (!q8_ready) {
    quantize_codes(s, x, xs, 1, a.cols, rows, q8);
  }
  const bool glu = a.glu != Glu::None;
  if (a.order) {  // grouped by expert: groups of 8 of an expert's slots
    glu ? launch_mv_mma<1, true>(s, a, split) : launch_mv_mma<1, false>(s, a, split);
    return;
  }
  // Integer tensor cores from 3 rows (measured on an H200: 2 rows and, up to 4, Q6_K products alone
  // are faster as packed dot products), unless set otherwise.
  bool q6 = true;
  for (int i = 0; i < a.nseg; ++i) q6 &= a.seg[i].type == kQ6_K;
  if (!a.ids && a.n >= (g_mma_min > 0 ? g_mma_min : q6 ? 5 : 3)) {
    // Groups of 8, 16 or 32 tokens a warp (from 33: groups of 32, launched side by side).
    // Without an activation, 32 tokens a warp take two tiles of rows (each load of the activations
    // used twice: measured on an H200 at 64 tokens, 16-27% faster from 4096 rows; with fewer rows the
    // warps are too few), and so do 16 without Q6_K weights (zinc_cuda_matvec_bench 16, us: down
    // 4096 x 12288 Q4_K 21.1 -> 17.7, q/o 9.20 -> 8.94, gate 12288 rows 25.6 -> 20.6; but Q6_K down
    // 26.1 -> 29.5, v 8.4 -> 9.7).
    // Gate and up with their activation past 32 tokens: groups of 16 where the last group of 32 would
    // hold 16 tokens or fewer (zinc_cuda_matvec_bench, us, 32 -> 16 a warp: 40 tokens 89.7 -> 80.2, 48
    // 91.5 -> 81.7, 80 142.6 -> 129.5, 112 178.0 -> 176.6; but 56 94.5 -> 104.5, 64 98.1 -> 106.0, and
    // below 32 slower too). Products without one keep 32 (at 48 tokens down Q6_K 64.4 -> 91.0).
    const bool glu16 = glu && a.n > 32 && (a.n - 1) % 32 < 16;
    const int groups = g_mma_groups > 0 ? g_mma_groups : a.n <= 8 ? 1 : a.n <= 16 || glu16 ? 2 : 4;
    int64_t out_rows = 0;
    bool any_q6 = false;
    for (int i = 0; i < a.nseg; ++i) out_rows += a.seg[i].rows, any_q6 |= a.seg[i].type == kQ6_K;
    const int tiles = glu ? 1 : g_mma_tiles > 0 ? g_mma_tiles : (groups == 4 || (groups == 2 && !any_q6)) && out_rows >= 4096 ? 2 : 1;
    const auto by_groups = [&](auto glu_c, auto tiles_c) {
      constexpr bool G = decltype(glu_c)::value;
      constexpr int R = decltype(tiles_c)::value;
      if (groups == 1) launch_mv_mma<1, G, R>(s, a, split);
      else if (groups == 2) launch_mv_mma<2, G, R>(s, a, split);
      else launch_mv_mma<4, G, R>(s, a, split);
    };
    if (glu) by_groups(std::true_type{}, std::integral_constant<int, 1>{});
    else if (tiles == 1) by_groups(std::false_type{}, std::integral_constant<int, 1>{});
    else by_groups(std::false_type{}, std::integral_constant<int, 2>{});
    return;
  }
  if (a.ids) {  // expert slots, each a block's own
    a.trigger_late = chain == Chain::First;
    glu ? launch_mv_codes<true>(s, a, split, rows_per_warp) : launch_mv_codes<false>(s, a, split, rows_per_warp);
    return;
  }
  if (a.n == 1) glu ? launch_mv_rows<1, true>(s, a, split, rows_per_warp) : launch_mv_rows<1, false>(s, a, split, rows_per_warp);
  else if (a.n == 2) glu ? launch_mv_rows<2, true>(s, a, split, rows_per_warp) : launch_mv_rows<2, false>(s, a, split, rows_per_warp);
  else if (a.n <= 4) glu ? launch_mv_rows<4, true>(s, a, split, rows_per_warp) : launch_mv_rows<4, false>(s, a, split, rows_per_warp);
  else glu ? launch_mv_rows<8, true>(s, a, split, rows_per_warp) : launch_mv_rows<8, false>(s, a, split, rows_per_warp);
}

MvArgs products_args(const Product* p, int count, int64_t cols, int n, Glu glu) {
  MvArgs a{};
  for (int i = 0; i < count; ++i) {
    a.seg[i] = {static_cast<const uint8_t*>(p[i].w), p[i].row_bytes, p[i].expert_bytes, p[i].first, p[i].rows, p[i].out_stride, p[i].out,
                p[i].bias, p[i].bias_stride, p[i].type, 0};
  }
  a.nseg = count;
  a.cols = cols;
  a.n = n;
  a.glu = glu;
  return a;
}

}  // namespace

void quantize_codes(Stream s, const float* x, int64_t x_stride, int x_div, int64_t cols, int rows, void* q8) {
  launch(k_quantize_q8k, dim3(static_cast<unsigned>((cols / 256 + 7) / 8), rows), dim3(256), s, x, x_stride, x_div, cols,
         codes_layout(q8, rows, cols));
}

void mul_mat_codes(Stream s, const Product* p, int count, int64_t cols, const float* x, int64_t x_stride, int x_div, const int32_t* ids,
                   int n, void* q8, bool q8_ready, Glu glu, int split, int rows_per_warp, Chain chain) {
  if (!ids && n > kCodesTokens) {  // a prompt's products: the tiles, where every one takes them
    bool tiles = glu == Glu::None && x_div == 1 && count >= 1 && count <= 3;
    for (int i = 0; i < count; ++i) tiles &= prompt_tiles(p[i].type, n) && p[i].first == 0;
    if (!tiles) throw Error("mul_mat_codes: a prompt's products take Q4_K, Q5_K or Q6_K weights, without an activation");
    if (!q8_ready) quantize_codes(s, x, x_stride, 1, cols, n, q8);
    mul_mm_codes_tiles(s, p, count, cols, q8, n);
    return;
  }
  if (!ids && wide_products(p, count, cols, n, x_div, glu)) {  // a short prompt's (chunk's) products
    if (!q8_ready) quantize_codes(s, x, x_stride, 1, cols, n, q8);
    mul_mat_codes_wide(s, p, count, cols, q8, n, glu);
    return;
  }
  MvArgs a = products_args(p, count, cols, n, glu);
  a.ids = ids;
  mv_codes(s, a, x, x_stride, x_div, q8, q8_ready, split, rows_per_warp, chain);
}

bool slot_products_keep_codes(int type, int64_t cols) { return !uses_codes(type) || codes_in_blocks_fit(cols); }

void grouped_mul_mat_codes(Stream s, const Product* p, int count, int64_t cols, const float* x, int64_t x_stride, int x_div,
                           const int32_t* order, const int32_t* offsets, int n_expert, int per_expert, int slots, void* q8,
                           bool q8_ready, Glu glu) {
  MvArgs a = products_args(p, count, cols, slots, glu);
  a.order = order;
  a.offsets = offsets;
  a.n_expert = n_expert;
  a.per_expert = per_expert;
  mv_codes(s, a, x, x_stride, x_div, q8, q8_ready, 0, 0, Chain::None);
}

}  // namespace zinc::backend::cuda
