// Attention of a block of query rows over key tiles and value rows (cpu_ops.h: attend_rows): the
// kernels of the instruction set the CPU kernels use (quant::dot_isa_in_use), compiled once per set
// (cpu_attention_kernels.h).
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/cpu_attention_isa.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_ops.h"
#include "quant/dot.h"

namespace zinc::backend::cpu {

namespace {

#if !defined(__x86_64__)
// Never called: by_isa picks the baseline.
constexpr auto attend_avx512 = attend_base, attend_avx2 = attend_base;
constexpr auto halves_to_floats_avx512 = halves_to_floats_base, halves_to_floats_avx2 = halves_to_floats_base;
constexpr auto transpose_avx512 = transpose_base, transpose_avx2 = transpose_base;
constexpr auto swiglu_avx512 = swiglu_base, swiglu_avx2 = swiglu_base;
constexpr auto geglu_avx512 = geglu_base, geglu_avx2 = geglu_base;
#endif

}  // namespace

void attend_rows(const AttendRows& a, std::vector<float>& scratch) {
  static const auto fn = by_isa(attend_avx512, attend_avx2, attend_base);
  int64_t jlo = a.lo[0], jhi = a.hi[0];
  for (int r = 1; r < a.nq; ++r) {
    jlo = std::min(jlo, a.lo[r]);
    jhi = std::max(jhi, a.hi[r]);
  }
  const int64_t tiles = jhi / kAttendTile - jlo / kAttendTile + 1;
  const size_t need = static_cast<size_t>(a.nq * attend_sums_floats(a.hd) + attend_sums_floats(a.nq) + a.nq * tiles * kAttendTile);
  if (scratch.size() < need) scratch.resize(need);
  fn(a, scratch.data());
}

void transpose_keys(const float* const* rows, int64_t width, float* tile) {
  static const auto fn = by_isa(transpose_avx512, transpose_avx2, transpose_base);
  fn(rows, width, tile);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  static const auto fn = by_isa(swiglu_avx512, swiglu_avx2, swiglu_base);
  fn(gate, up, out, n);
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  static const auto fn = by_isa(geglu_avx512, geglu_avx2, geglu_base);
  fn(gate, up, out, n);
}

void halves_to_floats(const uint16_t* h, float* out, int64_t n) {
  static const auto fn = by_isa(halves_to_floats_avx512, halves_to_floats_avx2, halves_to_floats_base);
  fn(h, out, n);
}

}  // namespace zinc::backend::cpu
