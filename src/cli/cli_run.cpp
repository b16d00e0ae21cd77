// `zinc run -m MODEL -p TEXT`: one prompt, greedy continuation streamed to stdout, timings on stderr
// (or all of it as JSON). The sampler chain and chat templates arrive with the Generation work.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/cli.h"
#include "cli/json_util.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/session.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace zinc::cli {

namespace {

struct RunArgs {
  std::string model, prompt;
  int n_predict = 128;
  int ctx = 2048;
  unsigned threads = 0;
  bool no_bos = false;
  std::string kv_type = "f16";
};

int run_generate(const RunArgs& a, const GlobalOptions& global) {
  using Clock = std::chrono::steady_clock;
  const auto t_load = Clock::now();
  const gguf::File file = gguf::File::open(a.model);
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = a.ctx;
  opts.max_tokens = 256;
  opts.threads = a.threads;
  opts.kv_type = a.kv_type == "f32" ? backend::KvType::F32 : a.kv_type == "q8_0" ? backend::KvType::Q8_0 : backend::KvType::F16;
  runtime::Session session(file, *backend, opts);
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  std::vector<int32_t> prompt = tok.encode(a.prompt, !a.no_bos, false);
  if (prompt.empty()) throw Error("the prompt is empty and the model adds no BOS token: nothing to continue");
  if (static_cast<int64_t>(prompt.size()) + a.n_predict > session.n_ctx()) {
    throw Error(fmt::format("the prompt ({} tokens) plus {} new tokens do not fit the context of {} (use --ctx)",
                            prompt.size(), a.n_predict, session.n_ctx()));
  }
  const auto t0 = Clock::now();
  auto logits = session.eval(prompt);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // The stream continues the prompt already shown, so its first token keeps any leading space.
  tokenizer::DecodeOptions dopts;
  dopts.at_start = false;
  tokenizer::Detokenizer detok(tok, dopts);
  std::vector<int32_t> out;
  std::string text;
  if (!global.json) {
    fmt::print("{}", a.prompt);
    std::fflush(stdout);
  }
  const auto t1 = Clock::now();
  for (int i = 0; i < a.n_predict; ++i) {
    const int32_t next = runtime::argmax(logits);
    if (tok.vocab().is_eog(next)) break;
    out.push_back(next);
    const std::string piece = detok.push(next);
    text += piece;
    if (!global.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 < a.n_predict) logits = session.eval(std::span<const int32_t>(&out.back(), 1));
  }
  const std::string tail = detok.flush();
  text += tail;
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  const double prefill_tps = static_cast<double>(prompt.size()) / prefill_s;
  const double decode_tps = out.empty() ? 0.0 : static_cast<double>(out.size()) / decode_s;
  if (global.json) {
    nlohmann::json j = {{"model", a.model},
                        {"prompt_tokens", prompt.size()},
                        {"tokens", out},
                        {"text", text},
                        {"timings",
                         {{"load_s", load_s},
                          {"prefill_s", prefill_s},
                          {"prefill_tokens_per_s", prefill_tps},
                          {"decode_s", decode_s},
                          {"decode_tokens_per_s", decode_tps}}}};
    fmt::print("{}\n", dump_json(j));
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    fmt::print("\n");
    std::fflush(stdout);
    fmt::print(stderr, "prompt {} tokens at {:.1f} tok/s · generated {} tokens at {:.1f} tok/s · load {:.2f} s\n",
               prompt.size(), prefill_tps, out.size(), decode_tps, load_s);
  }
  return 0;
}

void add_run_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Continue a prompt with a model (greedy), streaming the text");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "Context size in tokens")->capture_default_str()->check(CLI::Range(1, 1 << 22));
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: physical cores)");
  cmd->add_flag("--no-bos", a->no_bos, "Do not add the model's beginning-of-sequence token");
  cmd->add_option("--kv-type", a->kv_type, "KV cache storage: f16, f32 or q8_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_generate(*a, global); }; });
}

}  // namespace

ZINC_COMMAND(5, add_run_command);

}  // namespace zinc::cli
