#include <fmt/format.h>

#include "core/error.h"
#include "quant/quant.h"

namespace zinc::quant {

namespace {

gguf::TensorTypeInfo info_of(TensorType type) {
  const auto info = gguf::tensor_type_info(static_cast<uint32_t>(type));
  if (!info) throw Error(fmt::format("invalid tensor type id {}", static_cast<uint32_t>(type)));
  return *info;
}

}  // namespace

int64_t block_size(TensorType type) { return info_of(type).block_size; }

size_t row_size(TensorType type, int64_t n) {
  const auto info = info_of(type);
  if (n % info.block_size != 0) {
    throw Error(fmt::format("a row of {} elements is not a multiple of the {} block size {}", n, info.name,
                            info.block_size));
  }
  return static_cast<size_t>(n / info.block_size) * info.type_size;
}

bool can_dequantize(TensorType type) {
  switch (type) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: case TensorType::Q4_0:
    case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1: case TensorType::Q8_0:
    case TensorType::Q2_K: case TensorType::Q3_K: case TensorType::Q4_K: case TensorType::Q5_K:
    case TensorType::Q6_K: case TensorType::Q8_K: case TensorType::IQ4_NL: case TensorType::IQ4_XS:
    case TensorType::MXFP4:
      return true;
    default:
      return false;
  }
}

bool can_quantize(TensorType type) { return can_dequantize(type); }

}  // namespace zinc::quant
