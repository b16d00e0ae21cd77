// The gated delta rule's per-head kernels compiled once per instruction set (cpu_deltanet_kernels.h);
// cpu_deltanet.cpp calls the set the CPU kernels use. The AVX-512 and AVX2 ones exist on x86-64 only.
#pragma once

#include <cstdint>

namespace zinc::backend::cpu {

// One v head over n tokens (q, k rows q_stride apart, v and out v_stride apart, g and beta
// gate_stride apart), its state S (dk x dv) carried: token by token (recurrent_head; chunk unused) or
// in blocks of `chunk` tokens (chunked_head).
using DeltaHeadFn = void (*)(const float* q, const float* k, const float* v, const float* g, const float* beta, float* S,
                             float* out, int64_t n, int64_t q_stride, int64_t v_stride, int64_t gate_stride, int dk, int dv,
                             int chunk);

void recurrent_head_avx512(const float*, const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                           int64_t, int64_t, int, int, int);
void recurrent_head_avx2(const float*, const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                         int64_t, int64_t, int, int, int);
void recurrent_head_base(const float*, const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                         int64_t, int64_t, int, int, int);
void chunked_head_avx512(const float*, const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                         int64_t, int64_t, int, int, int);
void chunked_head_avx2(const float*, const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                       int64_t, int64_t, int, int, int);
void chunked_head_base(const float*, const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                       int64_t, int64_t, int, int, int);

}  // namespace zinc::backend::cpu
