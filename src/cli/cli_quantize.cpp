// `zinc quantize IN.gguf OUT.gguf TYPE`: convert a model's weights to a quantization mixture.

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/json_util.h"
#include "cli/terminal.h"
#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "hub/store.h"
#include "quant/model_quantize.h"

namespace zinc::cli {

namespace {

struct QuantizeArgs {
  std::string in, out, type;
  unsigned threads = 0;
  bool allow_requantize = false;
  std::vector<std::string> tensor_types;  // PATTERN=TYPE
  std::string output_type, token_embd_type;
  bool pure = false, leave_output = false;
};

int run_quantize(const QuantizeArgs& a, const GlobalOptions& global) {
  const auto mixture = quant::mixture_by_name(a.type);
  if (!mixture) {
    std::string names;
    for (const auto& n : quant::mixture_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error(fmt::format("unknown quantization type '{}' (choose one of: {})", a.type, names));
  }
  if (std::filesystem::exists(a.out) && std::filesystem::equivalent(a.in, a.out)) {
    throw Error("the output file must differ from the input file");
  }
  quant::QuantizeOptions opts;
  opts.mixture = *mixture;
  opts.threads = a.threads;
  opts.allow_requantize = a.allow_requantize;
  // The user's types, checked before the source is read.
  for (const auto& spec : a.tensor_types) opts.overrides.tensors.push_back(quant::parse_tensor_type(spec));
  if (!a.output_type.empty()) opts.overrides.output = quant::parse_type_name(a.output_type, "--output-tensor-type");
  if (!a.token_embd_type.empty()) opts.overrides.token_embd = quant::parse_type_name(a.token_embd_type, "--token-embedding-type");
  opts.overrides.pure = a.pure;
  opts.overrides.leave_output = a.leave_output;
  if (a.leave_output && opts.overrides.output) throw Error("--leave-output-tensor and --output-tensor-type contradict each other");
  const gguf::File in = gguf::File::open(hub::resolve_model_path(a.in));
  Progress bar("quantize");
  uint64_t total = 0;
  if (!global.json) {
    opts.progress = [&](const quant::QuantizeProgress& p) {
      total = p.bytes_total;
      bar.update(p.bytes_done, p.bytes_total, -1,
                 fmt::format("{}/{} {} → {}", p.tensor_index + 1, p.tensor_count, p.tensor_name, gguf::tensor_type_name(p.to)));
    };
  }
  const quant::QuantizeReport report = quant::quantize_model(in, a.out, opts);
  if (total > 0) bar.update(total, total);  // the last tensors may report no progress of their own
  bar.finish();
  for (const auto& p : report.unmatched_patterns) {
    spdlog::warn("--tensor-type '{}' matched no matrix (routers and norms are never converted)", p);
  }

  std::map<std::string, std::pair<int, uint64_t>> by_type;
  for (const auto& t : report.tensors) {
    auto& e = by_type[std::string(gguf::tensor_type_name(t.to))];
    e.first++;
    e.second += t.bytes_out;
  }
  if (global.json) {
    nlohmann::json j;
    j["input"] = a.in;
    j["output"] = a.out;
    j["mixture"] = mixture->name;
    j["file_size"] = report.file_size;
    j["tensor_bytes_in"] = report.bytes_in;
    j["tensor_bytes_out"] = report.bytes_out;
    j["seconds"] = report.seconds;
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : report.tensors) {
      nlohmann::json e = {{"name", t.name},
                          {"from", gguf::tensor_type_name(t.from)},
                          {"to", gguf::tensor_type_name(t.to)},
                          {"bytes_in", t.bytes_in},
                          {"bytes_out", t.bytes_out}};
      if (!t.fallback.empty()) e["fallback"] = t.fallback;
      tensors.push_back(std::move(e));
    }
    j["tensors"] = tensors;
    j["unmatched_tensor_types"] = report.unmatched_patterns;
    fmt::print("{}\n", dump_json(j));
    return 0;
  }
  fmt::print("{} → {} ({}): {} → {} of tensor data in {:.1f} s\n", a.in, a.out, mixture->name,
             format_bytes(report.bytes_in), format_bytes(report.bytes_out), report.seconds);
  for (const auto& [type, e] : by_type) fmt::print("  {:<8}{:>6} tensors {:>12}\n", type, e.first, format_bytes(e.second));
  for (const auto& t : report.tensors) {
    if (!t.fallback.empty()) fmt::print("  fallback: {}: {}\n", t.name, t.fallback);
  }
  return 0;
}

void add_quantize_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto a = std::make_shared<QuantizeArgs>();
  std::string types;
  for (const auto& n : quant::mixture_names()) types += (types.empty() ? "" : ", ") + n;
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize a GGUF model to a mixture (" + types + ")");
  cmd->add_option("input", a->in, "Source GGUF (F32, F16 or BF16 weights)")->required();
  cmd->add_option("output", a->out, "GGUF file to write")->required();
  cmd->add_option("type", a->type, "Mixture: " + types)->required();
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all)")->check(threads_range());
  cmd->add_flag("--allow-requantize", a->allow_requantize, "Accept already-quantized source tensors");
  cmd->add_option("--tensor-type", a->tensor_types,
                  "PATTERN=TYPE: matrices whose name contains a match of the regular expression get TYPE (repeatable; "
                  "the first match wins), e.g. attn_v=q8_0 or 'blk\\.[0-3]\\.ffn_down=q6_k'")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--output-tensor-type", a->output_type, "Type of output.weight (e.g. q8_0, f16)");
  cmd->add_option("--token-embedding-type", a->token_embd_type, "Type of token_embd.weight");
  cmd->add_flag("--pure", a->pure, "Every matrix in the mixture's base type, without its per-tensor choices");
  cmd->add_flag("--leave-output-tensor", a->leave_output, "Copy output.weight as it is");
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_quantize(*a, global); }; });
}

}  // namespace

ZINC_COMMAND(40, add_quantize_command);

}  // namespace zinc::cli
