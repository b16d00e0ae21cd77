// `zinc chat -m MODEL`: an interactive conversation in the terminal. Answers stream as they are
// generated, reasoning dimmed (or hidden with --hide-thinking); Ctrl-C stops the current answer; a
// status line after each answer gives speed and context use. Slash commands manage the conversation.
// On a terminal the input line is edited with libedit (line_editor.h): history per model, kept across
// sessions; a paste is one message. When stdout is not a terminal the output is plain text (no
// styles, no prompts, status on stderr).
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/cli.h"
#include "cli/generation_options.h"
#include "cli/line_editor.h"
#include "cli/terminal.h"
#include "core/error.h"
#include "core/format.h"
#include "core/json_bounded.h"
#include "runtime/chat_session.h"

namespace zinc::cli {

namespace {

const char* const kHelp =
    "  /help           this list\n"
    "  /reset          forget the conversation (the system prompt stays)\n"
    "  /system [TEXT]  show or set the system prompt\n"
    "  /save FILE      write the conversation as JSON messages\n"
    "  /load FILE      continue a saved conversation\n"
    "  /stats          context use and speed\n"
    "  /exit           quit (also /quit or Ctrl-D)\n"
    "  A line ending in \\ continues on the next line; \"\"\" on its own line starts and ends a block.\n"
    "  Ctrl-C stops an answer. Start a message with // to send a text beginning with /.\n";

struct ChatArgs {
  GenerationArgs gen;
  bool hide_thinking = false;
};

struct Totals {
  int turns = 0;
  int64_t generated = 0;
  double decode_s = 0;
  runtime::GenerateResult last;
};

class ChatUi {
 public:
  ChatUi(const ChatArgs& a, LoadedModel& m, runtime::ChatSession& chat, std::atomic<bool>& interrupted)
      : a_(a), m_(m), chat_(chat), interrupted_(interrupted) {
    if (in_tty_ && out_tty_) editor_.emplace(interrupted_, LineEditor::history_file_for(a_.gen.model));
  }

  int loop() {
    if (out_tty_) {
      const std::string device = m_.backend->device_name().empty()
                                     ? m_.backend->name()
                                     : fmt::format("{} on {}", m_.backend->name(), terminal_safe(m_.backend->device_name()));
      print(fmt::format("{}zinc chat · {} · {} · context {} tokens · /help for commands, Ctrl-C stops an answer, /exit "
                        "quits{}\n",
                        style_.dim(), terminal_safe(m_.file.get_or<std::string>("general.name", a_.gen.model)), device,
                        chat_.session().n_ctx(), style_.reset()));
    }
    for (;;) {
      std::string text;
      const ReadStatus st = read_message(text);
      if (st == ReadStatus::End) break;
      if (st == ReadStatus::Interrupted) {
        interrupted_.store(false);
        if (in_tty_) print(fmt::format("\n{}(Ctrl-C: type /exit or press Ctrl-D to quit){}\n", style_.dim(), style_.reset()));
        continue;
      }
      if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      if (text.starts_with("/") && !text.starts_with("//")) {
        if (!command(text)) break;
        continue;
      }
      if (text.starts_with("//")) text.erase(0, 1);
      answer(text);
    }
    if (out_tty_) print("\n");
    return 0;
  }

 private:
  void print(const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  void note(const std::string& s) {  // remarks about the session: dimmed on a terminal, stderr otherwise
    if (out_tty_) print(fmt::format("{}{}{}\n", style_.dim(), s, style_.reset()));
    else fmt::print(stderr, "{}\n", s);
  }

  // One line after `prompt` (shown only when the input is a terminal).
  ReadStatus read_one(const std::string& prompt, std::string& line) {
    if (editor_) return editor_->read(prompt, line);
    if (in_tty_) print(prompt);
    return read_line(line, interrupted_);
  }

  ReadStatus read_message(std::string& text) {
    const ReadStatus st = read_lines(text);
    if (st == ReadStatus::Line && editor_) editor_->remember(text);
    return st;
  }

  ReadStatus read_lines(std::string& text) {
    interrupted_.store(false);  // a Ctrl-C before the prompt shows counts as one at the prompt
    // The editor's prompt marks its styles as not printing (between \1s), so the cursor lands right.
    const std::string prompt = editor_ ? fmt::format("\1{}\1> \1{}\1", style_.bold(), style_.reset())
                                       : fmt::format("{}> {}", style_.bold(), style_.reset());
    std::string line;
    ReadStatus st = read_one(prompt, line);
    if (st != ReadStatus::Line) return st;
    auto more = [&] { return read_one("... ", line); };
    if (line == "\"\"\"") {  // a block: everything up to the closing """
      for (bool first = true;; first = false) {
        st = more();
        if (st != ReadStatus::Line || line == "\"\"\"") break;
        text += (first ? "" : "\n") + line;
      }
      return st == ReadStatus::Interrupted ? st : ReadStatus::Line;
    }
    while (!line.empty() && line.back() == '\\') {
      line.pop_back();
      text += line + "\n";
      st = more();
      if (st == ReadStatus::Interrupted) return st;
      if (st == ReadStatus::End) line.clear();
    }
    text += line;
    return ReadStatus::Line;
  }

  // Returns false to quit.
  bool command(const std::string& text) {
    const auto space = text.find(' ');
    const std::string cmd = text.substr(0, space);
    std::string arg = space == std::string::npos ? "" : text.substr(space + 1);
    while (!arg.empty() && (arg.back() == ' ' || arg.back() == '\n')) arg.pop_back();
    try {
      if (cmd == "/exit" || cmd == "/quit") return false;
      if (cmd == "/help") {
        print(kHelp);
      } else if (cmd == "/reset") {
        chat_.reset();
        note("(conversation cleared)");
      } else if (cmd == "/system") {
        if (arg.empty()) {
          note(chat_.system().empty() ? "(no system prompt)" : "system: " + chat_.system());
        } else {
          chat_.set_system(arg);
          note("(system prompt set)");
        }
      } else if (cmd == "/save") {
        if (arg.empty()) throw Error("/save needs a file name");
        std::ofstream out(arg);
        out << chat_.messages().dump(2) << "\n";
        if (!out) throw Error(fmt::format("cannot write {}", arg));
        note(fmt::format("(saved {} messages to {})", chat_.messages().size(), arg));
      } else if (cmd == "/load") {
        if (arg.empty()) throw Error("/load needs a file name");
        std::ifstream in(arg);
        if (!in) throw Error(fmt::format("cannot read {}", arg));
        nlohmann::ordered_json j;
        try {
          j = parse_json_bounded<nlohmann::ordered_json>(
              std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
        } catch (const JsonTooDeep& e) {
          throw Error(fmt::format("{}: {}", arg, e.what()));
        } catch (const nlohmann::json::exception& e) {
          throw Error(fmt::format("{}: not valid JSON: {}", arg, e.what()));
        }
        chat_.load(j);
        note(fmt::format("(loaded {} messages from {})", chat_.messages().size(), arg));
      } else if (cmd == "/stats") {
        stats();
      } else {
        note(fmt::format("unknown command {} (/help lists them)", cmd));
      }
    } catch (const Error& e) {
      note(fmt::format("error: {}", e.what()));
    }
    return true;
  }

  void stats() {
    const auto& s = chat_.session();
    const auto& l = totals_.last;
    note(fmt::format("context {}/{} tokens · {} messages · {} answers, {} tokens generated at {:.1f} tok/s · model "
                     "loaded in {:.2f} s",
                     s.n_past(), s.n_ctx(), chat_.messages().size(), totals_.turns, totals_.generated,
                     totals_.decode_s > 0 ? static_cast<double>(totals_.generated) / totals_.decode_s : 0.0, m_.load_s));
    if (totals_.turns > 0) {
      note(fmt::format("last answer: prompt {} tokens ({} reused, {} evaluated at {:.1f} tok/s) · first token after {:.2f} s"
                       " · {} tokens at {:.1f} tok/s · ended by {}",
                       l.prompt_tokens, l.cached_tokens, l.prompt_tokens - l.cached_tokens, l.prefill_tokens_per_s(),
                       l.first_token_s, l.tokens.size(), l.decode_tokens_per_s(), runtime::stop_reason_name(l.reason)));
    }
  }

  // A Ctrl-C from here on (even just after Enter) stops this answer.
  void answer(const std::string& text) {
    enum class Part { None, Reasoning, Content } part = Part::None;
    Spinner spinner(stdout, out_tty_);  // until the first token
    auto on_delta = [&](const chat::ParsedOutput& d) {
      spinner.stop();
      if (!d.reasoning.empty()) {
        if (part != Part::Reasoning) {
          if (a_.hide_thinking) print(fmt::format("{}(thinking){}", style_.dim(), style_.reset()));
          else print(out_tty_ ? style_.dim() : "<think>\n");
        }
        part = Part::Reasoning;
        if (!a_.hide_thinking) print(out_tty_ ? terminal_safe(d.reasoning, true) : d.reasoning);
      }
      if (!d.content.empty()) {
        if (part == Part::Reasoning) {
          if (a_.hide_thinking) print("\n");
          else print(out_tty_ ? std::string(style_.reset()) + "\n\n" : "\n</think>\n\n");
        }
        part = Part::Content;
        print(out_tty_ ? terminal_safe(d.content, true) : d.content);  // a model's text cannot steer the terminal
      }
    };
    runtime::ChatTurn turn;
    try {
      turn = chat_.send(text, on_delta);
      spinner.stop();
    } catch (const Error& e) {
      spinner.stop();
      if (part == Part::Reasoning && out_tty_) print(style_.reset());
      note(fmt::format("error: {}", e.what()));
      return;
    }
    if (part == Part::Reasoning && !a_.hide_thinking) print(out_tty_ ? style_.reset() : "\n</think>");
    const auto& r = turn.result;
    if (r.reason == runtime::StopReason::Cancelled) print(fmt::format(" {}[stopped]{}", style_.dim(), style_.reset()));
    print("\n");
    interrupted_.store(false);
    ++totals_.turns;
    totals_.generated += static_cast<int64_t>(r.tokens.size());
    totals_.decode_s += r.decode_s;
    totals_.last = r;
    std::string status = fmt::format("{:.1f} tok/s · {} tokens · context {}/{} · prefill {} at {:.1f} tok/s · first token {:.2f} s",
                                     r.decode_tokens_per_s(), r.tokens.size(), chat_.session().n_past(),
                                     chat_.session().n_ctx(), r.prompt_tokens - r.cached_tokens, r.prefill_tokens_per_s(),
                                     r.first_token_s);
    if (turn.dropped_messages > 0) status += fmt::format(" · dropped {} old messages", turn.dropped_messages);
    if (r.reason == runtime::StopReason::ContextFull) status += " · the context is full (/reset or --drop-old-turns)";
    note(status);
  }

  const ChatArgs& a_;
  LoadedModel& m_;
  runtime::ChatSession& chat_;
  std::atomic<bool>& interrupted_;
  const bool out_tty_ = is_terminal(stdout), in_tty_ = is_terminal(stdin);
  const Style style_{out_tty_};
  std::optional<LineEditor> editor_;  // both ends a terminal
  Totals totals_;
};

int run_chat(const ChatArgs& a) {
  const auto m = load_model(a.gen);
  sample::Sampler sampler(a.gen.sampler_params(m->session->n_ctx()), &m->tok);
  std::atomic<bool>& interrupted = install_interrupt_flag();
  runtime::ChatOptions copts;
  copts.system = a.gen.system;
  copts.enable_thinking = a.gen.enable_thinking();
  copts.drop_oldest_turns = a.gen.drop_old_turns;
  copts.generate = a.gen.generate_options(m->backend->name(), &m->tok);
    copts.generate.draft = m->drafter.get();
  copts.generate.cancel = &interrupted;
  runtime::ChatSession chat(*m->session, m->tok, sampler, chat_template(a.gen, m->file, m->tok), copts);
  ChatUi ui(a, *m, chat, interrupted);
  return ui.loop();
}

void add_chat_command(CLI::App& app, const GlobalOptions&, Runner& run) {
  auto a = std::make_shared<ChatArgs>();
  a->gen.sampling = sample::SamplerParams::chat();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  add_generation_options(cmd, a->gen, true);
  cmd->add_flag("--hide-thinking", a->hide_thinking, "Do not print the model's reasoning, only that it is thinking");
  cmd->callback([a, &run] { run = [a] { return run_chat(*a); }; });
}

}  // namespace

ZINC_COMMAND(6, add_chat_command);

}  // namespace zinc::cli
