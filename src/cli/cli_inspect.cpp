// `zinc inspect FILE.gguf`: what a GGUF file holds, from its header alone (no tensor data is read).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "cli/cli.h"
#include "cli/json_util.h"
#include "core/format.h"
#include "core/log.h"
#include "gguf/reader.h"
#include "hub/store.h"

namespace zinc::cli {

namespace {

using gguf::File;
using nlohmann::json;

struct InspectOptions {
  std::string path;
  bool tensors = false;
  bool metadata = false;
  bool full_arrays = false;
};

// inspect is a diagnostic tool: a key of the wrong type is reported, not fatal.
template <class T>
std::optional<T> soft_get(const File& f, std::string_view key) {
  try {
    return f.get_optional<T>(key);
  } catch (const Error& e) {
    spdlog::warn("{}", e.what());
    return std::nullopt;
  }
}

struct TypeStats {
  uint64_t count = 0, elements = 0, bytes = 0;
};

struct SpecialToken {
  std::string role;
  uint32_t id;
  std::optional<std::string> text;
};

struct Summary {
  std::string arch, name;
  uint64_t parameters = 0, tensor_bytes = 0;
  std::optional<uint32_t> file_type;
  std::vector<std::pair<std::string, const gguf::KeyValue*>> hparams;  // (key without "arch.", kv)
  std::map<std::string, TypeStats> types;
  std::optional<std::string> tok_model, tok_pre;
  uint64_t vocab = 0, merges = 0;
  std::vector<SpecialToken> specials;
  std::optional<bool> add_bos, add_eos;
  size_t chat_template_bytes = 0;
  std::vector<std::string> named_templates;
};

Summary summarize(const File& f) {
  Summary s;
  s.arch = soft_get<std::string>(f, "general.architecture").value_or("");
  s.name = soft_get<std::string>(f, "general.name").value_or("");
  s.file_type = soft_get<uint32_t>(f, "general.file_type");
  const std::string prefix = s.arch + ".";
  for (const auto& kv : f.metadata()) {
    if (!s.arch.empty() && kv.key.starts_with(prefix)) {
      s.hparams.emplace_back(std::string(kv.key.substr(prefix.size())), &kv);
    }
    if (kv.key.starts_with("tokenizer.chat_template.")) {
      s.named_templates.emplace_back(kv.key.substr(std::string_view("tokenizer.chat_template.").size()));
    }
  }
  for (const auto& t : f.tensors()) {
    auto& st = s.types[std::string(gguf::tensor_type_name(t.type))];
    st.count++;
    st.elements += t.n_elements;
    st.bytes += t.n_bytes;
    s.parameters += t.n_elements;
    s.tensor_bytes += t.n_bytes;
  }
  s.tok_model = soft_get<std::string>(f, "tokenizer.ggml.model");
  s.tok_pre = soft_get<std::string>(f, "tokenizer.ggml.pre");
  const auto tokens = soft_get<gguf::ArrayView>(f, "tokenizer.ggml.tokens");
  if (tokens) s.vocab = tokens->size();
  if (const auto m = soft_get<gguf::ArrayView>(f, "tokenizer.ggml.merges")) s.merges = m->size();
  static const std::pair<const char*, const char*> roles[] = {
      {"bos", "tokenizer.ggml.bos_token_id"},       {"eos", "tokenizer.ggml.eos_token_id"},
      {"eot", "tokenizer.ggml.eot_token_id"},       {"eom", "tokenizer.ggml.eom_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"},   {"pad", "tokenizer.ggml.padding_token_id"},
      {"sep", "tokenizer.ggml.seperator_token_id"}, {"sep", "tokenizer.ggml.separator_token_id"},
      {"mask", "tokenizer.ggml.mask_token_id"}};
  for (const auto& [role, key] : roles) {
    // -1 (or its uint32 form) means "no such token".
    const auto raw = soft_get<int64_t>(f, key);
    if (!raw || *raw < 0 || *raw >= 0xFFFFFFFFll) continue;
    const auto id = static_cast<uint32_t>(*raw);
    SpecialToken st{role, id, std::nullopt};
    if (tokens && tokens->element_type() == gguf::ValueType::STRING && id < tokens->size()) {
      st.text = std::string(tokens->at(id).string());
    }
    s.specials.push_back(std::move(st));
  }
  s.add_bos = soft_get<bool>(f, "tokenizer.ggml.add_bos_token");
  s.add_eos = soft_get<bool>(f, "tokenizer.ggml.add_eos_token");
  if (const auto t = soft_get<std::string_view>(f, "tokenizer.chat_template")) s.chat_template_bytes = t->size();
  return s;
}

const gguf::KeyValue* hparam(const Summary& s, std::string_view key) {
  for (const auto& [k, kv] : s.hparams) {
    if (k == key) return kv;
  }
  return nullptr;
}

std::vector<std::pair<std::string, TypeStats>> types_by_bytes(const Summary& s) {
  std::vector<std::pair<std::string, TypeStats>> v(s.types.begin(), s.types.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  return v;
}

// One line that says what the model is: "llama · 5 blocks · dim 64 · 8 heads / 4 KV · vocab 512 · ..."
std::string headline(const File& f, const Summary& s) {
  std::vector<std::string> parts;
  parts.push_back(s.arch.empty() ? "unknown architecture" : terminal_safe(s.arch));
  auto text = [&](std::string_view key) -> std::optional<std::string> {
    const gguf::KeyValue* kv = hparam(s, key);
    if (!kv) return std::nullopt;
    return value_to_text(kv->value, 4, 24);
  };
  if (auto v = text("block_count")) parts.push_back(*v + " blocks");
  if (auto v = text("embedding_length")) parts.push_back("dim " + *v);
  if (auto v = text("attention.head_count")) {
    auto kv = text("attention.head_count_kv");
    parts.push_back(*v + " heads" + (kv ? " / " + *kv + " KV" : ""));
  }
  if (auto v = text("expert_count")) {
    auto used = text("expert_used_count");
    parts.push_back(*v + " experts" + (used ? " (" + *used + " active)" : ""));
  }
  if (auto v = text("context_length")) parts.push_back("ctx " + *v);
  if (s.vocab) parts.push_back(fmt::format("vocab {}", s.vocab));
  parts.push_back(fmt::format("{} tensors", f.tensors().size()));
  std::string types;
  for (const auto& [name, st] : types_by_bytes(s)) {
    if (!types.empty()) types += "/";
    types += name;
  }
  if (!types.empty()) parts.push_back(types);
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : " · ") + p;
  return out;
}

std::string shape_text(const gguf::TensorInfo& t) {
  std::string out = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) out += fmt::format("{}{}", d ? ", " : "", t.ne[d]);
  return out + "]";
}

json tensor_json(const File& f, const gguf::TensorInfo& t) {
  return {{"name", std::string(t.name)},
          {"shape", std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
          {"type", std::string(gguf::tensor_type_name(t.type))},
          {"offset", t.offset},
          {"file_offset", f.data_offset() + t.offset},
          {"elements", t.n_elements},
          {"bytes", t.n_bytes}};
}

int print_json(const File& f, const Summary& s, const InspectOptions& o) {
  const size_t max_elems = o.full_arrays ? SIZE_MAX : 16;
  json j;
  j["file"] = o.path;
  j["size"] = f.size();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["architecture"] = s.arch;
  j["name"] = s.name;
  j["parameters"] = s.parameters;
  j["file_type"] = s.file_type ? json{{"id", *s.file_type}, {"name", gguf::file_type_name(*s.file_type)}} : json();
  json hp = json::object();
  for (const auto& [k, kv] : s.hparams) hp[k] = value_to_json(kv->value, max_elems, nullptr);
  j["hyperparameters"] = hp;
  json tok = json::object();
  tok["model"] = s.tok_model ? json(*s.tok_model) : json();
  tok["pre"] = s.tok_pre ? json(*s.tok_pre) : json();
  tok["vocab_size"] = s.vocab;
  tok["merges"] = s.merges;
  json specials = json::object();
  for (const auto& st : s.specials) {
    specials[st.role] = {{"id", st.id}, {"text", st.text ? json(*st.text) : json()}};
  }
  tok["special"] = specials;
  tok["add_bos"] = s.add_bos ? json(*s.add_bos) : json();
  tok["add_eos"] = s.add_eos ? json(*s.add_eos) : json();
  tok["chat_template"] = s.chat_template_bytes > 0;
  tok["chat_template_bytes"] = s.chat_template_bytes;
  tok["named_chat_templates"] = s.named_templates;
  j["tokenizer"] = tok;
  j["tensor_count"] = f.tensors().size();
  j["tensor_bytes"] = s.tensor_bytes;
  json types = json::array();
  for (const auto& [name, st] : types_by_bytes(s)) {
    types.push_back({{"type", name}, {"count", st.count}, {"elements", st.elements}, {"bytes", st.bytes}});
  }
  j["tensor_types"] = types;
  json meta = json::array();
  for (const auto& kv : f.metadata()) {
    bool truncated = false;
    json e = {{"key", std::string(kv.key)}, {"type", gguf::value_type_name(kv.value.type())}};
    if (kv.value.type() == gguf::ValueType::ARRAY) {
      e["element_type"] = gguf::value_type_name(kv.value.array().element_type());
      e["count"] = kv.value.array().size();
    }
    e["value"] = value_to_json(kv.value, max_elems, &truncated);
    if (truncated) e["truncated"] = true;
    meta.push_back(std::move(e));
  }
  j["metadata"] = meta;
  json tensors = json::array();
  for (const auto& t : f.tensors()) tensors.push_back(tensor_json(f, t));
  j["tensors"] = tensors;
  fmt::print("{}\n", dump_json(j));
  return 0;
}

int print_text(const File& f, const Summary& s, const InspectOptions& o) {
  const auto row = [](std::string_view label, const std::string& value) {
    fmt::print("{:<16}{}\n", label, value);
  };
  fmt::print("{}\n\n", headline(f, s));
  // Names, keys and texts come from the file: printed inert (terminal_safe), never as raw bytes.
  row("file", terminal_safe(o.path));
  row("size", fmt::format("{} ({} bytes) · GGUF v{} · alignment {} · data at byte {}", format_bytes(f.size()),
                          f.size(), f.version(), f.alignment(), f.data_offset()));
  row("architecture", s.arch.empty() ? "(not set)" : terminal_safe(s.arch));
  if (!s.name.empty()) row("name", terminal_safe(s.name));
  row("parameters", fmt::format("{} ({})", format_count(s.parameters), s.parameters));
  if (s.file_type) {
    const auto name = gguf::file_type_name(*s.file_type);
    row("file type", fmt::format("{} ({})", name.empty() ? "unknown" : name, *s.file_type));
  }
  if (!s.hparams.empty()) {
    fmt::print("\nhyper-parameters ({}.*)\n", terminal_safe(s.arch));
    for (const auto& [k, kv] : s.hparams) fmt::print("  {:<38}{}\n", terminal_safe(k), value_to_text(kv->value, 8, 80));
  }
  if (s.tok_model || s.vocab) {
    fmt::print("\ntokenizer\n");
    fmt::print("  {:<14}{}\n", "model", terminal_safe(s.tok_model.value_or("(not set)")));
    if (s.tok_pre) fmt::print("  {:<14}{}\n", "pre", terminal_safe(*s.tok_pre));
    fmt::print("  {:<14}{} tokens{}\n", "vocab", s.vocab, s.merges ? fmt::format(", {} merges", s.merges) : "");
    for (const auto& st : s.specials) {
      fmt::print("  {:<14}{}{}\n", st.role, st.id,
                 st.text ? " " + value_to_text(gguf::Value::str(*st.text).view(), 1, 40) : " (out of range)");
    }
    if (s.add_bos || s.add_eos) {
      auto yn = [](std::optional<bool> b) { return b ? (*b ? "yes" : "no") : "unset"; };
      fmt::print("  {:<14}{} / {}\n", "add bos/eos", yn(s.add_bos), yn(s.add_eos));
    }
    std::string tmpl = s.chat_template_bytes ? fmt::format("present ({} bytes)", s.chat_template_bytes) : "none";
    for (const auto& n : s.named_templates) tmpl += ", " + terminal_safe(n);
    fmt::print("  {:<14}{}\n", "chat template", tmpl);
  }
  fmt::print("\ntensors         {} · {}\n", f.tensors().size(), format_bytes(s.tensor_bytes));
  if (!s.types.empty()) {
    fmt::print("  {:<10}{:>8}{:>14}{:>14}{:>8}\n", "type", "count", "elements", "bytes", "share");
    for (const auto& [name, st] : types_by_bytes(s)) {
      const double share = s.tensor_bytes ? 100.0 * static_cast<double>(st.bytes) / static_cast<double>(s.tensor_bytes) : 0.0;
      fmt::print("  {:<10}{:>8}{:>14}{:>14}{:>7.1f}%\n", name, st.count, format_count(st.elements),
                 format_bytes(st.bytes), share);
    }
  }
  if (o.metadata) {
    fmt::print("\nmetadata ({} keys)\n", f.metadata().size());
    const size_t max_elems = o.full_arrays ? SIZE_MAX : 8;
    for (const auto& kv : f.metadata()) {
      fmt::print("  {:<44}{:<9}{}\n", terminal_safe(kv.key), gguf::value_type_name(kv.value.type()),
                 value_to_text(kv.value, max_elems, o.full_arrays ? SIZE_MAX : 120));
    }
  }
  if (o.tensors) {
    fmt::print("\n  {:<48}{:<26}{:<9}{:>14}{:>14}\n", "name", "shape", "type", "file offset", "bytes");
    for (const auto& t : f.tensors()) {
      fmt::print("  {:<48}{:<26}{:<9}{:>14}{:>14}\n", terminal_safe(t.name), shape_text(t), gguf::tensor_type_name(t.type),
                 f.data_offset() + t.offset, t.n_bytes);
    }
  }
  return 0;
}

}  // namespace

namespace {

void add_inspect_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show what a GGUF file holds: architecture, hyper-parameters, "
                                                "tokenizer, tensors");
  cmd->add_option("file,-m,--model", opts->path, "GGUF file")->required();
  cmd->add_flag("--tensors", opts->tensors, "List every tensor: name, shape, type, offset, bytes");
  cmd->add_flag("--metadata", opts->metadata, "List every metadata key and value");
  cmd->add_flag("--full-arrays", opts->full_arrays, "Print arrays in full instead of their first elements");
  cmd->callback([opts, &global, &run] {
    run = [opts, &global] {
      const File f = File::open(hub::resolve_model_path(opts->path));
      spdlog::debug("parsed {}: {} keys, {} tensors", f.name(), f.metadata().size(), f.tensors().size());
      const Summary s = summarize(f);
      return global.json ? print_json(f, s, *opts) : print_text(f, s, *opts);
    };
  });
}

}  // namespace

ZINC_COMMAND(10, add_inspect_command);

}  // namespace zinc::cli
