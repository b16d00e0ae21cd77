// GPT-OSS (GptOssForCausalLM → "gpt-oss"). The checkpoint stores each layer's experts as stacked
// parameters laid out for x · W: gate_up_proj [experts, width, 2 * ff] with gate and up interleaved
// column by column (gate even, up odd), down_proj [experts, ff, width], and their biases
// [experts, 2 * ff] (interleaved the same way) and [experts, width]. GGUF wants one row per output:
// ffn_{gate,up}_exps {width, ff, experts}, ffn_down_exps {ff, width, experts}, biases {ff or width,
// experts} in F32. The attention sinks (one logit per head) become attn_sinks.weight.
//
// The released checkpoints store the expert matrices in MXFP4 instead: gate_up_proj_blocks
// [experts, 2 * ff, width / 32, 16] and down_proj_blocks [experts, width, ff / 32, 16] (rows are
// outputs, gate/up interleaved row by row; byte k of a 32-element block holds element 2k in its low
// nibble and 2k + 1 in its high one), with *_scales [experts, rows, blocks] as E8M0 exponents
// (2^(s - 127)). Those rows are decoded exactly (a 4-bit value times a power of two fits BF16 and F32;
// F16, which --outtype auto picks for them, unless the scale leaves its range), and zinc quantize
// MXFP4_MOE encodes exactly the same values again (its block scale, 2^(floor(log2 amax) - 2), keeps
// every value of the block representable).
#include <fmt/format.h>

#include <cmath>

#include "convert/convert_plan.h"

namespace zinc::convert::detail {

namespace {

// MXFP4 row `row` (n elements) of a blocks/scales pair, decoded to floats.
void decode_mxfp4_row(const StTensor& blocks, const StTensor& scales, int64_t row, int64_t n, float* out) {
  static constexpr float kValues[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const int64_t nb = n / 32;
  const uint8_t* b = blocks.data.data() + row * nb * 16;
  const uint8_t* s = scales.data.data() + row * nb;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float d = std::ldexp(1.0f, static_cast<int>(s[ib]) - 127);
    for (int k = 0; k < 16; ++k) {
      out[ib * 32 + 2 * k] = kValues[b[ib * 16 + k] & 0xf] * d;
      out[ib * 32 + 2 * k + 1] = kValues[b[ib * 16 + k] >> 4] * d;
    }
  }
}

// The blocks and scales of `name` (…_blocks, …_scales), checked against `rows` rows of `n` elements.
std::pair<const StTensor*, const StTensor*> mxfp4_pair(const Job& job, const std::string& name, int64_t experts,
                                                       int64_t rows, int64_t n) {
  const StTensor& blocks = job.ckpt.get(name + "_blocks");
  const StTensor& scales = job.ckpt.get(name + "_scales");
  if (n % 32 != 0 || blocks.dtype != StDType::U8 || scales.dtype != StDType::U8 ||
      blocks.shape != std::vector<int64_t>{experts, rows, n / 32, 16} ||
      scales.shape != std::vector<int64_t>{experts, rows, n / 32}) {
    throw Error(fmt::format("{}: '{}' is not MXFP4 blocks/scales of {} experts x {} rows of {}", job.config_path.string(),
                            name, experts, rows, n));
  }
  return {&blocks, &scales};
}

}  // namespace

void plan_gpt_oss(Job& job) {
  const auto n_expert = job.get<uint32_t>("num_local_experts");
  const auto n_used = job.get<uint32_t>("num_experts_per_tok");
  const auto ff = job.get<uint32_t>("intermediate_size");
  if (n_expert == 0 || n_used == 0 || n_used > n_expert) {
    throw Error(fmt::format("{}: {} experts with {} per token is not a mixture", job.config_path.string(), n_expert, n_used));
  }
  job.set("expert_count", gguf::Value::u32(n_expert));
  job.set("expert_used_count", gguf::Value::u32(n_used));
  job.set("expert_feed_forward_length", gguf::Value::u32(ff));
  job.set("attention.sliding_window", gguf::Value::u32(job.get<uint32_t>("sliding_window")));
  // Sliding layers: the GGUF form assumes every other layer from the first; any other layout is
  // listed layer by layer.
  if (const auto types = job.get_opt<std::vector<std::string>>("layer_types")) {
    if (types->size() != job.n_layer) {
      throw Error(fmt::format("{}: layer_types lists {} layers, not {}", job.config_path.string(), types->size(), job.n_layer));
    }
    bool standard = true;
    std::vector<gguf::Value> pattern;
    for (size_t l = 0; l < types->size(); ++l) {
      const bool swa = (*types)[l] == "sliding_attention";
      if (!swa && (*types)[l] != "full_attention") {
        throw Error(fmt::format("{}: layer type '{}' is not supported", job.config_path.string(), (*types)[l]));
      }
      standard = standard && swa == (l % 2 == 0);
      pattern.push_back(gguf::Value::boolean(swa));
    }
    if (!standard) job.set("attention.sliding_window_pattern", gguf::Value::array(gguf::ValueType::BOOL, pattern));
  }

  const uint64_t d = job.n_embd, f = ff, ne = n_expert;
  for (uint32_t l = 0; l < job.n_layer; ++l) {
    const std::string hp = "model.layers." + std::to_string(l) + ".", gp = "blk." + std::to_string(l) + ".";
    job.need(hp + "input_layernorm.weight", gp + "attn_norm.weight");
    for (const char* proj : {"q", "k", "v"}) {
      job.need(fmt::format("{}self_attn.{}_proj.weight", hp, proj), fmt::format("{}attn_{}.weight", gp, proj));
      job.need(fmt::format("{}self_attn.{}_proj.bias", hp, proj), fmt::format("{}attn_{}.bias", gp, proj));
    }
    job.need(hp + "self_attn.o_proj.weight", gp + "attn_output.weight");
    job.need(hp + "self_attn.o_proj.bias", gp + "attn_output.bias");
    job.need(hp + "self_attn.sinks", gp + "attn_sinks.weight");
    job.need(hp + "post_attention_layernorm.weight", gp + "post_attention_norm.weight");
    // The router stays F32 whatever the output type, as in the reference converter: routing picks the
    // top k of its logits, and rounding them can swap a near tie.
    job.need(hp + "mlp.router.weight", gp + "ffn_gate_inp.weight").keep_f32 = true;
    job.need(hp + "mlp.router.bias", gp + "ffn_gate_inp.bias");

    const auto D = static_cast<int64_t>(d), F = static_cast<int64_t>(f), E = static_cast<int64_t>(ne);
    const StTensor& gate_up_b = job.ckpt.get(hp + "mlp.experts.gate_up_proj_bias");
    if (gate_up_b.shape != std::vector<int64_t>{E, 2 * F}) {
      throw Error(fmt::format("{}: layer {} gate_up_proj_bias is not [{}, {}]", job.config_path.string(), l, E, 2 * F));
    }
    // Gate (half 0) or up (half 1): target row r = e * ff + i is output 2i + half of expert e.
    for (int half = 0; half < 2; ++half) {
      const std::string g = fmt::format("{}ffn_{}_exps.weight", gp, half == 0 ? "gate" : "up");
      if (const StTensor* gate_up = job.ckpt.find(hp + "mlp.experts.gate_up_proj")) {
        if (gate_up->shape != std::vector<int64_t>{E, D, 2 * F}) {
          throw Error(fmt::format("{}: layer {} gate_up_proj is not [{}, {}, {}]", job.config_path.string(), l, E, D, 2 * F));
        }
        job.computed(g, *gate_up, {d, f, ne}, [gate_up, D, F, half](int64_t r, float* row) {
          const int64_t e = r / F, i = r % F;
          for (int64_t c = 0; c < D; ++c) row[c] = load_element(*gate_up, (e * D + c) * 2 * F + 2 * i + half);
        });
      } else {
        const auto [b, s] = mxfp4_pair(job, hp + "mlp.experts.gate_up_proj", E, 2 * F, D);
        const StTensor *blocks = b, *scales = s;
        job.computed(g, *blocks, {d, f, ne}, [blocks, scales, D, F, half](int64_t r, float* row) {
          decode_mxfp4_row(*blocks, *scales, (r / F) * 2 * F + 2 * (r % F) + half, D, row);
        });
      }
      const StTensor* bsrc = &gate_up_b;
      job.computed(fmt::format("{}ffn_{}_exps.bias", gp, half == 0 ? "gate" : "up"), gate_up_b, {f, ne},
                   [bsrc, F, half](int64_t e, float* row) {
                     for (int64_t i = 0; i < F; ++i) row[i] = load_element(*bsrc, e * 2 * F + 2 * i + half);
                   })
          .keep_f32 = true;
    }
    // Down: target row r = e * width + j is output j of expert e.
    const std::string g_down = gp + "ffn_down_exps.weight";
    if (const StTensor* down = job.ckpt.find(hp + "mlp.experts.down_proj")) {
      if (down->shape != std::vector<int64_t>{E, F, D}) {
        throw Error(fmt::format("{}: layer {} down_proj is not [{}, {}, {}]", job.config_path.string(), l, E, F, D));
      }
      job.computed(g_down, *down, {f, d, ne}, [down, D, F](int64_t r, float* row) {
        const int64_t e = r / D, j = r % D;
        for (int64_t i = 0; i < F; ++i) row[i] = load_element(*down, (e * F + i) * D + j);
      });
    } else {
      const auto [b, s] = mxfp4_pair(job, hp + "mlp.experts.down_proj", E, D, F);
      const StTensor *blocks = b, *scales = s;
      job.computed(g_down, *blocks, {f, d, ne},
                   [blocks, scales, F](int64_t r, float* row) { decode_mxfp4_row(*blocks, *scales, r, F, row); });
    }
    job.need(hp + "mlp.experts.down_proj_bias", gp + "ffn_down_exps.bias").keep_f32 = true;
  }
}

}  // namespace zinc::convert::detail
