#include "gguf/reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <limits>

namespace zinc::gguf {

namespace {

// Bounds-checked reading over the file's bytes. Every failure names the byte offset.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  const uint8_t* here() const { return bytes_.data() + pos_; }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw Error(fmt::format("{}: byte {}: {}", name_, at, what));
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail(pos_, fmt::format("file is truncated: {} needs {} bytes but only {} remain", what, n, remaining()));
    }
  }
  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += static_cast<size_t>(n);
  }
  uint32_t u32(std::string_view what) {
    need(4, what);
    const auto v = load_le<uint32_t>(here());
    pos_ += 4;
    return v;
  }
  uint64_t u64(std::string_view what) {
    need(8, what);
    const auto v = load_le<uint64_t>(here());
    pos_ += 8;
    return v;
  }
  std::string_view str(std::string_view what) {
    const size_t at = pos_;
    const uint64_t len = u64(what);
    if (len > remaining()) {
      fail(at, fmt::format("{} has length {} but only {} bytes remain in the file", what, len, remaining()));
    }
    std::string_view s(reinterpret_cast<const char*>(here()), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& name_;
  size_t pos_ = 0;
};

std::string quoted(std::string_view s) {
  // Keys and names come from untrusted bytes: show them escaped and bounded.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 96; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > 96) out += "...";
  return out + "'";
}

// Validates one value of type t at the cursor and advances past it.
void skip_value(Cursor& c, ValueType t, int depth, std::string_view key) {
  if (static_cast<uint32_t>(t) >= kValueTypeCount) {
    c.fail(c.pos(), fmt::format("metadata key {} has unknown value type {}", quoted(key), static_cast<uint32_t>(t)));
  }
  if (const size_t n = value_type_size(t)) {
    c.skip(n, fmt::format("value of {}", quoted(key)));
    return;
  }
  if (t == ValueType::STRING) {
    c.str(fmt::format("string value of {}", quoted(key)));
    return;
  }
  // ARRAY
  const size_t at = c.pos();
  if (depth >= kMaxArrayDepth) {
    c.fail(at, fmt::format("metadata key {} nests arrays deeper than {} levels", quoted(key), kMaxArrayDepth));
  }
  const uint32_t elem_id = c.u32(fmt::format("array element type of {}", quoted(key)));
  if (elem_id >= kValueTypeCount) {
    c.fail(at, fmt::format("metadata key {} is an array of unknown value type {}", quoted(key), elem_id));
  }
  const auto elem = static_cast<ValueType>(elem_id);
  const uint64_t count = c.u64(fmt::format("array length of {}", quoted(key)));
  // Smallest possible encoding of one element: its fixed size, 8 bytes for a string length, 12 for an
  // array header. Checking the count against that first keeps hostile counts from driving long loops.
  const size_t fixed = value_type_size(elem);
  const size_t min_size = fixed ? fixed : (elem == ValueType::STRING ? 8 : 12);
  if (count > c.remaining() / min_size) {
    c.fail(at, fmt::format("metadata key {} claims {} {} elements, more than the {} remaining bytes can hold",
                           quoted(key), count, value_type_name(elem), c.remaining()));
  }
  if (fixed) {
    c.skip(count * fixed, "array elements");
    return;
  }
  for (uint64_t i = 0; i < count; ++i) skip_value(c, elem, depth + 1, key);
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

File File::open(const std::filesystem::path& path) {
  File f;
  f.map_ = MappedFile::open(path);
  f.name_ = path.string();
  f.bytes_ = f.map_.bytes();
  f.parse_all();
  return f;
}

File File::parse(std::span<const uint8_t> bytes, std::string name) {
  File f;
  f.name_ = std::move(name);
  f.bytes_ = bytes;
  f.parse_all();
  return f;
}

void File::parse_all() {
  Cursor c(bytes_, name_);

  if (bytes_.size() < 4) {
    c.fail(0, fmt::format("file is {} bytes, too small to be a GGUF file", bytes_.size()));
  }
  if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
    c.fail(0, fmt::format("not a GGUF file (starts with {:02x} {:02x} {:02x} {:02x}, expected 'GGUF')",
                          bytes_[0], bytes_[1], bytes_[2], bytes_[3]));
  }
  c.skip(4, "magic");
  version_ = c.u32("version");
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3) {
      c.fail(4, "big-endian GGUF files are not supported");
    }
    if (version_ == 1) {
      c.fail(4, "GGUF version 1 is not supported (only versions 2 and 3): re-convert the model");
    }
    c.fail(4, fmt::format("unsupported GGUF version {} (this build reads versions 2 and 3)", version_));
  }
  const size_t counts_at = c.pos();
  const uint64_t n_tensors = c.u64("tensor count");
  const uint64_t n_kv = c.u64("metadata count");
  // A pair needs at least 13 bytes (key length, type, one-byte value); a tensor info at least 24.
  if (n_kv > c.remaining() / 13) {
    c.fail(counts_at + 8, fmt::format("metadata count {} cannot fit in the {} remaining bytes", n_kv, c.remaining()));
  }
  if (n_tensors > c.remaining() / 24) {
    c.fail(counts_at, fmt::format("tensor count {} cannot fit in the {} remaining bytes", n_tensors, c.remaining()));
  }

  kvs_.reserve(static_cast<size_t>(n_kv));
  kv_index_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = c.pos();
    const std::string_view key = c.str(fmt::format("key of metadata pair {}", i));
    const size_t type_at = c.pos();
    const uint32_t type_id = c.u32(fmt::format("value type of {}", quoted(key)));
    if (type_id >= kValueTypeCount) {
      c.fail(type_at, fmt::format("metadata key {} has unknown value type {}", quoted(key), type_id));
    }
    const size_t value_at = c.pos();
    skip_value(c, static_cast<ValueType>(type_id), 0, key);
    const auto [it, inserted] = kv_index_.emplace(key, kvs_.size());
    if (!inserted) {
      c.fail(at, fmt::format("duplicate metadata key {} (first defined at byte {})", quoted(key),
                             kvs_[it->second].file_offset));
    }
    kvs_.push_back({key, ValueView(static_cast<ValueType>(type_id), bytes_.subspan(value_at, c.pos() - value_at)),
                    at});
  }

  if (const KeyValue* kv = find("general.alignment")) {
    const auto a = kv->value.type() == ValueType::UINT32 ? kv->value.as<uint32_t>() : std::nullopt;
    if (!a) {
      c.fail(kv->file_offset, fmt::format("general.alignment must be a uint32, found {}",
                                          value_type_name(kv->value.type())));
    }
    if (*a == 0 || !std::has_single_bit(*a)) {
      c.fail(kv->file_offset, fmt::format("general.alignment is {}, which is not a power of two", *a));
    }
    alignment_ = *a;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  tensor_index_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.info_offset = c.pos();
    t.name = c.str(fmt::format("name of tensor {}", i));
    const size_t dims_at = c.pos();
    t.n_dims = c.u32(fmt::format("dimension count of tensor {}", quoted(t.name)));
    if (t.n_dims > kMaxDims) {
      c.fail(dims_at, fmt::format("tensor {} has {} dimensions (at most {} are allowed)", quoted(t.name), t.n_dims,
                                  kMaxDims));
    }
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      const size_t at = c.pos();
      t.ne[d] = c.u64(fmt::format("dimension {} of tensor {}", d, quoted(t.name)));
      if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        c.fail(at, fmt::format("tensor {} dimension {} is {}, beyond the largest allowed", quoted(t.name), d, t.ne[d]));
      }
    }
    const size_t type_at = c.pos();
    const uint32_t type_id = c.u32(fmt::format("type of tensor {}", quoted(t.name)));
    const auto info = tensor_type_info(type_id);
    if (!info) c.fail(type_at, fmt::format("tensor {} has unknown type id {}", quoted(t.name), type_id));
    t.type = static_cast<TensorType>(type_id);
    if (t.ne[0] % info->block_size != 0) {
      c.fail(dims_at, fmt::format("tensor {} has row length {}, not a multiple of the {} block size {}",
                                  quoted(t.name), t.ne[0], info->name, info->block_size));
    }
    uint64_t n = 1, rows = 1, bytes = 0;
    bool overflow = false;
    for (uint32_t d = 0; d < kMaxDims; ++d) overflow |= mul_overflows(n, t.ne[d], &n);
    for (uint32_t d = 1; d < kMaxDims; ++d) overflow |= mul_overflows(rows, t.ne[d], &rows);
    overflow |= mul_overflows(t.ne[0] / info->block_size, info->type_size, &bytes);
    overflow |= mul_overflows(bytes, rows, &bytes);
    if (overflow || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      c.fail(dims_at, fmt::format("tensor {} is too large (its element or byte count overflows)", quoted(t.name)));
    }
    t.n_elements = n;
    t.n_bytes = bytes;
    const size_t offset_at = c.pos();
    t.offset = c.u64(fmt::format("data offset of tensor {}", quoted(t.name)));
    if (t.offset % alignment_ != 0) {
      c.fail(offset_at, fmt::format("tensor {} has data offset {}, not a multiple of the alignment {}",
                                    quoted(t.name), t.offset, alignment_));
    }
    const auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
    if (!inserted) {
      c.fail(t.info_offset, fmt::format("duplicate tensor name {} (first defined at byte {})", quoted(t.name),
                                        tensors_[it->second].info_offset));
    }
    tensors_.push_back(t);
  }

  // The data section starts at the next multiple of the alignment. A file without tensors may end
  // before that padding.
  const uint64_t header_end = c.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > bytes_.size()) {
    c.fail(header_end, fmt::format("file is truncated: the tensor data section would start at byte {} but the file "
                                   "has only {} bytes",
                                   data_offset_, bytes_.size()));
  }
  const uint64_t data_size = data_offset_ <= bytes_.size() ? bytes_.size() - data_offset_ : 0;
  for (const TensorInfo& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      c.fail(t.info_offset, fmt::format("tensor {} ({} bytes at data offset {}) extends past the end of the file "
                                        "(the data section holds {} bytes)",
                                        quoted(t.name), t.n_bytes, t.offset, data_size));
    }
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (a.n_bytes > 0 && b.n_bytes > 0 && a.offset + a.n_bytes > b.offset) {
      c.fail(b.info_offset, fmt::format("tensor {} (data offset {}) overlaps tensor {} (data offset {}, {} bytes)",
                                        quoted(b.name), b.offset, quoted(a.name), a.offset, a.n_bytes));
    }
  }
}

const KeyValue* File::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw Error(fmt::format("{}: required tensor '{}' is missing", name_, name));
  return *t;
}

void File::throw_missing_key(std::string_view key) const {
  throw Error(fmt::format("{}: required metadata key '{}' is missing", name_, key));
}

void File::throw_wrong_type(const KeyValue& kv, const std::string& expected) const {
  std::string found(value_type_name(kv.value.type()));
  if (kv.value.is_integer() || kv.value.is_float()) {
    if (const auto v = kv.value.as<double>()) found += fmt::format(" {}", *v);
  }
  throw Error(fmt::format("{}: byte {}: metadata key '{}' is {}, expected {}", name_, kv.file_offset, kv.key, found,
                          expected));
}

}  // namespace zinc::gguf
