#include "gguf/types.h"

#include <array>
#include <cctype>

namespace zinc::gguf {

std::string_view value_type_name(ValueType t) {
  static constexpr std::array<std::string_view, kValueTypeCount> names = {
      "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
      "string", "array", "uint64", "int64", "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < names.size() ? names[i] : std::string_view("invalid");
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

namespace {

struct TypeRow {
  uint32_t id;
  TensorTypeInfo info;
};

// Block geometry per type: elements per block and bytes per block, from the format's block layouts.
constexpr TypeRow kTensorTypes[] = {
    {0, {"F32", 1, 4}},          {1, {"F16", 1, 2}},
    {2, {"Q4_0", 32, 18}},       {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},       {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},       {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},     {11, {"Q3_K", 256, 110}},
    {12, {"Q4_K", 256, 144}},    {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},    {15, {"Q8_K", 256, 292}},
    {16, {"IQ2_XXS", 256, 66}},  {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}},  {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},    {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},    {23, {"IQ4_XS", 256, 136}},
    {24, {"I8", 1, 1}},          {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},         {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},         {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},        {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},    {39, {"MXFP4", 32, 17}},
    {40, {"NVFP4", 64, 36}},     {41, {"Q1_0", 128, 18}},
    {42, {"Q2_0", 64, 18}},
};

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t id) {
  for (const auto& row : kTensorTypes) {
    if (row.id == id) return row.info;
  }
  return std::nullopt;
}

std::string_view tensor_type_name(TensorType t) {
  const auto info = tensor_type_info(static_cast<uint32_t>(t));
  return info ? info->name : std::string_view("INVALID");
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  for (const auto& row : kTensorTypes) {
    if (iequal(row.info.name, name)) return static_cast<TensorType>(row.id);
  }
  return std::nullopt;
}

std::string_view file_type_name(uint32_t file_type) {
  switch (file_type) {
    case 0: return "ALL_F32";
    case 1: return "MOSTLY_F16";
    case 2: return "MOSTLY_Q4_0";
    case 3: return "MOSTLY_Q4_1";
    case 7: return "MOSTLY_Q8_0";
    case 8: return "MOSTLY_Q5_0";
    case 9: return "MOSTLY_Q5_1";
    case 10: return "MOSTLY_Q2_K";
    case 11: return "MOSTLY_Q3_K_S";
    case 12: return "MOSTLY_Q3_K_M";
    case 13: return "MOSTLY_Q3_K_L";
    case 14: return "MOSTLY_Q4_K_S";
    case 15: return "MOSTLY_Q4_K_M";
    case 16: return "MOSTLY_Q5_K_S";
    case 17: return "MOSTLY_Q5_K_M";
    case 18: return "MOSTLY_Q6_K";
    case 19: return "MOSTLY_IQ2_XXS";
    case 20: return "MOSTLY_IQ2_XS";
    case 21: return "MOSTLY_Q2_K_S";
    case 22: return "MOSTLY_IQ3_XS";
    case 23: return "MOSTLY_IQ3_XXS";
    case 24: return "MOSTLY_IQ1_S";
    case 25: return "MOSTLY_IQ4_NL";
    case 26: return "MOSTLY_IQ3_S";
    case 27: return "MOSTLY_IQ3_M";
    case 28: return "MOSTLY_IQ2_S";
    case 29: return "MOSTLY_IQ2_M";
    case 30: return "MOSTLY_IQ4_XS";
    case 31: return "MOSTLY_IQ1_M";
    case 32: return "MOSTLY_BF16";
    case 36: return "MOSTLY_TQ1_0";
    case 37: return "MOSTLY_TQ2_0";
    case 38: return "MOSTLY_MXFP4_MOE";
    case 39: return "MOSTLY_NVFP4";
    case 40: return "MOSTLY_Q1_0";
    default: return "";
  }
}

}  // namespace zinc::gguf
