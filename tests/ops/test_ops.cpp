// The op suite: every graph op, over shapes and weight types, on every backend this machine has (the
// CPU always; Vulkan where a device exists, lavapipe in CI), against a double-precision implementation
// of the op's definition (graph/graph.h) — not against another backend. Each element must lie within a
// bound derived from the arithmetic the op does in float32 (u = 2^-24; the sums' lengths, the rounding
// of activations to int8 or f16 where a kernel does that, the precision the Vulkan spec grants exp and
// division); a comment at each bound says why. A backend that refuses a case (Backend::unsupported)
// skips it, saying why. With --perf, each case is also timed per step and printed as a table.
//
// Inputs are activations fed by Embed from F32 tables (token t picks row t), so a case is an ordinary
// graph run through Backend::load / Weights::instantiate / Executable::run, the path inference takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/probe.h"
#include "core/error.h"
#include "core/knobs.h"
#include "gguf/writer.h"
#include "graph/graph.h"
#include "quant/quant.h"
#include "quant_codes.h"
#include "raw_gguf.h"

namespace zinc {
namespace {

using graph::Builder;
using graph::TensorId;
using gguf::TensorType;

bool g_perf = false;  // --perf

constexpr double kU = 1.0 / (1 << 24);  // float32's unit roundoff

// The tensors of one case: input tables (activations through Embed) and weights, each stored in its
// type; values() are what the file holds, dequantized (what every backend computes with).
class Tables {
 public:
  explicit Tables(uint32_t seed) : rng_(seed) {}

  // An activation of n rows of `width` floats uniform in [lo, hi): row t is token t's.
  TensorId input(Builder& b, const std::string& name, int64_t width, int64_t n, float lo = -1, float hi = 1) {
    put(name, TensorType::F32, {width, n}, lo, hi);
    return b.embed(b.weight(name, TensorType::F32, {width, n, 1, 1}));
  }
  // A weight of GGUF shape ne stored as `type`.
  TensorId weight(Builder& b, const std::string& name, TensorType type, std::array<int64_t, 4> ne, float lo = -1,
                  float hi = 1) {
    put(name, type, {ne[0], ne[1] * ne[2] * ne[3]}, lo, hi);
    return b.weight(name, type, ne);
  }
  // An F32 table's values moved to multiples of 2^-7 below 1, every 32 starting 127/128, -127/128:
  // their 8-bit codes, 32 or 256 to a block, are exact (scale 2^-7 in f16 or f32, codes the
  // multiples), and so are a 32-block's sums in f16 (|sum| / 2^-7 of 30 codes stays below 2048).
  void exact_codes(const std::string& name) {
    T& t = t_.at(name);
    for (size_t i = 0; i < t.values.size(); ++i) {
      const float q = i % 32 == 0 ? 127.0f : i % 32 == 1 ? -127.0f : std::clamp(std::nearbyint(t.values[i] * 127), -127.0f, 127.0f);
      t.values[i] = q / 128;
    }
    std::memcpy(t.bytes.data(), t.values.data(), t.values.size() * sizeof(float));
  }
  const std::vector<float>& values(const std::string& name) const { return t_.at(name).values; }
  const std::vector<uint8_t>& bytes(const std::string& name) const { return t_.at(name).bytes; }
  std::vector<float>& mutable_values(const std::string& name) { return t_.at(name).values; }
  int64_t width(const std::string& name) const { return t_.at(name).ne[0]; }

  gguf::File write(const std::filesystem::path& path) const {
    gguf::Writer w;
    w.metadata().set("general.architecture", gguf::Value::str("test"));
    std::deque<std::vector<uint64_t>> shapes;  // the writer borrows them until write_file()
    for (const auto& [name, t] : t_) {
      std::vector<uint64_t>& shape = shapes.emplace_back(t.shape.begin(), t.shape.end());
      w.add_tensor(name, t.type, shape, t.bytes);
    }
    w.write_file(path);
    return gguf::File::open(path);
  }

 private:
  struct T {
    TensorType type;
    std::array<int64_t, 2> ne;  // row width, rows
    std::vector<int64_t> shape;
    std::vector<float> values;  // what `bytes` hold (quantizing again need not give the same bytes)
    std::vector<uint8_t> bytes;
  };
  void put(const std::string& name, TensorType type, std::array<int64_t, 2> ne, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    T t{type, ne, {}, std::vector<float>(static_cast<size_t>(ne[0] * ne[1])), {}};
    for (auto& x : t.values) x = u(rng_);
    // Stored in the type; the reference computes with what the backends read.
    const size_t rb = quant::row_size(type, ne[0]);
    t.bytes.resize(rb * static_cast<size_t>(ne[1]));
    for (int64_t r = 0; r < ne[1]; ++r) {
      float* v = t.values.data() + r * ne[0];
      quant::quantize_row(type, v, t.bytes.data() + static_cast<size_t>(r) * rb, ne[0]);
      quant::dequantize_row(type, t.bytes.data() + static_cast<size_t>(r) * rb, v, ne[0]);
    }
    t.shape = {ne[0], ne[1]};
    t_[name] = std::move(t);
  }
  std::mt19937 rng_;
  std::map<std::string, T> t_;
};

// Expected output rows (n tokens x width) and a bound per element: `bound` for every path, plus
// `f16` where the backend rounds to f16 (the Vulkan backend's prefill GEMM: steps of more than
// Case::f16_above tokens) and `codes` where it multiplies int8 codes of the activations (block-format weights on the
// CPU, and on Vulkan in steps of up to 32 tokens). Empty: none.
struct Expect {
  std::vector<double> want, bound, f16, codes;
};
constexpr int kDirectTokens = 32;  // the Vulkan backend multiplies steps up to this size by the weights directly
constexpr int kCudaDirectTokens = 8;  // and the CUDA backend
constexpr int kCudaCodesTokens = 64;  // CUDA steps up to this size take the 8-bit codes' products (K-quants)
constexpr int kMvMaxTokens = 8;    // and the experts of steps up to this size

struct Case {
  std::string name;
  int n = 4;               // tokens
  std::vector<int> steps;  // token counts of the steps it is fed in (empty: one step)
  TensorType weight_type = TensorType::F32;  // what a backend's unsupported() is asked about
  int f16_above = kDirectTokens;             // Vulkan steps longer than this add Expect::f16 to the bound
  backend::KvType kv = backend::KvType::F32;  // the KV cache of its context
  std::vector<std::pair<std::string, std::string>> env;  // knobs set while its weights load
  std::function<TensorId(Builder&, Tables&)> build;
  std::function<Expect(const Tables&)> reference;
};

// ---- references ------------------------------------------------------------------------------

const float* row(const Tables& t, const std::string& name, int64_t r) { return t.values(name).data() + r * t.width(name); }

// Elementwise ops whose formula uses exp (silu, sigmoid, tanh): the Vulkan spec grants exp (3 + 2|x|)
// ulp and division 2.5 ulp, and a tanh built from exp loses a few more; 16 + 4|x| ulp covers the chain.
double transcendental_ulps(double x) { return 16 + 4 * std::fabs(x); }

Case elementwise(const std::string& name, graph::Op op, int64_t width, int n) {
  Case c;
  c.name = name;
  c.n = n;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId a = t.input(b, "a", width, n, -3, 3);
    if (op == graph::Op::Softcap) return b.softcap(a, 2.5f, "out", 0);
    const TensorId x = t.input(b, "b", width, n, -3, 3);
    switch (op) {
      case graph::Op::Add: return b.add(a, x, "out", 0);
      case graph::Op::Mul: return b.mul(a, x, "out", 0);
      case graph::Op::SwiGLU: return b.swiglu(a, x, "out", 0);
      case graph::Op::GeGLU: return b.geglu(a, x, "out", 0);
      default: return b.sigmoid_mul(a, x, "out", 0);
    }
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < width; ++i) {
        const double a = row(t, "a", r)[i];
        double y = 0, bound = 0;
        if (op == graph::Op::Softcap) {
          y = 2.5 * std::tanh(a / 2.5);
          // tanh from exp: its error is absolute (e^2x - 1 cancels near 0), times the cap.
          bound = transcendental_ulps(a / 2.5) * kU * 2.5;
        } else {
          const double x = row(t, "b", r)[i];
          switch (op) {
            case graph::Op::Add: y = a + x; bound = kU * std::fabs(y); break;  // one rounding
            case graph::Op::Mul: y = a * x; bound = kU * std::fabs(y); break;
            case graph::Op::SwiGLU:
              y = a / (1 + std::exp(-a)) * x;
              bound = transcendental_ulps(a) * kU * std::fabs(y);
              break;
            case graph::Op::GeGLU: {
              const double in = std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a);
              y = 0.5 * a * (1 + std::tanh(in)) * x;
              // 1 + tanh loses tanh's absolute error, not its relative one: bound against |a x|.
              bound = transcendental_ulps(in) * kU * std::fabs(a * x);
              break;
            }
            default:
              y = a / (1 + std::exp(-x));
              bound = transcendental_ulps(x) * kU * std::fabs(y);
              break;
          }
        }
        e.want.push_back(y);
        e.bound.push_back(bound);
      }
    }
    return e;
  };
  return c;
}

// x / sqrt(mean(x^2) + eps) * (w + offset) over each group: the sum of squares has `group` positive
// terms (relative error group·u), the rest a handful of roundings (inversesqrt: 2 ulp in Vulkan).
Case rms_norm(int64_t width, int64_t group, bool weighted, float offset, int n) {
  Case c;
  c.name = fmt::format("rms_norm/{}x{}{}{}/n{}", width, group, weighted ? "/w" : "", offset != 0 ? "/offset" : "", n);
  c.n = n;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId x = t.input(b, "x", width, n, -2, 2);
    const TensorId w = weighted ? t.weight(b, "w", TensorType::F32, {group, 1, 1, 1}) : -1;
    return group == width ? b.rms_norm(x, w, 1e-6f, offset, "out", 0) : b.rms_norm_heads(x, w, static_cast<int>(group), 1e-6f, "out", 0);
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int64_t r = 0; r < n; ++r) {
      const float* x = row(t, "x", r);
      for (int64_t g0 = 0; g0 < width; g0 += group) {
        double ss = 0;
        for (int64_t i = 0; i < group; ++i) ss += static_cast<double>(x[g0 + i]) * x[g0 + i];
        const double inv = 1 / std::sqrt(ss / static_cast<double>(group) + 1e-6);
        for (int64_t i = 0; i < group; ++i) {
          const double w = weighted ? t.values("w")[static_cast<size_t>(i)] + static_cast<double>(offset) : 1.0;
          e.want.push_back(x[g0 + i] * inv * w);
          e.bound.push_back((static_cast<double>(group) + 16) * kU * std::fabs(e.want.back()));
        }
      }
    }
    return e;
  };
  return c;
}

// The error of each element of a row given to a block-format product as int8 codes: d/2 with d =
// amax/127 over its block, stored as f16: at most 1.01·amax/254 for the 256-element blocks, which
// contain the 32-element ones.
std::vector<double> code_errors(const std::vector<double>& v) {
  std::vector<double> e(v.size(), 0.0);
  for (size_t b0 = 0; b0 < v.size(); b0 += 256) {
    const size_t b1 = std::min(v.size(), b0 + 256);
    double amax = 0;
    for (size_t j = b0; j < b1; ++j) amax = std::max(amax, std::fabs(v[j]));
    for (size_t j = b0; j < b1; ++j) e[j] = 1.01 * amax / 254;
  }
  return e;
}

// out[t] = W · x[t] (+ bias). The float sum over ncols terms: (ncols + 4)·u·Σ|w x|. The prefill GEMM
// rounds x and the weights to f16 (2^-11 each): Σ|w_j x_j|·2^-10. Int8 codes of x for block-format
// weights: |x - code·d| <= d/2 with d = amax/127 over the block, stored as f16: at most 1.01·amax/254
// for the 256-element blocks, which contain the 32-element ones: Σ|w_j|·1.01·amax/254.
Case matmul(TensorType type, int64_t ncols, int64_t nrows, int n, bool bias) {
  Case c;
  c.name = fmt::format("matmul/{}/{}x{}/n{}{}", gguf::tensor_type_name(type), ncols, nrows, n, bias ? "/bias" : "");
  c.n = n;
  c.weight_type = type;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId x = t.input(b, "x", ncols, n);
    const TensorId w = t.weight(b, "w", type, {ncols, nrows, 1, 1});
    return b.matmul(w, x, "out", 0, bias ? t.weight(b, "bias", TensorType::F32, {nrows, 1, 1, 1}) : -1);
  };
  const bool blocks = quant::block_size(type) > 1;
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int64_t r = 0; r < n; ++r) {
      const float* x = row(t, "x", r);
      const std::vector<double> code_err =
          blocks ? code_errors(std::vector<double>(x, x + ncols)) : std::vector<double>(static_cast<size_t>(ncols), 0.0);
      for (int64_t o = 0; o < nrows; ++o) {
        const float* w = row(t, "w", o);
        double y = bias ? t.values("bias")[static_cast<size_t>(o)] : 0.0, mag = std::fabs(y), codes = 0;
        for (int64_t j = 0; j < ncols; ++j) {
          y += static_cast<double>(w[j]) * x[j];
          mag += std::fabs(static_cast<double>(w[j]) * x[j]);
          codes += std::fabs(w[j]) * code_err[static_cast<size_t>(j)];
        }
        e.want.push_back(y);
        e.bound.push_back((static_cast<double>(ncols) + 4) * kU * mag);
        e.f16.push_back(mag * std::ldexp(1.0, -10));
        e.codes.push_back(codes);
      }
    }
    return e;
  };
  return c;
}

// out[t] = row token[t] of W (dequantized) * scale: one product, one rounding.
// Embedding rows, times 0.5. Each backend forms an element d·sc·q + m from the block's fields in at most
// three roundings, as the reference's dequantizer does but maybe grouped otherwise: 8 u of the element's
// scaled-code and offset magnitudes (code_and_offset) bound the distance; the scale is exact.
Case embed(TensorType type, int64_t width) {
  Case c;
  c.name = fmt::format("embed/{}/{}", gguf::tensor_type_name(type), width);
  c.n = 5;
  c.weight_type = type;
  c.build = [=](Builder& b, Tables& t) { return b.embed(t.weight(b, "table", type, {width, 8, 1, 1}), 0.5f); };
  c.reference = [=](const Tables& t) {
    Expect e;
    const auto owner = test::code_bits(type);
    const size_t rb = quant::row_size(type, width);
    for (int64_t r = 0; r < 5; ++r) {
      const auto mag = test::code_and_offset(type, owner, t.bytes("table").data() + static_cast<size_t>(r) * rb, width);
      for (int64_t i = 0; i < width; ++i) {
        e.want.push_back(0.5 * row(t, "table", r)[i]);
        e.bound.push_back(std::max(kU * std::fabs(e.want.back()), 8 * kU * 0.5 * mag[static_cast<size_t>(i)]));
      }
    }
    return e;
  };
  return c;
}

// Rotation of the first n_rot dims of each head by pos * base^(-2i/n_rot). The angle is built in
// float by i repeated products of base^(-2/n_rot) (relative error (2i + 2)·u), cos and sin add a few
// ulp, the rotation two products and a sum: |Δ| <= (|x0| + |x1|)·(θ·(2i + 2)·u + 4u).
Case rope(graph::RopeMode mode, int head_dim, int n_rot, int n_past) {
  Case c;
  c.name = fmt::format("rope/{}/{}of{}/at{}", mode == graph::RopeMode::NeoX ? "neox" : "normal", n_rot, head_dim, n_past);
  const int n_head = 3, n = 5;
  c.n = n_past + n;
  c.steps = {n_past, n};
  const float base = 10000.0f;
  c.build = [=](Builder& b, Tables& t) {
    graph::RopeParams p;
    p.base = base;
    return b.rope(t.input(b, "x", int64_t{n_head} * head_dim, n_past + n), n_head, head_dim, n_rot, mode, p, "out", 0);
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int pos = 0; pos < n_past + n; ++pos) {
      const float* x = row(t, "x", pos);
      std::vector<double> y(x, x + n_head * head_dim), bound(y.size(), 0.0);
      for (int h = 0; h < n_head; ++h) {
        for (int i = 0; i < n_rot / 2; ++i) {
          const int a = h * head_dim + (mode == graph::RopeMode::Normal ? 2 * i : i);
          const int b = h * head_dim + (mode == graph::RopeMode::Normal ? 2 * i + 1 : i + n_rot / 2);
          const double theta = pos * std::pow(static_cast<double>(base), -2.0 * i / n_rot);
          y[static_cast<size_t>(a)] = x[a] * std::cos(theta) - x[b] * std::sin(theta);
          y[static_cast<size_t>(b)] = x[a] * std::sin(theta) + x[b] * std::cos(theta);
          const double d = (std::fabs(x[a]) + std::fabs(x[b])) * (theta * (2 * i + 2) + 4) * kU;
          bound[static_cast<size_t>(a)] = bound[static_cast<size_t>(b)] = d;
        }
      }
      e.want.insert(e.want.end(), y.begin(), y.end());
      e.bound.insert(e.bound.end(), bound.begin(), bound.end());
    }
    return e;
  };
  return c;
}

// Causal attention with grouped KV heads over an F32 cache, optionally a sliding window, a softcap
// and sinks; fed in two steps (the second attends to rows the first stored). Float error, with S the
// largest Σ|q k|·scale of a row's keys: a score is off by at most head_dim·u·S; p_j = exp(s_j - m) / Σ
// then by a relative 2·head_dim·u·S (its score and the max), the exp's (3 + 2|s_j - m|) ulp with
// |s_j - m| <= 2S, the denominator's n_keys·u and the division's 2.5 ulp; out = Σ p v adds n_keys·u of
// Σ p|v|. So |Δ| <= (2·(head_dim + 2)·S + 2·n_keys + 8)·u·Σ p|v|.
// With an F16 cache (f16_kv) k and v are rounded to f16 (2^-11 each): a logit moves by at most
// 2^-11 S, which moves the softmax's weighted mean by at most twice that times sum p|v|, and v's
// rounding adds 2^-11 sum p|v|. Vulkan's tensor-core prompt kernel (steps past 8 tokens) also rounds q
// and p to f16: as much again (Expect::f16). 10% over for the second-order terms.
Case attention(int n_head, int n_head_kv, int head_dim, int window, float softcap, bool sinks, int first, int second,
               bool f16_kv = false) {
  Case c;
  c.name = fmt::format("attention/{}q{}kv/hd{}{}{}{}{}/{}+{}", n_head, n_head_kv, head_dim, window ? fmt::format("/win{}", window) : "",
                       softcap != 0 ? "/softcap" : "", sinks ? "/sinks" : "", f16_kv ? "/f16" : "", first, second);
  if (f16_kv) {
    c.kv = backend::KvType::F16;
    c.f16_above = kMvMaxTokens;
  }
  const int n = first + second;
  c.n = n;
  c.steps = {first, second};
  const int qw = n_head * head_dim, kw = n_head_kv * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  c.build = [=](Builder& b, Tables& t) {
    const TensorId q = t.input(b, "q", qw, n, -1.5f, 1.5f), k = t.input(b, "k", kw, n, -1.5f, 1.5f), v = t.input(b, "v", kw, n);
    const TensorId s = sinks ? t.weight(b, "sinks", TensorType::F32, {n_head, 1, 1, 1}, -1, 2) : -1;
    return b.attention(q, k, v, n_head, n_head_kv, head_dim, scale, window, softcap, "out", 0, s);
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int pos = 0; pos < n; ++pos) {
      for (int h = 0; h < n_head; ++h) {
        const int kh = h / (n_head / n_head_kv), lo = window > 0 ? std::max(0, pos - window + 1) : 0;
        std::vector<double> logit;
        double S = 0;
        for (int j = lo; j <= pos; ++j) {
          double dot = 0, mag = 0;
          for (int i = 0; i < head_dim; ++i) {
            const double p = static_cast<double>(row(t, "q", pos)[h * head_dim + i]) * row(t, "k", j)[kh * head_dim + i];
            dot += p;
            mag += std::fabs(p);
          }
          double s = dot * scale;
          if (softcap != 0) s = softcap * std::tanh(s / softcap);
          logit.push_back(s);
          S = std::max(S, mag * scale);
        }
        double mx = -INFINITY, sum = 0;
        for (double x : logit) mx = std::max(mx, x);
        if (sinks) mx = std::max(mx, static_cast<double>(t.values("sinks")[static_cast<size_t>(h)]));
        for (double& x : logit) sum += (x = std::exp(x - mx));
        if (sinks) sum += std::exp(t.values("sinks")[static_cast<size_t>(h)] - mx);
        const auto keys = static_cast<double>(logit.size());
        for (int i = 0; i < head_dim; ++i) {
          double o = 0, pv = 0;
          for (size_t j = 0; j < logit.size(); ++j) {
            const double vj = row(t, "v", lo + static_cast<int64_t>(j))[kh * head_dim + i];
            o += logit[j] / sum * vj;
            pv += logit[j] / sum * std::fabs(vj);
          }
          e.want.push_back(o);
          const double f16_terms = 1.1 * (0x1p-10 * S + 0x1p-11) * pv;
          e.bound.push_back((2 * (head_dim + 2) * S + 2 * keys + 8) * kU * pv + (f16_kv ? f16_terms : 0.0));
          e.f16.push_back(f16_kv ? f16_terms : 0.0);
        }
      }
    }
    return e;
  };
  return c;
}

// Copies (Split, Concat) and Scale: exact, or one rounding.
Case split_concat(int64_t width) {
  Case c;
  c.name = fmt::format("split_concat/{}", width);
  c.n = 3;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId x = t.input(b, "x", width, 3);
    const TensorId y = t.input(b, "y", 8, 3);
    // Two groups of width/2: columns [4, 4 + width/4) of each; then y's row beside them.
    const TensorId s = b.split(x, 2, width / 2, 4, width / 4, "split", 0);
    return b.concat({s, y}, "out", 0);
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int64_t r = 0; r < 3; ++r) {
      for (int g = 0; g < 2; ++g) {
        for (int64_t i = 0; i < width / 4; ++i) e.want.push_back(row(t, "x", r)[g * width / 2 + 4 + i]);
      }
      for (int64_t i = 0; i < 8; ++i) e.want.push_back(row(t, "y", r)[i]);
    }
    e.bound.assign(e.want.size(), 0.0);
    return e;
  };
  return c;
}

Case scale(int64_t width, bool scalar) {
  Case c;
  c.name = fmt::format("scale/{}/{}", width, scalar ? "scalar" : "vector");
  c.n = 3;
  c.build = [=](Builder& b, Tables& t) {
    return b.scale(t.input(b, "x", width, 3), t.weight(b, "w", TensorType::F32, {scalar ? 1 : width, 1, 1, 1}), "out", 0);
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t i = 0; i < width; ++i) {
        e.want.push_back(static_cast<double>(row(t, "x", r)[i]) * t.values("w")[scalar ? 0 : static_cast<size_t>(i)]);
        e.bound.push_back(kU * std::fabs(e.want.back()));
      }
    }
    return e;
  };
  return c;
}

// The rows of s (its values and bounds) added to the residual rows x and normalised with weights w:
// h = x + s with s's error plus one rounding; y = h / sqrt(mean(h^2) + eps) * w with the norm's own
// (width + 16)·u|y| and h's error carried through the scale, inv·|w_i|·Δh_i + |y_i|·Σ|h_j|Δh_j / Σh_j².
Expect normed_after(const Tables& t, const Expect& s, int64_t width, int n) {
  Expect y;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> h(static_cast<size_t>(width)), dh(h.size());
    double ss = 0, carried = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      const size_t k = static_cast<size_t>(r * width) + i;
      const double x = row(t, "x", r)[i];
      h[i] = x + s.want[k];
      dh[i] = s.bound[k] + kU * (std::fabs(x) + std::fabs(s.want[k]) + s.bound[k]);
      ss += h[i] * h[i];
      carried += std::fabs(h[i]) * dh[i];
    }
    const double inv = 1 / std::sqrt(ss / static_cast<double>(width) + 1e-6);
    for (size_t i = 0; i < h.size(); ++i) {
      const double w = t.values("w")[i], v = h[i] * inv * w;
      y.want.push_back(v);
      y.bound.push_back((static_cast<double>(width) + 16) * kU * std::fabs(v) + inv * std::fabs(w) * dh[i] + std::fabs(v) * carried / ss);
    }
  }
  return y;
}

// sigmoid_gate's sums before any norm: a * sigmoid(g), plus e where `added`.
Expect sigmoid_gate_sums(const Tables& t, int64_t width, bool added) {
  Expect e;
  for (int64_t r = 0; r < 4; ++r) {
    double g = 0, mag = 0;
    for (int64_t i = 0; i < width; ++i) {
      g += static_cast<double>(t.values("wg")[static_cast<size_t>(i)]) * row(t, "a", r)[i];
      mag += std::fabs(static_cast<double>(t.values("wg")[static_cast<size_t>(i)]) * row(t, "a", r)[i]);
    }
    for (int64_t i = 0; i < width; ++i) {
      const double a = row(t, "a", r)[i];
      const double gated = a / (1 + std::exp(-g));
      const double bound = transcendental_ulps(g) * kU * std::fabs(gated) + std::fabs(a) / 4 * (static_cast<double>(width) + 4) * kU * mag;
      const double plus = added ? static_cast<double>(row(t, "e", r)[i]) : 0.0;
      e.want.push_back(plus + gated);
      e.bound.push_back(bound + (added ? kU * (std::fabs(plus) + std::fabs(gated) + bound) : 0.0));
    }
  }
  return e;
}

// SigmoidMul with one gate per token (b one value wide, a product of a as in Qwen3-Next's shared
// expert gate): a * sigmoid(g), g = wg · a. g's float sum is off by (width + 4)·u·Σ|wg a| and
// sigmoid's slope is at most 1/4. `added`: then added to another row, e + a * sigmoid(g) (the
// experts' output plus the shared expert's, one dispatch on Vulkan: sigmoid_mul_add), one more
// rounding of the sum. `normed` (with added): that sum then added to a residual row x and the result
// normalised, y = rms_norm(x + (e + a * sigmoid(g))) * w (Qwen3.5/3.6's and Qwen3-Next's mixture
// tail and the next layer's norm; one dispatch on Vulkan: rms_norm_row's gated add; normed_after).
Case sigmoid_gate(int64_t width, bool added = false, bool normed = false) {
  Case c;
  c.name = fmt::format("sigmoid_mul/{}/per_token{}{}", width, added ? "/added" : "", normed ? "/normed" : "");
  c.n = 4;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId a = t.input(b, "a", width, 4, -3, 3);
    const TensorId e = added ? t.input(b, "e", width, 4, -3, 3) : -1;
    const TensorId x = normed ? t.input(b, "x", width, 4, -3, 3) : -1;
    const TensorId g = b.matmul(t.weight(b, "wg", TensorType::F32, {width, 1, 1, 1}, -0.3f, 0.3f), a, "gate", 0);
    const TensorId y = b.sigmoid_mul(a, g, added ? "gated" : "out", 0);
    if (!added) return y;
    const TensorId s = b.add(e, y, normed ? "ffn" : "out", 0);
    if (!normed) return s;
    return b.rms_norm(b.add(x, s, "h", 0), t.weight(b, "w", TensorType::F32, {width, 1, 1, 1}), 1e-6f, 0.0f, "out", 0);
  };
  c.reference = [=](const Tables& t) {
    const Expect e = sigmoid_gate_sums(t, width, added);
    return normed ? normed_after(t, e, width, 4) : e;
  };
  return c;
}

// The same gated add and norm with a gate per element (g a row like a, as wide):
// rms_norm(x + (e + a * sigmoid(g))) * w. The gate's error is sigmoid's own.
Case gated_norm_per_element(int64_t width) {
  Case c;
  c.name = fmt::format("sigmoid_mul/{}/per_element/added/normed", width);
  c.n = 3;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId a = t.input(b, "a", width, 3, -3, 3), g = t.input(b, "g", width, 3, -4, 4);
    const TensorId e = t.input(b, "e", width, 3, -3, 3), x = t.input(b, "x", width, 3, -3, 3);
    const TensorId s = b.add(e, b.sigmoid_mul(a, g, "gated", 0), "ffn", 0);
    return b.rms_norm(b.add(x, s, "h", 0), t.weight(b, "w", TensorType::F32, {width, 1, 1, 1}), 1e-6f, 0.0f, "out", 0);
  };
  c.reference = [=](const Tables& t) {
    Expect s;
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t i = 0; i < width; ++i) {
        const double a = row(t, "a", r)[i], g = row(t, "g", r)[i], plus = row(t, "e", r)[i];
        const double gated = a / (1 + std::exp(-g)), bound = transcendental_ulps(g) * kU * std::fabs(gated);
        s.want.push_back(plus + gated);
        s.bound.push_back(bound + kU * (std::fabs(plus) + std::fabs(gated) + bound));
      }
    }
    return normed_after(t, s, width, 3);
  };
  return c;
}

// Causal depthwise convolution then SiLU, its last K-1 inputs carried to the next step as state:
// fed in two steps. The K-term sum is off by (K + 4)·u·Σ|w x|, SiLU's slope is at most 1.1, and
// SiLU itself adds its exp's and division's ulps.
Case ssm_conv(int64_t width, int K, int first, int second) {
  Case c;
  c.name = fmt::format("ssm_conv/{}/k{}/{}+{}", width, K, first, second);
  const int n = first + second;
  c.n = n;
  c.steps = {first, second};
  c.build = [=](Builder& b, Tables& t) {
    return b.ssm_conv(t.input(b, "x", width, n), t.weight(b, "w", TensorType::F32, {K, width, 1, 1}), "out", 0);
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t ch = 0; ch < width; ++ch) {
        double s = 0, mag = 0;
        for (int j = 0; j < K; ++j) {
          const int64_t src = r - K + 1 + j;
          if (src < 0) continue;
          const double p = static_cast<double>(t.values("w")[static_cast<size_t>(ch * K + j)]) * row(t, "x", src)[ch];
          s += p;
          mag += std::fabs(p);
        }
        e.want.push_back(s / (1 + std::exp(-s)));
        e.bound.push_back(1.1 * (K + 4) * kU * mag + transcendental_ulps(s) * kU * std::fabs(e.want.back()));
      }
    }
    return e;
  };
  return c;
}

// Mixture of experts, SwiGLU experts: router logits r = R x, softmax, the top k (renormalised), out =
// Σ w_e down_e(silu(gate_e x) * up_e x). The error is carried through each stage: the router's sums
// ((d + 4)·u·Σ|R x| each) move p_j by a relative 2·Er + (n_expert + 8)·u and the renormalised weights
// by twice that plus (k + 4)·u; gate and up are off by their sums' error (plus, with int8 codes of x,
// Σ|w|·1.01·amax/254), h = silu(g)·u by 1.1·Δg·|u| + |silu(g)|·Δu + silu's ulps, down by Σ|D|·Δh plus
// its own sum and codes of h; out = Σ w y by Σ(w·Δy + Δw·|y|) + (k + 2)·u·Σ|w y|. A token whose k-th
// and next expert are closer than their probabilities' error could be routed either way: it is left
// out (the reference must not decide a tie), and at most half of them may be.
// A block-format router (older converters' files) adds the codes' worst-case error to every logit,
// carried the same way; at d = 256 that leaves most tokens at a near tie (BlockRouter compares such
// routers between backends instead).
struct MoeShape {
  int n_expert, k;
  int64_t d, ff;
  TensorType router;
  bool blocks, rounds_f16;  // K-quant or block experts; long steps' grouped products round to f16
};

// One token's mixture of x, appended to e. x is off by up to dx[i] from what the backend computes
// with, and each logit by up to er_in[j] more (both empty: none). Returns whether the token is at a
// near tie (its bounds are then infinite).
bool moe_row(const Tables& t, const MoeShape& m, const std::vector<double>& x, const std::vector<double>& dx,
             const std::vector<double>& er_in, Expect& e) {
  const int n_expert = m.n_expert, k = m.k;
  const int64_t d = m.d, ff = m.ff;
  const auto input_error = [&](const float* w, int64_t i) { return dx.empty() ? 0.0 : std::fabs(w[i]) * dx[static_cast<size_t>(i)]; };
  const std::vector<double> xe = code_errors(x);
  std::vector<double> logit(static_cast<size_t>(n_expert));
  double er = 0;
  for (int j = 0; j < n_expert; ++j) {
    double s = 0, mag = 0, coded = 0, moved = er_in.empty() ? 0.0 : er_in[static_cast<size_t>(j)];
    const float* rw = t.values("router").data() + j * d;
    for (int64_t i = 0; i < d; ++i) {
      s += rw[i] * x[static_cast<size_t>(i)];
      mag += std::fabs(rw[i] * x[static_cast<size_t>(i)]);
      coded += std::fabs(rw[i]) * xe[static_cast<size_t>(i)];
      moved += input_error(rw, i);
    }
    logit[static_cast<size_t>(j)] = s;
    er = std::max(er, (d + 4) * kU * mag + (m.router == TensorType::F32 ? 0.0 : coded) + moved);
  }
  const double mx = *std::max_element(logit.begin(), logit.end());
  std::vector<double> prob(logit.size());
  double sum = 0;
  for (size_t j = 0; j < prob.size(); ++j) sum += (prob[j] = std::exp(logit[j] - mx));
  for (double& p : prob) p /= sum;
  std::vector<int> order(static_cast<size_t>(n_expert));
  for (int j = 0; j < n_expert; ++j) order[static_cast<size_t>(j)] = j;
  std::sort(order.begin(), order.end(), [&](int a, int b2) { return prob[static_cast<size_t>(a)] > prob[static_cast<size_t>(b2)]; });
  const double rel_p = 2 * er + (n_expert + 8) * kU;
  const double pk = prob[static_cast<size_t>(order[static_cast<size_t>(k - 1)])];
  const double pn = k < n_expert ? prob[static_cast<size_t>(order[static_cast<size_t>(k)])] : 0.0;
  const bool tie = k < n_expert && pk - pn <= 4 * rel_p * pk;
  double wsum = 0;
  for (int q = 0; q < k; ++q) wsum += prob[static_cast<size_t>(order[static_cast<size_t>(q)])];
  const double rel_w = 2 * rel_p + (k + 4) * kU;
  std::vector<double> out(static_cast<size_t>(d), 0.0), base(static_cast<size_t>(d), 0.0), codes(static_cast<size_t>(d), 0.0),
      mag(static_cast<size_t>(d), 0.0), f16(static_cast<size_t>(d), 0.0);
  for (int q = 0; q < k; ++q) {
    const int ex = order[static_cast<size_t>(q)];
    const double w = prob[static_cast<size_t>(ex)] / wsum;
    std::vector<double> h(static_cast<size_t>(ff)), dh(static_cast<size_t>(ff)), dh_codes(static_cast<size_t>(ff)),
        dh_f16(static_cast<size_t>(ff));
    for (int64_t f = 0; f < ff; ++f) {
      double g = 0, gm = 0, gc = 0, gx = 0, u = 0, um = 0, uc = 0, ux = 0;
      const float* gw = t.values("gate").data() + (ex * ff + f) * d;
      const float* uw = t.values("up").data() + (ex * ff + f) * d;
      for (int64_t i = 0; i < d; ++i) {
        g += gw[i] * x[static_cast<size_t>(i)];
        gm += std::fabs(gw[i] * x[static_cast<size_t>(i)]);
        gc += std::fabs(gw[i]) * xe[static_cast<size_t>(i)];
        gx += input_error(gw, i);
        u += uw[i] * x[static_cast<size_t>(i)];
        um += std::fabs(uw[i] * x[static_cast<size_t>(i)]);
        uc += std::fabs(uw[i]) * xe[static_cast<size_t>(i)];
        ux += input_error(uw, i);
      }
      const double sg = g / (1 + std::exp(-g));
      const double dg = (d + 4) * kU * gm + gx, du = (d + 4) * kU * um + ux;
      h[static_cast<size_t>(f)] = sg * u;
      dh[static_cast<size_t>(f)] = 1.1 * dg * (std::fabs(u) + du) + std::fabs(sg) * du + transcendental_ulps(g) * kU * std::fabs(sg * u);
      dh_codes[static_cast<size_t>(f)] = 1.1 * gc * std::fabs(u) + std::fabs(sg) * uc;
      dh_f16[static_cast<size_t>(f)] = 0x1p-10 * (1.1 * gm * std::fabs(u) + std::fabs(sg) * um);
    }
    const std::vector<double> he = code_errors(h);
    for (int64_t o = 0; o < d; ++o) {
      const float* dw = t.values("down").data() + (ex * d + o) * ff;
      double y = 0, ym = 0, dy = 0, dyc = 0, dyf = 0;
      for (int64_t f = 0; f < ff; ++f) {
        y += dw[f] * h[static_cast<size_t>(f)];
        ym += std::fabs(dw[f] * h[static_cast<size_t>(f)]);
        dy += std::fabs(dw[f]) * dh[static_cast<size_t>(f)];
        dyc += std::fabs(dw[f]) * (dh_codes[static_cast<size_t>(f)] + he[static_cast<size_t>(f)]);
        dyf += std::fabs(dw[f]) * (dh_f16[static_cast<size_t>(f)] + 0x1p-10 * std::fabs(h[static_cast<size_t>(f)]));
      }
      dy += (ff + 4) * kU * ym;
      out[static_cast<size_t>(o)] += w * y;
      base[static_cast<size_t>(o)] += w * dy + rel_w * w * std::fabs(y);
      codes[static_cast<size_t>(o)] += w * dyc;
      f16[static_cast<size_t>(o)] += w * dyf;
      mag[static_cast<size_t>(o)] += std::fabs(w * y);
    }
  }
  for (int64_t o = 0; o < d; ++o) {
    e.want.push_back(out[static_cast<size_t>(o)]);
    e.bound.push_back(tie ? INFINITY : base[static_cast<size_t>(o)] + (k + 2) * kU * mag[static_cast<size_t>(o)]);
    e.codes.push_back(m.blocks ? codes[static_cast<size_t>(o)] : 0.0);
    e.f16.push_back(m.rounds_f16 ? f16[static_cast<size_t>(o)] : 0.0);
  }
  return tie;
}

Case moe(TensorType type, int n_expert, int k, int n, int64_t d = 256, int64_t ff = 256, TensorType router = TensorType::F32) {
  Case c;
  c.name = fmt::format("moe/{}/{}of{}/n{}{}{}", gguf::tensor_type_name(type), k, n_expert, n,
                       d == 256 && ff == 256 ? "" : fmt::format("/d{}/ff{}", d, ff),
                       router == TensorType::F32 ? "" : fmt::format("/router_{}", gguf::tensor_type_name(router)));
  c.n = n;
  c.weight_type = type;
  c.f16_above = kMvMaxTokens;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId x = t.input(b, "x", d, n);
    const TensorId r = t.weight(b, "router", router, {d, n_expert, 1, 1}, -0.2f, 0.2f);
    const TensorId g = t.weight(b, "gate", type, {d, ff, n_expert, 1}, -0.2f, 0.2f);
    const TensorId u = t.weight(b, "up", type, {d, ff, n_expert, 1}, -0.2f, 0.2f);
    const TensorId dn = t.weight(b, "down", type, {ff, d, n_expert, 1}, -0.2f, 0.2f);
    return b.moe(x, r, g, u, dn, k, true, "out", 0);
  };
  // The grouped products of long steps round x, the activation and the weights to f16 on a tensor-core
  // device (2^-11 each), float weights aside.
  const bool blocks = quant::block_size(type) > 1;
  const MoeShape shape{n_expert, k, d, ff, router, blocks, blocks};
  c.reference = [=](const Tables& t) {
    Expect e;
    int ties = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* xf = row(t, "x", r);
      ties += moe_row(t, shape, std::vector<double>(xf, xf + d), {}, {}, e);
    }
    EXPECT_LE(ties * 2, n) << "too many tokens routed at a near tie to judge";
    return e;
  };
  return c;
}

// A mixture reading the norm of a product's residual sum, as a transformer layer's: h = W_o a + r,
// x = h / sqrt(mean(h^2) + eps) * (w + offset), then moe(x) with an F32 router and K-quant experts, in
// decode-sized steps. With `split` (ZINC_VULKAN_ROUTER_SPLIT=1, the default) Vulkan chooses the experts from s·(R_w r
// + M a), M = R_w W_o made at load, beside o's product, and weighs them from the norm's sums after it.
// a is on the grid whose 8-bit codes are exact (the codes' worst case would leave most tokens at a
// near tie). Errors carried into x: h's sum over d_in terms and its add, (d_in + 4)·u·Σ|W_o a| + u|h|;
// x by s·|w|·Δh, by the scale's
// first-order error Σ|h|Δh / (Σh² + d·eps) and the norm's own (d + 16)·u. The split's logits also
// round M's sums over d and the product M·a, and R_w r: (d + d_in + 8)·u·s·Σ|R_w|(|r| + Σ|W_o a|).
Case moe_after_product(int n_expert, int k, std::vector<int> steps, float offset, bool split, int64_t d = 256,
                       int64_t d_in = 256, int64_t ff = 256) {
  Case c;
  int n = 0;
  for (int s : steps) n += s;
  c.name = fmt::format("moe_after_product/Q4_K/{}of{}/n{}{}{}", k, n_expert, n, offset != 0 ? "/offset" : "", split ? "/split" : "");
  c.n = n;
  c.steps = steps;
  c.weight_type = TensorType::Q4_K;
  c.f16_above = kMvMaxTokens;
  c.env = {{"ZINC_VULKAN_ROUTER_SPLIT", split ? "1" : "0"}};
  constexpr float kEps = 1e-6f;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId a = t.input(b, "a", d_in, n);
    t.exact_codes("a");
    const TensorId r = t.input(b, "r", d, n, -2, 2);
    const TensorId wo = t.weight(b, "wo", TensorType::Q4_K, {d_in, d, 1, 1}, -0.05f, 0.05f);
    const TensorId nw = t.weight(b, "norm", TensorType::F32, {d, 1, 1, 1}, 0.5f, 1.5f);
    const TensorId x = b.rms_norm(b.add(b.matmul(wo, a, "o", 0), r, "h", 0), nw, kEps, offset, "x", 0);
    const TensorId rt = t.weight(b, "router", TensorType::F32, {d, n_expert, 1, 1}, -0.2f, 0.2f);
    const TensorId g = t.weight(b, "gate", TensorType::Q4_K, {d, ff, n_expert, 1}, -0.2f, 0.2f);
    const TensorId u = t.weight(b, "up", TensorType::Q4_K, {d, ff, n_expert, 1}, -0.2f, 0.2f);
    const TensorId dn = t.weight(b, "down", TensorType::Q4_K, {ff, d, n_expert, 1}, -0.2f, 0.2f);
    return b.moe(x, rt, g, u, dn, k, true, "out", 0);
  };
  const MoeShape shape{n_expert, k, d, ff, TensorType::F32, true, true};
  c.reference = [=](const Tables& t) {
    Expect e;
    int ties = 0;
    for (int64_t tok = 0; tok < n; ++tok) {
      const float* a = row(t, "a", tok);
      const float* r = row(t, "r", tok);
      std::vector<double> h(static_cast<size_t>(d)), dh(static_cast<size_t>(d)), hm(static_cast<size_t>(d));
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) {
        const float* w = row(t, "wo", j);
        double y = 0, mag = 0;
        for (int64_t i = 0; i < d_in; ++i) {
          y += static_cast<double>(w[i]) * a[i];
          mag += std::fabs(static_cast<double>(w[i]) * a[i]);
        }
        h[static_cast<size_t>(j)] = y + r[j];
        hm[static_cast<size_t>(j)] = mag;
        dh[static_cast<size_t>(j)] = (d_in + 4) * kU * mag + kU * std::fabs(y + r[j]);
        ss += h[static_cast<size_t>(j)] * h[static_cast<size_t>(j)];
      }
      const double s = 1 / std::sqrt(ss / static_cast<double>(d) + kEps);
      double spread = 0;
      for (int64_t j = 0; j < d; ++j) spread += std::fabs(h[static_cast<size_t>(j)]) * dh[static_cast<size_t>(j)];
      const double ds = 1.01 * spread / (ss + d * kEps);
      std::vector<double> x(static_cast<size_t>(d)), dx(static_cast<size_t>(d)), er(static_cast<size_t>(n_expert), 0.0);
      for (int64_t j = 0; j < d; ++j) {
        const double w = t.values("norm")[static_cast<size_t>(j)] + static_cast<double>(offset);
        x[static_cast<size_t>(j)] = h[static_cast<size_t>(j)] * s * w;
        const double ax = std::fabs(x[static_cast<size_t>(j)]);
        dx[static_cast<size_t>(j)] = s * std::fabs(w) * dh[static_cast<size_t>(j)] + ax * ds + (d + 16) * kU * ax;
      }
      for (int q = 0; q < n_expert; ++q) {
        const float* rw = t.values("router").data() + q * d;
        double mag = 0;
        for (int64_t j = 0; j < d; ++j) {
          const double w = t.values("norm")[static_cast<size_t>(j)] + static_cast<double>(offset);
          mag += std::fabs(rw[j] * w) * (std::fabs(r[j]) + hm[static_cast<size_t>(j)]);
        }
        er[static_cast<size_t>(q)] = (d + d_in + 8) * kU * s * mag;
      }
      ties += moe_row(t, shape, x, dx, er, e);
    }
    EXPECT_LE(ties * 2, n) << "too many tokens routed at a near tie to judge";
    return e;
  };
  return c;
}

// The gated delta rule over `steps` (its state carried between them): beta = sigmoid(b), g = A ·
// softplus(a + dt_bias), q and k L2-normalised (q also by 1/sqrt(dk)), per v head S = exp(g) S, then
// S += k (beta (v - S^T k))^T, out = S^T q. The bound is carried through the recurrence to first
// order: the normalisations are off by (dk + 8)·u relative, the gates by their exp/log ulps, each
// stage of S and the two contractions (dk terms) add their sums' rounding, and S's error so far is
// decayed, read by the next contraction and carried. Steps of one token: the token-by-token form on
// every backend (the chunked prompt form is checked against the definition in tests/graph).
Case delta_net(int n_head_k, int n_head_v, int dk, int dv, bool tiled, std::vector<int> steps) {
  Case c;
  int n = 0;
  for (int s : steps) n += s;
  c.name = fmt::format("delta_net/{}k{}v/{}x{}{}/{}", n_head_k, n_head_v, dk, dv, tiled ? "/tiled" : "", n);
  c.n = n;
  c.steps = steps;
  const int64_t qw = int64_t{n_head_k} * dk, vw = int64_t{n_head_v} * dv;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId q = t.input(b, "q", qw, n), k = t.input(b, "k", qw, n), v = t.input(b, "v", vw, n);
    const TensorId a = t.input(b, "a", n_head_v, n, -2, 2), beta = t.input(b, "b", n_head_v, n, -2, 2);
    const TensorId A = t.weight(b, "A", TensorType::F32, {n_head_v, 1, 1, 1}, -1.5f, -0.1f);
    const TensorId dt = t.weight(b, "dt", TensorType::F32, {n_head_v, 1, 1, 1}, -0.5f, 0.5f);
    return b.delta_net(q, k, v, a, beta, A, dt, n_head_k, n_head_v, dk, dv, tiled, "out", 0);
  };
  c.reference = [=](const Tables& t) {
    Expect e;
    e.want.assign(static_cast<size_t>(n * vw), 0.0);
    e.bound.assign(e.want.size(), 0.0);
    const double U = kU;
    for (int h = 0; h < n_head_v; ++h) {
      const int kh = tiled ? h % n_head_k : h / (n_head_v / n_head_k);
      std::vector<double> S(static_cast<size_t>(dk * dv), 0.0), E(S.size(), 0.0);  // state and its error bound
      for (int64_t r = 0; r < n; ++r) {
        std::vector<double> qn(static_cast<size_t>(dk)), kn(static_cast<size_t>(dk));
        double qq = 0, kk = 0;
        for (int i = 0; i < dk; ++i) {
          qq += std::pow(row(t, "q", r)[kh * dk + i], 2);
          kk += std::pow(row(t, "k", r)[kh * dk + i], 2);
        }
        for (int i = 0; i < dk; ++i) {
          qn[static_cast<size_t>(i)] = row(t, "q", r)[kh * dk + i] / std::sqrt(qq + 1e-6) / std::sqrt(static_cast<double>(dk));
          kn[static_cast<size_t>(i)] = row(t, "k", r)[kh * dk + i] / std::sqrt(kk + 1e-6);
        }
        const double cn = (dk + 8) * U;  // relative error of a normalised element
        const double x = row(t, "a", r)[h] + static_cast<double>(t.values("dt")[static_cast<size_t>(h)]);
        const double sp = x > 20 ? x : std::log1p(std::exp(x));
        const double g = t.values("A")[static_cast<size_t>(h)] * sp;
        const double decay = std::exp(g);
        const double c_decay = (std::fabs(g) * transcendental_ulps(x) + transcendental_ulps(g) + 4) * U;
        const double bx = row(t, "b", r)[h];
        const double beta = 1 / (1 + std::exp(-bx));
        const double c_beta = transcendental_ulps(bx) * U;
        for (size_t i = 0; i < S.size(); ++i) {
          E[i] = decay * E[i] + (c_decay + U) * std::fabs(decay * S[i]);
          S[i] *= decay;
        }
        std::vector<double> delta(static_cast<size_t>(dv)), ddelta(static_cast<size_t>(dv));
        for (int j = 0; j < dv; ++j) {
          double mem = 0, dmem = 0, mag = 0;
          for (int i = 0; i < dk; ++i) {
            const double s = S[static_cast<size_t>(i * dv + j)], k = kn[static_cast<size_t>(i)];
            mem += s * k;
            mag += std::fabs(s * k);
            dmem += E[static_cast<size_t>(i * dv + j)] * std::fabs(k) + std::fabs(s) * cn * std::fabs(k);
          }
          dmem += (dk + 4) * U * mag;
          const double vj = row(t, "v", r)[h * dv + j];
          delta[static_cast<size_t>(j)] = beta * (vj - mem);
          ddelta[static_cast<size_t>(j)] = beta * (dmem + 2 * U * (std::fabs(vj) + std::fabs(mem))) + c_beta * std::fabs(delta[static_cast<size_t>(j)]);
        }
        for (int i = 0; i < dk; ++i) {
          for (int j = 0; j < dv; ++j) {
            const size_t ij = static_cast<size_t>(i * dv + j);
            const double k = kn[static_cast<size_t>(i)], d = delta[static_cast<size_t>(j)];
            E[ij] += cn * std::fabs(k * d) + std::fabs(k) * ddelta[static_cast<size_t>(j)] + 2 * U * (std::fabs(S[ij]) + std::fabs(k * d));
            S[ij] += k * d;
          }
        }
        for (int j = 0; j < dv; ++j) {
          double o = 0, d = 0, mag = 0;
          for (int i = 0; i < dk; ++i) {
            const size_t ij = static_cast<size_t>(i * dv + j);
            o += S[ij] * qn[static_cast<size_t>(i)];
            mag += std::fabs(S[ij] * qn[static_cast<size_t>(i)]);
            d += E[ij] * std::fabs(qn[static_cast<size_t>(i)]) + std::fabs(S[ij]) * cn * std::fabs(qn[static_cast<size_t>(i)]);
          }
          e.want[static_cast<size_t>(r * vw + h * dv + j)] = o;
          e.bound[static_cast<size_t>(r * vw + h * dv + j)] = d + (dk + 4) * U * mag;
        }
      }
    }
    return e;
  };
  return c;
}

std::vector<Case> all_cases() {
  std::vector<Case> cs;
  using graph::Op;
  for (int n : {1, 5}) {
    cs.push_back(elementwise(fmt::format("add/n{}", n), Op::Add, 96, n));
    cs.push_back(elementwise(fmt::format("mul/n{}", n), Op::Mul, 96, n));
    cs.push_back(elementwise(fmt::format("swiglu/n{}", n), Op::SwiGLU, 256, n));
    cs.push_back(elementwise(fmt::format("geglu/n{}", n), Op::GeGLU, 256, n));
    cs.push_back(elementwise(fmt::format("softcap/n{}", n), Op::Softcap, 96, n));
    cs.push_back(elementwise(fmt::format("sigmoid_mul/n{}", n), Op::SigmoidMul, 96, n));
  }
  cs.push_back(sigmoid_gate(64));
  cs.push_back(sigmoid_gate(64, true));
  cs.push_back(sigmoid_gate(2048, true));
  cs.push_back(sigmoid_gate(64, true, true));
  cs.push_back(sigmoid_gate(2048, true, true));
  cs.push_back(gated_norm_per_element(96));
  cs.push_back(scale(96, false));
  cs.push_back(scale(96, true));
  cs.push_back(split_concat(64));
  cs.push_back(rms_norm(256, 256, true, 0.0f, 3));
  cs.push_back(rms_norm(256, 256, true, 1.0f, 3));
  cs.push_back(rms_norm(96, 96, false, 0.0f, 2));
  cs.push_back(rms_norm(256, 64, true, 0.0f, 3));
  cs.push_back(rms_norm(256, 128, false, 0.0f, 2));
  const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,   TensorType::Q4_0,   TensorType::Q4_1,
                              TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,   TensorType::Q2_K,   TensorType::Q3_K,
                              TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,   TensorType::IQ4_NL, TensorType::IQ4_XS,
                              TensorType::MXFP4};
  for (TensorType t : types) {
    if (quant::can_quantize(t)) cs.push_back(embed(t, 256));
  }
  for (TensorType t : types) {
    if (!quant::can_quantize(t)) continue;
    for (int n : {1, 5, 16}) cs.push_back(matmul(t, 256, 64, n, false));
    cs.push_back(matmul(t, 256, 64, 48, false));  // the prefill GEMM on Vulkan
    cs.push_back(matmul(t, 256, 128, 80, false));  // past CUDA's 64-row products: its prompt tiles
    cs.push_back(matmul(t, 512, 40, 3, true));
  }
  for (graph::RopeMode m : {graph::RopeMode::Normal, graph::RopeMode::NeoX}) {
    cs.push_back(rope(m, 64, 64, 0));
    cs.push_back(rope(m, 128, 128, 7));
    cs.push_back(rope(m, 64, 32, 3));  // partial rotation
  }
  cs.push_back(attention(4, 2, 64, 0, 0.0f, false, 5, 1));
  cs.push_back(attention(4, 2, 64, 0, 0.0f, false, 3, 6));
  cs.push_back(attention(8, 1, 128, 0, 0.0f, false, 7, 1));
  cs.push_back(attention(4, 4, 64, 4, 0.0f, false, 6, 3));
  cs.push_back(attention(4, 2, 64, 0, 30.0f, false, 4, 2));
  cs.push_back(attention(4, 2, 64, 3, 0.0f, true, 5, 2));
  cs.push_back(attention(2, 1, 256, 0, 0.0f, false, 3, 1));
  // Prompt steps over an F16 cache (on a tensor-core device, the prompt kernel: 32-row blocks of a kv
  // head's GQA rows, 64-key tiles, a second step after the first's keys).
  cs.push_back(attention(8, 2, 128, 0, 0.0f, false, 40, 30, true));
  cs.push_back(attention(4, 4, 64, 16, 30.0f, true, 24, 20, true));
  cs.push_back(attention(4, 2, 64, 0, 0.0f, false, 3, 2, true));
  for (TensorType t : {TensorType::F32, TensorType::Q8_0, TensorType::Q4_K}) {
    cs.push_back(moe(t, 8, 2, 1));
    cs.push_back(moe(t, 8, 2, 5));
    cs.push_back(moe(t, 8, 2, 40));  // the grouped products of a prefill step on Vulkan
  }
  // Prompt steps of K-quant experts, 20, 1.5 and 5 tokens an expert (tiles of one entry among them).
  cs.push_back(moe(TensorType::Q4_K, 4, 2, 40));
  cs.push_back(moe(TensorType::Q4_K, 64, 4, 24));
  cs.push_back(moe(TensorType::Q6_K, 16, 4, 20, 512, 256));
  cs.push_back(moe(TensorType::Q4_0, 4, 1, 3));
  // Decode steps of many experts (the router's product and the routing as one dispatch on Vulkan:
  // 32 workgroups per token count themselves per token) and of experts not filling a workgroup.
  cs.push_back(moe(TensorType::Q4_K, 128, 8, 4));
  cs.push_back(moe(TensorType::F32, 10, 3, 2));
  // The mixture after a product and its norm, one-token and several-token steps; on Vulkan also with
  // the router split from that norm.
  for (const bool split : {false, true}) cs.push_back(moe_after_product(16, 4, {1, 1, 4}, 0.0f, split));
  cs.push_back(moe_after_product(32, 4, {1, 3, 1, 3}, 1.0f, true));
  cs.push_back(delta_net(2, 4, 64, 64, false, {1, 1, 1, 1, 1, 1}));
  cs.push_back(delta_net(2, 4, 64, 64, true, {1, 1, 1, 1}));
  cs.push_back(delta_net(4, 4, 128, 64, false, {1, 1, 1}));
  cs.push_back(ssm_conv(64, 4, 3, 4));
  cs.push_back(ssm_conv(96, 4, 1, 1));
  cs.push_back(ssm_conv(64, 4, 6, 2));
  if (g_perf) {
    // With --perf, also the shapes of a real model (Qwen3-8B's products, norms and attention heads;
    // Qwen3-30B-A3B's experts; Qwen3.5's delta rule): a per-op throughput table, checked like the rest.
    for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::F16}) {
      cs.push_back(matmul(t, 4096, 4096, 1, false));
    }
    for (int n : {8, 32, 64}) cs.push_back(matmul(TensorType::Q4_K, 4096, 4096, n, false));
    cs.push_back(matmul(TensorType::Q4_K, 4096, 12288, 1, false));
    cs.push_back(matmul(TensorType::Q4_K, 12288, 4096, 1, false));
    cs.push_back(rms_norm(4096, 4096, true, 0.0f, 1));
    cs.push_back(rms_norm(4096, 4096, true, 0.0f, 64));
    cs.push_back(attention(32, 8, 128, 0, 0.0f, false, 63, 1));
    cs.push_back(attention(32, 4, 128, 0, 0.0f, false, 512, 0, true));  // a prompt's attention (F16 cache)
    cs.push_back(moe(TensorType::Q4_K, 128, 8, 2, 2048, 768));  // (two tokens: one may route at a near tie)
    cs.push_back(moe(TensorType::Q4_K, 128, 8, 256, 2048, 768));  // a prefill step's grouped experts
    cs.push_back(delta_net(16, 32, 128, 128, false, {1}));
  }
  return cs;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = all_cases();
  return cs;
}

struct PerfRow {
  std::string backend, name;
  double us;
};
std::vector<PerfRow>& perf_rows() {
  static std::vector<PerfRow> rows;
  return rows;
}

// A case's graph on a backend (its data seeded by the case's name, independent of the other cases),
// ready to run its steps; `why` says why the backend cannot (then nothing is loaded, nor where narrow).
struct CaseRun {
  CaseRun(const Case& c, backend::Backend& be) : t(static_cast<uint32_t>(std::hash<std::string>{}(c.name))) {
    Builder b(g);
    g.logits = c.build(b, t);
    g.n_layer = 1;
    g.n_vocab = g.tensor(g.logits).ne[0];
    if ((narrow = g.n_vocab < c.n)) return;
    if (why = be.why_unsupported(g); !why.empty()) return;
    file.emplace(t.write(tmp.file("case.gguf")));
    std::vector<std::pair<std::string, std::optional<std::string>>> before;
    for (const auto& [name, value] : c.env) {
      const char* was = std::getenv(name.c_str());
      before.emplace_back(name, was ? std::optional<std::string>(was) : std::nullopt);
      ::setenv(name.c_str(), value.c_str(), 1);
    }
    weights = be.load(g, *file);
    for (const auto& [name, was] : before) {
      if (was) ::setenv(name.c_str(), was->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
    backend::ExecOptions opts;
    opts.n_ctx = std::max(64, c.n);
    opts.max_tokens = c.n;
    opts.kv_type = c.kv;
    exe = weights->instantiate(opts);
    steps = c.steps.empty() ? std::vector<int>{c.n} : c.steps;
  }
  // Every step's output rows, one after another.
  std::vector<float> run() {
    std::vector<float> got;
    int32_t at = 0;
    for (int s : steps) {
      if (s == 0) continue;
      std::vector<int32_t> tokens(static_cast<size_t>(s));
      for (int i = 0; i < s; ++i) tokens[static_cast<size_t>(i)] = at + i;
      exe->run(graph::StepParams::one(tokens, at, true));
      got.insert(got.end(), exe->logits().begin(), exe->logits().end());
      at += s;
    }
    return got;
  }
  Tables t;
  graph::Graph g;
  test::TempDir tmp;
  std::optional<gguf::File> file;  // the weights may read it while they live
  std::shared_ptr<backend::Weights> weights;
  std::unique_ptr<backend::Executable> exe;
  std::vector<int> steps;
  std::string why;
  bool narrow = false;  // the output narrower than the tokens (ids are checked against it): a wrong case
};

class OpSuite : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {};

TEST_P(OpSuite, MatchesTheDefinition) {
  const auto& [backend_name, index] = GetParam();
  const Case& c = cases()[index];
  std::unique_ptr<backend::Backend> be;
  try {
    be = backend::make_backend(backend_name, -1, 2);
  } catch (const Error& e) {
    GTEST_SKIP() << backend_name << " cannot start: " << e.what();
  }
  CaseRun run(c, *be);
  ASSERT_FALSE(run.narrow) << "the output must be at least as wide as the tokens";
  if (!run.why.empty()) GTEST_SKIP() << run.why;
  const Tables& t = run.t;
  const std::vector<int>& steps = run.steps;
  const std::vector<float> got = run.run();
  Expect e = c.reference(t);
  ASSERT_EQ(got.size(), e.want.size());
  const int most = *std::max_element(steps.begin(), steps.end());
  // CUDA: Q4_K, Q5_K and Q6_K products take the activations' 8-bit codes in steps of up to 64 tokens
  // (as Vulkan's direct products do) and, on integer tensor cores, in longer ones too (unless
  // ZINC_CUDA_INT8_PROMPTS=0); other products of more than 8 tokens take f16 operands.
  const bool cuda = backend_name == "cuda";
  const bool code_type = c.weight_type == TensorType::Q4_K || c.weight_type == TensorType::Q5_K || c.weight_type == TensorType::Q6_K;
  const bool int8 = cuda && code_type && (most <= kCudaCodesTokens || knob_u32("ZINC_CUDA_INT8_PROMPTS", 1, 0, 1) == 1);
  const bool f16 = (backend_name == "vulkan" && most > c.f16_above) || (cuda && most > kCudaDirectTokens && !int8);
  const bool codes = backend_name == "cpu" || (cuda ? most <= kCudaDirectTokens || int8 : most <= kDirectTokens);
  for (size_t i = 0; i < e.bound.size(); ++i) {
    if (f16 && !e.f16.empty()) e.bound[i] += e.f16[i];
    if (codes && !e.codes.empty()) e.bound[i] += e.codes[i];
  }
  double worst = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - e.want[i]);
    const double ratio = e.bound[i] > 0 ? err / e.bound[i] : (err > 0 ? INFINITY : 0);
    if (!(ratio <= 1) && bad++ == 0) first_bad = i;
    worst = std::max(worst, ratio);
  }
  EXPECT_EQ(bad, 0u) << backend_name << " " << c.name << ": " << bad << " of " << got.size()
                     << " elements outside their bound; first at " << first_bad << ": got " << got[first_bad] << ", want "
                     << e.want[first_bad] << " ± " << e.bound[first_bad];
  std::printf("%s %s: worst error %.3g of its bound\n", backend_name.c_str(), c.name.c_str(), worst);
  if (g_perf) {
    const int reps = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) run.run();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    perf_rows().push_back({backend_name, c.name, us});
  }
}

std::string case_name(const ::testing::TestParamInfo<OpSuite::ParamType>& info) {
  std::string n = std::get<0>(info.param) + "_" + cases()[std::get<1>(info.param)].name;
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpSuite,
                         ::testing::Combine(::testing::Values("cpu", "vulkan", "cuda"), ::testing::Range<size_t>(0, cases().size())),
                         case_name);

// The largest element gap between two backends' outputs, and the largest output it is measured against.
struct Gap {
  double gap = 0, scale = 0;
};
Gap largest_gap(const std::vector<float>& got, const std::vector<float>& want) {
  Gap g;
  for (size_t i = 0; i < want.size(); ++i) {
    g.gap = std::max(g.gap, std::fabs(static_cast<double>(got[i]) - want[i]));
    g.scale = std::max(g.scale, std::fabs(static_cast<double>(want[i])));
  }
  return g;
}

// The CPU backend and Vulkan's, or (no Vulkan device here) why there is none.
struct CpuAndVulkan {
  std::unique_ptr<backend::Backend> cpu, vk;
  std::string why;
};
CpuAndVulkan cpu_and_vulkan() {
  CpuAndVulkan b{backend::make_cpu_backend(2), nullptr, ""};
  try {
    b.vk = backend::make_backend("vulkan", -1, 2);
  } catch (const Error& e) {
    b.why = e.what();
  }
  return b;
}

// A block-format router in decode steps on the Vulkan backend: the CPU's arithmetic (8-bit codes of the
// router's input, integer sums per block, the CPU's float expression per block), so the mixture's output
// is the CPU's to float rounding. With float activations the logits move by the codes' error (about
// 1e-3 of a logit), the routing weights with them and the output by about that much.
TEST(BlockRouter, VulkanDecodeStepsAreTheCpus) {
  auto [cpu, vk, why] = cpu_and_vulkan();
  if (!vk) GTEST_SKIP() << "vulkan cannot start: " << why;
  for (const TensorType router : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
    Case c = moe(TensorType::Q8_0, 16, 4, 4, 256, 256, router);
    c.steps = {1, 1, 2};
    CaseRun on_cpu(c, *cpu), on_vk(c, *vk);
    ASSERT_TRUE(on_cpu.why.empty() && on_vk.why.empty()) << on_cpu.why << on_vk.why;
    const std::vector<float> want = on_cpu.run(), got = on_vk.run();
    ASSERT_EQ(got.size(), want.size());
    const Gap g = largest_gap(got, want);
    std::printf("%s: largest gap to the CPU %.2e of the largest output\n", c.name.c_str(), g.gap / g.scale);
    EXPECT_LT(g.gap, 1e-5 * g.scale) << c.name;
  }
}

// The router split from its norm (Vulkan decode, ZINC_VULKAN_ROUTER_SPLIT=1) changes the logits'
// rounding only: the mixture after a product and its norm stays the CPU's to the float rounding of
// x (which may move an expert input's 8-bit code by one step), with the split and without. The
// definition's bounds above carry the codes' worst case, too loose to see a routing weight off by a
// few percent; this comparison fails for an R_w offset off by 0.01.
TEST(RouterSplit, VulkanDecodeStepsAreTheCpus) {
  auto [cpu, vk, why] = cpu_and_vulkan();
  if (!vk) GTEST_SKIP() << "vulkan cannot start: " << why;
  for (const float offset : {0.0f, 1.0f}) {
    Case c = moe_after_product(32, 4, {1, 1, 3, 1}, offset, true);
    CaseRun on_cpu(c, *cpu), on_vk(c, *vk);
    c.env = {{"ZINC_VULKAN_ROUTER_SPLIT", "0"}};
    CaseRun on_vk_whole(c, *vk);
    ASSERT_TRUE(on_cpu.why.empty() && on_vk.why.empty() && on_vk_whole.why.empty()) << on_cpu.why << on_vk.why;
    const std::vector<float> want = on_cpu.run(), got = on_vk.run(), whole = on_vk_whole.run();
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(whole.size(), want.size());
    const Gap split = largest_gap(got, want), no_split = largest_gap(whole, want);
    std::printf("%s: largest gap to the CPU %.2e of the largest output with the split, %.2e without\n", c.name.c_str(),
                split.gap / split.scale, no_split.gap / no_split.scale);
    EXPECT_LT(split.gap, 2e-4 * split.scale) << c.name;
    EXPECT_LT(no_split.gap, 2e-4 * no_split.scale) << c.name;
  }
}

// Case c on Vulkan with `knob` at 0 and at 1 ([0], [1]): its output and the dispatches and barriers its
// steps recorded. With `alone`, also c's tokens each a step of its own, whose rows must be bit for bit
// those of c's steps (no case here reads another token's row).
struct KnobRun {
  std::vector<float> got;
  backend::Backend::RecordedCounts counts;
};
// The CPU backend's output of c (empty, and a failure, where it refuses the case).
std::vector<float> cpu_result(const Case& c, backend::Backend& cpu) {
  CaseRun run(c, cpu);
  EXPECT_TRUE(run.why.empty()) << run.why;
  return run.why.empty() ? run.run() : std::vector<float>{};
}
std::array<KnobRun, 2> vulkan_knob_runs(const Case& c, backend::Backend& vk, const char* knob, bool alone) {
  std::array<KnobRun, 2> runs;
  Case singles = c;
  singles.steps.assign(static_cast<size_t>(c.n), 1);
  for (int on = 0; on < 2; ++on) {
    setenv(knob, on ? "1" : "0", 1);
    CaseRun run(c, vk);
    EXPECT_TRUE(run.why.empty()) << run.why;
    const backend::Backend::RecordedCounts before = vk.recorded_counts();
    runs[static_cast<size_t>(on)].got = run.why.empty() ? run.run() : std::vector<float>{};
    const backend::Backend::RecordedCounts after = vk.recorded_counts();
    runs[static_cast<size_t>(on)].counts = {after.dispatches - before.dispatches, after.barriers - before.barriers};
    if (alone && run.why.empty()) {
      const std::vector<float> single = CaseRun(singles, vk).run(), &got = runs[static_cast<size_t>(on)].got;
      EXPECT_TRUE(single.size() == got.size() && std::memcmp(single.data(), got.data(), got.size() * sizeof(float)) == 0)
          << c.name << ": the tokens alone, " << knob << "=" << on;
    }
    unsetenv(knob);
  }
  std::printf("%s: %s=0 %llu dispatches and %llu barriers, =1 %llu and %llu\n", c.name.c_str(), knob,
              static_cast<unsigned long long>(runs[0].counts.dispatches), static_cast<unsigned long long>(runs[0].counts.barriers),
              static_cast<unsigned long long>(runs[1].counts.dispatches), static_cast<unsigned long long>(runs[1].counts.barriers));
  return runs;
}

// Qwen3.5/3.6's mixture layer tail in decode-sized steps: the experts (Q4_K, 8 of 16, their fused gate,
// up and SwiGLU on Vulkan), a shared expert (Q4_K gate, up, SwiGLU, down) gated by sigmoid(wg · x), both added,
// then the residual add and the next norm; with `read`, that norm read by a Q4_K product (the output).
Case shared_expert_case(bool read) {
  constexpr int64_t d = 256, ff = 256;
  Case c;
  c.name = read ? "moe_shared_expert_read" : "moe_shared_expert";
  c.steps = {1, 1, 3, 1};
  c.n = 6;
  c.build = [=](Builder& b, Tables& t) {
    const TensorId x = t.input(b, "x", d, c.n), r = t.input(b, "r", d, c.n, -2, 2);
    const TensorId rt = t.weight(b, "router", TensorType::F32, {d, 16, 1, 1}, -0.2f, 0.2f);
    const TensorId g = t.weight(b, "gate", TensorType::Q4_K, {d, ff, 16, 1}, -0.2f, 0.2f);
    const TensorId u = t.weight(b, "up", TensorType::Q4_K, {d, ff, 16, 1}, -0.2f, 0.2f);
    const TensorId dn = t.weight(b, "down", TensorType::Q4_K, {ff, d, 16, 1}, -0.2f, 0.2f);
    const TensorId moe = b.moe(x, rt, g, u, dn, 8, true, "moe", 0);
    const TensorId su = b.matmul(t.weight(b, "shared_up", TensorType::Q4_K, {d, ff, 1, 1}, -0.2f, 0.2f), x, "shared_up", 0);
    const TensorId sg = b.matmul(t.weight(b, "shared_gate", TensorType::Q4_K, {d, ff, 1, 1}, -0.2f, 0.2f), x, "shared_gate", 0);
    const TensorId act = b.swiglu(sg, su, "shared_act", 0);
    const TensorId shared = b.matmul(t.weight(b, "shared_down", TensorType::Q4_K, {ff, d, 1, 1}, -0.2f, 0.2f), act, "shared", 0);
    const TensorId wg = b.matmul(t.weight(b, "shared_wg", TensorType::F32, {d, 1, 1, 1}, -0.2f, 0.2f), x, "shared_weight", 0);
    const TensorId ffn = b.add(moe, b.sigmoid_mul(shared, wg, "shared_gated", 0), "ffn", 0);
    const TensorId y = b.rms_norm(b.add(r, ffn, "h", 0), t.weight(b, "norm", TensorType::F32, {d, 1, 1, 1}, 0.5f, 1.5f), 1e-6f,
                                  0.0f, read ? "normed" : "out", 0);
    return read ? b.matmul(t.weight(b, "next", TensorType::Q4_K, {d, d, 1, 1}, -0.2f, 0.2f), y, "out", 0) : y;
  };
  return c;
}

// Vulkan records the shared expert's products between the experts' gate and up products and their
// down product (Plan::moe_early) so they run beside those: a reordering only, so the same bits as
// ZINC_VULKAN_SHARED_EARLY=0, as many dispatches, a barrier fewer in each step's recording, and the
// CPU's result to the float rounding of the codes' inputs.
TEST(SharedExpertEarly, VulkanRecordsItBesideTheExpertsWithTheSameBits) {
  auto [cpu, vk, why] = cpu_and_vulkan();
  if (!vk) GTEST_SKIP() << "vulkan cannot start: " << why;
  const Case c = shared_expert_case(false);
  const std::vector<float> want = cpu_result(c, *cpu);
  const std::array<KnobRun, 2> r = vulkan_knob_runs(c, *vk, "ZINC_VULKAN_SHARED_EARLY", false);
  EXPECT_EQ(r[0].counts.dispatches, r[1].counts.dispatches);
  // (A recording per step shape, 1 and 3 tokens: a barrier fewer in each.)
  EXPECT_GE(r[0].counts.barriers, r[1].counts.barriers + 2);
  ASSERT_EQ(r[0].got.size(), want.size());
  ASSERT_EQ(r[1].got.size(), want.size());
  EXPECT_EQ(std::memcmp(r[0].got.data(), r[1].got.data(), want.size() * sizeof(float)), 0);
  const Gap g = largest_gap(r[1].got, want);
  std::printf("moe_shared_expert: largest gap to the CPU %.2e of the largest output\n", g.gap / g.scale);
  EXPECT_LT(g.gap, 2e-3 * g.scale);
}

// With the norm read by a product, ZINC_VULKAN_GATE_TAIL=1 has the one-token step's two down products
// (the shared expert's and the experts' combined one, side by side) do the gated add, the residual add
// and the norm's codes and sums in their last workgroups: a dispatch and a barrier fewer, the 3-token
// step's rows (rms_norm_row's factored gated add) bit for bit those of one-token steps, and the CPU's
// output to the float rounding of the codes' inputs, as with the knob at 0.
TEST(GateTail, VulkanDecodeStepsAreTheCpus) {
  auto [cpu, vk, why] = cpu_and_vulkan();
  if (!vk) GTEST_SKIP() << "vulkan cannot start: " << why;
  const Case c = shared_expert_case(true);
  const std::vector<float> want = cpu_result(c, *cpu);
  const std::array<KnobRun, 2> r = vulkan_knob_runs(c, *vk, "ZINC_VULKAN_GATE_TAIL", true);
  EXPECT_GE(r[0].counts.dispatches, r[1].counts.dispatches + 1);
  EXPECT_GE(r[0].counts.barriers, r[1].counts.barriers + 1);
  for (int tail = 0; tail < 2; ++tail) {
    ASSERT_EQ(r[static_cast<size_t>(tail)].got.size(), want.size());
    const Gap g = largest_gap(r[static_cast<size_t>(tail)].got, want);
    std::printf("%s: largest gap to the CPU %.2e of the largest output (knob %d)\n", c.name.c_str(), g.gap / g.scale, tail);
    EXPECT_LT(g.gap, 2e-3 * g.scale) << c.name << " knob " << tail;
  }
}

// A case of decode-sized steps, 1, 1, 3 and 1 tokens.
Case decode_steps(const char* name) {
  Case c;
  c.name = name;
  c.steps = {1, 1, 3, 1};
  c.n = 6;
  return c;
}

// Its input of width d: x, or (`normed`) the norm of a Q4_K product's residual sum, which one-token
// steps leave to its readers (the norm tail) so the next product takes its scale.
TensorId decode_input(Builder& b, Tables& t, int64_t d, int n, bool normed) {
  const TensorId x = t.input(b, "x", d, n);
  if (!normed) return x;
  const TensorId h = b.add(b.matmul(t.weight(b, "wo", TensorType::Q4_K, {d, d, 1, 1}, -0.1f, 0.1f), x, "o", 0),
                           t.input(b, "r", d, n, -2, 2), "h", 0);
  return b.rms_norm(h, t.weight(b, "norm", TensorType::F32, {d, 1, 1, 1}, 0.5f, 1.5f), 1e-6f, 0.0f, "x_normed", 0);
}

// A dense FFN in decode-sized steps: out = W_d (silu(W_g x) * (W_u x)), Q4_K, d = ff = 256; x an input,
// or (`normed`) the norm of a product's residual sum, which one-token steps leave to its readers (the
// norm tail) so the fused kernel takes its scale. With ZINC_VULKAN_DENSE_GLU=1 Vulkan does the gate
// and up products, the SwiGLU and the down product's codes in one dispatch: two dispatches and a
// barrier fewer in each step's recording, and the CPU's output to the float rounding of the codes'
// inputs, as with the knob at 0. Each row of the 3-token step is bit for bit that token's row in
// one-token steps (speculative steps rely on it).
TEST(DenseGlu, VulkanDecodeStepsAreTheCpus) {
  auto [cpu, vk, why] = cpu_and_vulkan();
  if (!vk) GTEST_SKIP() << "vulkan cannot start: " << why;
  constexpr int64_t d = 256, ff = 256;
  for (const bool normed : {false, true}) {
    Case c = decode_steps(normed ? "dense_glu_normed" : "dense_glu");
    c.build = [&](Builder& b, Tables& t) {
      const TensorId x = decode_input(b, t, d, c.n, normed);
      const TensorId up = b.matmul(t.weight(b, "up", TensorType::Q4_K, {d, ff, 1, 1}, -0.2f, 0.2f), x, "up", 0);
      const TensorId gate = b.matmul(t.weight(b, "gate", TensorType::Q4_K, {d, ff, 1, 1}, -0.2f, 0.2f), x, "gate", 0);
      const TensorId act = b.swiglu(gate, up, "act", 0);
      return b.matmul(t.weight(b, "down", TensorType::Q4_K, {ff, d, 1, 1}, -0.2f, 0.2f), act, "out", 0);
    };
    const std::vector<float> want = cpu_result(c, *cpu);
    const std::array<KnobRun, 2> r = vulkan_knob_runs(c, *vk, "ZINC_VULKAN_DENSE_GLU", true);
    // (A recording per step shape, 1 and 3 tokens.)
    EXPECT_GE(r[0].counts.dispatches, r[1].counts.dispatches + 4) << c.name;
    EXPECT_GE(r[0].counts.barriers, r[1].counts.barriers + 2) << c.name;
    for (int fused = 0; fused < 2; ++fused) {
      ASSERT_EQ(r[static_cast<size_t>(fused)].got.size(), want.size());
      const Gap g = largest_gap(r[static_cast<size_t>(fused)].got, want);
      std::printf("%s: largest gap to the CPU %.2e of the largest output (knob %d)\n", c.name.c_str(), g.gap / g.scale, fused);
      EXPECT_LT(g.gap, 2e-3 * g.scale) << c.name << " knob " << fused;
    }
  }
}

// A recurrent layer's q, k and v product and the short causal convolution over it, in decode-sized steps
// that carry the convolution's state: out = silu(conv(state, W x)), Q4_K, 256 channels, 4 taps; x an
// input or the norm a product left to its readers. With ZINC_VULKAN_CONV_TAIL=1 a one-token step does
// the convolution in the product's dispatch: a dispatch and a barrier fewer, the same bits as with the
// knob at 0 (and as the 3-token step's own convolution), and the CPU's output to the float rounding of
// the codes' inputs.
TEST(ConvTail, VulkanDecodeStepsAreTheCpus) {
  auto [cpu, vk, why] = cpu_and_vulkan();
  if (!vk) GTEST_SKIP() << "vulkan cannot start: " << why;
  constexpr int64_t d = 256;
  for (const bool normed : {false, true}) {
    Case c = decode_steps(normed ? "conv_tail_normed" : "conv_tail");
    c.build = [&](Builder& b, Tables& t) {
      const TensorId x = decode_input(b, t, d, c.n, normed);
      const TensorId qkv = b.matmul(t.weight(b, "qkv", TensorType::Q4_K, {d, d, 1, 1}, -0.2f, 0.2f), x, "qkv", 0);
      return b.ssm_conv(qkv, t.weight(b, "conv", TensorType::F32, {4, d, 1, 1}, -0.5f, 0.5f), "out", 0);
    };
    const std::vector<float> want = cpu_result(c, *cpu);
    const std::array<KnobRun, 2> r = vulkan_knob_runs(c, *vk, "ZINC_VULKAN_CONV_TAIL", true);
    EXPECT_GE(r[0].counts.dispatches, r[1].counts.dispatches + 1) << c.name;
    EXPECT_GE(r[0].counts.barriers, r[1].counts.barriers + 1) << c.name;
    ASSERT_EQ(r[0].got.size(), want.size());
    ASSERT_EQ(r[1].got.size(), want.size());
    EXPECT_EQ(std::memcmp(r[0].got.data(), r[1].got.data(), want.size() * sizeof(float)), 0) << c.name;
    const Gap g = largest_gap(r[1].got, want);
    std::printf("%s: largest gap to the CPU %.2e of the largest output\n", c.name.c_str(), g.gap / g.scale);
    EXPECT_LT(g.gap, 2e-3 * g.scale) << c.name;
  }
}

// What "auto" takes from the probes' reports: CUDA with a GPU first, then Vulkan on a device that is
// not a CPU implementation (lavapipe is slower than the CPU backend), then the CPU.
TEST(AutoBackend, PrefersCudaThenAVulkanGpuThenTheCpu) {
  const auto report = [](const char* name, bool ready, std::vector<const char*> kinds) {
    backend::BackendReport r;
    r.name = name;
    r.compiled = true;
    r.ready = ready;
    for (const char* k : kinds) {
      backend::DeviceReport d;
      d.kind = k;
      r.devices.push_back(d);
    }
    return r;
  };
  const auto cpu = report("cpu", true, {"CPU"});
  const auto nvidia_vk = report("vulkan", true, {"discrete GPU"});
  const auto lavapipe = report("vulkan", true, {"CPU"});
  const auto cuda = report("cuda", true, {"discrete GPU"});
  const auto no_cuda = report("cuda", false, {});
  EXPECT_EQ(backend::auto_backend({cpu, nvidia_vk, cuda}), "cuda");
  EXPECT_EQ(backend::auto_backend({cpu, lavapipe, cuda}), "cuda");
  EXPECT_EQ(backend::auto_backend({cpu, nvidia_vk, no_cuda}), "vulkan");
  EXPECT_EQ(backend::auto_backend({cpu, report("vulkan", true, {"CPU", "integrated GPU"}), no_cuda}), "vulkan");
  EXPECT_EQ(backend::auto_backend({cpu, lavapipe, no_cuda}), "cpu");
  EXPECT_EQ(backend::auto_backend({cpu, report("vulkan", false, {}), no_cuda}), "cpu");
  EXPECT_EQ(backend::auto_backend({cpu}), "cpu");
  // And on this machine "auto" makes the backend the probes choose.
  const std::string want = backend::auto_backend(backend::probe_all());
  std::unique_ptr<backend::Backend> b;
  try {
    b = backend::make_backend("auto", -1, 2);
  } catch (const Error& e) {
    FAIL() << "auto chose " << want << ", which could not start: " << e.what();
  }
  EXPECT_EQ(b->name(), want);
}

}  // namespace
}  // namespace zinc

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {  // before the cases are listed: --perf adds the real models' shapes
    if (std::strcmp(argv[i], "--perf") == 0) zinc::g_perf = true;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (zinc::g_perf) {
    std::printf("\n| backend | op case | µs per run (all its steps) |\n|---|---|---|\n");
    for (const auto& r : zinc::perf_rows()) std::printf("| %s | %s | %.1f |\n", r.backend.c_str(), r.name.c_str(), r.us);
  }
  return rc;
}
