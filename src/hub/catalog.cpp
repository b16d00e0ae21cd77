#include "hub/catalog.h"

#include <fmt/format.h>

#include <cstdlib>
#include <utility>

#include "core/error.h"

namespace zinc::hub {

namespace {

constexpr uint64_t MB = 1000ull * 1000, GB = 1000 * MB;

}  // namespace

const std::vector<CatalogEntry>& catalog() {
  static const std::vector<CatalogEntry> kCatalog = {
      {"qwen3:0.6b", "Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf", "Q8_0", 639 * MB, "qwen3", 2 * GB},
      {"qwen3:1.7b", "Qwen/Qwen3-1.7B-GGUF", "Qwen3-1.7B-Q8_0.gguf", "Q8_0", 1830 * MB, "qwen3", 3 * GB},
      {"qwen3:4b", "Qwen/Qwen3-4B-GGUF", "Qwen3-4B-Q4_K_M.gguf", "Q4_K_M", 2500 * MB, "qwen3", 4 * GB},
      {"qwen3:8b", "Qwen/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf", "Q4_K_M", 5030 * MB, "qwen3", 7 * GB},
      {"qwen3:14b", "Qwen/Qwen3-14B-GGUF", "Qwen3-14B-Q4_K_M.gguf", "Q4_K_M", 9000 * MB, "qwen3", 11 * GB},
      {"qwen3:32b", "Qwen/Qwen3-32B-GGUF", "Qwen3-32B-Q4_K_M.gguf", "Q4_K_M", 19800 * MB, "qwen3", 23 * GB},
      {"qwen3:30b-a3b", "Qwen/Qwen3-30B-A3B-GGUF", "Qwen3-30B-A3B-Q4_K_M.gguf", "Q4_K_M", 18600 * MB, "qwen3moe", 21 * GB},
      {"qwen3.6:35b-a3b", "unsloth/Qwen3.6-35B-A3B-GGUF", "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL", 22200 * MB,
       "qwen35moe", 25 * GB},
      {"gemma3:1b", "ggml-org/gemma-3-1b-it-GGUF", "gemma-3-1b-it-Q4_K_M.gguf", "Q4_K_M", 806 * MB, "gemma3", 2 * GB},
      {"gemma3:4b", "ggml-org/gemma-3-4b-it-GGUF", "gemma-3-4b-it-Q4_K_M.gguf", "Q4_K_M", 2490 * MB, "gemma3", 4 * GB},
      {"gemma3:12b", "ggml-org/gemma-3-12b-it-GGUF", "gemma-3-12b-it-Q4_K_M.gguf", "Q4_K_M", 7300 * MB, "gemma3", 10 * GB},
      {"gemma3:27b", "ggml-org/gemma-3-27b-it-GGUF", "gemma-3-27b-it-Q4_K_M.gguf", "Q4_K_M", 16500 * MB, "gemma3", 20 * GB},
      {"gemma4:31b", "ggml-org/gemma-4-31B-it-GGUF", "gemma-4-31B-it-Q4_K_M.gguf", "Q4_K_M", 18700 * MB, "gemma4", 23 * GB},
      {"gemma4:26b-a4b", "ggml-org/gemma-4-26B-A4B-it-GGUF", "gemma-4-26B-A4B-it-Q4_K_M.gguf", "Q4_K_M", 16900 * MB, "gemma4",
       20 * GB},
      {"gpt-oss:20b", "ggml-org/gpt-oss-20b-GGUF", "gpt-oss-20b-mxfp4.gguf", "MXFP4", 12100 * MB, "gpt-oss", 16 * GB},
      {"llama3.1:8b", "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "Q4_K_M",
       4920 * MB, "llama", 7 * GB},
      {"llama3.2:1b", "bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M", 808 * MB,
       "llama", 2 * GB},
      {"llama3.2:3b", "bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q4_K_M.gguf", "Q4_K_M", 2020 * MB,
       "llama", 4 * GB},
  };
  return kCatalog;
}

std::string canonical_id(const std::string& id) {
  // The size a family name alone stands for: the one most machines that run the family can hold.
  static const std::pair<const char*, const char*> kDefaults[] = {
      {"qwen3", "qwen3:8b"},       {"qwen3.6", "qwen3.6:35b-a3b"}, {"gemma3", "gemma3:4b"},
      {"gemma4", "gemma4:26b-a4b"}, {"gpt-oss", "gpt-oss:20b"},     {"llama3.1", "llama3.1:8b"},
      {"llama3.2", "llama3.2:3b"}};
  std::string family = id;
  if (family.ends_with(":latest")) family.resize(family.size() - 7);
  if (family.find(':') != std::string::npos) return id;
  for (const auto& [f, d] : kDefaults) {
    if (family == f) return d;
  }
  return id;
}

const CatalogEntry* find_in_catalog(const std::string& id) {
  const std::string c = canonical_id(id);
  for (const auto& e : catalog()) {
    if (c == e.id) return &e;
  }
  return nullptr;
}

std::string hf_endpoint() {
  const char* e = std::getenv("HF_ENDPOINT");
  std::string s = e && *e ? e : "https://huggingface.co";
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

namespace {

std::string resolve_url(const std::string& repo, const std::string& file) {
  return fmt::format("{}/{}/resolve/main/{}", hf_endpoint(), repo, file);
}

}  // namespace

Source resolve_source(const std::string& spec) {
  if (const CatalogEntry* e = find_in_catalog(spec)) return {e->id, resolve_url(e->repo, e->file), e->file};
  if (spec.rfind("hf://", 0) == 0) {
    std::string rest = spec.substr(5);
    std::string quant;
    if (const auto colon = rest.find(':'); colon != std::string::npos) {
      quant = rest.substr(colon + 1);
      rest = rest.substr(0, colon);
    }
    const auto s1 = rest.find('/');
    const auto s2 = s1 == std::string::npos ? std::string::npos : rest.find('/', s1 + 1);
    if (s1 == std::string::npos || s1 == 0) {
      throw Error(fmt::format("'{}': expected hf://owner/repo/file.gguf or hf://owner/repo:QUANT", spec));
    }
    const std::string repo = rest.substr(0, s2);
    if (s2 != std::string::npos) {
      const std::string file = rest.substr(s2 + 1);
      if (file.empty() || file.find("..") != std::string::npos) throw Error(fmt::format("'{}': bad file name", spec));
      return {repo + "/" + file, resolve_url(repo, file), file.substr(file.rfind('/') + 1)};
    }
    for (const auto& e : catalog()) {
      if (repo == e.repo && (quant.empty() || quant == e.quant)) return {repo + "/" + e.file, resolve_url(repo, e.file), e.file};
    }
    throw Error(fmt::format("'{}': name the file (hf://{}/FILE.gguf): the repo's file names are not known here", spec, repo));
  }
  if (spec.rfind("https://", 0) == 0 || spec.rfind("http://", 0) == 0) {
    std::string path = spec.substr(spec.find("//") + 2);
    const auto q = path.find_first_of("?#");
    if (q != std::string::npos) path = path.substr(0, q);
    const auto slash = path.rfind('/');
    const std::string file = slash == std::string::npos ? "" : path.substr(slash + 1);
    if (file.empty() || file == "." || file == "..") throw Error(fmt::format("'{}': the URL does not end in a file name", spec));
    // Known by where it comes from (host and path), not by its file name alone: another server's
    // model.gguf is another model.
    return {path, spec, file};
  }
  std::string ids;
  for (const auto& e : catalog()) ids += (ids.empty() ? "" : ", ") + std::string(e.id);
  throw Error(fmt::format("unknown model '{}': use a catalog id ({}), hf://owner/repo/file.gguf or an https:// URL",
                          spec, ids));
}

}  // namespace zinc::hub
