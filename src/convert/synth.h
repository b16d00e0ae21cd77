// Synthetic models: random weights with the exact tensor names, shapes and metadata of a real model,
// stored with a quantization mixture's per-tensor types, so throughput can be measured anywhere
// without downloading weights. Written as a stream (no tensor is held whole in memory).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/writer.h"

namespace zinc::convert {

struct SynthOptions {
  std::string preset;            // synth_presets()
  std::string mixture = "Q4_K_M";
  int layers = 0;                // > 0: this many blocks instead of the real count (every shape kept)
  // The released model's multi-token-prediction head (Qwen3.5/3.6), one more block after the others.
  bool mtp = true;
  uint32_t seed = 1;
  // Quantize every row of random values (the mixture's search, minutes for a large model) instead of
  // drawing each block from a pool quantized once per type (near disk speed).
  bool quantize = false;
  // A directory with the real model's tokenizer.json (+ tokenizer_config.json); empty: a built-in
  // byte-level vocabulary padded to the real size (the text is meaningless, the shapes are right).
  std::filesystem::path tokenizer_dir;
  gguf::WriteProgress progress;  // told the bytes written as the file is (may be empty)
};

struct SynthReport {
  std::string architecture;
  int layers = 0;
  uint64_t file_size = 0;
  uint64_t parameters = 0;
};

std::vector<std::string> synth_presets();

// Throws zinc::Error for an unknown preset or mixture, or a tokenizer that cannot be read.
SynthReport synthesize(const SynthOptions& options, const std::filesystem::path& out);

}  // namespace zinc::convert
