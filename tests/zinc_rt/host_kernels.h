// ZINC_RT's kernels (shaders/amdgpu/*.cl) as the host build makes them (amdgpu_host.h): one C function
// per kernel, its arguments those of the OpenCL kernel. Without clang-19 or later they are not built:
// kBuilt is false and empty stand-ins let the tests compile (and skip, saying why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backend/zinc_rt/plan.h"

#if defined(ZINC_RT_HOST_KERNELS)
extern "C" {
void fill_ids(uint32_t* out, uint32_t n);
void rms_norm(const float* x, const float* w, float* out, uint32_t width, float eps);
void quantize_q8_k(const float* x, uint32_t* out);
void mul_mv_q4_k(const uint8_t* w, const uint32_t* xq, float* y, uint32_t ncols, uint32_t row_bytes);
void mul_mv_q6_k(const uint8_t* w, const uint32_t* xq, float* y, uint32_t ncols, uint32_t row_bytes);
void get_rows_q4_k(const uint8_t* w, const int32_t* ids, float* out, uint32_t ncols, uint32_t row_bytes);
void get_rows_q6_k(const uint8_t* w, const int32_t* ids, float* out, uint32_t ncols, uint32_t row_bytes);
void rope(const float* x, const float* cs, float* out, uint32_t n_head, uint32_t head_dim, uint32_t n_rot, uint32_t neox);
void swiglu(const float* gate, const float* up, float* out, uint32_t n);
void add(const float* a, const float* b, float* out, uint32_t n);
void kv_store(const float* k, const float* v, uint16_t* kc, uint16_t* vc, const int32_t* pos, uint32_t width);
void attention_decode(const float* q, const uint16_t* kc, const uint16_t* vc, float* out, const int32_t* n_kv, uint32_t n_head,
                      uint32_t n_head_kv, uint32_t head_dim, uint32_t kv_width, float scale);
}
namespace zinc::backend::zinc_rt::host {
inline constexpr bool kBuilt = true;
}
#else
inline void fill_ids(uint32_t*, uint32_t) {}
inline void rms_norm(const float*, const float*, float*, uint32_t, float) {}
inline void quantize_q8_k(const float*, uint32_t*) {}
inline void mul_mv_q4_k(const uint8_t*, const uint32_t*, float*, uint32_t, uint32_t) {}
inline void mul_mv_q6_k(const uint8_t*, const uint32_t*, float*, uint32_t, uint32_t) {}
inline void get_rows_q4_k(const uint8_t*, const int32_t*, float*, uint32_t, uint32_t) {}
inline void get_rows_q6_k(const uint8_t*, const int32_t*, float*, uint32_t, uint32_t) {}
inline void rope(const float*, const float*, float*, uint32_t, uint32_t, uint32_t, uint32_t) {}
inline void swiglu(const float*, const float*, float*, uint32_t) {}
inline void add(const float*, const float*, float*, uint32_t) {}
inline void kv_store(const float*, const float*, uint16_t*, uint16_t*, const int32_t*, uint32_t) {}
inline void attention_decode(const float*, const uint16_t*, const uint16_t*, float*, const int32_t*, uint32_t, uint32_t, uint32_t, uint32_t, float) {}
namespace zinc::backend::zinc_rt::host {
inline constexpr bool kBuilt = false;
}
#endif

namespace zinc::backend::zinc_rt::host {

// Runs one launch of a plan whose region is host memory (its addresses the host's pointers): the
// launch's arguments read as dispatch.h's structure for its kernel, the kernel run over its grid.
// Throws std::invalid_argument for a kernel it does not know or arguments of another size.
void run_launch(const Launch& l);
// The bytes of a kernel's arguments as run_launch reads them (dispatch.h's structure for it), 0 for a
// kernel it does not know.
size_t args_bytes(std::string_view kernel);

}  // namespace zinc::backend::zinc_rt::host
