// tokenizer.json -> GGUF metadata: the keys and values are checked against the JSON files themselves
// (read here independently), and the converted metadata must survive a trip through a GGUF file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "gguf/writer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "vocab_cases.h"

namespace zinc::tokenizer {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json load(const std::string& family, const char* file) {
  return json::parse(test::read_text(test::hf_model_dir(family) / file));
}

int64_t added_id(const json& tj, const std::string& content) {
  for (const auto& a : tj["added_tokens"]) {
    if (a["content"] == content) return a["id"].get<int64_t>();
  }
  return -1;
}

int64_t vocab_size(const json& tj) {
  int64_t n = 0;
  for (const auto& [t, id] : tj["model"]["vocab"].items()) n = std::max(n, id.get<int64_t>() + 1);
  for (const auto& a : tj["added_tokens"]) n = std::max(n, a["id"].get<int64_t>() + 1);
  return n;
}

const gguf::Value& key(const gguf::Metadata& md, const std::string& k) {
  const gguf::Value* v = md.find(k);
  if (!v) throw std::runtime_error("missing key " + k);
  return *v;
}
std::string str(const gguf::Metadata& md, const std::string& k) { return std::string(key(md, k).view().string()); }
int64_t num(const gguf::Metadata& md, const std::string& k) { return *key(md, k).view().as<int64_t>(); }
bool flag(const gguf::Metadata& md, const std::string& k) { return *key(md, k).view().as<bool>(); }
gguf::ArrayView arr(const gguf::Metadata& md, const std::string& k) { return key(md, k).view().array(); }

TEST(HfTokenizer, Llama3) {
  ZINC_REQUIRE_HF_TOKENIZER("llama3");
  const json tj = load("llama3", "tokenizer.json"), tc = load("llama3", "tokenizer_config.json");
  const auto r = convert_hf_tokenizer_dir(test::hf_model_dir("llama3"));
  const auto& md = r.metadata;
  EXPECT_EQ(str(md, "tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(str(md, "tokenizer.ggml.pre"), "llama-bpe");
  const auto tokens = arr(md, "tokenizer.ggml.tokens");
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), vocab_size(tj));
  EXPECT_EQ(tokens.at(tj["model"]["vocab"]["Hello"].get<int64_t>()).string(), "Hello");
  EXPECT_EQ(arr(md, "tokenizer.ggml.merges").size(), tj["model"]["merges"].size());
  const int64_t bos = added_id(tj, tc["bos_token"]), eos = added_id(tj, tc["eos_token"]);
  EXPECT_EQ(num(md, "tokenizer.ggml.bos_token_id"), bos);
  EXPECT_EQ(num(md, "tokenizer.ggml.eos_token_id"), eos);
  EXPECT_EQ(arr(md, "tokenizer.ggml.token_type").at(static_cast<uint64_t>(bos)).as<int32_t>(), 3);  // CONTROL
  EXPECT_EQ(str(md, "tokenizer.chat_template"), tc["chat_template"].get<std::string>());
  // The vocabulary loads, adds BOS (Llama 3 does) and ends generation at <|eot_id|>.
  const Tokenizer tok(Vocab::load(md, "llama3"));
  EXPECT_EQ(tok.encode("Hi", true).front(), bos);
  EXPECT_TRUE(tok.vocab().is_eog(added_id(tj, "<|eot_id|>")));
}

TEST(HfTokenizer, Qwen3) {
  ZINC_REQUIRE_HF_TOKENIZER("qwen3");
  const json tj = load("qwen3", "tokenizer.json"), tc = load("qwen3", "tokenizer_config.json");
  const auto r = convert_hf_tokenizer_dir(test::hf_model_dir("qwen3"));
  const auto& md = r.metadata;
  EXPECT_EQ(str(md, "tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(num(md, "tokenizer.ggml.eos_token_id"), added_id(tj, tc["eos_token"]));
  EXPECT_EQ(num(md, "tokenizer.ggml.padding_token_id"), added_id(tj, tc["pad_token"]));
  EXPECT_EQ(md.find("tokenizer.ggml.bos_token_id"), nullptr);  // bos_token is null
  EXPECT_FALSE(flag(md, "tokenizer.ggml.add_bos_token"));
  const auto types = arr(md, "tokenizer.ggml.token_type");
  EXPECT_EQ(types.at(static_cast<uint64_t>(added_id(tj, "<|im_start|>"))).as<int32_t>(), 3);  // special
  EXPECT_EQ(types.at(static_cast<uint64_t>(added_id(tj, "<think>"))).as<int32_t>(), 4);       // added, not special
  EXPECT_THAT(r.notes, ::testing::Contains(HasSubstr("NFC")));
  // Another family's pre type can be requested.
  HfTokenizerOptions o;
  o.pre = "qwen35";
  EXPECT_EQ(str(convert_hf_tokenizer_dir(test::hf_model_dir("qwen3"), o).metadata, "tokenizer.ggml.pre"), "qwen35");
}

TEST(HfTokenizer, GptOss) {
  ZINC_REQUIRE_HF_TOKENIZER("gptoss");
  const json tj = load("gptoss", "tokenizer.json"), tc = load("gptoss", "tokenizer_config.json");
  const auto r = convert_hf_tokenizer_dir(test::hf_model_dir("gptoss"));
  const auto& md = r.metadata;
  EXPECT_EQ(str(md, "tokenizer.ggml.pre"), "gpt-4o");
  EXPECT_EQ(num(md, "tokenizer.ggml.bos_token_id"), added_id(tj, tc["bos_token"]));
  EXPECT_EQ(num(md, "tokenizer.ggml.eos_token_id"), added_id(tj, tc["eos_token"]));
  EXPECT_EQ(num(md, "tokenizer.ggml.padding_token_id"), added_id(tj, tc["pad_token"]));
  EXPECT_EQ(md.find("tokenizer.chat_template"), nullptr);  // not in this tokenizer_config.json
  const Tokenizer tok(Vocab::load(md, "gptoss"));
  // Harmony: <|return|> and <|call|> end generation, <|end|> does not (llama.cpp's rule).
  EXPECT_TRUE(tok.vocab().is_eog(added_id(tj, "<|return|>")));
  EXPECT_TRUE(tok.vocab().is_eog(added_id(tj, "<|call|>")));
  EXPECT_FALSE(tok.vocab().is_eog(added_id(tj, "<|end|>")));
}

TEST(HfTokenizer, Gemma3AsGemma4) {
  ZINC_REQUIRE_HF_TOKENIZER("gemma3");
  const json tj = load("gemma3", "tokenizer.json"), tc = load("gemma3", "tokenizer_config.json");
  const auto r = convert_hf_tokenizer_dir(test::hf_model_dir("gemma3"));
  const auto& md = r.metadata;
  EXPECT_EQ(str(md, "tokenizer.ggml.model"), "gemma4");
  EXPECT_EQ(md.find("tokenizer.ggml.pre"), nullptr);
  const auto tokens = arr(md, "tokenizer.ggml.tokens");
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), vocab_size(tj));
  EXPECT_EQ(arr(md, "tokenizer.ggml.scores").size(), tokens.size());
  EXPECT_FALSE(flag(md, "tokenizer.ggml.add_space_prefix"));
  EXPECT_TRUE(flag(md, "tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(num(md, "tokenizer.ggml.bos_token_id"), added_id(tj, tc["bos_token"]));
  EXPECT_EQ(num(md, "tokenizer.ggml.eos_token_id"), added_id(tj, tc["eos_token"]));
  EXPECT_EQ(num(md, "tokenizer.ggml.padding_token_id"), added_id(tj, tc["pad_token"]));
  EXPECT_EQ(num(md, "tokenizer.ggml.unknown_token_id"), added_id(tj, tc["unk_token"]));
  const auto types = arr(md, "tokenizer.ggml.token_type");
  auto type_of = [&](const std::string& t) {
    return types.at(tj["model"]["vocab"][t].get<uint64_t>()).as<int32_t>().value_or(-1);
  };
  EXPECT_EQ(type_of("<0x41>"), 6);             // BYTE
  EXPECT_EQ(type_of("<start_of_turn>"), 3);    // special
  EXPECT_EQ(type_of("\n\n"), 4);               // added, not special
  EXPECT_EQ(type_of("\xE2\x96\x81\xE2\x96\x81"), 1);  // ▁▁ stays normal so it decodes to two spaces
  EXPECT_EQ(str(md, "tokenizer.chat_template"), tc["chat_template"].get<std::string>());
  const Tokenizer tok(Vocab::load(md, "gemma3"));
  EXPECT_EQ(tok.encode("Hi", true).front(), added_id(tj, "<bos>"));
  EXPECT_EQ(tok.decode(tok.encode("a  b\n\nc", false)), "a  b\n\nc");
}

TEST(HfTokenizer, SurvivesAGgufFile) {
  ZINC_REQUIRE_HF_TOKENIZER("qwen3");
  const auto r = convert_hf_tokenizer_dir(test::hf_model_dir("qwen3"));
  gguf::Writer w;
  w.metadata().set("general.architecture", gguf::Value::str("qwen3"));
  for (const auto& [k, v] : r.metadata.items()) w.metadata().set(k, v);
  test::TempDir dir;
  w.write_file(dir.file("vocab.gguf"));
  const gguf::File f = gguf::File::open(dir.file("vocab.gguf"));
  const Tokenizer from_file = Tokenizer::from_gguf(f);
  const Tokenizer from_metadata(Vocab::load(r.metadata));
  const std::string text = "<|im_start|>user\nHello, 世界! 🦙<|im_end|>";
  EXPECT_EQ(from_file.encode(text, true, true), from_metadata.encode(text, true, true));
  EXPECT_EQ(from_file.vocab().size(), from_metadata.vocab().size());
}

json tiny_bpe(json pre, json model_extra = json::object()) {
  json model = {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}};
  model.update(model_extra);
  return {{"model", model}, {"pre_tokenizer", pre}, {"added_tokens", json::array()}};
}

TEST(HfTokenizer, RefusesWhatGgufCannotExpress) {
  const json gpt2_pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_NO_THROW((void)convert_hf_tokenizer(tiny_bpe(gpt2_pre), nullptr));
  json unigram = tiny_bpe(gpt2_pre);
  unigram["model"]["type"] = "Unigram";
  EXPECT_THROW((void)convert_hf_tokenizer(unigram, nullptr), Error);
  const json odd_split = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}};
  try {
    (void)convert_hf_tokenizer(tiny_bpe(odd_split), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("pre"));
  }
  HfTokenizerOptions o;
  o.pre = "gpt-2";
  EXPECT_NO_THROW((void)convert_hf_tokenizer(tiny_bpe(odd_split), nullptr, nullptr, o));
  json prepend = tiny_bpe(nullptr, {{"byte_fallback", true}});
  prepend["normalizer"] = {{"type", "Sequence"},
                           {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}}}};
  EXPECT_THROW((void)convert_hf_tokenizer(prepend, nullptr), Error);
  json no_merges = tiny_bpe(gpt2_pre);
  no_merges["model"]["merges"] = json::array();
  EXPECT_THROW((void)convert_hf_tokenizer(no_merges, nullptr), Error);
}

TEST(HfTokenizer, SpecialTokensFromTemplateProcessing) {
  // SpecialVocab's rules: ids come from added_tokens named by tokenizer_config.json; a
  // TemplateProcessing post-processor that wraps the text in <s> ... </s> asks for BOS and EOS.
  const json gpt2_pre = {{"type", "ByteLevel"}, {"use_regex", true}};
  json tj = tiny_bpe(gpt2_pre);
  tj["added_tokens"] = {{{"id", 3}, {"content", "<s>"}, {"special", true}},
                        {{"id", 4}, {"content", "</s>"}, {"special", true}}};
  tj["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}, {{"SpecialToken", {{"id", "</s>"}}}}}}};
  const json tc = {{"bos_token", {{"content", "<s>"}}}, {"eos_token", "</s>"}, {"chat_template", {
      {{"name", "default"}, {"template", "D"}}, {{"name", "tool use"}, {"template", "T"}}}}};
  const auto md = convert_hf_tokenizer(tj, tc).metadata;
  EXPECT_EQ(num(md, "tokenizer.ggml.bos_token_id"), 3);
  EXPECT_EQ(num(md, "tokenizer.ggml.eos_token_id"), 4);
  EXPECT_TRUE(flag(md, "tokenizer.ggml.add_bos_token"));
  EXPECT_TRUE(flag(md, "tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(str(md, "tokenizer.chat_template"), "D");
  EXPECT_EQ(str(md, "tokenizer.chat_template.tool_use"), "T");
  const Tokenizer tok(Vocab::load(md));
  EXPECT_EQ(tok.encode("ab", true), (std::vector<int32_t>{3, 2, 4}));
}

}  // namespace
}  // namespace zinc::tokenizer
