// The CUDA backend's recurrent layers (declared in cuda_kernels.h): the causal convolution and the
// gated delta rule. Activations stay float32 throughout.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_device.cuh"

namespace zinc::backend::cuda {

namespace {

// ---- recurrent layers ---------------------------------------------------------------------------

// A thread per (channel, chunk of kConvChunk tokens), its tokens in order with the window of the
// kernel - 1 earlier inputs in registers (from x, or before the step's first token from state). Only a
// channel's first chunk reads the state, so it alone writes the new one (the last kernel - 1 inputs).
constexpr int kConvChunk = 16;
__global__ void k_ssm_conv(const float* x, const float* w, float* state, float* out, int64_t width, int kernel, int n,
                           float* kept, size_t kept_stride) {
  pdl_trigger();
  pdl_wait();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= width) return;
  const int t0 = static_cast<int>(blockIdx.y) * kConvChunk, t1 = min(n, t0 + kConvChunk);
  const int K1 = kernel - 1;
  float old[8] = {};  // the state (chunk 0 reads it): inputs -K1 .. -1
  float win[8];  // the kernel - 1 inputs before token t, oldest first (kernels of up to 8 taps)
  const auto input = [&](int tau) { return tau >= 0 ? x[static_cast<int64_t>(tau) * width + c] : old[K1 + tau]; };
  if (t0 == 0) {
    for (int j = 0; j < K1; ++j) old[j] = state[j * width + c];
  }
  for (int j = 0; j < K1; ++j) win[j] = input(t0 - K1 + j);
  float wc[8];
  for (int j = 0; j < kernel; ++j) wc[j] = w[c * kernel + j];
  for (int t = t0; t < t1; ++t) {
    const float xt = x[static_cast<int64_t>(t) * width + c];
    float sum = 0;
    for (int j = 0; j < K1; ++j) sum += wc[j] * win[j];
    sum += wc[kernel - 1] * xt;
    out[static_cast<int64_t>(t) * width + c] = sum / (1.0f + expf(-sum));
    for (int j = 0; j + 1 < K1; ++j) win[j] = win[j + 1];
    if (K1 > 0) win[K1 - 1] = xt;
    if (kept) {
      for (int j = 0; j < K1; ++j) kept[t * kept_stride + j * width + c] = win[j];
    }
  }
  if (t0 == 0) {
    for (int j = 0; j < K1; ++j) state[j * width + c] = input(n - K1 + j);
  }
}

// One warp per column j of one v head's state S (dk x dv, row i: key dimension i, stored by columns:
// element (i, j) at j dk + i, so a warp's column is one contiguous read); lane l holds rows l + 32 i.
// Per token: q and k L2-normalised (q also by 1/sqrt(dk)), S decayed by exp(g), then
// delta = beta (v_j - S[:, j] . k), S[:, j] += k delta, out_j = S[:, j] . q.
// The norms and the gates do not depend on the state: for steps of several tokens the block's warps
// form them for a chunk of tokens side by side first (shared memory), leaving two reductions a token
// on the serial path, whose next token's q, k and v are read while the current one's update runs (the
// same values: bit for bit as forming them in the loop).
constexpr int kDeltaChunk = 64;
template <int P>
__device__ __forceinline__ void delta_qkv(const DeltaArgs& a, int t, int hk, int hv, int j, int lane, float (&qv)[P], float (&kv)[P],
                                          float& vj) {
  const float* q = a.q + t * a.q_stride + static_cast<int64_t>(hk) * a.dk;
  const float* k = a.k + t * a.q_stride + static_cast<int64_t>(hk) * a.dk;
  for (int i = 0; i < P; ++i) {
    const int row = lane + 32 * i;
    qv[i] = row < a.dk ? q[row] : 0.0f;
    kv[i] = row < a.dk ? k[row] : 0.0f;
  }
  vj = a.v[t * a.v_stride + static_cast<int64_t>(hv) * a.dv + j];
}
// The norms' factors of q and k (qscale / |q|, 1 / |k|) and the gates: decay = exp(A softplus(alpha +
// dt_bias)), beta = sigmoid(beta_in), as the CPU forms them.
template <int P>
__device__ __forceinline__ void delta_factors(const DeltaArgs& a, int t, int hv, const float (&qv)[P], const float (&kv)[P], float& qn,
                                              float& kn, float& decay, float& b) {
  float qq = 0, kk = 0;
  for (int i = 0; i < P; ++i) {
    qq += qv[i] * qv[i];
    kk += kv[i] * kv[i];
  }
  qn = 1.0f / sqrtf(static_cast<float>(a.dk)) / sqrtf(warp_sum(qq) + 1e-6f);
  kn = 1.0f / sqrtf(warp_sum(kk) + 1e-6f);
  const float ax = a.alpha[static_cast<int64_t>(t) * a.hv + hv] + a.dt_bias[hv];
  decay = expf(a.A[hv] * (ax > 20.0f ? ax : log1pf(expf(ax))));
  b = 1.0f / (1.0f + expf(-a.beta_in[static_cast<int64_t>(t) * a.hv + hv]));
}
template <int P>
__global__ void k_delta_rule(DeltaArgs a) {
  pdl_trigger();
  pdl_wait();
  const int hv = blockIdx.x;
  const int warps = static_cast<int>(blockDim.x / kWarp);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int j = blockIdx.y * warps + warp;
  const bool active = j < a.dv;
  const int hk = a.tiled ? hv % a.hk : hv / (a.hv / a.hk);
  const int dk = a.dk;
  float* S = a.state + static_cast<int64_t>(hv) * dk * a.dv;
  float s[P];
  for (int i = 0; i < P; ++i) {
    const int row = lane + 32 * i;
    s[i] = active && row < dk ? S[static_cast<int64_t>(j) * dk + row] : 0.0f;
  }
  __shared__ float c_qn[kDeltaChunk], c_kn[kDeltaChunk], c_decay[kDeltaChunk], c_beta[kDeltaChunk];
  const bool chunked = a.n > 1;
  for (int t0 = 0; t0 < a.n; t0 += kDeltaChunk) {
    const int tn = min(kDeltaChunk, a.n - t0);
    if (chunked) {
      __syncthreads();  // (the previous chunk's factors read)
      for (int u = warp; u < tn; u += warps) {
        float qv[P], kv[P], vj, qn, kn, decay, b;
        delta_qkv<P>(a, t0 + u, hk, hv, active ? j : 0, lane, qv, kv, vj);
        delta_factors<P>(a, t0 + u, hv, qv, kv, qn, kn, decay, b);
        if (lane == 0) c_qn[u] = qn, c_kn[u] = kn, c_decay[u] = decay, c_beta[u] = b;
      }
      __syncthreads();
    }
    if (!active) continue;
    float qv[P], kv[P], vj;
    delta_qkv<P>(a, t0, hk, hv, j, lane, qv, kv, vj);
    for (int u = 0; u < tn; ++u) {
      const int t = t0 + u;
      float qn, kn, decay, b;
      if (chunked) qn = c_qn[u], kn = c_kn[u], decay = c_decay[u], b = c_beta[u];
      else delta_factors<P>(a, t, hv, qv, kv, qn, kn, decay, b);
      float nq[P], nk[P], nv = 0;  // the next token's, read meanwhile
      if (u + 1 < tn) delta_qkv<P>(a, t + 1, hk, hv, j, lane, nq, nk, nv);
      float sk = 0;
      for (int i = 0; i < P; ++i) {
        s[i] *= decay;
        sk += s[i] * kv[i] * kn;
      }
      const float delta = (vj - warp_sum(sk)) * b;
      float o = 0;
      for (int i = 0; i < P; ++i) {
        s[i] += kv[i] * kn * delta;
        o += s[i] * qv[i] * qn;
      }
      o = warp_sum(o);
      if (lane == 0) a.out[t * a.out_stride + static_cast<int64_t>(hv) * a.dv + j] = o;
      if (a.kept) {
        float* K = a.kept + t * a.kept_stride + static_cast<int64_t>(hv) * dk * a.dv;
        for (int i = 0; i < P; ++i) {
          const int row = lane + 32 * i;
          if (row < dk) K[static_cast<int64_t>(j) * dk + row] = s[i];
        }
      }
      if (u + 1 < tn) {
        for (int i = 0; i < P; ++i) qv[i] = nq[i], kv[i] = nk[i];
        vj = nv;
      }
    }
  }
  if (!active) return;
  for (int i = 0; i < P; ++i) {
    const int row = lane + 32 * i;
    if (row < dk) S[static_cast<int64_t>(j) * dk + row] = s[i];
  }
}

}  // namespace

void ssm_conv(Stream s, const float* x, const float* w, float* state, float* out, int64_t width, int kernel, int n, float* kept,
              size_t kept_stride) {
  launch(k_ssm_conv, dim3(grid_for(width, 128), static_cast<unsigned>((n + kConvChunk - 1) / kConvChunk)), dim3(128), s, x, w, state, out, width,
         kernel, n, kept, kept_stride);
}

void delta_rule(Stream s, const DeltaArgs& a) {
  constexpr int warps = 4;
  const dim3 grid(a.hv, (a.dv + warps - 1) / warps);
  const int p = (a.dk + 31) / 32;
  const dim3 block(static_cast<unsigned>(warps * kWarp));
  if (p <= 1) launch(k_delta_rule<1>, grid, block, s, a);
  else if (p <= 2) launch(k_delta_rule<2>, grid, block, s, a);
  else if (p <= 4) launch(k_delta_rule<4>, grid, block, s, a);
  else launch(k_delta_rule<8>, grid, block, s, a);
}

}  // namespace zinc::backend::cuda
