// The checkpoints with Qwen3.5's multi-token-prediction head: tests/models/fixtures-mtp/<name> holds
// the head (mtp.safetensors), its reference and a shard index; the model's own weights are those of
// tests/models/fixtures/<name> (the generator makes both from the same seeds). A directory of links to
// both is the whole checkpoint, as zinc convert reads it.
#pragma once

#include <filesystem>
#include <string>

namespace zinc::test {

inline std::filesystem::path mtp_checkpoint(const std::filesystem::path& mtp_fixtures, const std::string& name,
                                            const std::filesystem::path& into) {
  const auto dir = into / (name + "-mtp");
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(mtp_fixtures / name)) {
    std::filesystem::create_symlink(e.path(), dir / e.path().filename());
  }
  std::filesystem::create_symlink(mtp_fixtures.parent_path() / "fixtures" / name / "model.safetensors", dir / "model.safetensors");
  return dir;
}

}  // namespace zinc::test
