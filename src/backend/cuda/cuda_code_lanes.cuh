// Included by cuda_codes.cu inside its anonymous namespace: the codes' launch, and how the lanes of a
// warp hold a Q4_K, Q5_K or Q6_K super-block for the packed dot products (k_mv_codes, k_mv_rows), with
// the super-block's value formed as k_mv_mma forms it.
#pragma once

// ---- decode against 8-bit activation codes (Q4_K, Q6_K) ----------------------------------------

// One warp per (row, super-block), a row read x_div rows of codes apart (expert slots of one token).
__global__ void k_quantize_q8k(const float* x, int64_t xs, int x_div, int64_t cols, Codes c) {
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.y, b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (b >= cols / 256) return;
  store_codes_of(x + (row / x_div) * xs + b * 256, row, b, cols, c);
}

// n bytes from p into L2, without waiting (sm_90: one bulk prefetch of the 16-byte aligned span).
__device__ __forceinline__ void prefetch_l2(const uint8_t* p, int64_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{15};
  const uint32_t bytes = static_cast<uint32_t>((reinterpret_cast<uintptr_t>(p) + n - at + 15) & ~uintptr_t{15});
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(bytes) : "memory");
#else
  for (int64_t i = 0; i < n; i += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i));
#endif
}

__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) { return __dp4a(static_cast<int>(a), static_cast<int>(b), c); }



// A super-block is read by eight lanes (l8 = lane % 8; Q6_K: four), a warp's groups on consecutive
// super-blocks; a warp reads R rows at once, each step's activation codes loaded once for all of them.
// Q4_K: lane l8 holds code bytes 16 l8 .. 16 l8 + 15 (c = l8 / 2: low nibbles are elements
// 64c + 16(l8 % 2) + i of sub-block 2c, high nibbles the same 32 further, sub-block 2c + 1) and the
// 16-byte head (d, dmin, the twelve scale bytes). Offsets within a row are 32-bit.
struct Q4kLane {
  static constexpr int kBytes = 144, kLanes = 8;
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
  // The lane's 32 codes of token t's super-block b (low and high nibbles' elements).
  __device__ static void codes(const Lane& ln, int b, const Codes& c, int cols, int t, int4& lo, int4& hi) {
    const int8_t* p = c.q + (t * cols + b * 256 + ln.act);
    lo = *reinterpret_cast<const int4*>(p);
    hi = *reinterpret_cast<const int4*>(p + 32);
  }
  __device__ static Act act(const Lane& ln, int b, const Codes& c, int cols, int t) {
    Act a;
    codes(ln, b, c, cols, t, a.lo, a.hi);
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
    const int2 d = dots(q, a.lo, a.hi);
    return scaled(head, ln, a, d.x, d.y);
  }
  // The lane's integer sums from its two code sums (sub-blocks 2c and 2c + 1): the head's scales times
  // them, and (the pair's first lane) those sub-blocks' minimums times their code sums (sp and mp: the
  // scales and minimums as the two low bytes).
  __device__ static int2 ints_of(const uint4& head, const Lane& ln, const Act& a, int sl, int shh) {
    const uint32_t lo_m = (head.z >> ln.sh) & 0x3f3fu, hi_m = ((head.w >> (ln.sh + 4)) & 0x0f0fu) | ((head.z >> (ln.sh + 2)) & 0x3030u);
    const uint32_t mp = ln.first ? (ln.low ? lo_m : hi_m) : 0u;
    return make_int2(isum_of(head, ln, make_int2(sl, shh)), static_cast<int>(mp & 0xff) * a.x0 + static_cast<int>(mp >> 8) * a.x1);
  }
  // The lane's part, then d and dmin (Q4_K, Q5_K).
  __device__ static float scaled(const uint4& head, const Lane& ln, const Act& a, int sl, int shh) {
    const int2 s = ints_of(head, ln, a, sl, shh);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&head.x));
    return a.dx * (dm.x * static_cast<float>(s.x) - dm.y * static_cast<float>(s.y));
  }
  // k_mv_rows: a token's codes for the lane and the super-block's eight code sums (each lane forms
  // the whole minimums' term itself; only the scales' sums are added across the lanes).
  struct Whole {
    int4 lo, hi, sums;
    float dx;
  };
  __device__ static Whole whole(const Lane& ln, int b, const Codes& c, int cols, int t) {
    Whole a;
    codes(ln, b, c, cols, t, a.lo, a.hi);
    a.sums = *reinterpret_cast<const int4*>(c.s + (t * (cols / 32) + b * 8));
    a.dx = c.d[t * (cols / 256) + b];
    return a;
  }
  __device__ int isum(const Lane& ln, const Whole& a) const { return isum_of(head, ln, dots(q, a.lo, a.hi)); }
  __device__ static int2 dots(const uint4& q, const int4& lo, const int4& hi) {
    return make_int2(dp4a((q.w & 0x0F0F0F0Fu), lo.w, dp4a((q.z & 0x0F0F0F0Fu), lo.z, dp4a((q.y & 0x0F0F0F0Fu), lo.y, dp4a(q.x & 0x0F0F0F0Fu, lo.x, 0)))),
                     dp4a((q.w >> 4) & 0x0F0F0F0Fu, hi.w, dp4a((q.z >> 4) & 0x0F0F0F0Fu, hi.z, dp4a((q.y >> 4) & 0x0F0F0F0Fu, hi.y, dp4a((q.x >> 4) & 0x0F0F0F0Fu, hi.x, 0)))));
  }
  // The lane's scales times its two code sums.
  __device__ static int isum_of(const uint4& head, const Lane& ln, int2 d) {
    const uint32_t lo_s = (head.y >> ln.sh) & 0x3f3fu, hi_s = ((head.w >> ln.sh) & 0x0f0fu) | ((head.y >> (ln.sh + 2)) & 0x3030u);
    const uint32_t sp = ln.low ? lo_s : hi_s;
    return static_cast<int>(sp & 0xff) * d.x + static_cast<int>(sp >> 8) * d.y;
  }
  // The super-block's value from its scales' sum over the lanes and its minimums' term (the eight
  // minimums times the eight code sums, as k_mv_mma forms it).
  using Head = uint4;  // d, dmin, the scales and minimums
  __device__ Head head_of() const { return head; }
  __device__ static float value_of(const uint4& head, const Whole& a, int isum) {
    const int mn0 = static_cast<int>(head.z & 0x3f3f3f3fu), mn1 = static_cast<int>(((head.w >> 4) & 0x0f0f0f0fu) | ((head.z >> 2) & 0x30303030u));
    int m = __dp2a_lo(a.sums.x, mn0, 0);
    m = __dp2a_hi(a.sums.y, mn0, m);
    m = __dp2a_lo(a.sums.z, mn1, m);
    m = __dp2a_hi(a.sums.w, mn1, m);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&head.x));
    return super_value(a.dx, dm.x, dm.y, isum, m);
  }
};

// Q5_K: Q4_K's lanes and head (d, dmin, the twelve scale bytes), the code bytes at 48 and each code's
// fifth bit from qh (bytes 16 .. 47): element 16(l8 % 2) + i of chunk c = l8 / 2 has bit 2c of qh byte
// 16(l8 % 2) + i for its low nibble, bit 2c + 1 for its high one. 176-byte blocks: 16-byte aligned.
struct Q5kLane {
  static constexpr int kBytes = 176, kLanes = 8;
  using Lane = Q4kLane::Lane;
  using Act = Q4kLane::Act;
  __device__ static Act act(const Lane& ln, int b, const Codes& c, int cols, int t) { return Q4kLane::act(ln, b, c, cols, t); }
  uint4 head, q, h;
  __device__ void load(const uint8_t* blk, int l8) {
    head = ld_stream(blk);
    h = ld_stream(blk + 16 + 16 * (l8 & 1));
    q = ld_stream(blk + 48 + 16 * l8);
  }
  // The lane's two code sums (sub-blocks 2c and 2c + 1) with a token's codes lo and hi.
  __device__ int2 dots(const Lane& ln, const int4& lo4, const int4& hi4) const {
    const int b0 = ln.sum;  // 2c: the qh bit of the low nibbles (b0 + 1: the high ones)
    const auto lo = [&](uint32_t qw, uint32_t hw) { return (qw & 0x0F0F0F0Fu) | (((hw >> b0) & 0x01010101u) << 4); };
    const auto hi = [&](uint32_t qw, uint32_t hw) { return ((qw >> 4) & 0x0F0F0F0Fu) | (((hw >> (b0 + 1)) & 0x01010101u) << 4); };
    return make_int2(dp4a(lo(q.w, h.w), lo4.w, dp4a(lo(q.z, h.z), lo4.z, dp4a(lo(q.y, h.y), lo4.y, dp4a(lo(q.x, h.x), lo4.x, 0)))),
                     dp4a(hi(q.w, h.w), hi4.w, dp4a(hi(q.z, h.z), hi4.z, dp4a(hi(q.y, h.y), hi4.y, dp4a(hi(q.x, h.x), hi4.x, 0)))));
  }
  __device__ float part(const Lane& ln, const Act& a) const {
    const int2 d = dots(ln, a.lo, a.hi);
    return Q4kLane::scaled(head, ln, a, d.x, d.y);
  }
  using Whole = Q4kLane::Whole;
  __device__ static Whole whole(const Lane& ln, int b, const Codes& c, int cols, int t) { return Q4kLane::whole(ln, b, c, cols, t); }
  __device__ int isum(const Lane& ln, const Whole& a) const { return Q4kLane::isum_of(head, ln, dots(ln, a.lo, a.hi)); }
  using Head = uint4;
  __device__ Head head_of() const { return head; }
  __device__ static float value_of(const uint4& head, const Whole& a, int isum) { return Q4kLane::value_of(head, a, isum); }
};

// Q6_K: four lanes a super-block, lane l4 holding elements 128n + 32k + l0 + i (n = l4 / 2, l0 =
// 16 (l4 % 2), k = 0..3, i < 16): low nibbles (k = 0, 1) and high nibbles (k = 2, 3) of ql bytes 64n +
// 32(k % 2) + l0 + i, bits 2k of qh byte 32n + l0 + i; scale byte 8n + 2k + l0 / 16. 210-byte blocks
// are only 2-byte aligned: each 16 bytes come from three aligned 8-byte words (a block's lanes share
// their lines), 12 loads a lane for 52 bytes (with eight lanes of 8-byte pieces, 13 loads of 4 bytes
// each: the loads' latency bound the products at 57% of the bandwidth).
__device__ __forceinline__ uint4 ld16_aligned2(const uint8_t* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint2*>(at & ~uintptr_t{7});
  const uint2 x = __ldg(w), y = __ldg(w + 1), z = __ldg(w + 2);
  const bool up = at & 4;  // a word further
  const uint32_t sh = (at & 2) * 8;
  const uint32_t v0 = up ? x.y : x.x, v1 = up ? y.x : x.y, v2 = up ? y.y : y.x, v3 = up ? z.x : y.y, v4 = up ? z.y : z.x;
  return make_uint4(__funnelshift_r(v0, v1, sh), __funnelshift_r(v1, v2, sh), __funnelshift_r(v2, v3, sh), __funnelshift_r(v3, v4, sh));
}
__device__ __forceinline__ uint2 ld8_aligned2(const uint8_t* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint2*>(at & ~uintptr_t{7});
  const uint2 x = __ldg(w), y = __ldg(w + 1);
  const bool up = at & 4;
  const uint32_t sh = (at & 2) * 8;
  const uint32_t v0 = up ? x.y : x.x, v1 = up ? y.x : x.y, v2 = up ? y.y : y.x;
  return make_uint2(__funnelshift_r(v0, v1, sh), __funnelshift_r(v1, v2, sh));
}
struct Q6kLane {
  static constexpr int kBytes = 210, kLanes = 4;
  struct Lane {
    int act, hs;  // the lane's codes within a super-block; the shift of its scale bytes
    __device__ explicit Lane(int l4) : act((l4 >> 1) * 128 + (l4 & 1) * 16), hs((l4 & 1) * 8) {}
  };
  // k: the lane's sixteen codes of group k; off: -32 times their sum (the codes' offset, taken out
  // of the products of the weights' unsigned 6-bit codes with them).
  struct Act {
    int4 k[4];
    int off[4];
    float dx;
  };
  __device__ static Act act(const Lane& ln, int b, const Codes& c, int cols, int t) {
    Act a;
    const int8_t* p = c.q + (t * cols + b * 256 + ln.act);
    for (int k = 0; k < 4; ++k) {
      a.k[k] = *reinterpret_cast<const int4*>(p + 32 * k);
      const int4 v = a.k[k];
      a.off[k] = -32 * dp4a(0x01010101u, v.w, dp4a(0x01010101u, v.z, dp4a(0x01010101u, v.y, dp4a(0x01010101u, v.x, 0))));
    }
    a.dx = c.d[t * (cols / 256) + b];
    return a;
  }
  uint4 la, lb, qh;
  uint2 sc;
  uint32_t d;
  __device__ void load(const uint8_t* blk, int l4) {
    const int n = l4 >> 1, l0 = (l4 & 1) * 16;
    la = ld16_aligned2(blk + n * 64 + l0);
    lb = ld16_aligned2(blk + n * 64 + 32 + l0);
    qh = ld16_aligned2(blk + 128 + n * 32 + l0);
    sc = ld8_aligned2(blk + 192 + n * 8);
    d = __ldg(reinterpret_cast<const unsigned short*>(blk + 208));
  }
  __device__ float part(const Lane& ln, const Act& a) const {
    return a.dx * half_bits(static_cast<uint16_t>(d)) * static_cast<float>(isum(ln, a));
  }
  using Whole = Act;
  __device__ static Whole whole(const Lane& ln, int b, const Codes& c, int cols, int t) { return act(ln, b, c, cols, t); }
  using Head = uint32_t;  // d
  __device__ Head head_of() const { return d; }
  __device__ static float value_of(uint32_t d, const Whole& a, int isum) { return super_value(a.dx, half_bits(static_cast<uint16_t>(d)), isum); }
  // The lane's sum of scales times code products.
  __device__ int isum(const Lane& ln, const Act& a) const {
    const uint32_t wa[4] = {la.x, la.y, la.z, la.w}, wb[4] = {lb.x, lb.y, lb.z, lb.w}, wh[4] = {qh.x, qh.y, qh.z, qh.w};
    const uint32_t ws[2] = {sc.x, sc.y};
    int tot = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t x[4] = {static_cast<uint32_t>(a.k[k].x), static_cast<uint32_t>(a.k[k].y), static_cast<uint32_t>(a.k[k].z),
                             static_cast<uint32_t>(a.k[k].w)};
      int dot = a.off[k];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        // Four unsigned 6-bit codes (below 64: the same as signed bytes): nibble k / 2 of ql (a for
        // even k, b for odd), two bits of qh at 2k above them; their offset of 32 is in a.off.
        const uint32_t l = k & 1 ? wb[h] : wa[h];
        const uint32_t code = ((k < 2 ? l : l >> 4) & 0x0F0F0F0Fu) | (((wh[h] >> (2 * k)) & 0x03030303u) << 4);
        dot = dp4a(code, x[h], dot);
      }
      // Scale k: byte 2k + l0 / 16 of the eight (words 0, 1 hold k = 0, 1 and k = 2, 3).
      tot += static_cast<int8_t>((ws[k >> 1] >> (16 * (k & 1) + ln.hs)) & 0xff) * dot;
    }
    return tot;
  }
};
