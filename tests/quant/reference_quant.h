// Oracles for the quantizers.
// - ReferenceQuantizer: the reference implementation's own quantizer (ggml_quantize_chunk from the prebuilt
//   libggml-base.so that the pinned node-llama-cpp oracle ships), loaded at run time. Its quantizers are
//   scalar C, the same on every CPU.
// - nearest_code_violations: whether each element of a quantized block decodes to the value of its
//   block's grid nearest to the source, the grid being every value the element's own code can take with
//   the block's scales unchanged (code_bits, quant_codes.h), so the check knows no block layout.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "quant_codes.h"

namespace zinc::test {

class ReferenceQuantizer {
 public:
  // The library under ZINC_ORACLE_DIR, or nullopt (with the reason in `why`) when the oracle is not installed.
  static std::optional<ReferenceQuantizer> load(std::string* why) {
    namespace fs = std::filesystem;
    const fs::path root = fs::path(ZINC_ORACLE_DIR) / "node_modules/@node-llama-cpp";
    std::error_code ec;
    for (const auto& pkg : fs::directory_iterator(root, ec)) {
      for (const auto& dir : fs::directory_iterator(pkg.path() / "bins", ec)) {
        const fs::path lib = dir.path() / "libggml-base.so";
        if (!fs::exists(lib)) continue;
        void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
          *why = dlerror();
          return std::nullopt;
        }
        auto* fn = reinterpret_cast<Chunk>(dlsym(h, "ggml_quantize_chunk"));
        if (!fn) {
          *why = lib.string() + " has no ggml_quantize_chunk";
          return std::nullopt;
        }
        return ReferenceQuantizer(fn);
      }
    }
    *why = "the reference quantizer (libggml-base.so) was not found under " + root.string() +
           " (install with: npm install --prefix tests/oracle --omit=optional --ignore-scripts)";
    return std::nullopt;
  }

  // `rows` rows of `n` elements each, without an importance matrix.
  std::vector<uint8_t> quantize(gguf::TensorType t, const float* x, int64_t rows, int64_t n) const {
    std::vector<uint8_t> out(quant::row_size(t, n) * static_cast<size_t>(rows));
    fn_(static_cast<int>(t), x, out.data(), 0, rows, n, nullptr);
    return out;
  }

 private:
  using Chunk = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);
  explicit ReferenceQuantizer(Chunk fn) : fn_(fn) {}
  Chunk fn_;
};

#define ZINC_REQUIRE_REFERENCE_QUANTIZER(var)                             \
  std::string var##_why;                                                  \
  const auto var = zinc::test::ReferenceQuantizer::load(&var##_why);      \
  if (!var) GTEST_SKIP() << var##_why

struct NearestCheck {
  int64_t violations = 0;  // elements farther from the source than the grid's nearest value allows
  double worst = 0;        // largest (distance - nearest distance) / tolerance seen
  std::string first;       // a description of the first violation
};

// Checks each element of `row` (n elements of type t quantized from x) against the grid of its own code.
// The tolerance covers the float arithmetic that picks a code: the scaled value (x + min) / step, or x
// times a reciprocal step, is computed in a few float operations, each within half an ulp (2^-24
// relative) of values no larger than |x| plus the grid's largest magnitude; 2^-20 (16 ulps) covers them.
inline NearestCheck nearest_code_violations(gguf::TensorType t, const std::vector<int>& owner, const float* x,
                                            const uint8_t* row, int64_t n) {
  NearestCheck r;
  const int64_t bn = quant::block_size(t);
  const size_t bytes = quant::row_size(t, bn);
  std::vector<std::vector<size_t>> bits_of(bn);
  for (size_t bit = 0; bit < owner.size(); ++bit) {
    if (owner[bit] >= 0) bits_of[owner[bit]].push_back(bit);
  }
  std::vector<float> y(bn), g(bn);
  for (int64_t blk = 0; blk < n / bn; ++blk) {
    std::vector<uint8_t> b(row + blk * bytes, row + (blk + 1) * bytes);
    quant::dequantize_row(t, b.data(), y.data(), bn);
    for (int64_t i = 0; i < bn; ++i) {
      const double xi = x[blk * bn + i];
      const auto& bits = bits_of[i];
      std::vector<uint8_t> c = b;
      double nearest = INFINITY, span = 0;
      for (uint32_t combo = 0; combo < (1u << bits.size()); ++combo) {
        for (size_t k = 0; k < bits.size(); ++k) {
          const uint8_t mask = static_cast<uint8_t>(1u << (bits[k] % 8));
          c[bits[k] / 8] = static_cast<uint8_t>((c[bits[k] / 8] & ~mask) | (((combo >> k) & 1u) ? mask : 0));
        }
        quant::dequantize_row(t, c.data(), g.data(), bn);
        nearest = std::min(nearest, std::fabs(xi - g[i]));
        span = std::max(span, static_cast<double>(std::fabs(g[i])));
      }
      const double tol = std::ldexp(std::fabs(xi) + span, -20);
      const double excess = std::fabs(xi - y[i]) - nearest;
      r.worst = std::max(r.worst, excess / tol);
      if (excess > tol) {
        if (r.violations++ == 0) {
          r.first = "element " + std::to_string(blk * bn + i) + ": source " + std::to_string(xi) + " decodes to " +
                    std::to_string(y[i]) + " but its grid has a value " + std::to_string(nearest) + " away";
        }
      }
    }
  }
  return r;
}

}  // namespace zinc::test
