#include <cstring>
#include <stdexcept>
#include <string>

#include "amdgpu_host_run.h"
#include "backend/zinc_rt/dispatch.h"
#include "host_kernels.h"

namespace zinc::backend::zinc_rt::host {

namespace {

template <class A>
A args_of(const Launch& l) {
  if (l.args.size() != sizeof(A)) throw std::invalid_argument(l.kernel + ": arguments of " + std::to_string(l.args.size()) + " bytes");
  A a;
  std::memcpy(&a, l.args.data(), sizeof a);
  return a;
}
template <class T>
T* ptr(uint64_t address) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(address));
}

}  // namespace

void run_launch(const Launch& l) {
  const std::string& k = l.kernel;
  std::function<void()> call;
  if (k == "get_rows_q4_k" || k == "get_rows_q6_k") {
    const auto a = args_of<GetRowsArgs>(l);
    const auto f = k == "get_rows_q4_k" ? get_rows_q4_k : get_rows_q6_k;
    call = [=] { f(ptr<const uint8_t>(a.w), ptr<const int32_t>(a.ids), ptr<float>(a.out), a.ncols, a.row_bytes); };
  } else if (k == "rms_norm") {
    const auto a = args_of<RmsNormArgs>(l);
    call = [=] { rms_norm(ptr<const float>(a.x), ptr<const float>(a.w), ptr<float>(a.out), a.width, a.eps); };
  } else if (k == "quantize_q8_k") {
    const auto a = args_of<QuantizeQ8KArgs>(l);
    call = [=] { quantize_q8_k(ptr<const float>(a.x), ptr<uint32_t>(a.out)); };
  } else if (k == "mul_mv_q4_k" || k == "mul_mv_q6_k") {
    const auto a = args_of<MulMvKArgs>(l);
    const auto f = k == "mul_mv_q4_k" ? mul_mv_q4_k : mul_mv_q6_k;
    call = [=] { f(ptr<const uint8_t>(a.w), ptr<const uint32_t>(a.xq), ptr<float>(a.y), a.ncols, a.row_bytes); };
  } else if (k == "rope") {
    const auto a = args_of<RopeArgs>(l);
    call = [=] { rope(ptr<const float>(a.x), ptr<const float>(a.cs), ptr<float>(a.out), a.n_head, a.head_dim, a.n_rot, a.neox); };
  } else if (k == "swiglu") {
    const auto a = args_of<SwigluArgs>(l);
    call = [=] { swiglu(ptr<const float>(a.gate), ptr<const float>(a.up), ptr<float>(a.out), a.n); };
  } else if (k == "add") {
    const auto a = args_of<AddArgs>(l);
    call = [=] { add(ptr<const float>(a.a), ptr<const float>(a.b), ptr<float>(a.out), a.n); };
  } else if (k == "kv_store") {
    const auto a = args_of<KvStoreArgs>(l);
    call = [=] { kv_store(ptr<const float>(a.k), ptr<const float>(a.v), ptr<uint16_t>(a.kc), ptr<uint16_t>(a.vc), ptr<const int32_t>(a.pos), a.width); };
  } else if (k == "attention_decode") {
    const auto a = args_of<AttentionDecodeArgs>(l);
    call = [=] {
      attention_decode(ptr<const float>(a.q), ptr<const uint16_t>(a.kc), ptr<const uint16_t>(a.vc), ptr<float>(a.out), ptr<const int32_t>(a.n_kv),
                       a.n_head, a.n_head_kv, a.head_dim, a.kv_width, a.scale);
    };
  } else {
    throw std::invalid_argument("no host build of kernel " + k);
  }
  run(l.groups, l.block, call);
}

size_t args_bytes(std::string_view k) {
  if (k == "get_rows_q4_k" || k == "get_rows_q6_k") return sizeof(GetRowsArgs);
  if (k == "rms_norm") return sizeof(RmsNormArgs);
  if (k == "quantize_q8_k") return sizeof(QuantizeQ8KArgs);
  if (k == "mul_mv_q4_k" || k == "mul_mv_q6_k") return sizeof(MulMvKArgs);
  if (k == "rope") return sizeof(RopeArgs);
  if (k == "swiglu") return sizeof(SwigluArgs);
  if (k == "add") return sizeof(AddArgs);
  if (k == "kv_store") return sizeof(KvStoreArgs);
  if (k == "attention_decode") return sizeof(AttentionDecodeArgs);
  return 0;
}

}  // namespace zinc::backend::zinc_rt::host
