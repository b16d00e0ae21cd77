// The numeric ids GGUF uses on disk: metadata value types, tensor (block) types and the "file type"
// recorded in general.file_type. The ids and block geometry are those of the published GGUF format;
// a type id that is not in these tables is rejected by the reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace zinc::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
inline constexpr uint32_t kValueTypeCount = 13;

std::string_view value_type_name(ValueType t);   // "uint32", "string", ...
// Encoded size of one scalar value of type t; 0 for STRING and ARRAY (variable size).
size_t value_type_size(ValueType t);

// Tensor storage types. Ids 4, 5, 31-33 and 36-38 were retired by the format and are invalid.
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};

struct TensorTypeInfo {
  std::string_view name;  // as GGUF tools print it: "F32", "Q4_K", "MXFP4"
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
};

// Geometry of a tensor type, or nullopt for an id the format does not define.
std::optional<TensorTypeInfo> tensor_type_info(uint32_t id);
std::string_view tensor_type_name(TensorType t);
std::optional<TensorType> tensor_type_from_name(std::string_view name);  // case-insensitive

// Name of a general.file_type value ("MOSTLY_Q4_K_M"), or "" when unknown.
std::string_view file_type_name(uint32_t file_type);

}  // namespace zinc::gguf
