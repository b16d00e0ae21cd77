#include "convert/synth.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "quant/recipe.h"
#include "tokenizer/hf_tokenizer.h"

namespace zinc::convert {

namespace {

using gguf::TensorType;
using gguf::Value;
using nlohmann::json;

struct Preset {
  const char* name;
  const char* arch;
  int n_layer;
  int64_t n_embd, n_ff, n_vocab;
  int n_head, n_head_kv, head_dim;
  float rope_base, eps;
  bool tied;
  uint32_t n_ctx;
  const char* pre;  // tokenizer.ggml.pre of the real model
  float rope_linear = 0;  // Gemma 3: linear scaling factor of the global layers
  uint32_t sliding_window = 0;
  int n_expert = 0, n_expert_used = 0;  // mixtures of experts
  int64_t n_ff_exp = 0;
  // Hybrid linear attention (qwen35moe): key/value heads and head width of the DeltaNet layers, every
  // full_every-th layer full attention, the shared expert's width, rotated fraction of each head.
  int lin_hk = 0, lin_hv = 0, lin_d = 0, full_every = 0;
  int64_t n_ff_shexp = 0;
  float partial_rotary = 1.0f;
  // Gemma 4: every global_every-th layer is global (head_dim, n_head_kv, keys as values, rotary base
  // rope_base with the first partial_rotary of the pairs turning); the others are sliding-window
  // layers with their own head size, KV heads and base. Logits soft-capped at final_cap.
  int global_every = 0, head_dim_swa = 0, n_head_kv_swa = 0;
  float rope_base_swa = 0, final_cap = 0;
  bool mtp = false;  // a multi-token-prediction head (one full-attention block after the others)
};

// Shapes and settings of the released models.
const Preset kPresets[] = {
    {"qwen3-0.6b", "qwen3", 28, 1024, 3072, 151936, 16, 8, 128, 1e6f, 1e-6f, true, 40960, "qwen2"},
    {"qwen3-1.7b", "qwen3", 28, 2048, 6144, 151936, 16, 8, 128, 1e6f, 1e-6f, true, 40960, "qwen2"},
    {"qwen3-4b", "qwen3", 36, 2560, 9728, 151936, 32, 8, 128, 1e6f, 1e-6f, true, 40960, "qwen2"},
    {"qwen3-8b", "qwen3", 36, 4096, 12288, 151936, 32, 8, 128, 1e6f, 1e-6f, false, 40960, "qwen2"},
    {"qwen3-14b", "qwen3", 40, 5120, 17408, 151936, 40, 8, 128, 1e6f, 1e-6f, false, 40960, "qwen2"},
    {"qwen3-32b", "qwen3", 64, 5120, 25600, 151936, 64, 8, 128, 1e6f, 1e-6f, false, 40960, "qwen2"},
    {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 6144, 151936, 32, 4, 128, 1e6f, 1e-6f, false, 40960, "qwen2", 0, 0, 128, 8, 768},
    // Qwen3.6-35B-A3B (the Qwen3.5-35B-A3B layout): 40 layers, three gated-DeltaNet layers to one
    // gated full-attention layer, 256 experts (8 used) plus a shared one.
    {"qwen3.6-35b-a3b", "qwen35moe", 40, 2048, 0, 248320, 16, 2, 256, 1e7f, 1e-6f, false, 262144, "qwen35", 0, 0, 256,
     8, 512, 16, 32, 128, 4, 512, 0.25f, 0, 0, 0, 0, 0, true},
    // Qwen3.6-27B (the Qwen3.5-27B layout, dense): 64 layers, three gated-DeltaNet layers (16 key and 48
    // value heads of 128) to one gated full-attention layer (24 heads of 256 over 4 KV heads).
    {"qwen3.6-27b", "qwen35", 64, 5120, 17408, 248320, 24, 4, 256, 1e7f, 1e-6f, false, 262144, "qwen35", 0, 0, 0, 0, 0,
     16, 48, 128, 4, 0, 0.25f, 0, 0, 0, 0, 0, true},
    // GPT-OSS-20B: 24 layers alternating 128-token windows and full attention, sinks, biases, YaRN
    // (factor 32 over 4096), 32 experts (4 used) with the clamped SwiGLU.
    {"gpt-oss-20b", "gpt-oss", 24, 2880, 2880, 201088, 64, 8, 64, 150000.0f, 1e-5f, false, 131072, "gpt-4o", 0, 128,
     32, 4, 2880},
    {"llama3-8b", "llama", 32, 4096, 14336, 128256, 32, 8, 128, 5e5f, 1e-5f, false, 131072, "llama-bpe"},
    {"gemma3-1b", "gemma3", 26, 1152, 6912, 262144, 4, 1, 256, 1e6f, 1e-6f, true, 32768, "default", 0, 512},
    {"gemma3-12b", "gemma3", 48, 3840, 15360, 262144, 16, 8, 256, 1e6f, 1e-6f, true, 131072, "default", 8, 1024},
    // Gemma 4 31B (dense): 60 layers, five 1024-token-window layers (head 256, 16 KV heads, base 1e4) to
    // one global layer (head 512, 4 KV heads whose keys are the values, base 1e6, a quarter of the
    // pairs rotated), tied embeddings, logits capped at 30.
    {"gemma4-31b", "gemma4", 60, 5376, 21504, 262144, 32, 4, 512, 1e6f, 1e-6f, true, 262144, "default", 0, 1024, 0, 0, 0,
     0, 0, 0, 0, 0, 0.25f, 6, 256, 16, 1e4f, 30.0f},
};

const Preset& find_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return p;
  }
  std::string names;
  for (const auto& p : kPresets) names += (names.empty() ? "" : ", ") + std::string(p.name);
  throw Error(fmt::format("unknown preset '{}' (presets: {})", name, names));
}

// GPT-2's byte-to-character table: printable bytes map to themselves, the rest to U+0100 onwards.
std::string byte_char(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A byte-level BPE tokenizer.json: the 256 byte tokens, a few merges of common English pairs and the
// chat special tokens (the rest of the real vocabulary size is padding).
std::pair<json, json> builtin_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  json merges = json::array();
  int id = 256;
  const std::string space = byte_char(' ');
  for (const char* pair : {"th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ou", "ed", "is", "it", "or"}) {
    merges.push_back(std::string(1, pair[0]) + " " + std::string(1, pair[1]));
    vocab[pair] = id++;
  }
  for (char c : std::string("tasowbcmfhdlp")) {
    merges.push_back(space + " " + std::string(1, c));
    vocab[space + std::string(1, c)] = id++;
  }
  json added = json::array();
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  json tok = {{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  json config = {{"eos_token", "<|im_end|>"}, {"bos_token", nullptr}, {"add_bos_token", false}};
  return {tok, config};
}

}  // namespace

std::vector<std::string> synth_presets() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

SynthReport synthesize(const SynthOptions& o, const std::filesystem::path& out) {
  const Preset& p = find_preset(o.preset);
  const auto mixture = quant::mixture_by_name(o.mixture);
  if (!mixture) throw Error(fmt::format("unknown mixture '{}'", o.mixture));
  const int n_layer = o.layers > 0 ? o.layers : p.n_layer;
  const int n_block = n_layer + (p.mtp && o.mtp ? 1 : 0);  // the head's block last
  const std::string a = p.arch;
  const bool gemma = a == "gemma3" || a == "gemma4";
  const bool gemma4 = a == "gemma4";
  const bool hybrid = p.lin_hk > 0;
  const bool gpt_oss = a == "gpt-oss";
  const auto global = [&](int l) { return !gemma4 || (l + 1) % p.global_every == 0; };

  gguf::Writer w;
  auto& m = w.metadata();
  m.set("general.architecture", Value::str(a));
  m.set("general.name", Value::str(fmt::format("synthetic {}", p.name)));
  m.set("general.file_type", Value::u32(mixture->file_type));
  m.set(a + ".context_length", Value::u32(p.n_ctx));
  m.set(a + ".embedding_length", Value::u32(static_cast<uint32_t>(p.n_embd)));
  m.set(a + ".block_count", Value::u32(static_cast<uint32_t>(n_block)));
  if (n_block > n_layer) m.set(a + ".nextn_predict_layers", Value::u32(static_cast<uint32_t>(n_block - n_layer)));
  if (p.n_ff > 0) m.set(a + ".feed_forward_length", Value::u32(static_cast<uint32_t>(p.n_ff)));
  m.set(a + ".attention.head_count", Value::u32(static_cast<uint32_t>(p.n_head)));
  m.set(a + ".attention.head_count_kv", Value::u32(static_cast<uint32_t>(p.n_head_kv)));
  m.set(a + ".rope.freq_base", Value::f32(p.rope_base));
  m.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(p.eps));
  m.set(a + ".attention.key_length", Value::u32(static_cast<uint32_t>(p.head_dim)));
  m.set(a + ".attention.value_length", Value::u32(static_cast<uint32_t>(p.head_dim)));
  if (a == "llama") m.set(a + ".rope.dimension_count", Value::u32(static_cast<uint32_t>(p.head_dim)));
  if (p.sliding_window) m.set(a + ".attention.sliding_window", Value::u32(p.sliding_window));
  if (p.n_expert > 0) {
    m.set(a + ".expert_count", Value::u32(static_cast<uint32_t>(p.n_expert)));
    m.set(a + ".expert_used_count", Value::u32(static_cast<uint32_t>(p.n_expert_used)));
    m.set(a + ".expert_feed_forward_length", Value::u32(static_cast<uint32_t>(p.n_ff_exp)));
  }
  if (hybrid) {
    m.set(a + ".expert_shared_feed_forward_length", Value::u32(static_cast<uint32_t>(p.n_ff_shexp)));
    m.set(a + ".ssm.conv_kernel", Value::u32(4));
    m.set(a + ".ssm.state_size", Value::u32(static_cast<uint32_t>(p.lin_d)));
    m.set(a + ".ssm.group_count", Value::u32(static_cast<uint32_t>(p.lin_hk)));
    m.set(a + ".ssm.time_step_rank", Value::u32(static_cast<uint32_t>(p.lin_hv)));
    m.set(a + ".ssm.inner_size", Value::u32(static_cast<uint32_t>(p.lin_hv * p.lin_d)));
    m.set(a + ".full_attention_interval", Value::u32(static_cast<uint32_t>(p.full_every)));
    m.set(a + ".rope.dimension_count", Value::u32(static_cast<uint32_t>(static_cast<float>(p.head_dim) * p.partial_rotary)));
    std::vector<Value> sections;
    for (int v : {11, 11, 10, 0}) sections.push_back(Value::i32(v));
    m.set(a + ".rope.dimension_sections", Value::array(gguf::ValueType::INT32, sections));
  }
  if (gpt_oss) {
    m.set(a + ".rope.scaling.type", Value::str("yarn"));
    m.set(a + ".rope.scaling.factor", Value::f32(32.0f));
    m.set(a + ".rope.scaling.original_context_length", Value::u32(4096));
  }
  if (gemma4) {
    std::vector<Value> kv, pattern;
    for (int l = 0; l < n_layer; ++l) {
      kv.push_back(Value::u32(static_cast<uint32_t>(global(l) ? p.n_head_kv : p.n_head_kv_swa)));
      pattern.push_back(Value::boolean(!global(l)));
    }
    m.set(a + ".attention.head_count_kv", Value::array(gguf::ValueType::UINT32, kv));
    m.set(a + ".attention.sliding_window_pattern", Value::array(gguf::ValueType::BOOL, pattern));
    m.set(a + ".attention.key_length_swa", Value::u32(static_cast<uint32_t>(p.head_dim_swa)));
    m.set(a + ".attention.value_length_swa", Value::u32(static_cast<uint32_t>(p.head_dim_swa)));
    m.set(a + ".rope.dimension_count", Value::u32(static_cast<uint32_t>(p.head_dim)));
    m.set(a + ".rope.dimension_count_swa", Value::u32(static_cast<uint32_t>(p.head_dim_swa)));
    m.set(a + ".rope.freq_base_swa", Value::f32(p.rope_base_swa));
    m.set(a + ".attention.shared_kv_layers", Value::u32(0));
    m.set(a + ".embedding_length_per_layer_input", Value::u32(0));
    m.set(a + ".final_logit_softcapping", Value::f32(p.final_cap));
  }
  if (p.rope_linear > 0) {
    m.set(a + ".rope.scaling.type", Value::str("linear"));
    m.set(a + ".rope.scaling.factor", Value::f32(p.rope_linear));
  }
  if (mixture->quantized) m.set("general.quantization_version", Value::u32(2));

  tokenizer::HfTokenizerOptions topts;
  topts.vocab_size = static_cast<uint32_t>(p.n_vocab);
  tokenizer::HfTokenizerResult tok;
  if (o.tokenizer_dir.empty()) {
    topts.pre = p.pre;
    const auto [tok_json, tok_config] = builtin_tokenizer();
    tok = tokenizer::convert_hf_tokenizer(tok_json, tok_config, nullptr, topts, "built-in tokenizer");
  } else {
    tok = tokenizer::convert_hf_tokenizer_dir(o.tokenizer_dir, topts);
  }
  for (const auto& [k, v] : tok.metadata.items()) m.set(k, v);

  // Tensors in the order the standard converter writes them.
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    bool norm;
  };
  std::vector<T> ts;
  const auto d = static_cast<uint64_t>(p.n_embd), ff = static_cast<uint64_t>(p.n_ff);
  ts.push_back({"token_embd.weight", {d, static_cast<uint64_t>(p.n_vocab)}, false});
  // Gemma 4's proportional rotation: the per-pair frequency divisors of the global layers (filled below).
  if (gemma4) ts.push_back({"rope_freqs.weight", {static_cast<uint64_t>(p.head_dim / 2)}, false});
  int n_attn_v = 0;
  for (int l = 0; l < n_block; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const bool head_block = l >= n_layer;  // the multi-token-prediction head's: full attention
    if (head_block) {
      ts.push_back({b + "nextn.eh_proj.weight", {2 * d, d}, false});
      ts.push_back({b + "nextn.enorm.weight", {d}, true});
      ts.push_back({b + "nextn.hnorm.weight", {d}, true});
      ts.push_back({b + "nextn.shared_head_norm.weight", {d}, true});
    }
    const int head = global(l) ? p.head_dim : p.head_dim_swa, kv_heads = global(l) ? p.n_head_kv : p.n_head_kv_swa;
    const auto qw = static_cast<uint64_t>(p.n_head * head), kvw = static_cast<uint64_t>(kv_heads * head);
    const auto hd = static_cast<uint64_t>(head);
    ts.push_back({b + "attn_norm.weight", {d}, true});
    if (hybrid && !head_block && (l + 1) % p.full_every != 0) {
      const auto kd = static_cast<uint64_t>(p.lin_hk * p.lin_d), vd = static_cast<uint64_t>(p.lin_hv * p.lin_d);
      const auto hv = static_cast<uint64_t>(p.lin_hv);
      ts.push_back({b + "attn_qkv.weight", {d, 2 * kd + vd}, false});
      ts.push_back({b + "attn_gate.weight", {d, vd}, false});
      ts.push_back({b + "ssm_conv1d.weight", {4, 2 * kd + vd}, false});
      ts.push_back({b + "ssm_dt.bias", {hv}, false});
      ts.push_back({b + "ssm_a", {hv}, false});
      ts.push_back({b + "ssm_beta.weight", {d, hv}, false});
      ts.push_back({b + "ssm_alpha.weight", {d, hv}, false});
      ts.push_back({b + "ssm_norm.weight", {static_cast<uint64_t>(p.lin_d)}, true});
      ts.push_back({b + "ssm_out.weight", {vd, d}, false});
    } else {
      ts.push_back({b + "attn_q.weight", {d, hybrid ? 2 * qw : qw}, false});  // hybrid: query and output gate
      ts.push_back({b + "attn_k.weight", {d, kvw}, false});
      if (!(gemma4 && global(l))) {  // Gemma 4's global layers use the keys as values
        ts.push_back({b + "attn_v.weight", {d, kvw}, false});
        ++n_attn_v;
      }
      ts.push_back({b + "attn_output.weight", {qw, d}, false});
      if (gpt_oss) {
        ts.push_back({b + "attn_q.bias", {qw}, false});
        ts.push_back({b + "attn_k.bias", {kvw}, false});
        ts.push_back({b + "attn_v.bias", {kvw}, false});
        ts.push_back({b + "attn_output.bias", {d}, false});
        ts.push_back({b + "attn_sinks.weight", {static_cast<uint64_t>(p.n_head)}, false});
      } else if (a != "llama") {
        ts.push_back({b + "attn_q_norm.weight", {hd}, true});
        ts.push_back({b + "attn_k_norm.weight", {hd}, true});
      }
    }
    if (gemma) ts.push_back({b + "post_attention_norm.weight", {d}, true});
    ts.push_back({b + (hybrid || gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), {d}, true});
    if (p.n_expert > 0) {
      const auto ne = static_cast<uint64_t>(p.n_expert), fe = static_cast<uint64_t>(p.n_ff_exp);
      ts.push_back({b + "ffn_gate_inp.weight", {d, ne}, false});
      ts.push_back({b + "ffn_gate_exps.weight", {d, fe, ne}, false});
      ts.push_back({b + "ffn_up_exps.weight", {d, fe, ne}, false});
      ts.push_back({b + "ffn_down_exps.weight", {fe, d, ne}, false});
      if (gpt_oss) {
        ts.push_back({b + "ffn_gate_inp.bias", {ne}, false});
        ts.push_back({b + "ffn_gate_exps.bias", {fe, ne}, false});
        ts.push_back({b + "ffn_up_exps.bias", {fe, ne}, false});
        ts.push_back({b + "ffn_down_exps.bias", {d, ne}, false});
      }
      if (hybrid) {
        const auto fs = static_cast<uint64_t>(p.n_ff_shexp);
        ts.push_back({b + "ffn_gate_inp_shexp.weight", {d}, false});
        ts.push_back({b + "ffn_gate_shexp.weight", {d, fs}, false});
        ts.push_back({b + "ffn_up_shexp.weight", {d, fs}, false});
        ts.push_back({b + "ffn_down_shexp.weight", {fs, d}, false});
      }
    } else {
      ts.push_back({b + "ffn_gate.weight", {d, ff}, false});
      ts.push_back({b + "ffn_up.weight", {d, ff}, false});
      ts.push_back({b + "ffn_down.weight", {ff, d}, false});
    }
    if (gemma) ts.push_back({b + "post_ffw_norm.weight", {d}, true});
  }
  ts.push_back({"output_norm.weight", {d}, true});
  if (!p.tied) ts.push_back({"output.weight", {d, static_cast<uint64_t>(p.n_vocab)}, false});

  quant::ModelFacts facts;
  facts.arch = a;
  facts.n_layer = n_block;
  facts.n_gqa = p.n_head / p.n_head_kv;
  facts.tied_embeddings = p.tied;
  facts.n_attn_v = n_attn_v;
  facts.n_ffn_down = n_block;
  quant::TypeSelector selector(*mixture, facts);
  auto pool = std::make_shared<ThreadPool>(0);
  // Block pools: per quantized type, kPoolBlocks blocks of normal(0, 0.02) values quantized once.
  constexpr int kPoolBits = 14;
  constexpr int64_t kPoolBlocks = int64_t{1} << kPoolBits;
  std::map<TensorType, std::shared_ptr<const std::vector<uint8_t>>> block_pools;
  const auto block_pool = [&](TensorType type) {
    auto& slot = block_pools[type];
    if (slot) return slot;
    const int64_t bs = quant::block_size(type);
    const size_t bb = quant::row_size(type, bs);
    auto blocks = std::make_shared<std::vector<uint8_t>>(bb * static_cast<size_t>(kPoolBlocks));
    pool->parallel_for(kPoolBlocks, [&](int64_t b0, int64_t e0) {
      std::vector<float> v(static_cast<size_t>(bs));
      for (int64_t i = b0; i < e0; ++i) {
        std::mt19937 rng(o.seed * 7919u + static_cast<uint32_t>(type) * 1000003u + static_cast<uint32_t>(i));
        std::normal_distribution<float> g(0.0f, 0.02f);
        for (auto& x : v) x = g(rng);
        quant::quantize_row(type, v.data(), blocks->data() + static_cast<size_t>(i) * bb, bs);
      }
    });
    slot = blocks;
    return slot;
  };
  SynthReport report;
  report.architecture = a;
  report.layers = n_layer;
  uint32_t tensor_seed = o.seed * 1000003u;
  for (const auto& t : ts) {
    gguf::TensorInfo info;
    info.name = t.name;
    info.type = TensorType::F32;
    info.n_dims = static_cast<uint32_t>(t.ne.size());
    info.ne = {t.ne[0], t.ne.size() > 1 ? t.ne[1] : 1, t.ne.size() > 2 ? t.ne[2] : 1, 1};
    const auto choice = selector.choose(info);
    const TensorType type = choice.convert ? choice.type : TensorType::F32;
    const auto cols = static_cast<int64_t>(t.ne[0]);
    int64_t rows = 1;
    for (size_t i = 1; i < t.ne.size(); ++i) rows *= static_cast<int64_t>(t.ne[i]);
    report.parameters += static_cast<uint64_t>(cols * rows);
    const bool norm = t.norm;
    // Gemma 4: pairs past the rotated quarter turn at 1e30 times lower frequency (so not at all).
    const int64_t rotated_pairs = t.name == "rope_freqs.weight" ? static_cast<int64_t>(p.partial_rotary * static_cast<float>(cols)) : -1;
    const uint32_t s = tensor_seed++;
    const bool from_pool = !o.quantize && !norm && rotated_pairs < 0 && quant::block_size(type) > 1;
    std::shared_ptr<const std::vector<uint8_t>> blocks;
    if (from_pool) blocks = block_pool(type);
    w.add_tensor(t.name, type, t.ne, [=](const auto& emit) {
      const size_t rs = quant::row_size(type, cols);
      const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / rs));
      std::vector<uint8_t> buf;
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t nr = std::min(chunk, rows - r0);
        buf.resize(rs * static_cast<size_t>(nr));
        pool->parallel_for(nr, [&](int64_t b0, int64_t e0) {
          // Each row from its own seed: the file is the same whatever the thread count.
          if (blocks) {
            const int64_t bs = quant::block_size(type);
            const size_t bb = quant::row_size(type, bs);
            for (int64_t i = b0; i < e0; ++i) {
              uint64_t state = (uint64_t{s} << 32) ^ static_cast<uint64_t>(r0 + i);
              uint8_t* dst = buf.data() + static_cast<size_t>(i) * rs;
              for (int64_t b = 0; b < cols / bs; ++b) {
                // splitmix64
                uint64_t z = (state += 0x9e3779b97f4a7c15ull);
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                z ^= z >> 31;
                std::memcpy(dst + static_cast<size_t>(b) * bb, blocks->data() + static_cast<size_t>(z >> (64 - kPoolBits)) * bb, bb);
              }
            }
            return;
          }
          std::vector<float> row(static_cast<size_t>(cols));
          for (int64_t i = b0; i < e0; ++i) {
            std::mt19937 rng(s * 2654435761u + static_cast<uint32_t>(r0 + i));
            std::normal_distribution<float> g(0.0f, 0.02f);
            for (auto& v : row) v = norm ? 1.0f : g(rng);
            if (rotated_pairs >= 0) {
              for (int64_t j = 0; j < cols; ++j) row[static_cast<size_t>(j)] = j < rotated_pairs ? 1.0f : 1e30f;
            }
            quant::quantize_row(type, row.data(), buf.data() + static_cast<size_t>(i) * rs, cols);
          }
        });
        emit(std::span<const uint8_t>(buf));
      }
    });
  }
  report.file_size = w.file_size();
  w.write_file(out, o.progress);
  return report;
}

}  // namespace zinc::convert
