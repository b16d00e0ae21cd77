#include "hub/store.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/bandwidth.h"
#include "core/error.h"
#include "gguf/reader.h"
#include "hub/catalog.h"

namespace zinc::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A directory name for an id: ':' and '/' would nest or confuse file systems.
std::string dir_name(const std::string& id) {
  std::string d;
  for (char c : id) d += (c == ':' || c == '/' || c == '\\') ? '-' : c;
  if (d.empty() || d == "." || d == "..") throw Error(fmt::format("'{}' is not a usable model name", id));
  return d;
}

std::optional<InstalledModel> read_manifest(const fs::path& dir) {
  std::ifstream in(dir / "zinc.json");
  if (!in) return std::nullopt;
  try {
    const json j = json::parse(in);
    InstalledModel m;
    m.id = j.at("id").get<std::string>();
    m.file = dir / j.at("file").get<std::string>();
    m.size = j.value("size", uint64_t{0});
    m.architecture = j.value("architecture", "");
    m.source = j.value("source", "");
    m.sha256 = j.value("sha256", "");
    m.verified = j.value("verified", false);
    if (!fs::exists(m.file)) return std::nullopt;
    return m;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

fs::path models_dir() { return fs::path(zinc_home()) / "models"; }

std::vector<InstalledModel> installed_models() {
  std::vector<InstalledModel> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(models_dir(), ec)) {
    if (!e.is_directory()) continue;
    if (auto m = read_manifest(e.path())) out.push_back(std::move(*m));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

std::optional<InstalledModel> find_installed(const std::string& id) {
  if (id.empty()) return std::nullopt;
  auto m = read_manifest(models_dir() / dir_name(id));
  if (m && m->id != id) return std::nullopt;  // another id whose directory name is the same
  return m;
}

void remove_installed(const std::string& id) {
  const fs::path dir = models_dir() / dir_name(id);
  if (!fs::exists(dir)) {
    throw Error(fmt::format("'{}' is not installed (zinc list shows what is)", id));
  }
  fs::remove_all(dir);
}

PullResult pull(const std::string& spec, const DownloadOptions& options) {
  const Source src = resolve_source(spec);
  PullResult r;
  if (auto m = find_installed(src.id)) {
    r.model = *m;
    r.already_installed = true;
    return r;
  }
  const fs::path dir = models_dir() / dir_name(src.id);
  if (const auto other = read_manifest(dir); other && other->id != src.id) {
    throw Error(fmt::format("'{}' would be stored where '{}' is installed ({}); zinc rm {} first", src.id, other->id,
                            dir.string(), other->id));
  }
  std::string arch;
  DownloadOptions o = options;
  o.validate = [&](const fs::path& part) {
    try {
      const auto f = gguf::File::open(part);
      arch = f.get_or<std::string>("general.architecture", "");
    } catch (const Error& e) {
      throw Error(fmt::format("{}: the download is not a usable GGUF file ({}); it was discarded", src.url, e.what()));
    }
  };
  try {
    r.download = download(src.url, dir / src.file, o);
  } catch (...) {
    // Keep a partial file to resume from; otherwise leave no trace of the attempt.
    std::error_code ec;
    if (!fs::exists(dir / (src.file + ".part"), ec)) fs::remove_all(dir, ec);
    throw;
  }
  r.model.id = src.id;
  r.model.file = dir / src.file;
  r.model.size = r.download.size;
  r.model.architecture = arch;
  r.model.source = src.url;
  r.model.sha256 = r.download.sha256;
  r.model.verified = r.download.verified;
  const json manifest = {{"id", r.model.id},         {"file", src.file},          {"size", r.model.size},
                         {"architecture", arch},       {"source", src.url},         {"sha256", r.model.sha256},
                         {"verified", r.model.verified}};
  const fs::path tmp = dir / "zinc.json.tmp";
  std::ofstream(tmp) << manifest.dump(2) << "\n";
  fs::rename(tmp, dir / "zinc.json");
  return r;
}

std::string resolve_model_path(const std::string& arg) {
  std::error_code ec;
  if (fs::exists(arg, ec)) return arg;  // a path: opening it reports any problem
  if (auto m = find_installed(arg)) return m->file.string();
  if (auto m = find_installed(canonical_id(arg))) return m->file.string();  // qwen3: the installed qwen3:8b
  if (const CatalogEntry* e = find_in_catalog(arg)) {
    throw Error(fmt::format("model '{}' is not installed: zinc pull {}", e->id, e->id));
  }
  return arg;  // neither: the file open says it does not exist
}

}  // namespace zinc::hub
