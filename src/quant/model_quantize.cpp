#include "quant/model_quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/writer.h"
#include "quant/quant.h"

namespace zinc::quant {

namespace {

bool is_float_type(gguf::TensorType t) {
  return t == gguf::TensorType::F32 || t == gguf::TensorType::F16 || t == gguf::TensorType::BF16;
}

}  // namespace

QuantizeReport quantize_model(const gguf::File& in, const std::filesystem::path& out, const QuantizeOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  TypeSelector selector(opts.mixture, model_facts(in), opts.overrides);
  gguf::Writer w(in.version());
  for (const auto& kv : in.metadata()) w.metadata().set(kv.key, gguf::Value::copy_of(kv.value));
  w.metadata().set("general.file_type", gguf::Value::u32(opts.mixture.file_type));
  if (opts.mixture.quantized) w.metadata().set("general.quantization_version", gguf::Value::u32(2));

  QuantizeReport report;
  uint64_t total_in = 0;
  for (const auto& t : in.tensors()) total_in += t.n_bytes;
  auto pool = std::make_shared<ThreadPool>(opts.threads);
  auto done = std::make_shared<uint64_t>(0);
  const size_t count = in.tensors().size();

  for (size_t ti = 0; ti < count; ++ti) {
    const gguf::TensorInfo& t = in.tensors()[ti];
    const TensorChoice choice = selector.choose(t);
    TensorReport r{std::string(t.name), t.type, choice.convert ? choice.type : t.type, t.n_bytes, 0, choice.fallback};
    const std::span<const uint64_t> ne(t.ne.data(), t.n_dims);
    const auto src = in.tensor_data(t);
    if (!choice.convert) {
      r.bytes_out = t.n_bytes;
      w.add_tensor(r.name, t.type, ne, src);
    } else {
      if (!can_dequantize(t.type)) {
        throw Error(fmt::format("{}: tensor '{}' is stored as {}, which zinc cannot read", in.name(), t.name,
                                gguf::tensor_type_name(t.type)));
      }
      if (!is_float_type(t.type) && !opts.allow_requantize) {
        throw Error(fmt::format("{}: tensor '{}' is already quantized ({}); requantizing loses quality — start from an "
                                "F32/F16/BF16 model, or pass --allow-requantize",
                                in.name(), t.name, gguf::tensor_type_name(t.type)));
      }
      const int64_t cols = static_cast<int64_t>(t.ne[0]);
      const int64_t rows = static_cast<int64_t>(t.n_elements) / cols;
      const size_t in_row = row_size(t.type, cols), out_row = row_size(choice.type, cols);
      r.bytes_out = out_row * static_cast<uint64_t>(rows);
      const gguf::TensorType from = t.type, to = choice.type;
      auto progress = opts.progress;
      const std::string name = r.name;
      w.add_tensor(r.name, to, ne, [=](const auto& emit) {
        // Rows in chunks of about 16 MiB of output, each chunk converted in parallel.
        const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>((16u << 20) / out_row));
        std::vector<uint8_t> buf;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
          const int64_t nr = std::min(chunk, rows - r0);
          buf.resize(static_cast<size_t>(nr) * out_row);
          pool->parallel_for(nr, [&](int64_t b, int64_t e) {
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t i = b; i < e; ++i) {
              dequantize_row(from, src.data() + static_cast<size_t>(r0 + i) * in_row, row.data(), cols);
              quantize_row(to, row.data(), buf.data() + static_cast<size_t>(i) * out_row, cols);
            }
          });
          emit(std::span<const uint8_t>(buf));
          *done += static_cast<uint64_t>(nr) * in_row;
          if (progress) progress({ti, count, name, to, *done, total_in});
        }
      });
    }
    report.bytes_in += r.bytes_in;
    report.bytes_out += r.bytes_out;
    report.tensors.push_back(std::move(r));
  }
  report.file_size = w.file_size();
  w.write_file(out);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.unmatched_patterns = selector.unmatched_patterns();
  return report;
}

}  // namespace zinc::quant
