// GPT-OSS (GptOssForCausalLM → "gpt-oss"). The checkpoint stores each layer's experts as stacked
// parameters laid out for x · W: gate_up_proj [experts, width, 2 * ff] with gate and up interleaved
// column by column (gate even, up odd), down_proj [experts, ff, width], and their biases
// [experts, 2 * ff] (interleaved the same way) and [experts, width]. GGUF wants one row per output:
// ffn_{gate,up}_exps {width, ff, experts}, ffn_down_exps {ff, width, experts}, biases {ff or width,
// experts} in F32. The attention sinks (one logit per head) become attn_sinks.weight.
#include <fmt/format.h>

#include "convert/convert_plan.h"

namespace zinc::convert::detail {

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
    job.need(hp + "mlp.router.weight", gp + "ffn_gate_inp.weight");
    job.need(hp + "mlp.router.bias", gp + "ffn_gate_inp.bias");

    const StTensor& gate_up = job.ckpt.get(hp + "mlp.experts.gate_up_proj");
    const StTensor& gate_up_b = job.ckpt.get(hp + "mlp.experts.gate_up_proj_bias");
    const StTensor& down = job.ckpt.get(hp + "mlp.experts.down_proj");
    const std::vector<int64_t> gu_shape{static_cast<int64_t>(ne), static_cast<int64_t>(d), static_cast<int64_t>(2 * f)};
    const std::vector<int64_t> down_shape{static_cast<int64_t>(ne), static_cast<int64_t>(f), static_cast<int64_t>(d)};
    if (gate_up.shape != gu_shape || down.shape != down_shape ||
        gate_up_b.shape != std::vector<int64_t>{static_cast<int64_t>(ne), static_cast<int64_t>(2 * f)}) {
      throw Error(fmt::format("{}: layer {} experts do not have the shapes of {} experts of width {} and {}",
                              job.config_path.string(), l, ne, d, f));
    }
    const auto D = static_cast<int64_t>(d), F = static_cast<int64_t>(f);
    // Target row r = e * ff + i of gate (half 0) or up (half 1) is column 2i + half of expert e.
    for (int half = 0; half < 2; ++half) {
      const char* name = half == 0 ? "gate" : "up";
      const StTensor* src = &gate_up;
      job.computed(fmt::format("{}ffn_{}_exps.weight", gp, name), gate_up, {d, f, ne}, [src, D, F, half](int64_t r, float* row) {
        const int64_t e = r / F, i = r % F;
        for (int64_t c = 0; c < D; ++c) row[c] = load_element(*src, (e * D + c) * 2 * F + 2 * i + half);
      });
      const StTensor* bsrc = &gate_up_b;
      job.computed(fmt::format("{}ffn_{}_exps.bias", gp, name), gate_up_b, {f, ne}, [bsrc, F, half](int64_t e, float* row) {
        for (int64_t i = 0; i < F; ++i) row[i] = load_element(*bsrc, e * 2 * F + 2 * i + half);
      }).keep_f32 = true;
    }
    // Target row r = e * width + j of down is column j of expert e's [ff, width] matrix.
    const StTensor* dsrc = &down;
    job.computed(gp + "ffn_down_exps.weight", down, {f, d, ne}, [dsrc, D, F](int64_t r, float* row) {
      const int64_t e = r / D, j = r % D;
      for (int64_t i = 0; i < F; ++i) row[i] = load_element(*dsrc, (e * F + i) * D + j);
    });
    job.need(hp + "mlp.experts.down_proj_bias", gp + "ffn_down_exps.bias").keep_f32 = true;
  }
}

}  // namespace zinc::convert::detail
