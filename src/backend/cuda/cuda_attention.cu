// The CUDA backend's KV cache and attention kernels (declared in cuda_kernels.h): rows appended to the
// cache, the decode attention (a block per query-head group, row and part of its keys, the parts merged
// by the last block to finish) and a prompt's attention on tensor cores (flash attention, its parts
// merged by a second launch).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_device.cuh"

namespace zinc::backend::cuda {
namespace {

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

// Attention of decode rows (and of any rows the tiles do not take): a block of kDecWarps warps per
// (G query heads of one KV head, row, part of the row's visible keys), the G heads sharing each read
// of the cache. A warp takes 8 keys at a time, lane l holding elements P l .. P l + P - 1 of each key
// and value row; the step's key and value rows are all read before any is used (one round trip a
// step; values after the softmax for heads of 512). Per head the eight dot products are summed across
// the lanes by halving exchanges (each lane left with one key's sum), then one softmax step for the
// eight and the weighted values. A row's keys are split in parts of at least kDecMinKeys (or
// AttentionArgs::part_keys), at most
// `splits` (the blocks of higher parts return at once); with more than one part each block writes
// each head's maximum, sum and weighted values to part, and the block that finishes a (head group,
// row) last (count) merges them into out and resets the count.
// The loop is bound by the latency of each step's reads, so short parts in flight read the cache
// faster than a few long ones (H200, qwen3-8b tg128: parts of 128 keys 390.9 tok/s, 64 392.6, 32
// 399.4, one head a block and values read after the softmax); sharing a KV head's reads among its
// query heads and reading values with keys took qwen3-8b tg128 at depth 4096 from 325.1 tok/s to 373.5;
// the eight keys' offsets from one table entry, the softmax's reductions over the eight keys alone
// and the last block's merge with a column's parts read together, to 382.4 (ncu, one launch at depth
// 4096: 18 us, 19% of DRAM bandwidth, 115 registers, two blocks a multiprocessor: bound by each
// warp's chain of exchanges and the merge's round trips, not by the reads).
// With AttentionArgs::pre the block forms its query heads from the products' q (norm and rotation in
// registers, HeadForm), and the last part's block forms the row's newest key, stores it and the value
// at the row's slot and syncs before the loop: the heads' launch gone (qwen3-30b-a3b tg128 469.7 ->
// 486.6 on an H200, where forming them in the q/k/v launch's last block of each head had lost 1%).
constexpr int kDecWarps = 8, kDecKeys = 8, kDecMinKeys = kDecWarps * kDecKeys;
static_assert(kMaxAttentionSplits <= kWarp, "the merge holds a head's parts in one warp");

// Query heads per block: what divides the group of query heads sharing a KV head, within 16 values
// of each head's elements per lane.
__host__ __device__ constexpr int decode_heads(int head_dim, int group) {
  return head_dim <= 128 && group % 4 == 0 ? 4 : head_dim <= 256 && group % 2 == 0 ? 2 : 1;
}

// A lane's P elements of a cache row as read; their conversion to float deferred until used.
template <int KV, int P>
struct KvRaw;
template <int P>
struct KvRaw<kF32, P> {
  float2 w[P / 2];
  __device__ __forceinline__ void load(const uint8_t* row, int c) {
    const auto* p = reinterpret_cast<const float2*>(reinterpret_cast<const float*>(row) + c);
#pragma unroll
    for (int i = 0; i < P / 2; ++i) w[i] = p[i];
  }
  __device__ __forceinline__ void get(float* out) const {
#pragma unroll
    for (int i = 0; i < P / 2; ++i) out[2 * i] = w[i].x, out[2 * i + 1] = w[i].y;
  }
};
template <int P>
struct KvRaw<kF16, P> {
  uint32_t w[P / 2];  // pairs of halves
  __device__ __forceinline__ void load(const uint8_t* row, int c) {
    const auto* p = reinterpret_cast<const uint32_t*>(row + 2 * static_cast<size_t>(c));  // 2P-byte aligned
    if constexpr (P == 2) {
      w[0] = p[0];
    } else if constexpr (P == 4) {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      w[0] = v.x, w[1] = v.y;
    } else {
#pragma unroll
      for (int i = 0; i < P / 2; i += 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(p + i);
        w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
      }
    }
  }
  __device__ __forceinline__ void get(float* out) const {
#pragma unroll
    for (int i = 0; i < P / 2; ++i) halves(w[i], out + 2 * i);
  }
};
template <int P>
struct KvRaw<kQ8_0, P> {  // P codes within one 34-byte block (2-byte aligned: its scale, then the codes)
  uint16_t d, w[P / 2];
  __device__ __forceinline__ void load(const uint8_t* row, int c) {
    const auto* b = reinterpret_cast<const uint16_t*>(row + static_cast<size_t>(c / 32) * 34);
    d = b[0];
#pragma unroll
    for (int i = 0; i < P / 2; ++i) w[i] = b[1 + (c % 32) / 2 + i];
  }
  __device__ __forceinline__ void get(float* out) const {
    const float s = half_bits(d);
#pragma unroll
    for (int i = 0; i < P / 2; ++i) q8_pair(w[i], s, out + 2 * i);
  }
};

// Eight per-lane partial sums reduced over the warp: lane l ends with the whole sum of value
// 4 b4 + 2 b3 + b2 (bits of l); four exchanges, two, one, then two more.
__device__ __forceinline__ float warp_sum8(const float (&v)[8], int lane) {
  const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
  float w[4], x[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = (b4 ? v[i + 4] : v[i]) + __shfl_xor_sync(0xffffffffu, b4 ? v[i] : v[i + 4], 16);
#pragma unroll
  for (int i = 0; i < 2; ++i) x[i] = (b3 ? w[i + 2] : w[i]) + __shfl_xor_sync(0xffffffffu, b3 ? w[i] : w[i + 2], 8);
  float y = (b2 ? x[1] : x[0]) + __shfl_xor_sync(0xffffffffu, b2 ? x[0] : x[1], 4);
  y += __shfl_xor_sync(0xffffffffu, y, 2);
  y += __shfl_xor_sync(0xffffffffu, y, 1);
  return y;
}

// A head's elements as a decode warp holds them (lane l: P l .. P l + P - 1), formed as
// k_heads_norm_rope forms them, bit for bit (the same sums in the same order, each rounding fixed: a
// row's heads are formed here in steps of one token a sequence, there in others, such as a speculative
// step's): normalised over the head (w: the lane's weights plus the offset), then
// rotated by the row's table (cs: the lane's pairs' cosines and sines; neox: the pair's other half
// P lanes times half / P away).
template <int P>
struct HeadForm {
  float cs[2 * P];
  __device__ __forceinline__ void load(const HeadsArgs& h, int r, int lane) {
    const int c0 = P * lane, half = h.n_rot / 2;
    const float* row = h.cs + static_cast<int64_t>(r) * h.n_rot;
#pragma unroll
    for (int i = 0; i < 2 * P; ++i) cs[i] = 0;
    if (c0 >= h.n_rot) return;
    if (h.neox) {
#pragma unroll
      for (int i = 0; i < 2 * P; ++i) cs[i] = row[2 * (c0 % half) + i];
    } else {
#pragma unroll
      for (int i = 0; i < P; ++i) cs[i] = c0 + i < h.n_rot ? row[c0 + i] : 0.0f;
    }
  }
  __device__ __forceinline__ void weights(const HeadsPart& p, int lane, float (&w)[P]) const {
#pragma unroll
    for (int i = 0; i < P; ++i) w[i] = p.norm && p.w ? p.w[P * lane + i] + p.offset : 1.0f;
  }
  __device__ __forceinline__ void apply(const HeadsArgs& h, const HeadsPart& p, const float (&w)[P], int lane, float (&x)[P]) const {
    if (p.norm) {
      float ss = 0;
#pragma unroll
      for (int i = 0; i < P; ++i) ss = __fmaf_rn(x[i], x[i], ss);
      ss = warp_sum(ss);
      const float scale = 1.0f / sqrtf(ss / static_cast<float>(32 * P) + p.eps);
#pragma unroll
      for (int i = 0; i < P; ++i) x[i] = p.w ? x[i] * scale * w[i] : x[i] * scale;
    }
    const int c0 = P * lane, half = h.n_rot / 2;
    if (h.neox) {
      const bool lo = c0 < half;
      const int d = half / P;
      float y[P];
#pragma unroll
      for (int i = 0; i < P; ++i) y[i] = __shfl_sync(0xffffffffu, x[i], (lo ? lane + d : lane - d) & (kWarp - 1));
      if (c0 < h.n_rot) {
#pragma unroll
        for (int i = 0; i < P; ++i)
          x[i] = lo ? __fsub_rn(__fmul_rn(x[i], cs[2 * i]), __fmul_rn(y[i], cs[2 * i + 1])) : __fadd_rn(__fmul_rn(y[i], cs[2 * i + 1]), __fmul_rn(x[i], cs[2 * i]));
      }
    } else {
#pragma unroll
      for (int m = 0; m < P / 2; ++m) {
        if (c0 + 2 * m >= h.n_rot) break;
        const float x0 = x[2 * m], x1 = x[2 * m + 1], cv = cs[2 * m], sv = cs[2 * m + 1];
        x[2 * m] = __fsub_rn(__fmul_rn(x0, cv), __fmul_rn(x1, sv));
        x[2 * m + 1] = __fadd_rn(__fmul_rn(x0, sv), __fmul_rn(x1, cv));
      }
    }
  }
};

template <int HD, int KV, int G>
__global__ void __launch_bounds__(kDecWarps * kWarp) k_attention_keys(AttentionArgs a) {
  constexpr int P = HD / 32;
  constexpr bool kValuesWithKeys = P <= 8;
  __shared__ float wm[kDecWarps][G], wl[kDecWarps][G];
  __shared__ float wacc[kDecWarps][G * HD];
  __shared__ float fs[G][kWarp];
  __shared__ bool last;
  __shared__ __align__(16) float ov[G * HD];  // the block's output, for its codes
  pdl_trigger();
  // The step's positions and block tables (not the previous kernel's) read while it finishes.
  const int h0 = blockIdx.x * G, r = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int kvh = h0 / (a.n_head / a.n_head_kv);
  const int pos = a.pos[r];
  const int lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int total = pos - lo + 1;
  const int least = a.part_keys > 0 ? a.part_keys : kDecMinKeys;  // keys a part
  const int splits = min(static_cast<int>(gridDim.z), (total + least - 1) / least);
  if (split >= splits) return;  // (before any load: most of a short row's blocks)
  const int32_t* table = a.tables + a.table_at[r];
  // Forming the heads (pre): the table's row and the norms' weights read before the wait too.
  constexpr bool kForms = (KV == kF32 || KV == kF16) && HD <= 256;
  const bool forms = kForms && a.pre.nparts == 2;
  const bool newest = forms && split == splits - 1;  // this block stores the row's newest key and value
  HeadForm<P> hf;
  float wq[P], wk[P];
  if (forms) {
    hf.load(a.pre, r, lane);
    hf.weights(a.pre.part[0], lane, wq);
    hf.weights(a.pre.part[1], lane, wk);
  }
  pdl_wait();
  float q[G][P];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qr = a.q + static_cast<int64_t>(r) * a.q_stride + static_cast<int64_t>(h0 + g) * HD + P * lane;
#pragma unroll
    for (int i = 0; i < P; ++i) q[g][i] = qr[i];
  }
  if constexpr (kForms) {
    if (forms) {
      if (newest && warp < 2) {
        const HeadsPart& kp = a.pre.part[1];
        const float* src = warp == 0 ? kp.in + (static_cast<int64_t>(r) * kp.n_head + kvh) * HD + P * lane
                                     : a.pre.v + (static_cast<int64_t>(r) * a.pre.v_heads + kvh) * HD + P * lane;
        float x[P];
#pragma unroll
        for (int i = 0; i < P; ++i) x[i] = src[i];
        if (warp == 0) hf.apply(a.pre, kp, wk, lane, x);
        uint8_t* row = (warp == 0 ? a.pre.kc : a.pre.vc) + static_cast<size_t>(a.pre.slots[r]) * a.row_bytes;
#pragma unroll
        for (int i = 0; i < P; ++i) store_kv(row, static_cast<int64_t>(kvh) * HD + P * lane + i, x[i], KV);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) hf.apply(a.pre, a.pre.part[0], wq, lane, q[g]);
      if (newest) __syncthreads();  // (the newest key and value stored before any warp reads them)
    }
  }
  const int chunk = ((total + splits - 1) / splits + kDecKeys - 1) / kDecKeys * kDecKeys;
  const int k0 = lo + split * chunk, k1 = min(pos + 1, k0 + chunk);
  const auto* kc = static_cast<const uint8_t*>(a.k);
  const auto* vc = static_cast<const uint8_t*>(a.v);
  const int col = kvh * HD + P * lane;
  const int mine = 4 * ((lane >> 4) & 1) + 2 * ((lane >> 3) & 1) + ((lane >> 2) & 1);  // the key whose sum this lane gets
  float m[G], l[G], acc[G][P];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY, l[g] = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) acc[g][i] = 0;
  }
  for (int j0 = k0 + kDecKeys * warp; j0 < k1; j0 += kDecKeys * kDecWarps) {
    // Past the end: the last key again, its weight then zero. The eight keys in one block of the table
    // unless the row's window starts off a multiple of eight.
    size_t off[kDecKeys];
    if (j0 % kKvBlock + kDecKeys <= kKvBlock) {
      const size_t slot = static_cast<size_t>(table[j0 / kKvBlock]) * kKvBlock + j0 % kKvBlock;
#pragma unroll
      for (int k = 0; k < kDecKeys; ++k) off[k] = (slot + min(k, k1 - 1 - j0)) * a.row_bytes;
    } else {
#pragma unroll
      for (int k = 0; k < kDecKeys; ++k) {
        const int j = min(j0 + k, k1 - 1);
        off[k] = (static_cast<size_t>(table[j / kKvBlock]) * kKvBlock + j % kKvBlock) * a.row_bytes;
      }
    }
    KvRaw<KV, P> kr[kDecKeys], vr[kDecKeys];
#pragma unroll
    for (int k = 0; k < kDecKeys; ++k) kr[k].load(kc + off[k], col);
    if constexpr (kValuesWithKeys) {
#pragma unroll
      for (int k = 0; k < kDecKeys; ++k) vr[k].load(vc + off[k], col);
    }
    float part[G][kDecKeys];
#pragma unroll
    for (int k = 0; k < kDecKeys; ++k) {
      float kv[P];
      kr[k].get(kv);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0;
#pragma unroll
        for (int i = 0; i < P; ++i) d += q[g][i] * kv[i];
        part[g][k] = d;
      }
    }
    const bool past = j0 + mine >= k1;
    float p[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float s = warp_sum8(part[g], lane) * a.scale;
      if (a.softcap > 0) s = a.softcap * tanhf(s / a.softcap);
      if (past) s = -INFINITY;
      // Over the eight keys: lanes that differ in bits 2-4 (each key's score is on four lanes).
      float mx = s;
#pragma unroll
      for (int b = 4; b <= 16; b *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, b));
      const float m_new = fmaxf(m[g], mx);  // key j0 is visible: finite
      const float corr = expf(m[g] - m_new);
      p[g] = expf(s - m_new);
      float ps = p[g];
#pragma unroll
      for (int b = 4; b <= 16; b *= 2) ps += __shfl_xor_sync(0xffffffffu, ps, b);
      l[g] = l[g] * corr + ps;
#pragma unroll
      for (int i = 0; i < P; ++i) acc[g][i] *= corr;
      m[g] = m_new;
    }
#pragma unroll
    for (int k = 0; k < kDecKeys; ++k) {
      if constexpr (!kValuesWithKeys) vr[k].load(vc + off[k], col);
      float v[P];
      vr[k].get(v);
      const int from = 16 * (k >> 2) + 8 * ((k >> 1) & 1) + 4 * (k & 1);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pk = __shfl_sync(0xffffffffu, p[g], from);
#pragma unroll
        for (int i = 0; i < P; ++i) acc[g][i] += pk * v[i];
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) wm[warp][g] = m[g], wl[warp][g] = l[g];
  }
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < P; ++i) wacc[warp][g * HD + P * lane + i] = acc[g][i];
  __syncthreads();
  // Each head's maximum, sum and weighted values over the block (the warps merged); element e of the
  // block's heads is element e % HD of head h0 + e / HD.
  const auto merged = [&](int e, float& M, float& L) {
    const int g = e / HD;
    M = -INFINITY;
    for (int w = 0; w < kDecWarps; ++w) M = fmaxf(M, wm[w][g]);
    L = 0;
    float sum = 0;
    for (int w = 0; w < kDecWarps; ++w) {
      const float f = wm[w][g] == -INFINITY ? 0.0f : expf(wm[w][g] - M);
      L += wl[w][g] * f;
      sum += wacc[w][e] * f;
    }
    return sum;
  };
  float* o = a.out + static_cast<int64_t>(r) * a.q_stride + static_cast<int64_t>(h0) * HD;
  // The codes of the block's G * HD outputs (whole super-blocks: attention_codes_fit), a warp each.
  const auto codes = [&] {
    if constexpr (G * HD % 256 == 0) {
      __syncthreads();
      const int64_t cols = static_cast<int64_t>(a.n_head) * HD;
      const Codes c = codes_layout(a.codes, a.n, cols);
      for (int b = warp; b < G * HD / 256; b += kDecWarps) store_codes_of(ov + b * 256, r, h0 * HD / 256 + b, cols, c);
    }
  };
  if (splits == 1) {
    for (int e = threadIdx.x; e < G * HD; e += blockDim.x) {
      float M, L;
      const float sum = merged(e, M, L);
      const float sink = a.sinks ? a.sinks[h0 + e / HD] : -INFINITY;
      const float Ms = fmaxf(M, sink), f = M == -INFINITY ? 0.0f : expf(M - Ms);
      o[e] = ov[e] = sum * f / (L * f + (a.sinks ? expf(sink - Ms) : 0.0f));
    }
    if (a.codes) codes();
    return;
  }
  // A head's parts: each its maximum and sum, two unused, then the weighted values (16-byte aligned).
  constexpr int kPart = HD + 4;
  const int hr = r * a.n_head + h0;
  const int64_t stride = static_cast<int64_t>(gridDim.z) * kPart;
  for (int e = threadIdx.x; e < G * HD; e += blockDim.x) {
    float M, L;
    const float sum = merged(e, M, L);
    float* part = a.part + (hr + e / HD) * stride + static_cast<int64_t>(split) * kPart;
    if (e % HD == 0) part[0] = M, part[1] = L;
    part[4 + e % HD] = sum;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&a.count[hr], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Warp g the factors of head h0 + g's parts (lane: part), over the whole sum; then the elements.
  if (warp < G) {
    const float* parts = a.part + (hr + warp) * stride;
    const float ms = lane < splits ? __ldcg(parts + lane * kPart) : -INFINITY;
    const float ls = lane < splits ? __ldcg(parts + lane * kPart + 1) : 0.0f;
    const float sink = a.sinks ? a.sinks[h0 + warp] : -INFINITY;
    const float M = fmaxf(warp_max(ms), sink);  // part 0 has a visible key: finite
    const float f = ms == -INFINITY ? 0.0f : expf(ms - M);
    const float L = warp_sum(ls * f) + (a.sinks ? expf(sink - M) : 0.0f);
    fs[warp][lane] = f / L;
  }
  __syncthreads();
  // Four elements (a column) a thread and kSub threads a column, each every kSub-th part, all its
  // parts' reads in flight together; then the column's threads summed.
  constexpr int kCols = G * HD / 4, kSub = kDecWarps * kWarp / kCols, kEach = (kMaxAttentionSplits + kSub - 1) / kSub;
  static_assert(kCols <= kDecWarps * kWarp && kEach <= 16, "a column's parts on at most 16 reads a thread");
  const int col4 = threadIdx.x % kCols, sub = threadIdx.x / kCols;
  float4 sum = make_float4(0, 0, 0, 0);
  if (sub < kSub) {
    const int e = 4 * col4;
    const float* parts = a.part + (hr + e / HD) * stride + 4 + e % HD;
    const float* f = fs[e / HD];
    float4 v[kEach];
#pragma unroll
    for (int i = 0; i < kEach; ++i)
      if (sub + kSub * i < splits) v[i] = __ldcg(reinterpret_cast<const float4*>(parts + (sub + kSub * i) * kPart));
#pragma unroll
    for (int i = 0; i < kEach; ++i)
      if (sub + kSub * i < splits) {
        const float w = f[sub + kSub * i];
        sum.x += v[i].x * w, sum.y += v[i].y * w, sum.z += v[i].z * w, sum.w += v[i].w * w;
      }
  }
  if constexpr (kSub > 1) {
    __shared__ float4 cols[kDecWarps * kWarp];
    cols[threadIdx.x] = sum;
    __syncthreads();
    if (sub == 0)
      for (int t = 1; t < kSub; ++t) {
        const float4 x = cols[t * kCols + col4];
        sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
      }
  }
  if (sub == 0) {
    const int e = 4 * col4;
    o[e] = sum.x, o[e + 1] = sum.y, o[e + 2] = sum.z, o[e + 3] = sum.w;
    *reinterpret_cast<float4*>(ov + e) = sum;
  }
  if (threadIdx.x == 0) a.count[hr] = 0;
  if (a.codes) codes();
}

template <int HD, int KV>
void launch_attention_keys(Stream s, const AttentionArgs& a, int splits) {
  const int g = decode_heads(HD, a.n_head / a.n_head_kv);
  const dim3 block(kDecWarps * kWarp);
  if constexpr (HD <= 128) {
    if (g == 4) return launch(k_attention_keys<HD, KV, 4>, dim3(a.n_head / 4, a.n, splits), block, s, a);
  }
  if constexpr (HD <= 256) {
    if (g == 2) return launch(k_attention_keys<HD, KV, 2>, dim3(a.n_head / 2, a.n, splits), block, s, a);
  }
  launch(k_attention_keys<HD, KV, 1>, dim3(a.n_head, a.n, splits), block, s, a);
}

template <int KV>
void launch_attention(Stream s, const AttentionArgs& a) {
  const int splits = a.part && a.count ? std::clamp(a.splits, 1, kMaxAttentionSplits) : 1;
  switch (a.head_dim) {
    case 64: return launch_attention_keys<64, KV>(s, a, splits);
    case 128: return launch_attention_keys<128, KV>(s, a, splits);
    case 256: return launch_attention_keys<256, KV>(s, a, splits);
    case 512: return launch_attention_keys<512, KV>(s, a, splits);
    default: break;
  }
  const dim3 grid(a.n_head, a.n);
  const int p = (a.head_dim + 31) / 32;
  if (p <= 1) launch(k_attention<1, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else if (p <= 2) launch(k_attention<2, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else if (p <= 4) launch(k_attention<4, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else if (p <= 8) launch(k_attention<8, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
  else launch(k_attention<16, KV>, grid, dim3(kAttnWarps * kWarp), s, a);
}

// ---- attention of a prompt on tensor cores ------------------------------------------------------
//
// One block of four warps per (64 query rows of one sequence, query head): a warp takes 16 rows, the
// block steps through the visible keys a cache block (32 keys) at a time, the keys and values of the
// head's cache rows read into shared memory as f16 once for the block. Scores S = Q K^T by 16x8x16 f16
// matrix instructions with float32 sums (Q rounded to f16 in registers), then scaled (and capped),
// masked by each row's position and window, and an online softmax per row in float32; P (rounded to
// f16 where it stays in registers as the next product's A fragments) times V accumulated in float32.
// F16 and Q8_0 caches, heads of 64 or 128. With a.splits > 1 (a short chunk of a prompt deep in its
// sequence: a few row tiles, a few hundred blocks of keys) the visible keys are split in gridDim.z parts
// of at least kFaMinBlocks cache blocks; each block writes its rows' maximum, sum and weighted values
// to a.part, and k_flash_merge merges them (the parts past the keys write empty ones).
constexpr int kFaRows = 64, kFaKeys = 32, kFaMinBlocks = 2;

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

template <int HD, int KV>
__global__ void __launch_bounds__(128) k_flash_attention(AttentionArgs a) {
  constexpr int LD = HD + 8;  // halves per shared row
  __shared__ __align__(16) __half ks[2][kFaKeys][LD];  // two steps: the next one's copies in flight
  __shared__ __align__(16) __half vs[2][kFaKeys][LD];
  __shared__ int lo_min, hi_max;
  pdl_trigger();
  pdl_wait();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, gq = lane / 4, tq = lane % 4;
  const int h = blockIdx.y, r0 = blockIdx.x * kFaRows;
  const int group = a.n_head / a.n_head_kv, kvh = h / group;
  const int32_t* table = a.tables + a.table_at[r0];  // one sequence: every row's table
  // The rows' visible keys: [lo, pos] each; the block's union.
  if (threadIdx.x == 0) {
    lo_min = INT_MAX;
    hi_max = -1;
  }
  __syncthreads();
  if (threadIdx.x < kFaRows && r0 + static_cast<int>(threadIdx.x) < a.n) {
    const int p = a.pos[r0 + threadIdx.x];
    atomicMin(&lo_min, a.window > 0 ? max(0, p - a.window + 1) : 0);
    atomicMax(&hi_max, p);
  }
  // This thread's two rows (gq and gq + 8 of the warp's 16).
  int pos[2], lo[2];
  bool live[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + 16 * warp + gq + 8 * i;
    live[i] = r < a.n;
    pos[i] = live[i] ? a.pos[r] : -1;
    lo[i] = live[i] && a.window > 0 ? max(0, pos[i] - a.window + 1) : 0;
  }
  // Q fragments (A of S = Q K^T), f16, per 16 columns of the head.
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r0 + 16 * warp + gq + 8 * i;
        float2 v = make_float2(0, 0);
        if (r < a.n) v = *reinterpret_cast<const float2*>(a.q + static_cast<int64_t>(r) * a.q_stride + h * HD + 16 * kk + 8 * half + 2 * tq);
        qf[kk][i + 2 * half] = pack_half2(v.x, v.y);
      }
  float o[HD / 8][4];
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  __syncthreads();
  const int k_first = (lo_min / kFaKeys) * kFaKeys, k_last = hi_max;
  // This block's part of the keys: [k_begin, k_end) (whole cache blocks; the last may run past k_last).
  int k_begin = k_first, k_end = k_last + 1;
  if (gridDim.z > 1) {
    const int blocks = (k_last - k_first) / kFaKeys + 1;
    const int chunk = max(kFaMinBlocks, (blocks + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z));
    k_begin = k_first + static_cast<int>(blockIdx.z) * chunk * kFaKeys;
    k_end = min(k_end, k_begin + chunk * kFaKeys);
  }
  const auto* kc = static_cast<const uint8_t*>(a.k);
  const auto* vc = static_cast<const uint8_t*>(a.v);
  // The 32 keys and values of head kvh from key j0 on into stage st, as f16 (groups of eight elements):
  // F16 rows copied asynchronously (the next step's while this one computes), Q8_0 converted here.
  // Keys past k_last are not written yet: zeros (a masked score's weight is 0, not 0 x NaN).
  const auto load = [&](int j0, int st) {
    const size_t slot0 = static_cast<size_t>(table[j0 / kKvBlock]) * kKvBlock;
    for (int e = threadIdx.x; e < kFaKeys * HD / 8; e += blockDim.x) {
      const int key = e / (HD / 8), c = (e % (HD / 8)) * 8;
      const size_t off = (slot0 + key) * a.row_bytes;
      const bool have = j0 + key <= k_last;
      if constexpr (KV == kF16) {
        const size_t at = off + (static_cast<size_t>(kvh) * HD + c) * 2;
        cp_async16_zfill(&ks[st][key][c], kc + at, have);
        cp_async16_zfill(&vs[st][key][c], vc + at, have);
      } else {
        uint4 kv[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
#pragma unroll
        for (int w = 0; w < 2 && have; ++w) {
          const int i = kvh * HD + c;
          const uint8_t* b = (w ? vc : kc) + off + (i / 32) * 34;
          const float d = half_bits(ld16(b));
          const int8_t* q = reinterpret_cast<const int8_t*>(b + 2 + i % 32);
          kv[w] = make_uint4(pack_half2(d * q[0], d * q[1]), pack_half2(d * q[2], d * q[3]), pack_half2(d * q[4], d * q[5]),
                             pack_half2(d * q[6], d * q[7]));
        }
        *reinterpret_cast<uint4*>(&ks[st][key][c]) = kv[0];
        *reinterpret_cast<uint4*>(&vs[st][key][c]) = kv[1];
      }
    }
    cp_async_commit();
  };
  if (k_begin < k_end) load(k_begin, 0);
  int st = 0;
  for (int j0 = k_begin; j0 < k_end; j0 += kFaKeys, st ^= 1) {
    // (Stage st ^ 1 was last read before the previous step's closing barrier.)
    if (j0 + kFaKeys < k_end) {
      load(j0 + kFaKeys, st ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    // S: 16 rows x 32 keys a warp.
    float s[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&ks[st][8 * t + gq][16 * kk + 2 * tq]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&ks[st][8 * t + gq][16 * kk + 8 + 2 * tq]);
        mma_f16(s[t], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b0, b1);
      }
    }
    // Scale, cap, mask; the rows' new maxima (over the four lanes of a row).
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2, key = j0 + 8 * t + 2 * tq + (e % 2);
        float v = s[t][e] * a.scale;
        if (a.softcap > 0) v = a.softcap * tanhf(v / a.softcap);
        if (key > pos[i] || key < lo[i]) v = -INFINITY;
        s[t][e] = v;
        mx[i] = fmaxf(mx[i], v);
      }
    float corr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      const float base = mx[i] == -INFINITY ? 0.0f : mx[i];
      corr[i] = expf(m[i] - base);  // m = -inf: 0
      m[i] = mx[i];
      l[i] *= corr[i];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        s[t][2 * i] = expf(s[t][2 * i] - base);
        s[t][2 * i + 1] = expf(s[t][2 * i + 1] - base);
        l[i] += s[t][2 * i] + s[t][2 * i + 1];
      }
    }
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      o[j][0] *= corr[0];
      o[j][1] *= corr[0];
      o[j][2] *= corr[1];
      o[j][3] *= corr[1];
    }
    // O += P V: P's fragments from S's (keys 16 kk .. 16 kk + 15), V's by transposing loads.
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t p0 = pack_half2(s[2 * kk][0], s[2 * kk][1]), p1 = pack_half2(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t p2 = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]), p3 = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int j = 0; j < HD / 8; j += 2) {
        uint32_t b[4];
        const __half* addr = &vs[st][16 * kk + (lane & 15)][8 * j + (lane >= 16 ? 8 : 0)];
        const auto sa = static_cast<uint32_t>(__cvta_generic_to_shared(addr));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                     : "r"(sa));
#else
        b[0] = b[1] = b[2] = b[3] = sa;
#endif
        mma_f16(o[j], p0, p1, p2, p3, b[0], b[1]);
        mma_f16(o[j + 1], p0, p1, p2, p3, b[2], b[3]);
      }
    }
    __syncthreads();
  }
  // The rows' sums over their four lanes, the sink, and the output (or this part's, unscaled).
  const float sink = a.sinks ? a.sinks[h] : -INFINITY;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    if (gridDim.z > 1) {
      const int r = r0 + 16 * warp + gq + 8 * i;
      if (!live[i]) continue;
      float* part = a.part + ((static_cast<int64_t>(r) * a.n_head + h) * gridDim.z + blockIdx.z) * (HD + 2);
      if (tq == 0) part[0] = m[i], part[1] = l[i];
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) *reinterpret_cast<float2*>(part + 2 + 8 * j + 2 * tq) = make_float2(o[j][2 * i], o[j][2 * i + 1]);
      continue;
    }
    const float M = fmaxf(m[i], sink);
    const float f = m[i] == -INFINITY ? 0.0f : expf(m[i] - M);
    const float L = l[i] * f + (a.sinks ? expf(sink - M) : 0.0f);
    const float scale = L > 0 ? f / L : 0.0f;
    const int r = r0 + 16 * warp + gq + 8 * i;
    if (!live[i]) continue;
    float* out = a.out + static_cast<int64_t>(r) * a.q_stride + h * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<float2*>(out + 8 * j + 2 * tq) = make_float2(o[j][2 * i] * scale, o[j][2 * i + 1] * scale);
  }
}

// The parts of k_flash_attention's split keys: a block per (row, head), a thread per element.
__global__ void k_flash_merge(AttentionArgs a, int head_dim) {
  pdl_trigger();
  pdl_wait();
  const int r = blockIdx.x, h = blockIdx.y, c = threadIdx.x;
  const int splits = a.splits, stride = head_dim + 2;
  const float* parts = a.part + (static_cast<int64_t>(r) * a.n_head + h) * splits * stride;
  const float sink = a.sinks ? a.sinks[h] : -INFINITY;
  float M = sink;
  for (int sp = 0; sp < splits; ++sp) M = fmaxf(M, parts[sp * stride]);
  float L = a.sinks ? expf(sink - M) : 0.0f, sum = 0;
  for (int sp = 0; sp < splits; ++sp) {
    const float ms = parts[sp * stride];
    if (ms == -INFINITY) continue;
    const float f = expf(ms - M);
    L += parts[sp * stride + 1] * f;
    sum += parts[sp * stride + 2 + c] * f;
  }
  a.out[static_cast<int64_t>(r) * a.q_stride + static_cast<int64_t>(h) * head_dim + c] = L > 0 ? sum / L : 0.0f;
}

}  // namespace

void kv_append(Stream s, int kv_type, const float* k, const float* v, int64_t kv_width, int n, const int32_t* slots, size_t row_bytes,
               void* kc, void* vc) {
  launch(k_kv_append, dim3(n, 2), dim3(256), s, kv_type, k, v, kv_width, slots, row_bytes, static_cast<uint8_t*>(kc), static_cast<uint8_t*>(vc));
}

bool flash_attention_fits(int kv_type, int head_dim) { return (kv_type == kF16 || kv_type == kQ8_0) && (head_dim == 64 || head_dim == 128); }

void flash_attention(Stream s, const AttentionArgs& a) {
  const int splits = a.part ? max(1, a.splits) : 1;
  const dim3 grid(static_cast<unsigned>((a.n + kFaRows - 1) / kFaRows), static_cast<unsigned>(a.n_head), static_cast<unsigned>(splits));
  if (a.head_dim == 64) a.kv_type == kF16 ? launch(k_flash_attention<64, kF16>, grid, dim3(128), s, a) : launch(k_flash_attention<64, kQ8_0>, grid, dim3(128), s, a);
  else a.kv_type == kF16 ? launch(k_flash_attention<128, kF16>, grid, dim3(128), s, a) : launch(k_flash_attention<128, kQ8_0>, grid, dim3(128), s, a);
  if (splits > 1) {
    AttentionArgs b = a;
    b.splits = splits;
    launch(k_flash_merge, dim3(static_cast<unsigned>(a.n), static_cast<unsigned>(a.n_head)), dim3(static_cast<unsigned>(a.head_dim)), s, b, a.head_dim);
  }
}

int flash_splits(int n, int n_head, int sms) {
  const int tiles = (n + kFaRows - 1) / kFaRows;
  if (tiles * n_head >= sms) return 1;  // a wave of blocks already (a whole prompt's tiles)
  const int want = (4 * sms + tiles * n_head - 1) / (tiles * n_head);
  return std::clamp(std::min(want, kMaxFlashSplits), 1, std::max(1, kFlashPartRows / n));
}

int decode_attention_splits(int n, int n_head, int n_head_kv, int head_dim, int sms) {
  // Two blocks a multiprocessor: more (smaller parts, or a head a block) measured slower at depth
  // 4096 (H200 qwen3-8b: four heads a block and twice the parts' blocks 379 -> 359 tok/s). The parts
  // fit in one wave of those (rounded down: a part more that spills into a second wave makes some
  // multiprocessors run two of its blocks one after the other; qwen3-8b 16 rows at depth 2048, three
  // parts against two, 2709 -> 2872 tok/s).
  const int blocks = n_head / decode_heads(head_dim, n_head / n_head_kv) * (n <= kSameRows ? 1 : n);  // a part's
  return std::clamp(2 * sms / blocks, 1, kMaxAttentionSplits);
}

int decode_attention_part_keys(int n) {
  // One row: parts as short as a block's one pass (64 keys; short parts in flight read the cache
  // faster than a few long ones). Eight rows and more fill the GPU with fewer parts: a part costs its
  // block's fixed work (the heads formed, the newest key stored) and the merge's round trips, so parts
  // of 256 keys (one part up to depth 256) took qwen3-8b 16 rows through the scheduler (64 to 192
  // deep) from 3259 / 3283 to 3326 / 3327 tok/s, `--parallel 16` from 3923 / 3962 to 3994 / 3995.
  // Up to kSameRows rows, one row's parts (each row's arithmetic that of a step of it alone).
  return n > kSameRows ? 4 * kDecMinKeys : kDecMinKeys;
}

bool attention_forms_heads(int kv_type, int head_dim, int n_rot, bool neox) {
  if ((kv_type != kF32 && kv_type != kF16) || (head_dim != 64 && head_dim != 128 && head_dim != 256)) return false;
  const int p = head_dim / 32;
  return n_rot > 0 && n_rot <= head_dim && n_rot % 2 == 0 && (!neox || (n_rot / 2) % p == 0);
}

bool attention_codes_fit(int head_dim, int n_head, int n_head_kv) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256 && head_dim != 512) return false;
  if (n_head_kv <= 0 || n_head % n_head_kv != 0) return false;
  return decode_heads(head_dim, n_head / n_head_kv) * head_dim % 256 == 0;
}

void attention(Stream s, const AttentionArgs& a) {
  if (a.kv_type == kF32) launch_attention<kF32>(s, a);
  else if (a.kv_type == kF16) launch_attention<kF16>(s, a);
  else launch_attention<kQ8_0>(s, a);
}

}  // namespace zinc::backend::cuda
