// tokenizer.json -> tokenizer.* GGUF metadata. The special-token rules follow gguf-py's SpecialVocab
// (ids looked up among added_tokens by the strings tokenizer_config.json names; add_bos/add_eos from
// tokenizer_config.json, else guessed from a TemplateProcessing post-processor), so a file converted
// here carries what the standard converter would write.
#include "tokenizer/hf_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/json_bounded.h"
#include "tokenizer/vocab.h"

namespace zinc::tokenizer {

namespace {

using nlohmann::json;
using gguf::Value;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw Error(fmt::format("{}: {}", source, what));
}

struct KnownRegex {
  const char* pre;
  const char* regex;
};

// The pre-tokenizer expressions of the supported families, exactly as their tokenizer.json has them.
const KnownRegex kKnownRegexes[] = {
    {"gpt-2", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
    {"llama-bpe",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"qwen2",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"qwen35",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"gpt-4o",
     R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"tekken",
     R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
};

// Added tokens some models forget to mark special (gguf-py's does_token_look_special).
bool looks_special(const std::string& t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (t.starts_with("<|") && t.ends_with("|>")) return true;
  if (t.starts_with("<｜") && t.ends_with("｜>")) return true;
  return t.starts_with("<unused") && t.ends_with(">");
}

bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

// The regular expressions of the Split pre-tokenizers, in order; "byte-level" marks a ByteLevel
// pre-tokenizer that splits with GPT-2's own expression.
void collect_splits(const json& pre, std::vector<std::string>& regexes, bool& byte_level) {
  if (!pre.is_object()) return;
  const std::string type = pre.value("type", "");
  if (type == "Sequence") {
    for (const json& p : pre.value("pretokenizers", json::array())) collect_splits(p, regexes, byte_level);
  } else if (type == "Split") {
    const json& pattern = pre.value("pattern", json::object());
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) regexes.push_back(pattern["Regex"]);
    else if (pattern.contains("String") && pattern["String"].is_string()) regexes.push_back("string:" + pattern["String"].get<std::string>());
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (pre.value("use_regex", true)) regexes.push_back(kKnownRegexes[0].regex);
  }
}

// Token content of a tokenizer_config entry: a string or {"content": ...}.
std::optional<std::string> entry_content(const json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("content") && e["content"].is_string()) return e["content"].get<std::string>();
  return std::nullopt;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open: {}", p.string(), std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(const std::filesystem::path& p) {
  try {
    return parse_json_bounded<json>(read_file(p));
  } catch (const JsonTooDeep& e) {
    throw Error(fmt::format("{}: {}", p.string(), e.what()));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", p.string(), e.what()));
  }
}

}  // namespace

std::string hf_pre_name_for_regex(const std::string& regex) {
  for (const auto& k : kKnownRegexes) {
    if (regex == k.regex) return k.pre;
  }
  return {};
}

HfTokenizerResult convert_hf_tokenizer(const json& tj, const json& tokenizer_config_in, const json& config,
                                       const HfTokenizerOptions& options, const std::string& source) {
  HfTokenizerResult result;
  auto& notes = result.notes;
  if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object()) {
    fail(source, "no \"model\" section; this is not a Hugging Face tokenizer.json");
  }
  const json& model = tj["model"];
  const std::string model_type = model.value("type", "");
  if (model_type != "BPE") {
    fail(source, fmt::format("tokenizer model \"{}\" cannot be written as a GGUF BPE vocabulary (only BPE is "
                             "supported; convert SentencePiece models from tokenizer.model)",
                             model_type));
  }
  const bool byte_fallback = model.value("byte_fallback", false);

  // gpt2 (byte-level) or gemma4 (SentencePiece-style BPE over raw UTF-8).
  std::string gguf_model = options.model;
  if (gguf_model.empty()) gguf_model = byte_fallback ? "gemma4" : "gpt2";
  if (gguf_model != "gpt2" && gguf_model != "gemma4") {
    fail(source, fmt::format("cannot write tokenizer model \"{}\"; use \"gpt2\" or \"gemma4\"", gguf_model));
  }
  std::vector<std::string> regexes;
  bool byte_level = false;
  collect_splits(tj.value("pre_tokenizer", json()), regexes, byte_level);
  std::string pre = options.pre;
  if (gguf_model == "gpt2") {
    if (!byte_level) notes.push_back("no ByteLevel pre-tokenizer; writing a byte-level (gpt2) vocabulary anyway");
    if (pre.empty()) {
      if (regexes.size() == 1) pre = hf_pre_name_for_regex(regexes[0]);
      if (pre.empty()) {
        fail(source, fmt::format("the pre-tokenizer ({}) is not one this converter recognises; pass the "
                                 "tokenizer.ggml.pre name of the model family explicitly",
                                 regexes.empty() ? std::string("none") : regexes[0]));
      }
    }
  } else {
    // The text must become ▁-escaped without a leading ▁, which is what "gemma4" vocabularies do.
    const json& norm = tj.value("normalizer", json());
    const std::string dump = norm.dump();
    if (dump.find("\"Prepend\"") != std::string::npos || tj.value("pre_tokenizer", json()).dump().find("Metaspace") != std::string::npos) {
      fail(source, "this SentencePiece-style tokenizer adds a leading space (Prepend/Metaspace), which a "
                   "gemma4 vocabulary cannot express; convert it from its tokenizer.model instead");
    }
  }
  if (const json& norm = tj.value("normalizer", json()); !norm.is_null()) {
    const std::string type = norm.value("type", "");
    const bool space_replace = type == "Replace" && norm.value("content", "") == "\xE2\x96\x81";
    if (!(gguf_model == "gemma4" && space_replace)) {
      notes.push_back(fmt::format("normalizer {} is not stored in GGUF and is not applied when tokenizing", type));
    }
  }

  // Vocabulary: base vocab, then added tokens (which may also sit in the base vocab).
  std::map<int64_t, std::string> by_id;
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(source, "model.vocab is missing");
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) fail(source, "model.vocab ids must be non-negative integers");
    by_id[id.get<int64_t>()] = text;
  }
  struct Added {
    bool special;
  };
  std::map<int64_t, Added> added;
  const json added_tokens = tj.value("added_tokens", json::array());
  for (const json& a : added_tokens) {
    if (!a.contains("id") || !a.contains("content") || !a["content"].is_string()) continue;
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0) fail(source, "added_tokens ids must be non-negative");
    by_id[id] = a["content"].get<std::string>();
    added[id] = {a.value("special", false)};
  }
  if (by_id.empty()) fail(source, "the vocabulary is empty");
  int64_t n_vocab = by_id.rbegin()->first + 1;
  if (options.vocab_size && *options.vocab_size > n_vocab) n_vocab = *options.vocab_size;
  if (n_vocab > INT32_MAX / 2) fail(source, "the vocabulary is too large");

  std::vector<std::string> tokens(static_cast<size_t>(n_vocab));
  std::vector<int32_t> types(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) {
    auto& t = tokens[static_cast<size_t>(i)];
    auto& type = types[static_cast<size_t>(i)];
    const auto it = by_id.find(i);
    if (it == by_id.end()) {
      t = fmt::format("[PAD{}]", i);
      type = static_cast<int32_t>(TokenType::Unused);
      continue;
    }
    t = it->second;
    const auto a = added.find(i);
    if (a != added.end()) {
      if (a->second.special || looks_special(t)) {
        type = static_cast<int32_t>(TokenType::Control);
      } else if (gguf_model == "gpt2") {
        // gguf-py pre-normalizes user-defined spaces (▁ -> " ").
        std::string replaced;
        for (size_t p = 0; p < t.size();) {
          if (t.compare(p, 3, "\xE2\x96\x81") == 0) {
            replaced += ' ';
            p += 3;
          } else {
            replaced += t[p++];
          }
        }
        t = replaced;
        type = static_cast<int32_t>(TokenType::UserDefined);
      } else {
        const bool has_space_marker = t.find("\xE2\x96\x81") != std::string::npos;
        type = static_cast<int32_t>(has_space_marker ? TokenType::Normal : TokenType::UserDefined);
      }
    } else if (byte_fallback && is_byte_token(t)) {
      type = static_cast<int32_t>(TokenType::Byte);
    } else {
      type = static_cast<int32_t>(TokenType::Normal);
    }
  }

  // Merges: "a b" strings, or [a, b] pairs whose spaces are written as U+0120 (gguf-py's encoding).
  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    const json& m = model["merges"];
    merges.reserve(m.size());
    for (const json& e : m) {
      if (e.is_string()) {
        merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        std::string joined;
        for (int part = 0; part < 2; ++part) {
          if (part) joined += ' ';
          for (char c : e[part].get<std::string>()) {
            if (c == ' ') joined += "\xC4\xA0";
            else joined += c;
          }
        }
        merges.push_back(std::move(joined));
      } else {
        fail(source, "model.merges entries must be \"a b\" strings or [a, b] pairs");
      }
    }
  }
  if (merges.empty()) fail(source, "model.merges is empty; a BPE vocabulary needs its merges");

  auto& md = result.metadata;
  md.set("tokenizer.ggml.model", Value::str(gguf_model));
  if (gguf_model == "gpt2") md.set("tokenizer.ggml.pre", Value::str(pre));
  md.set("tokenizer.ggml.tokens", Value::strings(tokens));
  if (gguf_model == "gemma4") {
    const std::vector<float> scores(tokens.size(), -1000.0f);
    md.set("tokenizer.ggml.scores", Value::f32s(scores));
  }
  md.set("tokenizer.ggml.token_type", Value::i32s(types));
  md.set("tokenizer.ggml.merges", Value::strings(merges));

  // Special tokens and add_* flags (SpecialVocab).
  json tc = tokenizer_config_in.is_object() ? tokenizer_config_in : json::object();
  const bool have_config = tokenizer_config_in.is_object();
  std::vector<std::string> token_types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  std::vector<std::pair<std::string, bool>> add_special;
  auto set_add = [&](const std::string& typ, bool v) {
    for (auto& [k, val] : add_special) {
      if (k == typ) {
        val = v;
        return;
      }
    }
    add_special.emplace_back(typ, v);
  };
  auto tc_str = [&](const char* key) { return tc.contains(key) ? entry_content(tc[key]) : std::nullopt; };
  std::optional<std::string> special_bos = tc_str("bos_token"), special_cls = tc_str("cls_token");
  std::optional<std::string> special_eos = tc_str("eos_token"), special_sep = tc_str("sep_token");
  if (!special_bos && special_cls && have_config) tc["bos_token"] = *(special_bos = special_cls);
  if (!special_eos && special_sep && have_config) tc["eos_token"] = *(special_eos = special_sep);
  const json post = tj.value("post_processor", json());
  if (post.is_object()) {
    const json processors = post.contains("processors") ? post["processors"] : json::array({post});
    for (const json& p : processors) {
      const std::string ptype = p.value("type", "");
      if (ptype == "RobertaProcessing") {
        set_add("bos", true);
        set_add("eos", true);
        set_add("sep", true);
        if (!special_cls && have_config && p.contains("cls") && p["cls"].is_array() && !p["cls"].empty()) {
          tc["cls_token"] = p["cls"][0];
          special_cls = entry_content(p["cls"][0]);
        }
        if (!special_sep && have_config && p.contains("sep") && p["sep"].is_array() && !p["sep"].empty()) {
          tc["sep_token"] = p["sep"][0];
          special_sep = entry_content(p["sep"][0]);
        }
        continue;
      }
      if (ptype != "TemplateProcessing") continue;
      const json single = p.value("single", json::array());
      if (single.size() <= 1) continue;
      auto special_id = [](const json& item) -> std::optional<std::string> {
        if (item.contains("SpecialToken") && item["SpecialToken"].contains("id")) return item["SpecialToken"]["id"].get<std::string>();
        return std::nullopt;
      };
      if (const auto first = special_id(single.front())) {
        if (!have_config) special_bos = first;
        set_add("bos", first == special_bos || first == special_cls);
        if (!(first == special_bos || first == special_cls)) {
          notes.push_back("unknown leading special token " + *first + " in TemplateProcessing");
        }
      }
      if (const auto last = special_id(single.back())) {
        if (!have_config) {
          special_eos = last;
        } else if (last != special_eos) {
          // The template's last token becomes EOS; the configured one is kept as EOT (or EOM).
          const char* keep = std::find(token_types.begin(), token_types.end(), "eot") == token_types.end() ? "eot"
                             : std::find(token_types.begin(), token_types.end(), "eom") == token_types.end() ? "eom"
                                                                                                                 : nullptr;
          if (keep) {
            token_types.emplace_back(keep);
            if (special_eos) tc[std::string(keep) + "_token"] = *special_eos;
          }
          tc["eos_token"] = *last;
          special_eos = last;
        }
        set_add("eos", last == special_eos);
      }
    }
  }

  std::vector<std::pair<std::string, uint32_t>> special_ids;
  auto set_special = [&](const std::string& typ, std::optional<int64_t> id) {
    if (!id || *id < 0 || *id >= n_vocab) return;
    for (const auto& [k, v] : special_ids) {
      if (k == typ) return;  // the first source wins
    }
    special_ids.emplace_back(typ, static_cast<uint32_t>(*id));
  };
  std::optional<json> chat_template;
  if (have_config) {
    if (tc.contains("chat_template") && (tc["chat_template"].is_string() || tc["chat_template"].is_array())) {
      chat_template = tc["chat_template"];
    }
    for (const std::string& typ : token_types) {
      const std::string add_key = "add_" + typ + "_token";
      if (tc.contains(add_key) && tc[add_key].is_boolean()) set_add(typ, tc[add_key].get<bool>());
      const auto content = tc_str((typ + "_token").c_str());
      if (!content) continue;
      std::optional<int64_t> id;
      for (const json& a : added_tokens) {
        if (a.contains("content") && a["content"] == *content && a.contains("id")) {
          id = a["id"].get<int64_t>();
          break;
        }
      }
      set_special(typ, id);
    }
  }
  if (config.is_object()) {
    for (const std::string& typ : token_types) {
      const std::string key = typ + "_token_id";
      const json* v = config.contains(key) ? &config[key] : nullptr;
      if ((!v || v->is_null()) && config.contains("text_config") && config["text_config"].contains(key)) {
        v = &config["text_config"][key];
      }
      if (v && v->is_number_integer()) set_special(typ, v->get<int64_t>());
    }
  }
  static const std::map<std::string, std::string> kIdKeys = {
      {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", "tokenizer.ggml.cls_token_id"},
      {"mask", "tokenizer.ggml.mask_token_id"},   {"eot", "tokenizer.ggml.eot_token_id"},
      {"eom", "tokenizer.ggml.eom_token_id"}};
  for (const auto& [typ, id] : special_ids) md.set(kIdKeys.at(typ), Value::u32(id));
  for (const auto& [typ, v] : add_special) {
    if (typ == "bos" || typ == "eos" || typ == "sep") md.set("tokenizer.ggml.add_" + typ + "_token", Value::boolean(v));
  }
  if (gguf_model == "gemma4") {
    md.set("tokenizer.ggml.add_space_prefix", Value::boolean(false));
    md.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  }

  if (chat_template) {
    if (chat_template->is_string()) {
      md.set("tokenizer.chat_template", Value::str(chat_template->get<std::string>()));
    } else {
      std::vector<std::string> names;
      std::optional<std::string> default_template;
      for (const json& choice : *chat_template) {
        if (!choice.is_object() || !choice.contains("template") || !choice["template"].is_string()) continue;
        std::string name = choice.value("name", "");
        for (char& c : name) {
          if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
        }
        if (name.empty()) continue;
        if (name == "default") {
          default_template = choice["template"].get<std::string>();
        } else {
          names.push_back(name);
          md.set("tokenizer.chat_template." + name, Value::str(choice["template"].get<std::string>()));
        }
      }
      if (!names.empty()) md.set("tokenizer.chat_templates", Value::strings(names));
      if (default_template) md.set("tokenizer.chat_template", Value::str(*default_template));
    }
  }

  // Behaviour the GGUF cannot request: tell the caller when it differs from what the pre type implies.
  const bool hf_ignore_merges = model.value("ignore_merges", false);
  const bool gguf_ignore_merges = gguf_model == "gpt2" && (pre == "llama-bpe" || pre == "tekken");
  if (hf_ignore_merges != gguf_ignore_merges) {
    notes.push_back(fmt::format("tokenizer.json has ignore_merges={}, but GGUF readers derive {} from pre \"{}\"",
                                hf_ignore_merges, gguf_ignore_merges, gguf_model == "gpt2" ? pre : "gemma4"));
  }
  return result;
}

HfTokenizerResult convert_hf_tokenizer_dir(const std::filesystem::path& dir, const HfTokenizerOptions& options) {
  const auto tokenizer_path = dir / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer_path)) {
    throw Error(fmt::format("{}: not found; the model directory needs a Hugging Face tokenizer.json",
                            tokenizer_path.string()));
  }
  const json tj = parse_json(tokenizer_path);
  json tc = nullptr, config = nullptr;
  if (std::filesystem::exists(dir / "tokenizer_config.json")) tc = parse_json(dir / "tokenizer_config.json");
  if (std::filesystem::exists(dir / "config.json")) config = parse_json(dir / "config.json");
  if (tc.is_object() && !tc.contains("chat_template") && std::filesystem::exists(dir / "chat_template.jinja")) {
    tc["chat_template"] = read_file(dir / "chat_template.jinja");
  }
  HfTokenizerOptions opts = options;
  if (!opts.vocab_size && config.is_object() && config.contains("vocab_size") && config["vocab_size"].is_number_unsigned()) {
    opts.vocab_size = config["vocab_size"].get<uint32_t>();
  }
  return convert_hf_tokenizer(tj, tc, config, opts, tokenizer_path.string());
}

}  // namespace zinc::tokenizer
