#include "gguf/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cstring>

namespace zinc::gguf {

namespace {

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Names longer than this do not load in the reference implementation.
constexpr size_t kMaxTensorName = 63;

class Encoder {
 public:
  explicit Encoder(ByteSink& sink) : sink_(sink) {}
  void bytes(const void* p, size_t n) {
    sink_.write({static_cast<const uint8_t*>(p), n});
    written_ += n;
  }
  void u32(uint32_t v) { bytes(&v, 4); }
  void u64(uint64_t v) { bytes(&v, 8); }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void zeros(uint64_t n) {
    static const uint8_t z[256] = {};
    while (n > 0) {
      const size_t k = n < sizeof z ? static_cast<size_t>(n) : sizeof z;
      bytes(z, k);
      n -= k;
    }
  }
  uint64_t written() const { return written_; }

 private:
  ByteSink& sink_;
  uint64_t written_ = 0;
};

// Buffered file output that reports the path and errno on failure (e.g. a full disk).
class FileSink final : public ByteSink {
 public:
  FileSink(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
    buf_.reserve(kBuf);
  }
  ~FileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(std::span<const uint8_t> bytes) override {
    if (buf_.size() + bytes.size() > kBuf) flush();
    if (bytes.size() >= kBuf) {
      write_all(bytes.data(), bytes.size());
    } else {
      buf_.insert(buf_.end(), bytes.begin(), bytes.end());
    }
  }
  void finish() {
    flush();
    if (::fsync(fd_) != 0) fail("cannot sync");
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("cannot close");
    }
    fd_ = -1;
  }

 private:
  static constexpr size_t kBuf = 1 << 20;
  void flush() {
    write_all(buf_.data(), buf_.size());
    buf_.clear();
  }
  void write_all(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t k = ::write(fd_, p, n);
      if (k < 0) {
        if (errno == EINTR) continue;
        fail("cannot write");
      }
      p += k;
      n -= static_cast<size_t>(k);
    }
  }
  [[noreturn]] void fail(const char* what) {
    throw Error(fmt::format("{} '{}': {}", what, path_.string(), std::strerror(errno)));
  }
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<uint8_t> buf_;
};

}  // namespace

Writer::Writer(uint32_t version) : version_(version) {
  if (version != 2 && version != 3) throw Error(fmt::format("cannot write GGUF version {} (only 2 and 3)", version));
}

Writer Writer::copy_of(const File& file) {
  Writer w(file.version());
  for (const KeyValue& kv : file.metadata()) w.metadata_.set(kv.key, Value::copy_of(kv.value));
  for (const TensorInfo& t : file.tensors()) {
    w.add_tensor(std::string(t.name), t.type, std::span<const uint64_t>(t.ne.data(), t.n_dims), file.tensor_data(t));
  }
  return w;
}

void Writer::add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne,
                        std::span<const uint8_t> data) {
  const uint64_t n = data.size();
  add(std::move(name), type, ne, [data](const auto& emit) { emit(data); }, &n);
}

void Writer::add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne, TensorSource source) {
  add(std::move(name), type, ne, std::move(source), nullptr);
}

void Writer::add(std::string name, TensorType type, std::span<const uint64_t> ne, TensorSource source,
                 const uint64_t* expected_bytes) {
  const auto info = tensor_type_info(static_cast<uint32_t>(type));
  if (!info) throw Error(fmt::format("tensor '{}': invalid tensor type {}", name, static_cast<uint32_t>(type)));
  if (name.empty() || name.size() > kMaxTensorName) {
    throw Error(fmt::format("tensor name '{}' must be 1 to {} bytes long", name, kMaxTensorName));
  }
  for (const Tensor& t : tensors_) {
    if (t.name == name) throw Error(fmt::format("duplicate tensor name '{}'", name));
  }
  if (ne.empty() || ne.size() > kMaxDims) {
    throw Error(fmt::format("tensor '{}' has {} dimensions (1 to {} allowed)", name, ne.size(), kMaxDims));
  }
  if (ne[0] % info->block_size != 0) {
    throw Error(fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}", name, ne[0],
                            info->name, info->block_size));
  }
  uint64_t bytes = ne[0] / info->block_size * info->type_size;
  for (size_t d = 1; d < ne.size(); ++d) {
    if (__builtin_mul_overflow(bytes, ne[d], &bytes)) throw Error(fmt::format("tensor '{}' is too large", name));
  }
  if (expected_bytes && *expected_bytes != bytes) {
    throw Error(fmt::format("tensor '{}': {} data bytes given, its shape and type need {}", name, *expected_bytes,
                            bytes));
  }
  tensors_.push_back({std::move(name), type, std::vector<uint64_t>(ne.begin(), ne.end()), bytes, std::move(source)});
}

uint32_t Writer::alignment() const {
  const Value* v = metadata_.find("general.alignment");
  if (!v) return kDefaultAlignment;
  const auto a = v->type() == ValueType::UINT32 ? v->view().as<uint32_t>() : std::nullopt;
  if (!a || *a == 0 || !std::has_single_bit(*a)) {
    throw Error("general.alignment must be a uint32 power of two");
  }
  return *a;
}

uint64_t Writer::header_size() const {
  uint64_t n = 4 + 4 + 8 + 8;
  for (const auto& [key, value] : metadata_.items()) n += 8 + key.size() + 4 + value.encoded().size();
  for (const Tensor& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  return n;
}

uint64_t Writer::file_size() const {
  const uint64_t a = alignment();
  if (tensors_.empty()) return header_size();
  uint64_t n = align_up(header_size(), a);
  for (const Tensor& t : tensors_) n += align_up(t.n_bytes, a);
  return n;
}

void Writer::write(ByteSink& sink, const WriteProgress& progress) const {
  const uint32_t a = alignment();
  const uint64_t total = progress ? file_size() : 0;
  Encoder e(sink);
  e.bytes("GGUF", 4);
  e.u32(version_);
  e.u64(tensors_.size());
  e.u64(metadata_.items().size());
  for (const auto& [key, value] : metadata_.items()) {
    e.str(key);
    e.u32(static_cast<uint32_t>(value.type()));
    e.bytes(value.encoded().data(), value.encoded().size());
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    e.str(t.name);
    e.u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) e.u64(d);
    e.u32(static_cast<uint32_t>(t.type));
    e.u64(offset);
    offset += align_up(t.n_bytes, a);
  }
  // The data section starts aligned; a file without tensors ends right after its header, as
  // vocabulary-only files do.
  if (!tensors_.empty()) e.zeros(align_up(e.written(), a) - e.written());
  for (const Tensor& t : tensors_) {
    const uint64_t start = e.written();
    t.source([&](std::span<const uint8_t> piece) {
      if (e.written() - start + piece.size() > t.n_bytes) {
        throw Error(fmt::format("tensor '{}': source produced more than its {} bytes", t.name, t.n_bytes));
      }
      e.bytes(piece.data(), piece.size());
      if (progress) progress(e.written(), total);
    });
    if (e.written() - start != t.n_bytes) {
      throw Error(fmt::format("tensor '{}': source produced {} bytes, expected {}", t.name, e.written() - start,
                              t.n_bytes));
    }
    e.zeros(align_up(t.n_bytes, a) - t.n_bytes);
  }
  if (progress) progress(e.written(), total);
}

void Writer::write_file(const std::filesystem::path& path, const WriteProgress& progress) const {
  std::filesystem::path tmp = path;
  tmp += fmt::format(".partial-{}", ::getpid());
  try {
    FileSink sink(tmp);
    write(sink, progress);
    sink.finish();
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace zinc::gguf
