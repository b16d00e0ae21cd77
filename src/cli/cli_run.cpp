// `zinc run -m MODEL -p TEXT`: one prompt, the continuation streamed to stdout, timings on stderr (or all
// of it as JSON). With --chat the prompt is a user message rendered with the model's chat template and
// the answer is split into reasoning and content.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/generation_options.h"
#include "cli/json_util.h"
#include "cli/terminal.h"
#include "core/error.h"
#include "core/format.h"
#include "runtime/chat_session.h"

namespace zinc::cli {

namespace {

struct RunArgs {
  GenerationArgs gen;
  std::string prompt, prompt_file;
  bool no_bos = false;
  bool chat = false;
};

void write(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// The prompt: -p TEXT, -p - (standard input) or -f FILE, as llama.cpp takes them.
std::string read_prompt(const RunArgs& a) {
  const auto slurp = [](std::istream& in) { return std::string(std::istreambuf_iterator<char>(in), {}); };
  if (!a.prompt_file.empty()) {
    std::ifstream in(a.prompt_file, std::ios::binary);
    if (!in) throw Error(fmt::format("cannot read the prompt file {}", a.prompt_file));
    return slurp(in);
  }
  if (a.prompt == "-") return slurp(std::cin);
  if (a.prompt.empty()) throw Error("no prompt: give -p TEXT, -p - (standard input) or -f FILE");
  return a.prompt;
}

int run_generate(RunArgs a, const GlobalOptions& global) {
  a.prompt = read_prompt(a);
  if (a.prompt.empty()) throw Error("the prompt is empty");
  const auto m = load_model(a.gen);
  runtime::Session& session = *m->session;
  sample::Sampler sampler(a.gen.sampler_params(session.n_ctx()), &m->tok);
  const Style style{!global.json && is_terminal(stdout)};
  runtime::GenerateResult r;
  chat::ParsedOutput answer;
  std::vector<int32_t> prompt;

  if (a.chat) {
    runtime::ChatOptions copts;
    copts.system = a.gen.system;
    copts.enable_thinking = a.gen.enable_thinking();
    copts.generate = a.gen.generate_options(m->backend->name(), &m->tok);
    copts.generate.draft = m->drafter.get();
    runtime::ChatSession chat(session, m->tok, sampler, chat_template(a.gen, m->file, m->tok), copts);
    bool in_reasoning = false;
    // On a terminal, what the model writes is shown inert (a model's text cannot steer the terminal);
    // into a file or a pipe it goes byte for byte.
    const bool tty = is_terminal(stdout);
    const auto shown = [tty](const std::string& s) { return tty ? terminal_safe(s, true) : s; };
    Spinner spinner(stdout, style.ansi);  // until the first token
    auto turn = chat.send(a.prompt, [&](const chat::ParsedOutput& d) {
      spinner.stop();
      if (global.json) return;
      if (!d.reasoning.empty()) {
        if (!in_reasoning) write(style.ansi ? style.dim() : "<think>\n");
        in_reasoning = true;
        write(shown(d.reasoning));
      }
      if (!d.content.empty()) {
        if (in_reasoning) write(style.ansi ? std::string(style.reset()) + "\n\n" : "\n</think>\n\n");
        in_reasoning = false;
        write(shown(d.content));
      }
    });
    spinner.stop();
    if (in_reasoning) write(style.ansi ? style.reset() : "\n</think>");
    r = std::move(turn.result);
    answer = std::move(turn.message);
  } else {
    prompt = m->tok.encode(a.prompt, !a.no_bos, false);
    if (prompt.empty()) throw Error("the prompt is empty and the model adds no BOS token: nothing to continue");
    if (!a.gen.context_shift && a.gen.n_predict >= 0 &&
        static_cast<int64_t>(prompt.size()) + a.gen.n_predict > session.n_ctx()) {
      throw Error(fmt::format("the prompt ({} tokens) plus {} new tokens do not fit the context of {} (use --ctx or "
                              "--context-shift)",
                              prompt.size(), a.gen.n_predict, session.n_ctx()));
    }
    auto gopts = a.gen.generate_options(m->backend->name(), &m->tok);
    gopts.draft = m->drafter.get();
    gopts.decode.at_start = false;  // the stream continues the prompt already shown
    if (!global.json) write(a.prompt);
    const bool tty = is_terminal(stdout);
    Spinner spinner(stdout, style.ansi);  // until the first token
    r = runtime::generate(session, m->tok, sampler, prompt, gopts, [&](std::string_view piece) {
      spinner.stop();
      if (!global.json) write(tty ? terminal_safe(piece, true) : std::string(piece));  // inert on a terminal
    });
    spinner.stop();
  }

  const nlohmann::json timings = {{"load_s", m->load_s},
                                  {"prefill_s", r.prefill_s},
                                  {"prefill_tokens_per_s", r.prefill_tokens_per_s()},
                                  {"first_token_s", r.first_token_s},
                                  {"decode_s", r.decode_s},
                                  {"decode_tokens_per_s", r.decode_tokens_per_s()}};
  if (global.json) {
    nlohmann::json j = {{"model", a.gen.model},
                        {"backend", m->backend->name()},
                        {"device", m->backend->device_name()},
                        {"seed", sampler.seed()},
                        {"stop_reason", runtime::stop_reason_name(r.reason)},
                        {"stopped_by", r.stop_index >= 0 ? nlohmann::json(a.gen.stop[static_cast<size_t>(r.stop_index)])
                                                         : nlohmann::json()},
                        {"prompt_tokens", r.prompt_tokens},
                        {"tokens", r.tokens},
                        {"grammar_resamples", r.grammar_resamples},
                        {"grammar_s", r.grammar_s},
                        {"draft_tokens", r.draft_tokens},
                        {"draft_accepted", r.draft_accepted},
                        {"text", r.text},
                        {"timings", timings}};
    if (a.chat) {
      j["content"] = answer.content;
      j["reasoning"] = answer.reasoning;
      j["reasoning_tokens"] = r.reasoning_tokens;
      j["reasoning_concluded"] = r.reasoning_concluded;  // the budget ran out and the engine ended it
    }
    fmt::print("{}\n", dump_json(j));
  } else {
    write("\n");
    fmt::print(stderr,
               "prompt {} tokens at {:.1f} tok/s · first token after {:.2f} s · generated {} tokens at {:.1f} tok/s{}"
               " · load {:.2f} s · {}{}\n",
               r.prompt_tokens, r.prefill_tokens_per_s(), r.first_token_s, r.tokens.size(), r.decode_tokens_per_s(),
               r.draft_tokens > 0 ? fmt::format(" · drafted {}, accepted {} ({:.0f}%)", r.draft_tokens, r.draft_accepted,
                                                100.0 * r.draft_accepted / r.draft_tokens)
                                  : std::string(),
               m->load_s,
               m->backend->device_name().empty()
                   ? m->backend->name()
                   : fmt::format("{} on {}", m->backend->name(), terminal_safe(m->backend->device_name())),
               r.reason == runtime::StopReason::ContextFull ? " · stopped: the context is full" : "");
  }
  return 0;
}

void add_run_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto a = std::make_shared<RunArgs>();
  a->gen.n_predict = 128;
  a->gen.sampling = sample::SamplerParams::greedy();  // one-shot runs are greedy unless asked otherwise
  a->gen.ctx = 2048;
  CLI::App* cmd = app.add_subcommand("run", "Continue a prompt (or answer it with --chat), streaming the text");
  auto* prompt = cmd->add_option("-p,--prompt", a->prompt, "Prompt text (- reads it from standard input)");
  cmd->add_option("-f,--file", a->prompt_file, "Read the prompt from this file")->excludes(prompt);
  add_generation_options(cmd, a->gen, true);
  cmd->add_flag("--chat", a->chat, "Treat the prompt as a user message and apply the model's chat template");
  cmd->add_flag("--no-bos", a->no_bos, "Do not add the model's beginning-of-sequence token (raw prompts)");
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_generate(*a, global); }; });
}

}  // namespace

ZINC_COMMAND(5, add_run_command);

}  // namespace zinc::cli
