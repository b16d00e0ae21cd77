// What every executor checks the same way: whether a step fits, the rules of recurrent state, and the
// layout of a saved context (so that a context saved by one backend loads into another).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "gguf/types.h"
#include "quant/quant.h"

namespace zinc::backend {

// Throws zinc::Error unless the step has 1..max_tokens tokens, fits in the context and every id is in
// the vocabulary.
inline void check_step(const graph::Graph& g, const ExecOptions& opts, const graph::StepParams& step) {
  const auto n = static_cast<int64_t>(step.tokens.size());
  if (n == 0) throw Error("a step needs at least one token");
  if (n > opts.max_tokens) {
    throw Error(fmt::format("a step of {} tokens exceeds the executable's limit of {}", n, opts.max_tokens));
  }
  if (step.n_past < 0 || step.n_past + n > opts.n_ctx) {
    throw Error(fmt::format("the context is full: {} tokens already in it, {} more do not fit in {}", step.n_past, n,
                            opts.n_ctx));
  }
  for (int32_t t : step.tokens) {
    if (t < 0 || t >= g.n_vocab) throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", t, g.n_vocab - 1));
  }
}

// The recurrent state summarises every token before it: it restarts at position 0 and can only
// continue from where the last step ended (`state_pos` tokens; -1 after a failed step). Returns true
// when the step starts again (the state must be cleared); throws for any other position.
inline bool recurrent_restart(int64_t state_pos, int32_t n_past) {
  if (n_past == 0) return true;
  if (n_past != state_pos) {
    throw Error(fmt::format("the recurrent state holds {} tokens; a step cannot resume at position {}",
                            std::max<int64_t>(state_pos, 0), n_past));
  }
  return false;
}

// The storage type of a KV cache.
inline gguf::TensorType kv_storage_type(KvType t) {
  return t == KvType::F32 ? gguf::TensorType::F32 : t == KvType::F16 ? gguf::TensorType::F16 : gguf::TensorType::Q8_0;
}

// Bytes of one cache row per layer (each layer's own K/V width; 0 for layers without attention).
// Throws when a layer's rows or heads do not fill whole blocks of the type.
inline std::vector<size_t> kv_row_bytes(const graph::Graph& g, gguf::TensorType type) {
  std::vector<size_t> out(static_cast<size_t>(g.n_layer), 0);
  for (const graph::Node& node : g.nodes) {
    if (node.op != graph::Op::Attention) continue;
    const int64_t kw = g.kv_width_of(node.layer);
    if (kw % quant::block_size(type) != 0 || node.head_dim % quant::block_size(type) != 0) {
      throw Error(fmt::format("a {} KV cache needs head rows that are a multiple of {} elements",
                              gguf::tensor_type_name(type), quant::block_size(type)));
    }
    out[static_cast<size_t>(node.layer)] = quant::row_size(type, kw);
  }
  return out;
}

// A saved context: a header {magic, fingerprint, n_past}, then per layer its first n_past K rows and
// V rows, then every node's recurrent state (floats).
struct SavedStateLayout {
  static constexpr uint64_t kMagic = 0x31544154534e435aull;  // "ZCNSTAT1"
  static constexpr size_t kHeaderBytes = 3 * sizeof(uint64_t);

  gguf::TensorType kv_type = gguf::TensorType::F16;
  int32_t n_ctx = 0;
  std::vector<size_t> kv_row_bytes;  // per layer (0: no cache)
  std::vector<size_t> state_floats;  // per node (0: no state)

  // What the layout depends on: a state saved under another one is refused.
  uint64_t fingerprint() const {
    uint64_t h = 1469598103934665603ull;
    const auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(kv_type));
    mix(static_cast<uint64_t>(n_ctx));
    for (size_t r : kv_row_bytes) mix(r);
    for (size_t s : state_floats) mix(s);
    return h;
  }

  size_t bytes(size_t n_past) const {
    size_t n = kHeaderBytes;
    for (size_t r : kv_row_bytes) n += 2 * r * n_past;
    for (size_t s : state_floats) n += s * sizeof(float);
    return n;
  }

  // Throws unless a context of n_past tokens can be saved now (a recurrent state holds exactly
  // state_pos tokens); returns the buffer with its header written.
  std::vector<uint8_t> begin_save(int32_t n_past, bool recurrent, int64_t state_pos) const {
    if (n_past < 0 || n_past > n_ctx || (recurrent && n_past != state_pos)) {
      throw Error(fmt::format("cannot save the state at position {} (the context holds {})", n_past,
                              recurrent ? state_pos : int64_t{n_ctx}));
    }
    std::vector<uint8_t> out(bytes(static_cast<size_t>(n_past)));
    const uint64_t header[] = {kMagic, fingerprint(), static_cast<uint64_t>(n_past)};
    std::memcpy(out.data(), header, sizeof(header));
    return out;
  }

  // Checks a saved context's header and size against this layout; returns its n_past.
  size_t check(std::span<const uint8_t> saved) const {
    uint64_t header[3];
    if (saved.size() < sizeof(header)) throw Error("saved state: truncated");
    std::memcpy(header, saved.data(), sizeof(header));
    if (header[0] != kMagic || header[1] != fingerprint() || header[2] > static_cast<uint64_t>(n_ctx)) {
      throw Error("saved state: made by another model, backend or context settings");
    }
    const auto n_past = static_cast<size_t>(header[2]);
    if (saved.size() != bytes(n_past)) {
      throw Error(fmt::format("saved state: {} bytes, expected {}", saved.size(), bytes(n_past)));
    }
    return n_past;
  }
};

}  // namespace zinc::backend
