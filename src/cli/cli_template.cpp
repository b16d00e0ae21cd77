// `zinc template`: renders a conversation with a model's chat template, exactly as the model will see it.
// The template comes from the GGUF (tokenizer.chat_template) or, with --template FILE, from a file: the
// override for a GGUF whose template is wrong or missing. The conversation is OpenAI-style JSON: an
// array of messages, or an object with "messages", optional "tools", and any further template variables.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "cli/cli.h"
#include "cli/json_util.h"
#include "cli/terminal.h"
#include "core/error.h"
#include "core/format.h"
#include "core/json_bounded.h"
#include "gguf/reader.h"
#include "hub/store.h"

namespace zinc::cli {

namespace {

using nlohmann::ordered_json;

struct TemplateOptions {
  std::string model;
  std::string template_file;
  std::string messages_file;
  bool add_generation_prompt = false;
  bool no_think = false;
};

// Shown when no --messages is given, so `zinc template -m MODEL` previews the prompt format.
ordered_json sample_conversation() {
  return ordered_json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}},
                              {{"role", "user"}, {"content", "Hello!"}}});
}

int run_template(const TemplateOptions& o, const GlobalOptions& global) {
  if (o.model.empty() && o.template_file.empty()) {
    throw Error("zinc template needs a model (-m MODEL.gguf) or a template file (--template FILE)");
  }
  std::optional<chat::ChatTemplate> tmpl;
  std::string bos, eos;
  std::optional<gguf::File> file;
  if (!o.model.empty()) file.emplace(gguf::File::open(hub::resolve_model_path(o.model)));
  if (!o.template_file.empty()) {
    if (file) {
      // Keep the model's BOS/EOS texts when only the template is overridden.
      std::tie(bos, eos) = chat::gguf_bos_eos(*file);
    }
    tmpl.emplace(read_text(o.template_file, "template"), bos, eos, o.template_file);
  } else {
    tmpl.emplace(chat::ChatTemplate::from_gguf(*file));
  }

  ordered_json request_json = sample_conversation();
  if (!o.messages_file.empty()) {
    const std::string text = read_text(o.messages_file, "messages");
    const std::string where = o.messages_file == "-" ? "stdin" : o.messages_file;
    try {
      request_json = parse_json_bounded<ordered_json>(text);
    } catch (const JsonTooDeep& e) {
      throw Error(fmt::format("{}: {}", where, e.what()));
    } catch (const nlohmann::json::exception&) {
      throw Error(fmt::format("{}: not valid JSON (expected an array of messages or an object with \"messages\")", where));
    }
  }
  chat::ChatRequest request = chat::ChatRequest::from_json(request_json);
  if (!request_json.is_object() || !request_json.contains("add_generation_prompt")) {
    request.add_generation_prompt = o.add_generation_prompt;
  }
  if (o.add_generation_prompt) request.add_generation_prompt = true;
  if (o.no_think) request.enable_thinking = false;

  const std::string prompt = tmpl->render(request);
  const chat::OutputFormat format = chat::detect_output_format(tmpl->source());
  if (global.json) {
    ordered_json j;
    j["prompt"] = prompt;
    j["template"] = o.template_file.empty() ? "gguf" : "file";
    j["template_source"] = o.template_file.empty() ? o.model : o.template_file;
    j["bos_token"] = tmpl->bos_token();
    j["eos_token"] = tmpl->eos_token();
    j["add_generation_prompt"] = request.add_generation_prompt;
    j["enable_thinking"] = request.enable_thinking ? ordered_json(*request.enable_thinking) : ordered_json();
    j["output_format"] = chat::output_format_name(format);
    j["opens_reasoning"] = chat::prompt_opens_reasoning(prompt);
    // Same layout as dump_json(), keeping the keys in this order.
    fmt::print("{}\n", j.dump(2, ' ', false, ordered_json::error_handler_t::replace));
    return 0;
  }
  // The prompt exactly as rendered: no newline is added, so the output can be used as it is. On a
  // terminal a template's control characters are shown as escapes.
  const std::string out = is_terminal(stdout) ? terminal_safe(prompt, true) : prompt;
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

void add_template_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto opts = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand("template", "Render a conversation with a model's chat template (the exact prompt text)");
  cmd->add_option("-m,--model", opts->model, "GGUF model whose chat template (and BOS/EOS tokens) to use");
  cmd->add_option("--template", opts->template_file, "Jinja template file to use instead of the model's");
  cmd->add_option("--messages", opts->messages_file,
                  "Conversation JSON: an array of messages, or {\"messages\": [...], \"tools\": [...], ...}; '-' reads "
                  "stdin (default: a short sample conversation)");
  cmd->add_flag("--add-generation-prompt", opts->add_generation_prompt,
                "End with the assistant turn's opening, ready for the model to answer");
  cmd->add_flag("--no-think", opts->no_think, "Set enable_thinking=false (templates that support it skip reasoning)");
  cmd->callback([opts, &global, &run] { run = [opts, &global] { return run_template(*opts, global); }; });
}

}  // namespace

ZINC_COMMAND(30, add_template_command);

}  // namespace zinc::cli
