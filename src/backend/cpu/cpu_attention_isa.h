// The attention kernels compiled once per instruction set (cpu_attention_kernels.h); cpu_attention.cpp
// calls the set the CPU kernels use. The AVX-512 and AVX2 ones exist on x86-64 only.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_ops.h"

namespace zinc::backend::cpu {

// Floats of attend_rows' scratch arrays of n, rounded up to whole tiles.
inline int64_t attend_sums_floats(int64_t n) { return (n + kAttendTile - 1) / kAttendTile * kAttendTile; }

// attend_rows on a scratch buffer of the size attend_rows reserves.
void attend_avx512(const AttendRows& a, float* buf);
void attend_avx2(const AttendRows& a, float* buf);
void attend_base(const AttendRows& a, float* buf);
// n fp16 values → floats (exact).
void halves_to_floats_avx512(const uint16_t* h, float* out, int64_t n);
void halves_to_floats_avx2(const uint16_t* h, float* out, int64_t n);
void halves_to_floats_base(const uint16_t* h, float* out, int64_t n);
// swiglu and geglu (cpu_act_kernels.h, compiled with the attention kernels).
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void swiglu_base(const float* gate, const float* up, float* out, int64_t n);
void geglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void geglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void geglu_base(const float* gate, const float* up, float* out, int64_t n);
// transpose_keys.
void transpose_avx512(const float* const* rows, int64_t width, float* tile);
void transpose_avx2(const float* const* rows, int64_t width, float* tile);
void transpose_base(const float* const* rows, int64_t width, float* tile);

}  // namespace zinc::backend::cpu
