// `zinc tokenize` and `zinc detokenize`: a GGUF file's tokenizer from the command line, to see how a
// prompt is split into tokens (ids and the bytes each stands for) and what a list of ids reads as.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/cli.h"
#include "cli/json_util.h"
#include "core/error.h"
#include "core/log.h"
#include "gguf/reader.h"
#include "hub/store.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace zinc::cli {

namespace {

using nlohmann::json;
using tokenizer::Tokenizer;

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool ids_only = false;
  bool no_special = false;
};

struct DetokenizeOptions {
  std::string model;
  std::vector<std::string> ids;
  bool no_special = false;
};

std::string read_stdin() {
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

Tokenizer load_tokenizer(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  const gguf::File file = gguf::File::open(hub::resolve_model_path(path));
  Tokenizer tok = Tokenizer::from_gguf(file);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  spdlog::debug("{}: {} tokenizer, pre {}, {} tokens, {} merges, loaded in {:.1f} ms", path, tok.vocab().model_name(),
                tok.vocab().pre_name(), tok.vocab().size(), tok.vocab().merge_count(), ms);
  return tok;
}

// A piece for people: quoted, with control characters escaped and bytes that are not (yet) a
// whole UTF-8 character shown as \xHH.
std::string show_piece(std::string_view piece) {
  std::string out = "\"";
  for (size_t pos = 0; pos < piece.size();) {
    const auto b = static_cast<uint8_t>(piece[pos]);
    if (b < 0x80) {
      switch (b) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        default:
          if (b < 0x20 || b == 0x7F) out += fmt::format("\\u{:04x}", b);
          else out += static_cast<char>(b);
      }
      ++pos;
      continue;
    }
    const size_t n = tokenizer::unicode::utf8_valid_length(piece, pos);
    if (n == 0) {
      out += fmt::format("\\x{:02X}", b);
      ++pos;
    } else {
      out.append(piece.substr(pos, n));
      pos += n;
    }
  }
  return out + "\"";
}

int run_tokenize(const TokenizeOptions& o, const GlobalOptions& global) {
  const Tokenizer tok = load_tokenizer(o.model);
  const std::string text = o.text == "-" ? read_stdin() : o.text;
  const bool special = !o.no_special;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/special, /*parse_special=*/special);
  spdlog::debug("{} bytes -> {} tokens in {:.2f} ms", text.size(), ids.size(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  if (global.json) {
    json tokens = json::array();
    for (int32_t id : ids) {
      const std::string piece = tok.token_to_piece(id, true);
      json t = {{"id", id}, {"piece", piece}};
      if (!tokenizer::unicode::is_valid_utf8(piece)) {
        // Part of a character: the text above has U+FFFD where the raw bytes cannot be JSON.
        std::vector<int> bytes;
        for (char c : piece) bytes.push_back(static_cast<uint8_t>(c));
        t["bytes"] = bytes;
      }
      tokens.push_back(std::move(t));
    }
    const json j = {{"model", o.model}, {"count", ids.size()}, {"ids", ids}, {"tokens", tokens}};
    fmt::print("{}\n", dump_json(j));
  } else if (o.ids_only) {
    std::string line;
    for (int32_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
    fmt::print("{}\n", line);
  } else {
    for (int32_t id : ids) fmt::print("{:>8}  {}\n", id, show_piece(tok.token_to_piece(id, true)));
  }
  return 0;
}

std::vector<int32_t> parse_ids(const std::vector<std::string>& args) {
  std::string all;
  for (const auto& a : args) all += (a == "-" ? read_stdin() : a) + " ";
  for (char& c : all) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::vector<int32_t> ids;
  std::istringstream in(all);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < INT32_MIN || v > INT32_MAX) {
      throw Error(fmt::format("'{}' is not a token id; give ids as integers (separated by spaces or commas)",
                              tokenizer::unicode::sanitize_utf8(word)));
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

int run_detokenize(const DetokenizeOptions& o, const GlobalOptions& global) {
  const Tokenizer tok = load_tokenizer(o.model);
  const std::vector<int32_t> ids = parse_ids(o.ids);
  tokenizer::DecodeOptions d;
  d.remove_special = o.no_special;
  d.render_special = !o.no_special;
  const std::string text = tok.decode(ids, d);  // checks every id first
  if (global.json) {
    const json j = {{"model", o.model}, {"count", ids.size()}, {"text", tokenizer::unicode::sanitize_utf8(text)}};
    fmt::print("{}\n", dump_json(j));
  } else {
    fmt::print("{}\n", tokenizer::unicode::sanitize_utf8(text));
  }
  return 0;
}

void add_tokenize_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Split text into tokens with a model's tokenizer: one line per token (id and piece); "
                  "--json for structured output");
  cmd->add_option("-m,--model", o->model, "GGUF file whose tokenizer to use")->required();
  cmd->add_option("text", o->text, "Text to tokenize, or - to read it from standard input (all bytes, "
                                   "including a final newline)")
      ->required();
  cmd->add_flag("--ids", o->ids_only, "Print only the token ids, space-separated on one line");
  cmd->add_flag("--no-special", o->no_special,
                "Plain text only: add no BOS/EOS and tokenize special-token text such as <|im_start|> as "
                "ordinary characters");
  cmd->callback([o, &global, &run] {
    run = [o, &global] { return run_tokenize(*o, global); };
  });
}

void add_detokenize_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto o = std::make_shared<DetokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Turn token ids back into text with a model's tokenizer");
  cmd->add_option("-m,--model", o->model, "GGUF file whose tokenizer to use")->required();
  cmd->add_option("ids", o->ids, "Token ids (separated by spaces or commas), or - to read them from standard input")
      ->required();
  cmd->add_flag("--no-special", o->no_special,
                "Leave out control tokens and the BOS/EOS the model adds itself");
  cmd->callback([o, &global, &run] {
    run = [o, &global] { return run_detokenize(*o, global); };
  });
}

}  // namespace

ZINC_COMMAND(20, add_tokenize_command);
ZINC_COMMAND(21, add_detokenize_command);

}  // namespace zinc::cli
