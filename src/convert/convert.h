// Hugging Face checkpoint (safetensors + config.json + tokenizer files) to GGUF, writing the tensor
// names, layouts, metadata keys and tokenizer metadata the standard GGUF converter writes, so a file
// converted here and one downloaded from Hugging Face are interchangeable.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gguf/writer.h"

namespace zinc::convert {

struct ConvertOptions {
  // Storage of the weight matrices: "f32", "f16", "bf16", "q8_0", or "auto" (bf16 and f16 sources keep
  // their type, f32 sources become f16). Vectors (norms, biases) are always F32.
  std::string outtype = "auto";
  std::string name;  // general.name; default: the directory's name
  gguf::WriteProgress progress;  // told the bytes written as the file is (may be empty)
};

struct ConvertReport {
  std::string architecture;
  size_t tensor_count = 0;
  uint64_t file_size = 0;
  std::vector<std::string> notes;  // what could not be represented exactly, for the caller to show
};

// Throws zinc::Error naming the file and the problem for unsupported architectures, missing files or
// tensors, and malformed input. Nothing is left at `out` on failure.
ConvertReport convert_hf(const std::filesystem::path& dir, const std::filesystem::path& out, const ConvertOptions& opts);

std::vector<std::string> convertible_architectures();

}  // namespace zinc::convert
