// Included inside an anonymous namespace by cuda_codes.cu and cuda_codes_wide.cu: a super-block's
// value from its integer sums, and a tile of 16 rows of a Q4_K, Q5_K or Q6_K super-block against 8
// tokens' codes on integer tensor cores (k_mv_mma, k_mm_wide).
#pragma once

// A super-block's value from its exact integer sums (the scales times the code products; the minimums
// times the code sums) and its float scales (the activations' dx, the weights' d and dmin), rounded
// step by step (no fused multiply-add to choose differently): k_mv_rows and k_mv_mma form every
// super-block so and sum a row's super-blocks in the same order (rows_split), so a row is the same bit
// for bit on packed dot products and on integer tensor cores, whatever the step's other rows.
__device__ __forceinline__ float super_value(float dx, float d, float dmin, int isum, int imin) {
  return __fmul_rn(dx, __fsub_rn(__fmul_rn(d, static_cast<float>(isum)), __fmul_rn(dmin, static_cast<float>(imin))));
}
__device__ __forceinline__ float super_value(float dx, float d, int isum) { return __fmul_rn(__fmul_rn(dx, d), static_cast<float>(isum)); }

// ---- a few tokens (decode of several sequences, short prompts) on integer tensor cores ----------
//
// A warp takes a tile of 16 rows (GLU: 16 rows of gate and the same of up) times 8 NJ tokens, over
// its share of the super-blocks (S warps per tile, every S-th super-block). Weights go from memory
// straight into the matrix instructions' registers, in an order within each sub-block chosen so that
// a lane's loads are contiguous; the activations' codes (read from L1/L2, shared by every tile) are
// taken in the same order, which leaves each sub-block's dot product unchanged. Lane (gq, tq) =
// (lane / 4, lane % 4) holds rows gq and gq + 8 of the tile and, for the instruction's second
// operand, token gq of each group of 8; its results are tokens 2 tq and 2 tq + 1.
// Q4_K, Q5_K (m16n8k32, one instruction per sub-block of 32): lane tq takes bytes 8 tq .. 8 tq + 7
// of each 32-byte chunk c of codes: low nibbles are elements 64c + 8tq + i of sub-block 2c, high
// nibbles the same of sub-block 2c + 1 (Q5_K: the fifth bit from qh bytes 8 tq + i, bits 2c, 2c + 1).
// Q6_K (m16n8k16, one per sub-block of 16): lane tq takes elements 16h + 4tq .. + 3 of each group of
// 32 (ql at 64n + 32(k % 2) + 16h + 4tq, qh at 128 + 32n + 16h + 4tq; 2-byte aligned blocks: each
// word from two aligned ones).
__device__ __forceinline__ uint2 ld_stream8(const uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

struct MmaTok {
  const int8_t* q[4];     // token gq of each group of 8: its codes' row
  int qd[4][2];           // tokens 2 tq, 2 tq + 1 of each group: their rows (clamped to the last token)
};

template <int T>
struct Q45Mma {
  static constexpr int kBytes = T == kQ4_K ? 144 : 176, kCodes = T == kQ4_K ? 16 : 48;
  static constexpr int kSub = 8, kA = 4;  // sub-blocks of 32 (one m16n8k32 each), A registers
  using X = uint2;                        // a lane's activation codes of a sub-block
  uint4 h[2];
  uint2 q[2][4], qh[2];
  __device__ void load(const uint8_t* const (&r)[2], int b, int tq) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* blk = r[i] + static_cast<int64_t>(b) * kBytes;
      h[i] = ld_stream(blk);
#pragma unroll
      for (int c = 0; c < 4; ++c) q[i][c] = ld_stream8(blk + kCodes + 32 * c + 8 * tq);
      if constexpr (T == kQ5_K) qh[i] = ld_stream8(blk + 16 + 8 * tq);
    }
  }
  // The same from the rows' super-blocks staged in shared memory.
  __device__ void load_staged(const uint8_t* const (&blk)[2], int tq) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      h[i] = *reinterpret_cast<const uint4*>(blk[i]);
#pragma unroll
      for (int c = 0; c < 4; ++c) q[i][c] = *reinterpret_cast<const uint2*>(blk[i] + kCodes + 32 * c + 8 * tq);
      if constexpr (T == kQ5_K) qh[i] = *reinterpret_cast<const uint2*>(blk[i] + 16 + 8 * tq);
    }
  }
  static __device__ X x(const int8_t* at, int s, int tq) {  // (at: a token's codes of the super-block)
    return *reinterpret_cast<const uint2*>(at + 64 * (s / 2) + 32 * (s % 2) + 8 * tq);
  }
  static __device__ void mma(int (&p)[4], const uint32_t (&a)[kA], X x) { mma_s8_k32(p, a, x.x, x.y); }
  // Sub-block s: the A fragment (a0, a1: elements 8tq .. 8tq + 3 of rows gq, gq + 8; a2, a3: 8tq + 4 ..
  // 8tq + 7) and the two rows' 6-bit scales.
  __device__ void frag(int s, uint32_t (&a)[kA], int (&sc)[2]) const {
    const int ch = s / 2, nib = s % 2;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      uint32_t lo = nib ? (q[i][ch].x >> 4) & 0x0F0F0F0Fu : q[i][ch].x & 0x0F0F0F0Fu;
      uint32_t hi = nib ? (q[i][ch].y >> 4) & 0x0F0F0F0Fu : q[i][ch].y & 0x0F0F0F0Fu;
      if constexpr (T == kQ5_K) {
        lo |= ((qh[i].x >> s) & 0x01010101u) << 4;
        hi |= ((qh[i].y >> s) & 0x01010101u) << 4;
      }
      a[i] = lo;
      a[2 + i] = hi;
      // Scales of sub-blocks 0..3 (bytes 4..7 of the header, 6 bits) and 4..7.
      const uint32_t w = s < 4 ? h[i].y & 0x3f3f3f3fu : (h[i].w & 0x0f0f0f0fu) | ((h[i].y >> 2) & 0x30303030u);
      sc[i] = static_cast<int>((w >> (8 * (s % 4))) & 0xff);
    }
  }
  // The float scales, and the minimums' term: the minimums times the activations' sums of 32.
  template <int NJ>
  __device__ void finish(int b, const MmaTok& tk, const Codes& c, int cols, const int (&isum)[NJ][4], float (&acc)[NJ][4]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&h[i].x));
      const int mn0 = static_cast<int>(h[i].z & 0x3f3f3f3fu), mn1 = static_cast<int>(((h[i].w >> 4) & 0x0f0f0f0fu) | ((h[i].z >> 2) & 0x30303030u));
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int t = tk.qd[j][u];
          // (The sums of token t's super-block b: 16 bytes, 16-byte aligned (codes_layout).)
          const int4 sp = *reinterpret_cast<const int4*>(c.s + static_cast<int64_t>(t) * (cols / 32) + b * 8);
          int m = __dp2a_lo(sp.x, mn0, 0);
          m = __dp2a_hi(sp.y, mn0, m);
          m = __dp2a_lo(sp.z, mn1, m);
          m = __dp2a_hi(sp.w, mn1, m);
          const float xd = c.d[static_cast<int64_t>(t) * (cols / 256) + b];
          acc[j][2 * i + u] = __fadd_rn(acc[j][2 * i + u], super_value(xd, dm.x, dm.y, isum[j][2 * i + u], m));
        }
    }
  }
};

struct Q6Mma {
  static constexpr int kBytes = 210;
  static constexpr int kSub = 16, kA = 2;  // sub-blocks of 16 (one m16n8k16 each), A registers
  using X = uint32_t;
  uint32_t ql[2][2][2][2];  // [row][n][k % 2][h]
  uint32_t qh[2][2][2];     // [row][n][h]
  uint32_t sc[2][4];
  float d[2];
  // Row i's block at blk (2-byte aligned): from memory, or (SH) staged in shared memory.
  template <bool SH>
  __device__ void load_row(int i, const uint8_t* blk, int tq) {
    const auto* w = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(blk) & ~uintptr_t{3});
    const uint32_t sh = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(blk) & 2) * 8;
    const auto ld = [&](int k) { return SH ? w[k] : __ldg(w + k); };
    const auto word = [&](int off) { return __funnelshift_r(ld(off / 4), ld(off / 4 + 1), sh); };
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        ql[i][n][0][h] = word(64 * n + 16 * h + 4 * tq);
        ql[i][n][1][h] = word(64 * n + 32 + 16 * h + 4 * tq);
        qh[i][n][h] = word(128 + 32 * n + 16 * h + 4 * tq);
      }
#pragma unroll
    for (int k = 0; k < 4; ++k) sc[i][k] = word(192 + 4 * k);
    const auto* dp = reinterpret_cast<const unsigned short*>(blk + 208);
    d[i] = half_bits(SH ? *dp : __ldg(dp));
  }
  __device__ void load(const uint8_t* const (&r)[2], int b, int tq) {
#pragma unroll
    for (int i = 0; i < 2; ++i) load_row<false>(i, r[i] + static_cast<int64_t>(b) * kBytes, tq);
  }
  __device__ void load_staged(const uint8_t* const (&blk)[2], int tq) {
#pragma unroll
    for (int i = 0; i < 2; ++i) load_row<true>(i, blk[i], tq);
  }
  // Sub-block sb = 8n + 2k + h: elements 16h + 4tq .. + 3 of group k of half n.
  static __device__ X x(const int8_t* at, int sb, int tq) {
    const int n = sb / 8, k = (sb / 2) % 4, h = sb % 2;
    return *reinterpret_cast<const uint32_t*>(at + 128 * n + 32 * k + 16 * h + 4 * tq);
  }
  static __device__ void mma(int (&p)[4], const uint32_t (&a)[kA], X x) { mma_s8_k16(p, a[0], a[1], x); }
  __device__ void frag(int sb, uint32_t (&a)[kA], int (&s)[2]) const {
    const int n = sb / 8, k = (sb / 2) % 4, h = sb % 2;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t code = ((ql[i][n][k % 2][h] >> (4 * (k / 2))) & 0x0F0F0F0Fu) | (((qh[i][n][h] >> (2 * k)) & 0x03030303u) << 4);
      a[i] = __vsub4(code, 0x20202020u);
      s[i] = static_cast<int8_t>((sc[i][sb / 4] >> (8 * (sb % 4))) & 0xff);
    }
  }
  template <int NJ>
  __device__ void finish(int b, const MmaTok& tk, const Codes& c, int cols, const int (&isum)[NJ][4], float (&acc)[NJ][4]) const {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const float xd = c.d[static_cast<int64_t>(tk.qd[j][u]) * (cols / 256) + b];
        acc[j][u] = __fadd_rn(acc[j][u], super_value(xd, d[0], isum[j][u]));
        acc[j][2 + u] = __fadd_rn(acc[j][2 + u], super_value(xd, d[1], isum[j][2 + u]));
      }
  }
};

// One super-block of P parts (gate and up, or two tiles of rows) against NJ groups of 8 tokens: each
// sub-block's activation fragments loaded once for every part.
// xs[j]: token gq of group j, its codes of super-block b (in memory, or staged in shared memory).
template <class W, int NJ, int P>
__device__ __forceinline__ void dot_parts(const W (&w)[P], int b, int tq, const int8_t* const (&xs)[NJ], const MmaTok& tk, const Codes& c,
                                          int cols, float (&acc)[P][NJ][4]) {
  int isum[P][NJ][4];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int j = 0; j < NJ; ++j) isum[p][j][0] = isum[p][j][1] = isum[p][j][2] = isum[p][j][3] = 0;
#pragma unroll
  for (int s = 0; s < W::kSub; ++s) {
    uint32_t a[P][W::kA];
    int sc[P][2];
#pragma unroll
    for (int p = 0; p < P; ++p) w[p].frag(s, a[p], sc[p]);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const typename W::X x = W::x(xs[j], s, tq);
#pragma unroll
      for (int p = 0; p < P; ++p) {
        int r[4] = {0, 0, 0, 0};
        W::mma(r, a[p], x);
        isum[p][j][0] += sc[p][0] * r[0];
        isum[p][j][1] += sc[p][0] * r[1];
        isum[p][j][2] += sc[p][1] * r[2];
        isum[p][j][3] += sc[p][1] * r[3];
      }
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) w[p].template finish<NJ>(b, tk, c, cols, isum[p], acc[p]);
}

// A row's super-block staged in shared memory (k_mv_mma with its weights staged, k_mm_wide): the 16-byte
// chunks copied from the 16-byte boundary below it (a Q6_K block is 2-byte aligned: up to 14 bytes
// more), and the slot bytes that hold them for Q4_K, Q5_K and Q6_K.
template <class W>
__host__ __device__ constexpr int staged_chunks() { return W::kBytes % 16 ? (W::kBytes + 14 + 15) / 16 : W::kBytes / 16; }
constexpr int kWSlots[3] = {144, 176, 224};
constexpr int staged_slot(int type) { return kWSlots[type == kQ6_K ? 2 : type == kQ5_K ? 1 : 0]; }
// Where super-block b of a row starting at `row` lies within its slot (its address's offset within 16 bytes).
template <class W>
__device__ __forceinline__ uintptr_t staged_offset(const uint8_t* row, int b) {
  return W::kBytes % 16 ? (reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(b) * W::kBytes) & 15 : 0;
}
// Chunk ch of the super-block at blk into its slot at `to` (16 bytes from the 16-byte boundary below the
// block, asynchronously; past the block's last chunk, nothing).
template <class W>
__device__ __forceinline__ void copy_staged_chunk(uint8_t* to, const uint8_t* blk, int ch) {
  const uint8_t* from = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(blk) & ~uintptr_t{15});
  const int have = W::kBytes % 16 ? static_cast<int>((blk - from) + W::kBytes + 15) / 16 : staged_chunks<W>();
  if (ch < have) cp_async16(to + 16 * ch, from + 16 * ch);
}
