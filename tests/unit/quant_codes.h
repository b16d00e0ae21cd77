// Which bits of a quantized block are each element's code, found through the dequantizer alone (no
// block layout), and what follows from it: the split of each weight into a scaled-code part and an
// offset part, whose magnitudes bound a product's rounding whatever way a kernel groups the terms.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace zinc::test {

// For each bit of one block of type t: the element whose value it alone changes (its code bit), or -1 (a
// scale, a min, or a bit shared by several elements). Found on blocks of random bytes: a scale bit changes
// every element of its sub-block for almost every such block, so three blocks that agree settle it (a
// block where the flip changes nothing, as under a zero scale, says nothing).
inline std::vector<int> code_bits(gguf::TensorType t) {
  const int64_t n = quant::block_size(t);
  const size_t bytes = quant::row_size(t, n);
  std::vector<int> owner(bytes * 8, -2);  // -2: not yet seen
  std::mt19937 rng(7);
  int blocks = 0;
  std::vector<uint8_t> b(bytes);
  std::vector<float> base(n), y(n);
  const auto finite = [&](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
  };
  for (int attempt = 0; blocks < 3 && attempt < 1000; ++attempt) {
    for (auto& c : b) c = static_cast<uint8_t>(rng());
    quant::dequantize_row(t, b.data(), base.data(), n);
    if (!finite(base)) continue;
    ++blocks;
    for (size_t bit = 0; bit < bytes * 8; ++bit) {
      b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      quant::dequantize_row(t, b.data(), y.data(), n);
      b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      int changed = -1, count = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (std::memcmp(&y[i], &base[i], sizeof(float)) != 0) changed = static_cast<int>(i), ++count;
      }
      if (count == 0) continue;  // e.g. a code bit under a zero scale: no evidence either way
      const int who = count == 1 ? changed : -1;
      owner[bit] = owner[bit] == -2 || owner[bit] == who ? who : -1;
    }
  }
  for (int& o : owner) o = o == -2 ? -1 : o;
  return owner;
}

// For each of a row's n weights (`row`, type t): |w_i - o_i| + |o_i|, where o_i is the value the element
// takes with its code bits all zero: its offset (a block's min, -8 d for Q4_0, ...). A kernel may add the
// scaled codes and the offsets as separate sums (d sum q x - m sum x), or form d q + m in one fused step:
// these are its terms' magnitudes, and they bound |w_i| too.
inline std::vector<double> code_and_offset(gguf::TensorType t, const std::vector<int>& owner, const uint8_t* row, int64_t n) {
  const int64_t bn = quant::block_size(t);
  const size_t bytes = quant::row_size(t, bn);
  std::vector<float> w(bn), o(bn);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t blk = 0; blk < n / bn; ++blk) {
    std::vector<uint8_t> b(row + blk * bytes, row + (blk + 1) * bytes);
    quant::dequantize_row(t, b.data(), w.data(), bn);
    for (size_t bit = 0; bit < owner.size(); ++bit) {
      if (owner[bit] >= 0) b[bit / 8] &= static_cast<uint8_t>(~(1u << (bit % 8)));
    }
    quant::dequantize_row(t, b.data(), o.data(), bn);
    for (int64_t i = 0; i < bn; ++i) {
      out[static_cast<size_t>(blk * bn + i)] = std::fabs(static_cast<double>(w[i]) - o[i]) + std::fabs(static_cast<double>(o[i]));
    }
  }
  return out;
}

// Sum over the row of code_and_offset(w_i) |x_i|: the magnitudes of a product's terms.
inline double code_and_offset_terms(gguf::TensorType t, const std::vector<int>& owner, const uint8_t* row,
                                    const float* x, int64_t n) {
  const auto m = code_and_offset(t, owner, row, n);
  double terms = 0;
  for (int64_t i = 0; i < n; ++i) terms += m[static_cast<size_t>(i)] * std::fabs(static_cast<double>(x[i]));
  return terms;
}

// Bound on the float rounding of a quantized dot product of n elements with magnitude `terms` (the sum
// of its terms' magnitudes, offsets counted apart), whatever order a kernel adds in (Higham §4.2,
// u = 2^-24). Block formats multiply integer codes, whose sums over a block of at least 16 are exact,
// then scale each block's sum by one or two rounded products and add it into the float total: 3
// roundings per 16 elements, and a few for the total's last steps. Float formats round every term.
inline double dot_rounding_bound(gguf::TensorType t, int64_t n, double terms) {
  const bool floats = t == gguf::TensorType::F32 || t == gguf::TensorType::F16 || t == gguf::TensorType::BF16;
  const double roundings = floats ? static_cast<double>(n) + 2 : 3.0 * static_cast<double>(n / 16) + 8;
  return roundings * 0x1p-24 * terms;
}

}  // namespace zinc::test
