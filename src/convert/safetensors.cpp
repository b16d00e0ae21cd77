#include "convert/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_bounded.h"

namespace zinc::convert {

namespace {

struct DTypeRow {
  const char* name;
  StDType type;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {{"F32", StDType::F32, 4},  {"F16", StDType::F16, 2}, {"BF16", StDType::BF16, 2},
                                {"F64", StDType::F64, 8},  {"I64", StDType::I64, 8}, {"I32", StDType::I32, 4},
                                {"I16", StDType::I16, 2},  {"I8", StDType::I8, 1},   {"U8", StDType::U8, 1},
                                {"BOOL", StDType::BOOL, 1}};

}  // namespace

size_t st_dtype_size(StDType t) {
  for (const auto& r : kDTypes) {
    if (r.type == t) return r.size;
  }
  return 0;
}

const char* st_dtype_name(StDType t) {
  for (const auto& r : kDTypes) {
    if (r.type == t) return r.name;
  }
  return "?";
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.map_ = MappedFile::open(path);
  f.parse_all(f.map_.bytes(), path.string());
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  SafetensorsFile f;
  f.parse_all(bytes, name);
  return f;
}

void SafetensorsFile::parse_all(std::span<const uint8_t> bytes, const std::string& name) {
  auto fail = [&](const std::string& what) -> void { throw Error(fmt::format("{}: {}", name, what)); };
  if (bytes.size() < 8) fail(fmt::format("file is {} bytes, too small to be safetensors", bytes.size()));
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8) {
    fail(fmt::format("header length {} exceeds the file ({} bytes)", header_len, bytes.size()));
  }
  const auto* hp = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header;
  try {
    header = parse_json_bounded<nlohmann::json>(std::string_view(hp, static_cast<size_t>(header_len)));
  } catch (const JsonTooDeep& e) {
    fail(fmt::format("header refused: {}", e.what()));
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) fail("header is not a JSON object");
  const auto data = bytes.subspan(8 + static_cast<size_t>(header_len));
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") continue;
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") ||
        !v["dtype"].is_string() || !v["shape"].is_array() || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      fail(fmt::format("tensor '{}' needs dtype, shape and data_offsets [begin, end]", key));
    }
    StTensor t;
    t.name = key;
    const std::string dt = v["dtype"].get<std::string>();
    const auto row = std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const DTypeRow& r) { return dt == r.name; });
    if (row == std::end(kDTypes)) fail(fmt::format("tensor '{}' has unsupported dtype '{}'", key, dt));
    t.dtype = row->type;
    uint64_t n = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail(fmt::format("tensor '{}' has a shape entry that is not a non-negative integer", key));
      const auto dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(n, dim, &n)) {
        fail(fmt::format("tensor '{}' is too large", key));
      }
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      fail(fmt::format("tensor '{}' has data_offsets that are not non-negative integers", key));
    }
    const auto begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    uint64_t bytes_needed;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(row->size), &bytes_needed) || end < begin ||
        end - begin != bytes_needed) {
      fail(fmt::format("tensor '{}' ({} {}) does not match its byte range [{}, {})", key, dt, v["shape"].dump(), begin, end));
    }
    if (end > data.size()) {
      fail(fmt::format("tensor '{}' ends at byte {} of the data, which has only {}", key, end, data.size()));
    }
    t.data = data.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    tensors_.push_back(std::move(t));
  }
}

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
  Checkpoint c;
  c.dir_ = dir;
  std::vector<std::filesystem::path> files;
  const auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index)) {
    std::ifstream in(index);
    nlohmann::json j;
    try {
      j = parse_json_bounded<nlohmann::json>(
          std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    } catch (const JsonTooDeep& e) {
      throw Error(fmt::format("{}: {}", index.string(), e.what()));
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}: not valid JSON: {}", index.string(), e.what()));
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw Error(fmt::format("{}: no weight_map object", index.string()));
    }
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        throw Error(fmt::format("{}: tensor '{}' maps to an invalid file name", index.string(), tensor));
      }
      const auto p = dir / file.get<std::string>();
      if (std::find(files.begin(), files.end(), p) == files.end()) files.push_back(p);
    }
  } else if (std::filesystem::exists(dir / "model.safetensors")) {
    files.push_back(dir / "model.safetensors");
  } else {
    throw Error(fmt::format("{}: no model.safetensors or model.safetensors.index.json found", dir.string()));
  }
  for (const auto& p : files) {
    c.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(p)));
    for (const auto& t : c.files_.back()->tensors()) {
      if (!c.by_name_.emplace(t.name, &t).second) {
        throw Error(fmt::format("{}: tensor '{}' appears in more than one shard", dir.string(), t.name));
      }
    }
  }
  return c;
}

const StTensor* Checkpoint::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const StTensor& Checkpoint::get(const std::string& name) const {
  const StTensor* t = find(name);
  if (!t) throw Error(fmt::format("{}: checkpoint has no tensor '{}'", dir_.string(), name));
  return *t;
}

std::vector<const StTensor*> Checkpoint::tensors() const {
  std::vector<const StTensor*> out;
  for (const auto& [name, t] : by_name_) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const StTensor* a, const StTensor* b) { return a->name < b->name; });
  return out;
}

}  // namespace zinc::convert
