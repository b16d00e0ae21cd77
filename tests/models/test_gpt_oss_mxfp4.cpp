// GPT-OSS checkpoints as released store their experts in MXFP4 (*_blocks / *_scales, rows = outputs).
// The fixture's experts are encoded that way here, and also written back dequantized in the bf16
// layout (values that bf16 holds exactly): both checkpoints must convert to the same expert tensors,
// which checks the MXFP4 path's row order, gate/up interleave and nibble order against the bf16 path
// that the fixture test compares with transformers. The encoding follows the checkpoint format: byte k
// of a block holds element 2k in its low nibble, 2k + 1 in its high one; scales are E8M0 exponents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "convert/convert.h"
#include "convert/safetensors.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "quant/fp16.h"
#include "raw_gguf.h"

namespace zinc {
namespace {

const std::filesystem::path kFixtures = ZINC_FIXTURES_DIR;
constexpr float kFp4[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

struct OutTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void write_safetensors(const std::filesystem::path& path, const std::vector<OutTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(n));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

float bf16_at(const convert::StTensor& t, int64_t i) {
  uint16_t h;
  std::memcpy(&h, t.data.data() + i * 2, 2);
  return quant::bf16_to_f32(h);
}

// Encodes `rows` rows of `n` elements (element c of row r at get(r, c)) as MXFP4 blocks and scales,
// and stores each decoded value through put(r, c, value).
template <class Get, class Put>
void encode_mxfp4(int64_t rows, int64_t n, Get get, Put put, std::vector<uint8_t>& blocks, std::vector<uint8_t>& scales) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b0 = 0; b0 < n; b0 += 32) {
      float amax = 0;
      for (int64_t c = b0; c < b0 + 32; ++c) amax = std::max(amax, std::fabs(get(r, c)));
      const int e = amax > 0 ? static_cast<int>(std::floor(std::log2(amax))) - 2 : -127;
      scales.push_back(static_cast<uint8_t>(e + 127));
      const float d = std::ldexp(1.0f, e);
      uint8_t code[32];
      for (int64_t c = b0; c < b0 + 32; ++c) {
        int best = 0;
        for (int k = 1; k < 16; ++k) {
          if (std::fabs(kFp4[k] * d - get(r, c)) < std::fabs(kFp4[best] * d - get(r, c))) best = k;
        }
        code[c - b0] = static_cast<uint8_t>(best);
        put(r, c, kFp4[best] * d);
      }
      for (int k = 0; k < 16; ++k) blocks.push_back(static_cast<uint8_t>(code[2 * k] | (code[2 * k + 1] << 4)));
    }
  }
}

std::vector<uint8_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    const auto h = static_cast<uint16_t>(bits >> 16);  // exact: the values have at most 2 mantissa bits
    std::memcpy(out.data() + i * 2, &h, 2);
  }
  return out;
}

TEST(GptOss, ConvertsMxfp4ExpertsLikeTheirBf16Values) {
  const auto src = kFixtures / "gpt_oss";
  const auto config = nlohmann::json::parse(std::ifstream(src / "config.json"));
  const int64_t E = config["num_local_experts"], D = config["hidden_size"], F = config["intermediate_size"];
  const int n_layer = config["num_hidden_layers"];
  const auto st = convert::SafetensorsFile::open(src / "model.safetensors");
  std::vector<OutTensor> plain, packed;
  for (const auto& t : st.tensors()) {
    const bool gate_up = t.name.ends_with("mlp.experts.gate_up_proj"), down = t.name.ends_with("mlp.experts.down_proj");
    if (!gate_up && !down) {
      OutTensor o{t.name, convert::st_dtype_name(t.dtype), t.shape, {t.data.begin(), t.data.end()}};
      plain.push_back(o);
      packed.push_back(std::move(o));
      continue;
    }
    ASSERT_EQ(t.dtype, convert::StDType::BF16);
    std::vector<float> deq(static_cast<size_t>(t.n_elements()));
    std::vector<uint8_t> blocks, scales;
    // Checkpoint rows are outputs: gate_up [E, D, 2F] has rows (e, c) over D; down [E, F, D] rows (e, j) over F.
    const int64_t n_out = gate_up ? 2 * F : D, n_in = gate_up ? D : F;
    const auto index = [&](int64_t r, int64_t c) { return ((r / n_out) * n_in + c) * n_out + r % n_out; };
    encode_mxfp4(E * n_out, n_in, [&](int64_t r, int64_t c) { return bf16_at(t, index(r, c)); },
                 [&](int64_t r, int64_t c, float v) { deq[static_cast<size_t>(index(r, c))] = v; }, blocks, scales);
    plain.push_back({t.name, "BF16", t.shape, to_bf16(deq)});
    packed.push_back({t.name + "_blocks", "U8", {E, n_out, n_in / 32, 16}, std::move(blocks)});
    packed.push_back({t.name + "_scales", "U8", {E, n_out, n_in / 32}, std::move(scales)});
  }
  test::TempDir tmp;
  for (const auto& [dir, tensors] : {std::pair{"plain", &plain}, std::pair{"packed", &packed}}) {
    std::filesystem::create_directories(tmp.file(dir));
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(src / f, tmp.file(dir) / f);
    }
    write_safetensors(tmp.file(dir) / "model.safetensors", *tensors);
    convert::ConvertOptions copts;
    copts.outtype = "f32";
    convert::convert_hf(tmp.file(dir), tmp.file(std::string(dir) + ".gguf"), copts);
  }
  const gguf::File a = gguf::File::open(tmp.file("plain.gguf")), b = gguf::File::open(tmp.file("packed.gguf"));
  EXPECT_NO_THROW(model::load(b));
  int compared = 0;
  for (int l = 0; l < n_layer; ++l) {
    for (const char* which : {"gate", "up", "down"}) {
      const auto name = "blk." + std::to_string(l) + ".ffn_" + which + "_exps.weight";
      const auto da = a.tensor_data(a.tensor(name)), db = b.tensor_data(b.tensor(name));
      ASSERT_EQ(da.size(), db.size()) << name;
      EXPECT_EQ(std::memcmp(da.data(), db.data(), da.size()), 0) << name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 3 * n_layer);
}

}  // namespace
}  // namespace zinc
