// Quantizing a whole GGUF model to a mixture: streams tensor by tensor from the mapped input to the
// output file (written atomically), converting rows in parallel. Metadata is copied, with
// general.file_type and general.quantization_version updated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "quant/recipe.h"

namespace zinc::quant {

struct QuantizeProgress {
  size_t tensor_index = 0, tensor_count = 0;
  std::string_view tensor_name;
  gguf::TensorType to{};
  uint64_t bytes_done = 0, bytes_total = 0;  // input bytes processed, over the whole model
};

struct QuantizeOptions {
  Mixture mixture;
  unsigned threads = 0;          // 0: all hardware threads
  bool allow_requantize = false;  // accept already-quantized sources (quality suffers)
  TypeOverrides overrides;        // the user's types over the mixture's
  std::function<void(const QuantizeProgress&)> progress;
};

struct TensorReport {
  std::string name;
  gguf::TensorType from{}, to{};
  uint64_t bytes_in = 0, bytes_out = 0;
  std::string fallback;
};

struct QuantizeReport {
  std::vector<TensorReport> tensors;
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor data only
  uint64_t file_size = 0;
  double seconds = 0;
  std::vector<std::string> unmatched_patterns;  // --tensor-type patterns that matched no matrix
};

// Throws zinc::Error (nothing is left at `out`) for unsupported source types, already-quantized
// sources without allow_requantize, or I/O failures.
QuantizeReport quantize_model(const gguf::File& in, const std::filesystem::path& out, const QuantizeOptions& opts);

}  // namespace zinc::quant
