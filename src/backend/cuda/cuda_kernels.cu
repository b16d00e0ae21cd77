// The CUDA backend's kernels other than the matrix products and attention (declared in cuda_kernels.h;
// the products are in cuda_products.cu and cuda_codes.cu, the KV cache and attention in
// cuda_attention.cu, the recurrent layers in cuda_recurrent.cu): norms, rotations, elementwise ops,
// mixture routing and combining. Activations stay float32 throughout.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "backend/cuda/cuda_device.cuh"

namespace zinc::backend::cuda {

bool g_pdl_allowed = true;

namespace {

// ---- small ops ----------------------------------------------------------------------------------

__global__ void k_rms_norm(const float* x, const float* w, float* out, int64_t width, int64_t group, float eps, float offset) {
  pdl_trigger();
  pdl_wait();
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
// k_quantize_q8k makes them. One block of W warps (8, 16 or 32: add_rms_norm) per row, warp i the
// super-blocks i, i + W, ... (at most PER), eight elements per lane held in registers between the
// passes.
constexpr int kNormWarps = 8, kNormPer = 8;
template <int W, int PER>
__global__ void __launch_bounds__(W * kWarp) k_add_rms_norm(const float* a, const float* b, float* sum, const float* w, float* out, int64_t width,
                                                             float eps, float offset, Codes c, bool codes, const float* moe_y, const float* moe_w,
                                                             int moe_k, const float* sh, const float* sh_g, int64_t sh_gw) {
  pdl_trigger();
  const int64_t row = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t nsb = width / 256;
  // The norm's weights on their way while the previous kernel finishes.
  if (w) {
    for (int64_t sb = warp; sb < nsb; sb += W) asm volatile("prefetch.global.L1 [%0];" ::"l"(w + sb * 256 + lane * 8));
  }
  pdl_wait();
  float v[PER][8];
  float ss = 0;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t sb = warp + i * W;
    if (sb >= nsb) break;
    const int64_t at = row * width + sb * 256 + lane * 8;
    float4 x0 = *reinterpret_cast<const float4*>(a + at), x1 = *reinterpret_cast<const float4*>(a + at + 4);
    if (b) {
      const float4 y0 = *reinterpret_cast<const float4*>(b + at), y1 = *reinterpret_cast<const float4*>(b + at + 4);
      x0 = make_float4(x0.x + y0.x, x0.y + y0.y, x0.z + y0.z, x0.w + y0.w);
      x1 = make_float4(x1.x + y1.x, x1.y + y1.y, x1.z + y1.z, x1.w + y1.w);
    } else if (moe_y) {
      float y[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int s = 0; s < moe_k; ++s) {
        const float ws = moe_w[row * moe_k + s];
        const float* ys = moe_y + (row * moe_k + s) * width + sb * 256 + lane * 8;
        const float4 y0 = *reinterpret_cast<const float4*>(ys), y1 = *reinterpret_cast<const float4*>(ys + 4);
        y[0] += ws * y0.x, y[1] += ws * y0.y, y[2] += ws * y0.z, y[3] += ws * y0.w;
        y[4] += ws * y1.x, y[5] += ws * y1.y, y[6] += ws * y1.z, y[7] += ws * y1.w;
      }
      if (sh) {  // the shared expert's rows times the sigmoid of their gate, as k_sigmoid_mul forms them
        const int64_t col = sb * 256 + lane * 8;
        for (int j = 0; j < 8; ++j) y[j] += sh[row * width + col + j] / (1.0f + expf(-sh_g[row * sh_gw + (sh_gw == 1 ? 0 : col + j)]));
      }
      x0 = make_float4(x0.x + y[0], x0.y + y[1], x0.z + y[2], x0.w + y[3]);
      x1 = make_float4(x1.x + y[4], x1.y + y[5], x1.z + y[6], x1.w + y[7]);
    }
    if (sum) {
      *reinterpret_cast<float4*>(sum + at) = x0;
      *reinterpret_cast<float4*>(sum + at + 4) = x1;
    }
    v[i][0] = x0.x, v[i][1] = x0.y, v[i][2] = x0.z, v[i][3] = x0.w, v[i][4] = x1.x, v[i][5] = x1.y, v[i][6] = x1.z, v[i][7] = x1.w;
    for (int j = 0; j < 8; ++j) ss += v[i][j] * v[i][j];
  }
  __shared__ float part[W];
  ss = warp_sum(ss);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  ss = 0;
  for (int k = 0; k < W; ++k) ss += part[k];
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(width) + eps);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t sb = warp + i * W;
    if (sb >= nsb) break;
    const int64_t col = sb * 256 + lane * 8;
    float o[8];
    for (int j = 0; j < 8; ++j) o[j] = w ? v[i][j] * scale * (w[col + j] + offset) : v[i][j] * scale;
    *reinterpret_cast<float4*>(out + row * width + col) = make_float4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<float4*>(out + row * width + col + 4) = make_float4(o[4], o[5], o[6], o[7]);
    if (codes) store_codes(o, row, sb, width, c);
  }
}

// Rows whose width is a multiple of 256, normalised over groups of `group` (8 to 256, a power of two:
// group / 8 lanes a group), times (w + offset) (w: group floats), then through the activation with z:
// out = act(normed) z (act_first) or act(z) normed; with codes, out's codes as k_quantize_q8k makes
// them. A warp a super-block (its groups and codes are its own), kNormGluWarps a block: a row's
// super-blocks side by side on several multiprocessors (one block a row took 8.7 us for 4096 columns
// on an H200, against 3.x for the three launches it replaced).
constexpr int kNormGluWarps = 2;
__global__ void __launch_bounds__(kNormGluWarps * kWarp) k_norm_glu(const float* x, const float* w, const float* z, float* out,
                                                                    int64_t width, int group, float eps, float offset, bool gelu,
                                                                    bool act_first, Codes c, bool codes) {
  pdl_trigger();
  const int64_t row = blockIdx.y;
  const int lane = threadIdx.x % kWarp;
  const int64_t sb = static_cast<int64_t>(blockIdx.x) * kNormGluWarps + threadIdx.x / kWarp;
  const int64_t col = sb * 256 + lane * 8, at = row * width + col;
  float wv[8];
  for (int j = 0; j < 8; ++j) wv[j] = w && sb < width / 256 ? w[(col + j) % group] + offset : 1.0f;  // (before the wait)
  pdl_wait();
  if (sb >= width / 256) return;
  const float4 x0 = *reinterpret_cast<const float4*>(x + at), x1 = *reinterpret_cast<const float4*>(x + at + 4);
  const float4 z0 = *reinterpret_cast<const float4*>(z + at), z1 = *reinterpret_cast<const float4*>(z + at + 4);
  const float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  const float zv[8] = {z0.x, z0.y, z0.z, z0.w, z1.x, z1.y, z1.z, z1.w};
  float ss = 0;
  for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
  for (int o = group / 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(group) + eps);
  float o[8];
  for (int j = 0; j < 8; ++j) {
    const float h = w ? v[j] * scale * wv[j] : v[j] * scale;
    o[j] = act_first ? glu_value(gelu, h, zv[j]) : glu_value(gelu, zv[j], h);
  }
  *reinterpret_cast<float4*>(out + at) = make_float4(o[0], o[1], o[2], o[3]);
  *reinterpret_cast<float4*>(out + at + 4) = make_float4(o[4], o[5], o[6], o[7]);
  if (codes) store_codes(o, row, sb, width, c);
}

// One block per (row, head), a thread per rotated pair (and the dims past n_rot copied).
__global__ void k_rope(const float* x, float* out, const float* cs, int n_head, int head_dim, int n_rot, bool neox) {
  pdl_trigger();
  pdl_wait();
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
__global__ void __launch_bounds__(128) k_heads_norm_rope(HeadsArgs a) {
  pdl_trigger();
  const int t = blockIdx.y;
  const int heads = a.part[0].n_head + (a.nparts > 1 ? a.part[1].n_head : 0);
  // The norm's weights and the rotation's table (the step's, not the previous kernel's) on their way
  // while the previous kernel finishes.
  if (static_cast<int>(blockIdx.x) < heads) {
    const HeadsPart& pp = a.part[static_cast<int>(blockIdx.x) >= a.part[0].n_head ? 1 : 0];
    for (int i = threadIdx.x * 32; i < a.head_dim; i += blockDim.x * 32) {
      if (pp.norm && pp.w) asm volatile("prefetch.global.L1 [%0];" ::"l"(pp.w + i));
    }
    for (int i = threadIdx.x * 32; i < a.n_rot; i += blockDim.x * 32) asm volatile("prefetch.global.L1 [%0];" ::"l"(a.cs + t * a.n_rot + i));
  }
  pdl_wait();
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
  if (part.norm && a.head_dim % kWarp == 0) {
    // Every warp the head's sum of squares as the decode attention forms a head (HeadForm: lane l the
    // squares of elements P l .. P l + P - 1 in order, then across the warp), so that a row's heads are
    // the same bit for bit whichever launch forms them.
    __syncthreads();
    const int P = a.head_dim / kWarp, lane = threadIdx.x % kWarp;
    ss = 0;
    for (int i = 0; i < P; ++i) ss = __fmaf_rn(v[P * lane + i], v[P * lane + i], ss);
    ss = warp_sum(ss);
    scale = 1.0f / sqrtf(ss / static_cast<float>(a.head_dim) + part.eps);
  } else if (part.norm) {
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
    const float y0 = __fsub_rn(__fmul_rn(x0, cv), __fmul_rn(x1, sv)), y1 = __fadd_rn(__fmul_rn(x0, sv), __fmul_rn(x1, cv));
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
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = a[i], y = b[i];
    float r;
    switch (op) {
      case Elementwise::Add: r = x + y; break;
      case Elementwise::Mul: r = x * y; break;
      case Elementwise::SwiGLU: r = glu_value(false, x, y); break;
      case Elementwise::GeGLU: r = glu_value(true, x, y); break;
      default: {
        const float g = fminf(x, limit), u = fminf(fmaxf(y, -limit), limit);
        r = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
      }
    }
    out[i] = r;
  }
}

__global__ void k_softcap(const float* x, float* out, int64_t n, float cap) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = cap * tanhf(x[i] / cap);
}

__global__ void k_sigmoid_mul(const float* a, const float* b, float* out, int64_t width, int64_t bw, int64_t n) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    out[i] = a[i] / (1.0f + expf(-b[t * bw + (bw == 1 ? 0 : c)]));
  }
}

__global__ void k_scale(const float* x, const float* w, bool one, float* out, int64_t width, int64_t n) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = x[i] * w[one ? 0 : i % width];
}

__global__ void k_copy_cols(const float* x, int64_t in_width, int64_t at, int64_t stride, int groups, float* out, int64_t out_width,
                            int64_t out_at, int64_t width, int64_t n) {
  pdl_trigger();
  pdl_wait();
  const int64_t per_row = width * groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * per_row; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, c = i % per_row, gi = c / width, j = c % width;
    out[t * out_width + out_at + c] = x[t * in_width + gi * stride + at + j];
  }
}

__global__ void k_gather_rows(const float* x, const int32_t* rows, int64_t width, float* out) {
  pdl_trigger();
  pdl_wait();
  const int64_t r = blockIdx.y;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < width; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[r * width + i] = x[static_cast<int64_t>(rows[r]) * width + i];
}

// One run a block: 16-byte pieces where both addresses and the length allow, else bytes.
__global__ void k_copy_runs(const CopyRun* runs) {
  pdl_trigger();
  pdl_wait();
  const CopyRun r = runs[blockIdx.x];
  if (((reinterpret_cast<uintptr_t>(r.from) | reinterpret_cast<uintptr_t>(r.to) | r.bytes) & 15) == 0) {
    const auto* from = static_cast<const uint4*>(r.from);
    auto* to = static_cast<uint4*>(r.to);
    for (uint64_t i = threadIdx.x; i < r.bytes / 16; i += blockDim.x) to[i] = from[i];
  } else {
    const auto* from = static_cast<const uint8_t*>(r.from);
    auto* to = static_cast<uint8_t*>(r.to);
    for (uint64_t i = threadIdx.x; i < r.bytes; i += blockDim.x) to[i] = from[i];
  }
}

// The index of each row's largest value, the first on ties (NaN never taken; -1 when every value is
// NaN): blocks of kArgmaxSpan columns each (a vocabulary's row is read by many SMs at once). Each
// thread scans its columns in increasing order, the block's pairs are reduced keeping the larger value,
// on ties the smaller index; the block's pair goes into its row's 64-bit key (the value's order-keeping
// bits above the index's complement) by atomicMax, and the row's last block writes the answer and
// clears the key and the count for the next launch.
constexpr int kArgmaxSpan = 4096, kArgmaxThreads = 256;
__device__ __forceinline__ void argmax_pick(float& v, int& i, float ov, int oi) {
  if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) v = ov, i = oi;
}
__global__ void __launch_bounds__(kArgmaxThreads) k_argmax_rows(const float* x, int64_t width, int32_t* out, unsigned long long* key,
                                                               unsigned* count) {
  pdl_trigger();
  pdl_wait();
  const unsigned r = blockIdx.y;
  const float* row = x + static_cast<int64_t>(r) * width;
  const int64_t end = min(width, static_cast<int64_t>(blockIdx.x + 1) * kArgmaxSpan);
  float best = 0;
  int at = -1;
#pragma unroll 4
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kArgmaxSpan + threadIdx.x; c < end; c += kArgmaxThreads) {
    const float v = row[c];
    if (v == v && (at < 0 || v > best)) best = v, at = static_cast<int>(c);
  }
  for (int o = kWarp / 2; o > 0; o /= 2) argmax_pick(best, at, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, at, o));
  __shared__ float sv[kArgmaxThreads / kWarp];
  __shared__ int si[kArgmaxThreads / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) sv[warp] = best, si[warp] = at;
  __syncthreads();
  if (warp != 0) return;
  best = lane < kArgmaxThreads / kWarp ? sv[lane] : 0.0f;
  at = lane < kArgmaxThreads / kWarp ? si[lane] : -1;
  for (int o = kWarp / 2; o > 0; o /= 2) argmax_pick(best, at, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, at, o));
  if (lane != 0) return;
  if (at >= 0) {
    uint32_t u = __float_as_uint(best == 0.0f ? 0.0f : best);  // (-0 and +0 are one value)
    u = u & 0x80000000u ? ~u : u | 0x80000000u;
    atomicMax(key + r, static_cast<unsigned long long>(u) << 32 | ~static_cast<uint32_t>(at));
  }
  __threadfence();
  if (atomicAdd(count + r, 1u) != gridDim.x - 1) return;
  const unsigned long long k = atomicExch(key + r, 0ull);
  count[r] = 0;
  out[r] = k == 0 ? -1 : static_cast<int32_t>(~static_cast<uint32_t>(k));
}

// ---- mixture of experts -------------------------------------------------------------------------

// One warp per token: the routing of cpu_backend.cpp's moe() (same operations; the softmax's sum in
// another order), lane l holding experts l + 32 j (j < J) in registers; the top k chosen one at a time
// (larger weight first, the lower expert on ties): each lane's best, then the warp's largest weight
// and the lowest expert holding it by two warp reductions over order-preserving integer keys.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t b = __float_as_uint(v);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}
// Each round's chosen value is broadcast to the warp, the sums formed in the order of choosing; then
// each chosen expert's lane writes its slot, the slots in increasing expert order (the order the CPU
// sums them in) from ballots of the chosen bits: no serial tail on one lane (qwen3-30b-a3b tg128
// 445 -> 458 on an H200 against the top k on lane 0 and an insertion sort).
template <int J>
__device__ void route_token(const float* l, int t, int ne, int k, bool topk_first, bool norm, float logit_scale,
                            const float* router_b, const float* expert_scale, int32_t* ids, float* weights) {
  const int lane = threadIdx.x % kWarp;
  float v[J];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int e = lane + j * kWarp;
    v[j] = -INFINITY;
    if (e < ne) {
      float x = __ldcg(l + e);  // (written by other blocks of the same launch, for k_moe_router)
      if (logit_scale != 1.0f) x *= logit_scale;
      if (router_b) x += router_b[e];
      v[j] = x;
      mx = fmaxf(mx, x);
    }
  }
  if (!topk_first) {
    mx = warp_max(mx);
    float sum = 0;
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (lane + j * kWarp < ne) sum += v[j] = expf(v[j] - mx);
    sum = warp_sum(sum);
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (lane + j * kWarp < ne) v[j] /= sum;
  }
  __shared__ float val[64];  // topk_first: the chosen weights before normalising, in the order chosen
  uint32_t taken = 0;        // bit j: expert lane + 32 j chosen
  float m0 = 0, sum = 0, top = 0;
  for (int i = 0; i < k; ++i) {
    uint32_t bk = 0;
    int be = ne;
    float bv = 0;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int e = lane + j * kWarp;
      if (e >= ne || (taken >> j & 1u)) continue;
      const uint32_t key = order_key(v[j]);
      if (be == ne || key > bk) bk = key, be = e, bv = v[j];  // e rises: ties keep the lower expert
    }
    const uint32_t best = __reduce_max_sync(0xffffffffu, be < ne ? bk : 0u);
    const int e = static_cast<int>(__reduce_min_sync(0xffffffffu, be < ne && best == bk ? static_cast<uint32_t>(be) : 0xffffffffu));
    const float w = __shfl_sync(0xffffffffu, bv, e % kWarp);
    if (e == be) taken |= 1u << (e / kWarp);
    if (topk_first) {
      if (i == 0) m0 = w;
      const float x = expf(w - m0);
      sum += x;
      if (lane == 0) val[i] = x;
    } else {
      top += w;
    }
  }
  if (topk_first) {
    __syncwarp();
    for (int i = 0; i < k; ++i) top += val[i] / sum;
  }
  int before = 0;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const uint32_t m = __ballot_sync(0xffffffffu, taken >> j & 1u);
    if (taken >> j & 1u) {
      const int at = t * k + before + __popc(m & ((1u << lane) - 1u));
      const int e = lane + j * kWarp;
      const float x = topk_first ? expf(v[j] - m0) / sum : v[j];
      const float wt = norm ? x / top : x;
      ids[at] = e;
      weights[at] = expert_scale ? wt * expert_scale[e] : wt;
    }
    before += __popc(m);
  }
}

template <int J>
__global__ void k_moe_route(const float* logits, int n, int ne, int k, bool topk_first, bool norm, float logit_scale,
                            const float* router_b, const float* expert_scale, int32_t* ids, float* weights) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x;
  if (t >= n) return;
  route_token<J>(logits + static_cast<int64_t>(t) * ne, t, ne, k, topk_first, norm, logit_scale, router_b, expert_scale, ids, weights);
}

// The router's logits and the routing in one launch: block b the logit of expert b for token
// blockIdx.y, its warps each a quarter of the row (float32 weights, loaded before the wait); the
// token's last block to finish (count: zero between launches) routes it.
struct RouterArgs {
  const float* w;
  const float* x;
  int64_t d;
  unsigned* count;
  float* logits;
  int ne, k;
  bool topk_first, norm;
  float logit_scale;
  const float *router_b, *expert_scale;
  int32_t* ids;
  float* weights;
  const float* w2;  // with w2 (d floats), block n_expert its product with each row into out2 (not routed)
  float* out2;
};
constexpr int kRouterWarps = 4;
template <int J>
__global__ void __launch_bounds__(kRouterWarps * kWarp) k_moe_router(RouterArgs a) {
  pdl_trigger();
  const int t = blockIdx.y, e = blockIdx.x, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  constexpr int U = 4;
  const float* wr = e < a.ne ? a.w + static_cast<int64_t>(e) * a.d : a.w2;
  const float* xr = a.x + static_cast<int64_t>(t) * a.d;
  float acc = 0;
  bool waited = false;
  for (int64_t c0 = (warp * kWarp + lane) * 4; c0 < a.d; c0 += kRouterWarps * kWarp * 4 * U) {
    float4 wv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * kRouterWarps * kWarp * 4;
      wv[u] = c < a.d ? __ldg(reinterpret_cast<const float4*>(wr + c)) : make_float4(0, 0, 0, 0);
    }
    if (!waited) pdl_wait(), waited = true;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * kRouterWarps * kWarp * 4;
      if (c >= a.d) break;
      const float4 xv = *reinterpret_cast<const float4*>(xr + c);
      acc += wv[u].x * xv.x + wv[u].y * xv.y + wv[u].z * xv.z + wv[u].w * xv.w;
    }
  }
  if (!waited) pdl_wait();
  __shared__ float part[kRouterWarps];
  __shared__ bool last;
  acc = warp_sum(acc);
  if (lane == 0) part[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int k = 0; k < kRouterWarps; ++k) sum += part[k];
    if (e == a.ne) {
      a.out2[t] = sum;
      last = false;
    } else {
      a.logits[static_cast<int64_t>(t) * a.ne + e] = sum;
      __threadfence();
      last = atomicAdd(&a.count[t], 1u) == static_cast<unsigned>(a.ne) - 1;
      if (last) a.count[t] = 0;
    }
  }
  __syncthreads();
  if (!last || warp != 0) return;
  route_token<J>(a.logits + static_cast<int64_t>(t) * a.ne, t, a.ne, a.k, a.topk_first, a.norm, a.logit_scale, a.router_b, a.expert_scale,
                 a.ids, a.weights);
}

__global__ void k_moe_combine(const float* y, const float* weights, int k, int64_t d, float* out) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.y;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < d; j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += weights[t * k + i] * y[(static_cast<int64_t>(t) * k + i) * d + j];
    out[t * d + j] = sum;
  }
}

}  // namespace

std::string last_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

void set_programmatic_launch(bool on) { g_pdl_allowed = on; }

void rms_norm(Stream s, const float* x, const float* w, float* out, int64_t width, int64_t group, int n, float eps, float offset) {
  const int64_t blocks = static_cast<int64_t>(n) * (width / group);
  const int threads = group >= 1024 ? 1024 : group >= 256 ? 256 : 64;
  launch(k_rms_norm, dim3(static_cast<unsigned>(blocks)), dim3(threads), s, x, w, out, width, group, eps, offset);
}

bool add_rms_norm_fits(int64_t width) { return width % 256 == 0 && width / 256 <= kNormWarps * kNormPer; }

void add_rms_norm(Stream s, const float* a, const float* b, float* sum, const float* w, float* out, int64_t width, int n, float eps,
                  float offset, void* q8, const float* moe_y, const float* moe_w, int moe_k, const float* sh, const float* sh_g,
                  int64_t sh_gw) {
  const Codes c = q8 ? codes_layout(q8, n, width) : Codes{};
  // A warp a super-block where a block holds them: the launch is bound by each warp's chain of reads
  // and reductions, not by the bytes. On an H200, 8 warps -> 16 for qwen3-8b's 4096 columns: tg128
  // 431.1 / 435.3 -> 453.3 / 454.6 tok/s, 8 rows 2444 -> 2581, 16 rows 3985 -> 4063 / 4092; 8 -> 16 -> 32
  // for qwen3-14b's 5120 (12 of its layers): tg128 739.6 -> 758.2 -> 766.7, 16 rows 6175 -> 6214 -> 6356.
  const int64_t nsb = width / 256;
  const dim3 grid(static_cast<unsigned>(n));
  if (nsb <= kNormWarps)
    launch(k_add_rms_norm<kNormWarps, kNormPer>, grid, dim3(kNormWarps * kWarp), s, a, b, sum, w, out, width, eps, offset, c, q8 != nullptr, moe_y,
           moe_w, moe_k, sh, sh_g, sh_gw);
  else if (nsb <= 2 * kNormWarps)
    launch(k_add_rms_norm<2 * kNormWarps, kNormPer / 2>, grid, dim3(2 * kNormWarps * kWarp), s, a, b, sum, w, out, width, eps, offset, c,
           q8 != nullptr, moe_y, moe_w, moe_k, sh, sh_g, sh_gw);
  else
    launch(k_add_rms_norm<4 * kNormWarps, kNormPer / 4>, grid, dim3(4 * kNormWarps * kWarp), s, a, b, sum, w, out, width, eps, offset, c,
           q8 != nullptr, moe_y, moe_w, moe_k, sh, sh_g, sh_gw);
}

bool norm_glu_fits(int64_t width, int64_t group) { return width % 256 == 0 && group >= 8 && group <= 256 && (group & (group - 1)) == 0; }

void norm_glu(Stream s, const float* x, const float* w, const float* z, float* out, int64_t width, int64_t group, int n, float eps,
              float offset, bool gelu, bool act_first, void* q8) {
  const Codes c = q8 ? codes_layout(q8, n, width) : Codes{};
  launch(k_norm_glu, dim3(static_cast<unsigned>((width / 256 + kNormGluWarps - 1) / kNormGluWarps), static_cast<unsigned>(n)),
         dim3(kNormGluWarps * kWarp), s, x, w, z, out, width, static_cast<int>(group), eps, offset, gelu, act_first, c, q8 != nullptr);
}

void heads_norm_rope(Stream s, const HeadsArgs& a, int n) {
  const int heads = a.part[0].n_head + (a.nparts > 1 ? a.part[1].n_head : 0) + (a.kc ? a.v_heads : 0);
  launch(k_heads_norm_rope, dim3(static_cast<unsigned>(heads), static_cast<unsigned>(n)), dim3(a.head_dim >= 256 ? 128 : 64), s, a);
}

void rope(Stream s, const float* x, float* out, const float* cs, int n, int n_head, int head_dim, int n_rot, bool neox) {
  launch(k_rope, dim3(static_cast<unsigned>(n * n_head)), dim3(64), s, x, out, cs, n_head, head_dim, n_rot, neox);
}

void elementwise(Stream s, Elementwise op, const float* a, const float* b, float* out, int64_t n, float alpha, float limit) {
  launch(k_elementwise, dim3(grid_for(n)), dim3(256), s, op, a, b, out, n, alpha, limit);
}

void softcap(Stream s, const float* x, float* out, int64_t n, float cap) { launch(k_softcap, dim3(grid_for(n)), dim3(256), s, x, out, n, cap); }

void sigmoid_mul(Stream s, const float* a, const float* b, float* out, int64_t width, int64_t bw, int n) {
  launch(k_sigmoid_mul, dim3(grid_for(width * n)), dim3(256), s, a, b, out, width, bw, width * n);
}

void scale(Stream s, const float* x, const float* w, bool one, float* out, int64_t width, int n) {
  launch(k_scale, dim3(grid_for(width * n)), dim3(256), s, x, w, one, out, width, width * n);
}

void copy_cols(Stream s, const float* x, int64_t in_width, int64_t at, int64_t stride, int groups, float* out, int64_t out_width,
               int64_t out_at, int64_t width, int n) {
  launch(k_copy_cols, dim3(grid_for(width * groups * n)), dim3(256), s, x, in_width, at, stride, groups, out, out_width, out_at, width, n);
}

void gather_rows(Stream s, const float* x, const int32_t* rows, int64_t width, int n, float* out) {
  launch(k_gather_rows, dim3(grid_for(width), static_cast<unsigned>(n)), dim3(256), s, x, rows, width, out);
}

void copy_runs(Stream s, const CopyRun* runs, int n) {
  if (n > 0) launch(k_copy_runs, dim3(static_cast<unsigned>(n)), dim3(256), s, runs);
}

size_t argmax_scratch_bytes(int n) { return static_cast<size_t>(std::max(n, 0)) * 12; }
void argmax_rows(Stream s, const float* x, int64_t width, int n, int32_t* out, void* scratch) {
  if (n <= 0) return;
  auto* key = static_cast<unsigned long long*>(scratch);
  const auto spans = static_cast<unsigned>((width + kArgmaxSpan - 1) / kArgmaxSpan);
  launch(k_argmax_rows, dim3(spans, static_cast<unsigned>(n)), dim3(kArgmaxThreads), s, x, width, out, key, reinterpret_cast<unsigned*>(key + n));
}

// f(std::integral_constant<int, J>) for the fewest registers per lane, J, that hold n_expert logits.
template <class F>
void with_route_j(int n_expert, F&& f) {
  if (n_expert <= kWarp) f(std::integral_constant<int, 1>{});
  else if (n_expert <= 2 * kWarp) f(std::integral_constant<int, 2>{});
  else if (n_expert <= 4 * kWarp) f(std::integral_constant<int, 4>{});
  else if (n_expert <= 8 * kWarp) f(std::integral_constant<int, 8>{});
  else if (n_expert <= 16 * kWarp) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, 32>{});
}

void moe_route(Stream s, float* logits, int n, int n_expert, int k, bool topk_first, bool norm, float logit_scale, const float* router_b,
               const float* expert_scale, int32_t* ids, float* weights) {
  with_route_j(n_expert, [&](auto j) {
    launch(k_moe_route<decltype(j)::value>, dim3(static_cast<unsigned>(n)), dim3(kWarp), s, logits, n, n_expert, k, topk_first, norm,
           logit_scale, router_b, expert_scale, ids, weights);
  });
}

bool moe_router_fits(int type, int64_t d, int n_expert) { return type == kF32 && d % 4 == 0 && n_expert <= 32 * kWarp; }

void moe_router(Stream s, const float* w, const float* x, int64_t d, int n, unsigned* count, float* logits, int n_expert, int k,
                bool topk_first, bool norm, float logit_scale, const float* router_b, const float* expert_scale, int32_t* ids,
                float* weights, const float* w2, float* out2) {
  const RouterArgs a{w, x, d, count, logits, n_expert, k, topk_first, norm, logit_scale, router_b, expert_scale, ids, weights, w2, out2};
  const auto blocks = static_cast<unsigned>(n_expert + (w2 ? 1 : 0));
  with_route_j(n_expert, [&](auto j) {
    launch(k_moe_router<decltype(j)::value>, dim3(blocks, static_cast<unsigned>(n)), dim3(kRouterWarps * kWarp), s, a);
  });
}

void moe_combine(Stream s, const float* y, const float* weights, int n, int k, int64_t d, float* out) {
  launch(k_moe_combine, dim3(grid_for(d), static_cast<unsigned>(n)), dim3(256), s, y, weights, k, d, out);
}

}  // namespace zinc::backend::cuda
