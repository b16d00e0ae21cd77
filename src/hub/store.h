// Installed models under $ZINC_HOME/models: one directory per model with its GGUF file and a manifest
// (id, source, digest, size, architecture). `-m` accepts a file path or an installed id.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hub/download.h"

namespace zinc::hub {

struct InstalledModel {
  std::string id;
  std::filesystem::path file;
  uint64_t size = 0;
  std::string architecture, source, sha256;
  bool verified = false;
};

std::filesystem::path models_dir();
std::vector<InstalledModel> installed_models();
std::optional<InstalledModel> find_installed(const std::string& id);

// Removes an installed model (and any partial download of it); throws zinc::Error when unknown.
void remove_installed(const std::string& id);

struct PullResult {
  InstalledModel model;
  DownloadResult download;
  bool already_installed = false;
};

// Downloads (or finds already installed) the model `spec` names (see resolve_source); the file must
// parse as GGUF before it is installed.
PullResult pull(const std::string& spec, const DownloadOptions& options);

// A model argument: an existing path as is, an installed id as its file; a catalog id that is not
// installed throws zinc::Error saying to pull it; anything else comes back unchanged (opening it
// reports the missing file).
std::string resolve_model_path(const std::string& arg);

}  // namespace zinc::hub
