// Managed models: short ids (qwen3:8b, gemma3:4b, ...) for GGUF files published on Hugging Face, with
// what a user needs to decide (quantization, download size, memory needed, architecture).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zinc::hub {

struct CatalogEntry {
  const char* id;
  const char* repo;  // Hugging Face owner/name
  const char* file;  // the GGUF file in the repo
  const char* quant;
  uint64_t size_bytes;  // download size (as published; the server's figure wins)
  const char* architecture;
  uint64_t min_memory_bytes;  // weights plus a working context
};

const std::vector<CatalogEntry>& catalog();
// A family name alone (qwen3) or with :latest means the family's default size, as Ollama's tags do:
// the catalog id it stands for; any other name is returned as it is.
std::string canonical_id(const std::string& id);
// The entry of `id` (after canonical_id), or nullptr.
const CatalogEntry* find_in_catalog(const std::string& id);

// Where a model comes from: a URL to fetch and the installed name.
struct Source {
  std::string id;    // the name under which it is installed (catalog id, owner/repo/file, or host/path of a URL)
  std::string url;   // https:// (or http:// for tests)
  std::string file;  // the file name to store
};

// Resolves `zinc pull` arguments: a catalog id, hf://owner/repo[/file.gguf | :QUANT], or an http(s)
// URL. hf:// without a file picks the repo's GGUF of the given quantization (only for repos in the
// catalog, which knows the file names). $HF_ENDPOINT replaces https://huggingface.co. Throws
// zinc::Error with the catalog ids for an unknown name.
Source resolve_source(const std::string& spec);

std::string hf_endpoint();

}  // namespace zinc::hub
