// libFuzzer target for the GGUF reader. Any input must either be rejected with zinc::Error or give a
// File whose every view is readable; an accepted file must survive writer → reader unchanged
// (same keys and encoded values, same tensors and tensor bytes). Anything else aborts.
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "gguf/reader.h"
#include "gguf/writer.h"

namespace {

using namespace zinc::gguf;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "round-trip mismatch: %s\n", what);
  std::abort();
}

uint64_t walk(const ValueView& v) {
  uint64_t h = static_cast<uint64_t>(v.type());
  switch (v.type()) {
    case ValueType::STRING:
      for (char c : v.string()) h = h * 31 + static_cast<unsigned char>(c);
      return h;
    case ValueType::ARRAY:
      for (ValueView e : v.array()) h = h * 31 + walk(e);
      return h;
    case ValueType::BOOL: return h + (*v.as<bool>() ? 1 : 0);
    case ValueType::FLOAT32: case ValueType::FLOAT64: return h + static_cast<uint64_t>(*v.as<double>() != 0.0);
    default: return h + static_cast<uint64_t>(v.as<int64_t>().value_or(0)) + v.as<uint64_t>().value_or(0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<File> f;
  try {
    f.emplace(File::parse({data, size}, "fuzz"));
  } catch (const zinc::Error&) {
    return 0;
  }
  volatile uint64_t sink = 0;
  for (const KeyValue& kv : f->metadata()) sink = sink + walk(kv.value);
  for (const TensorInfo& t : f->tensors()) {
    const auto bytes = f->tensor_data(t);
    if (!bytes.empty()) sink = sink + bytes.front() + bytes.back();
  }

  std::optional<Writer> w;
  try {
    w.emplace(Writer::copy_of(*f));  // the writer refuses names the reference loader would refuse
  } catch (const zinc::Error&) {
    return 0;
  }
  VectorSink out;
  w->write(out);
  if (out.data.size() != w->file_size()) die("file_size");
  const File g = File::parse(out.data, "rewritten");  // throws (and so crashes) if we wrote a bad file
  if (g.metadata().size() != f->metadata().size() || g.tensors().size() != f->tensors().size()) die("counts");
  for (size_t i = 0; i < g.metadata().size(); ++i) {
    const auto& a = f->metadata()[i];
    const auto& b = g.metadata()[i];
    if (a.key != b.key || a.value.type() != b.value.type() ||
        !std::equal(a.value.encoded().begin(), a.value.encoded().end(), b.value.encoded().begin(),
                    b.value.encoded().end())) {
      die("metadata");
    }
  }
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const auto& a = f->tensors()[i];
    const auto& b = g.tensors()[i];
    if (a.name != b.name || a.type != b.type || a.ne != b.ne) die("tensor info");
    const auto da = f->tensor_data(a), db = g.tensor_data(b);
    if (!std::equal(da.begin(), da.end(), db.begin(), db.end())) die("tensor data");
  }
  return 0;
}
