// The CUDA backend's products against 8-bit activation codes of more than kSameRows and at most
// kCodesTokens rows (short prompts, a prompt's chunks beside decoding sequences) on integer tensor
// cores: k_mm_wide (declared in cuda_kernels.h as mul_mat_codes_wide).
//
// A block takes 64 tokens and KS groups of 8 warps. A group's warps take 4 tiles of 16 weight rows
// (gate and up with their activation: 2 tiles of each, the same rows) times 2 halves of the tokens (32
// each: k_mv_mma's dot_parts with 4 groups of 8); group g the super-blocks g, g + KS, ... in order. Up
// to 32 rows, a block takes 32 tokens and a group 8 tiles of 16 rows (WideShape).
// Each step copies every group's super-block into shared memory: the codes of the block's 64 tokens and
// the raw blocks of its 64 rows (16-byte asynchronous copies, the next step's while one is computed).
// So a super-block's codes are read once per 64 weight rows, where k_mv_mma's warps each read their
// own per 16 rows, and no warp waits on a weight load it issued itself. The groups' sums are added in
// their order at the end: a row's value does not depend on timing (nor, for KS = 1, on anything but
// its token: super-blocks summed one after the other).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_device.cuh"
#include "core/error.h"

namespace zinc::backend::cuda {

int g_wide_mode = 1;  // 0: never; 1: by the shape; 2, 3: with 1 or 2 groups a block (measurements)
void set_codes_wide(int mode) { g_wide_mode = std::clamp(mode, 0, 3); }

namespace {

#include "backend/cuda/cuda_code_mma.cuh"  // (inside this namespace: a super-block on the tensor cores)

constexpr int kWideNJ = 4, kWideGroupWarps = 8, kWideMaxGroups = 2;
constexpr int kWideRow = 272;  // bytes a token's codes of a super-block take in shared memory (banks spread)
// A group of TL tiles of 16 weight rows (gate and up: TL / 2 of each, the same rows) times 8 / TL halves
// of 32 tokens, a warp each: TL 4, 64 tokens a block; TL 8, 32. Its stage: the tokens' codes of a
// super-block, their sums of 32 (16 bytes a token) and scales, then the slots of its rows' blocks.
template <int TL>
struct WideShape {
  static constexpr int kHalves = kWideGroupWarps / TL, kTokens = 32 * kHalves, kRows = 16 * TL;
  static constexpr int kCodes = kTokens * kWideRow, kSums = kCodes, kScales = kSums + kTokens * 16, kSlots = kScales + kTokens * 4;
  __host__ __device__ static constexpr int out_rows(bool glu) { return glu ? kRows / 2 : kRows; }
  __host__ __device__ static constexpr int stage_bytes(int wslot) { return kSlots + kRows * wslot; }
};

struct WideArgs {
  CodesSeg seg[3];
  int nseg, n, cols, groups, wslot;  // wslot: the bytes a row's super-block takes in shared memory
  Glu glu;
  Codes c;
  bool early_next;  // the next launch let in as the blocks start (else once they are done)
};

// Group g's stage k.
template <int TL>
__device__ __forceinline__ uint8_t* wide_stage(uint8_t* base, const WideArgs& a, int k, int g) {
  return base + (k * a.groups + g) * WideShape<TL>::stage_bytes(a.wslot);
}

// NST stages: the copies of NST - 1 steps in flight while one is computed.
template <class W, bool GLU, int NST, int TL>
__device__ __forceinline__ void wide_rows(const WideArgs& a, const CodesSeg& g, int64_t r0, int t0, uint8_t* shared, float (&acc)[1][kWideNJ][4]) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, gq = lane / 4, tq = lane % 4;
  using S = WideShape<TL>;
  constexpr int kGate = TL / 2;  // (gate and up: the tiles of each)
  const int grp = warp / kWideGroupWarps, wl = warp % kWideGroupWarps, q = wl % TL, h = wl / TL;
  const int lt = threadIdx.x % (kWideGroupWarps * kWarp);  // the thread within its group
  const int cols = a.cols, nsb = cols / 256, n = a.n;
  // Row rr of the group's tiles: its segment and row (past the segment's rows: its last).
  const auto row_of = [&](int rr, const CodesSeg*& seg) {
    const int tile = rr / 16;
    seg = GLU ? &a.seg[tile / kGate] : &g;
    const int64_t r = GLU ? r0 + 16 * (tile % kGate) + rr % 16 : r0 + rr;
    return seg->w + min(r, seg->rows - 1) * static_cast<int64_t>(seg->row_bytes);
  };
  constexpr int kChunks = staged_chunks<W>();
  const auto copy_weights = [&](int b, int k) {
    uint8_t* slots = wide_stage<TL>(shared, a, k, grp) + S::kSlots;
    for (int item = lt; item < S::kRows * kChunks; item += kWideGroupWarps * kWarp) {
      const int rr = item / kChunks, ch = item % kChunks;
      const CodesSeg* seg;
      const uint8_t* blk = row_of(rr, seg) + static_cast<int64_t>(b) * W::kBytes;
      copy_staged_chunk<W>(slots + rr * a.wslot, blk, ch);
    }
  };
  const auto copy_codes = [&](int b, int k) {
    uint8_t* st = wide_stage<TL>(shared, a, k, grp);
#pragma unroll
    for (int j = 0; j < S::kTokens * 16 / (kWideGroupWarps * kWarp); ++j) {
      const int item = lt + kWideGroupWarps * kWarp * j, t = item / 16, ch = item % 16;
      cp_async16(st + t * kWideRow + 16 * ch, a.c.q + static_cast<int64_t>(min(t0 + t, n - 1)) * cols + b * 256 + 16 * ch);
    }
    if (lt < S::kTokens) {
      const int64_t row = min(t0 + lt, n - 1);
      cp_async16(st + S::kSums + 16 * lt, a.c.s + row * (cols / 32) + b * 8);
    } else if (lt < 2 * S::kTokens) {
      const int64_t row = min(t0 + lt - S::kTokens, n - 1);
      cp_async4(st + S::kScales + 4 * (lt - S::kTokens), a.c.d + row * (cols / 256) + b);
    }
  };
  const int G = a.groups, steps = (nsb + G - 1) / G;
  // Step i: super-block i G + grp.
  const auto copy = [&](int i, bool codes) {
    const int b = i * G + grp;
    if (i < steps && b < nsb) {
      if (codes) copy_codes(b, i % NST);
      else copy_weights(b, i % NST);
    }
  };
  for (int i = 0; i < NST - 1; ++i) copy(i, false);
  pdl_wait();  // the codes are the previous kernels' output
  for (int i = 0; i < NST - 1; ++i) copy(i, true), cp_async_commit();
  // This warp's rows: tile q's (GLU: gate's or up's tile q % kGate).
  const CodesSeg* mine;
  const uint8_t* rows[2] = {row_of(16 * q + gq, mine), row_of(16 * q + gq + 8, mine)};
  const int groups8 = min(kWideNJ, (n - t0 - 32 * h + 7) / 8);  // this warp's groups of 8 holding tokens
  const bool any = (GLU ? r0 + 16 * (q % kGate) : r0 + 16 * q) < mine->rows && groups8 > 0;
  // The finish reads the tokens' sums and scales from the stage: a view of one super-block (b 0,
  // 256 columns) whose token t is the block's t - t0.
  MmaTok tk;
#pragma unroll
  for (int j = 0; j < kWideNJ; ++j) {
    tk.qd[j][0] = 32 * h + 8 * j + 2 * tq;
    tk.qd[j][1] = 32 * h + 8 * j + 2 * tq + 1;
  }
  for (int i = 0; i < steps; ++i) {
    const int k = i % NST, b = i * G + grp;
    cp_async_wait<NST - 2>();
    __syncthreads();  // step i's copies landed (every thread's), and every warp is done with step i - 1's stage
    copy(i + NST - 1, false), copy(i + NST - 1, true);
    cp_async_commit();
    if (b < nsb && any) {
      uint8_t* st = wide_stage<TL>(shared, a, k, grp);
      const int8_t* xs[kWideNJ];
#pragma unroll
      for (int j = 0; j < kWideNJ; ++j) xs[j] = reinterpret_cast<const int8_t*>(st + (32 * h + 8 * j + gq) * kWideRow);
      const uint8_t* blk[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uintptr_t mis = staged_offset<W>(rows[e], b);
        blk[e] = st + S::kSlots + (16 * q + gq + 8 * e) * a.wslot + mis;
      }
      W raw[1];
      raw[0].load_staged(blk, tq);
      const Codes view{nullptr, reinterpret_cast<float*>(st + S::kScales), reinterpret_cast<int16_t*>(st + S::kSums)};
      // (The groups of 8 holding the step's tokens: a last tile's past them skipped.)
      if (groups8 > 2) dot_parts<W, kWideNJ, 1>(raw, 0, tq, xs, tk, view, 256, acc);
      else if (groups8 == 2)
        dot_parts<W, 2, 1>(raw, 0, tq, reinterpret_cast<const int8_t* const(&)[2]>(xs), tk, view, 256, reinterpret_cast<float(&)[1][2][4]>(acc));
      else
        dot_parts<W, 1, 1>(raw, 0, tq, reinterpret_cast<const int8_t* const(&)[1]>(xs), tk, view, 256, reinterpret_cast<float(&)[1][1][4]>(acc));
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // (the stages free for the sums' exchange)
}

template <bool GLU, int NST, int TL>
__global__ void __launch_bounds__(kWideMaxGroups * kWideGroupWarps * kWarp, 1) k_mm_wide(const WideArgs a) {
  using S = WideShape<TL>;
  constexpr int kGate = TL / 2;
  extern __shared__ __align__(16) uint8_t wide_shared[];
  if (a.early_next) pdl_trigger();
  unsigned bx = blockIdx.y;
  int si = 0;
  while (si + 1 < a.nseg && bx >= a.seg[si].blocks) bx -= a.seg[si].blocks, ++si;
  const CodesSeg& g = a.seg[si];
  const int64_t r0 = static_cast<int64_t>(bx) * S::out_rows(GLU);
  const int t0 = static_cast<int>(blockIdx.x) * S::kTokens;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, gq = lane / 4, tq = lane % 4;
  const int grp = warp / kWideGroupWarps, wl = warp % kWideGroupWarps, q = wl % TL, h = wl / TL;
  float acc[1][kWideNJ][4] = {};
  if (g.type == kQ4_K) wide_rows<Q45Mma<kQ4_K>, GLU, NST, TL>(a, g, r0, t0, wide_shared, acc);
  else if (g.type == kQ5_K) wide_rows<Q45Mma<kQ5_K>, GLU, NST, TL>(a, g, r0, t0, wide_shared, acc);
  else wide_rows<Q6Mma, GLU, NST, TL>(a, g, r0, t0, wide_shared, acc);
  // The groups' sums into group 0's (in their order), then (GLU) up's into gate's warps.
  auto* ex = reinterpret_cast<float*>(wide_shared);  // [warp][16][lane] (the stages are free)
  const auto put = [&](int w) {
#pragma unroll
    for (int j = 0; j < kWideNJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) ex[(w * 16 + 4 * j + e) * kWarp + lane] = acc[0][j][e];
  };
  if (a.groups > 1) {
    if (grp > 0) put(warp);
    __syncthreads();
    if (grp == 0) {
      for (int o = 1; o < a.groups; ++o)
#pragma unroll
        for (int j = 0; j < kWideNJ; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[0][j][e] += ex[((o * kWideGroupWarps + wl) * 16 + 4 * j + e) * kWarp + lane];
    }
    __syncthreads();
  }
  float up[kWideNJ][4];
  if constexpr (GLU) {
    if (grp == 0 && q >= kGate) put(wl);
    __syncthreads();
    if (grp == 0 && q < kGate) {
#pragma unroll
      for (int j = 0; j < kWideNJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) up[j][e] = ex[((wl + kGate) * 16 + 4 * j + e) * kWarp + lane];
    }
  }
  if (grp != 0 || (GLU && q >= kGate)) return;
  // Element e of group j: row gq + 8 (e / 2) of the tile, token t0 + 32 h + 8 j + 2 tq + e % 2.
  const int64_t rt = r0 + 16 * q;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t r = rt + gq + 8 * (e / 2);
    if (r >= g.rows) continue;
#pragma unroll
    for (int j = 0; j < kWideNJ; ++j) {
      const int t = t0 + 32 * h + 8 * j + 2 * tq + e % 2;
      if (t >= a.n) continue;
      float y;
      if constexpr (GLU) {
        const float v0 = acc[0][j][e] + (a.seg[0].bias ? a.seg[0].bias[r] : 0.0f);
        const float v1 = up[j][e] + (a.seg[1].bias ? a.seg[1].bias[r] : 0.0f);
        y = glu_value(a.glu == Glu::GeGLU, v0, v1);
      } else {
        y = acc[0][j][e] + (g.bias ? g.bias[r] : 0.0f);
      }
      g.out[static_cast<int64_t>(t) * g.os + r] = y;
    }
  }
}

// The groups of warps a block of a launch of `blocks` blocks over `nsb` super-blocks: two where one
// would leave multiprocessors without a block (each group keeping at least four super-blocks).
int wide_groups(int64_t blocks, int64_t nsb) { return g_wide_mode == 2 ? 1 : g_wide_mode == 3 ? 2 : blocks < sm_count() && nsb >= 8 ? 2 : 1; }

// The tiles a group takes: 8 (32 tokens a block) for up to 32 rows, else 4 (64).
int wide_tiles(int n) { return n <= 32 ? 8 : 4; }

template <bool GLU, int TL>
void launch_wide(Stream s, WideArgs& a) {
  using S = WideShape<TL>;
  static const int limit3 = allow_most_shared(k_mm_wide<GLU, 3, TL>), limit4 = allow_most_shared(k_mm_wide<GLU, 4, TL>);
  unsigned blocks = 0;
  for (int i = 0; i < a.nseg; ++i) {
    a.seg[i].blocks = static_cast<unsigned>((a.seg[i].rows + S::out_rows(GLU) - 1) / S::out_rows(GLU));
    if (!GLU || i == 0) blocks += a.seg[i].blocks;
  }
  if (GLU) a.nseg = 1;
  const unsigned groups_t = static_cast<unsigned>((a.n + S::kTokens - 1) / S::kTokens);
  a.groups = wide_groups(static_cast<int64_t>(blocks) * groups_t, a.cols / 256);
  // Four stages where a block of the groups holds them, else three.
  const auto bytes = [&](int nst) { return static_cast<size_t>(nst * a.groups * S::stage_bytes(a.wslot)); };
  if (bytes(3) > static_cast<size_t>(limit3)) a.groups = 1;
  const dim3 grid(groups_t, blocks), block(a.groups * kWideGroupWarps * kWarp);
  // The next launch in early only past one tile of tokens. Measured on an H200 (synthetic qwen3-8b,
  // zinc bench, tok/s, next launch in as the blocks start -> once they are done): pp32 4,918 / 4,909
  // -> 5,233 / 5,233, pp64 6,538 / 6,522 -> 6,818 / 6,802, but pp112 7,952 / 7,944 -> 7,838 / 7,846; in
  // once the blocks' loops are done: as at the start (pp64 6,526 / 6,516).
  a.early_next = groups_t > 1;
  if (bytes(4) <= static_cast<size_t>(limit4)) launch_shared(k_mm_wide<GLU, 4, TL>, grid, block, bytes(4), s, a);
  else launch_shared(k_mm_wide<GLU, 3, TL>, grid, block, bytes(3), s, a);
}

}  // namespace

// Where the shared tiles take a product: where a step's last tile holds enough tokens (of 64: 56 or
// more, or 48 in a second tile; of 32, for up to 32 rows: 28 or more), and where the blocks, counting two
// groups a block, fill the GPU (fewer: each warp's own tokens' codes leaves more warps in flight).
// Measured with zinc_cuda_matvec_bench on an H200, us, each warp its own -> shared tiles of 64 tokens:
// at 64 tokens gate and up with their activation 2x12288x4096 Q4_K 95.8 -> 77.9 (384 blocks), gate
// 12288x4096 59.6 -> 45.4 (192), q, k and v 4096+1024+1024 45.0 -> 39.2 (96, two groups), but q/o
// 4096x4096 19.5 -> 26.5 and down 4096x12288 Q4_K 47.7 -> 76.0 (64 blocks; two groups: 128); at 112
// tokens gate and up 182.5 -> 145.0, q, k and v 72.6 -> 66.8, down Q6_K 126.2 -> 112.7; at 96 gate and
// up 153.9 -> 154.1, down Q6_K 125.7 -> 114.1; at 48 gate and up 85.8 -> 103.3, at 40 84.2 -> 120.0. A
// synthetic qwen3-8b's prompt alone (zinc bench, tok/s): pp64 6483 -> 6539, pp112 7107 -> 8046, but
// pp80 5791 -> 5200 with its second tile of 16 taken. Tiles of 32 tokens over 128 rows, at 32 tokens:
// gate and up 57.7 -> 49.7, gate 32.7 -> 28.9, the logits' 151936x4096 Q6_K 424 -> 411 (q, k, v, o and
// down: too few blocks); pp32 5,102 / 5,125 -> 5,233 / 5,233 (the next launch in once they are done).
bool wide_products(const Product* p, int count, int64_t cols, int n, int x_div, Glu glu) {
  if (g_wide_mode == 0 || n <= kSameRows || n > kCodesTokens || x_div != 1 || cols % 256 != 0 || cols / 256 < 2) return false;
  if (glu != Glu::None ? count != 2 || p[0].rows != p[1].rows : count < 1 || count > 3) return false;
  const bool small = wide_tiles(n) == 8;
  const int out_rows = (small ? WideShape<8>::kRows : WideShape<4>::kRows) / (glu != Glu::None ? 2 : 1);
  int64_t blocks = 0;
  int slot = 0;
  for (int i = 0; i < count; ++i) {
    if (p[i].type != kQ4_K && p[i].type != kQ5_K && p[i].type != kQ6_K) return false;
    if (p[i].expert_bytes != 0 || p[i].first != 0 || reinterpret_cast<uintptr_t>(p[i].w) % 16 != 0 || p[i].row_bytes % 2 != 0) return false;
    if (glu == Glu::None || i == 0) blocks += (p[i].rows + out_rows - 1) / out_rows;
    slot = std::max(slot, staged_slot(p[i].type));
  }
  // (A device whose blocks hold less shared memory than one group's three stages: never.)
  static const int limit[2][2] = {{allow_most_shared(k_mm_wide<false, 3, 4>), allow_most_shared(k_mm_wide<true, 3, 4>)},
                                  {allow_most_shared(k_mm_wide<false, 3, 8>), allow_most_shared(k_mm_wide<true, 3, 8>)}};
  const int stage = small ? WideShape<8>::stage_bytes(slot) : WideShape<4>::stage_bytes(slot);
  if (3 * stage > limit[small ? 1 : 0][glu != Glu::None ? 1 : 0]) return false;
  if (g_wide_mode >= 2) return true;  // (measurements, tests: wherever it can)
  const int per = small ? WideShape<8>::kTokens : WideShape<4>::kTokens;
  const int tiles = (n + per - 1) / per, last = n - per * (tiles - 1);
  if (last < (small ? 28 : tiles == 1 ? 56 : 48)) return false;
  blocks *= tiles;
  return 4 * blocks * wide_groups(blocks, cols / 256) >= 5 * sm_count();
}

void mul_mat_codes_wide(Stream s, const Product* p, int count, int64_t cols, void* q8, int n, Glu glu) {
  WideArgs a{};
  int slot = 0;
  for (int i = 0; i < count; ++i) {
    a.seg[i] = {static_cast<const uint8_t*>(p[i].w), p[i].row_bytes, p[i].rows, p[i].out_stride, p[i].out, p[i].bias, p[i].type, 0};
    slot = std::max(slot, staged_slot(p[i].type));
  }
  a.nseg = count;
  a.n = n;
  a.cols = static_cast<int>(cols);
  a.wslot = slot;
  a.glu = glu;
  a.c = codes_layout(q8, n, cols);
  const bool small = wide_tiles(n) == 8;
  if (glu != Glu::None) small ? launch_wide<true, 8>(s, a) : launch_wide<true, 4>(s, a);
  else small ? launch_wide<false, 8>(s, a) : launch_wide<false, 4>(s, a);
}

}  // namespace zinc::backend::cuda
