// Streaming detokenizer and decode(): whole code points only, at most 3 bytes held back, U+FFFD for
// bytes that can never form a character (the Unicode "maximal subpart" rule), llama.cpp's leading-space
// rule for SentencePiece vocabularies, and exact round trips of real text through real vocabularies.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "tokenizer/detokenizer.h"
#include "tokenizer/unicode.h"
#include "tiny_vocab.h"
#include "vocab_cases.h"

namespace zinc::tokenizer {
namespace {

using test::kByte0;
using test::kFirstPiece;
using test::spm_vocab;
using test::Tok;

const std::string kFffd = "\xEF\xBF\xBD";

Tokenizer tiny_spm() {
  return Tokenizer(Vocab::load(spm_vocab({{"\xE2\x96\x81", -3}, {"a", -4}, {"\xE2\x96\x81" "a", -1}})));
}
constexpr int32_t kSpace = kFirstPiece, kA = kFirstPiece + 1, kSpaceA = kFirstPiece + 2;
int32_t byte(uint8_t b) { return kByte0 + b; }

TEST(Detokenizer, HoldsBackSplitFourByteCharacter) {
  const Tokenizer tok = tiny_spm();
  Detokenizer d(tok);
  EXPECT_EQ(d.push(kSpaceA), "a");  // first token: SentencePiece's leading space is dropped
  EXPECT_EQ(d.push(byte(0xF0)), "");
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.push(byte(0x9F)), "");
  EXPECT_EQ(d.push(byte(0xA6)), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(byte(0x99)), "\xF0\x9F\xA6\x99");  // 🦙
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.push(kSpaceA), " a");
  EXPECT_EQ(d.flush(), "");
}

TEST(Detokenizer, ReplacesBytesThatCannotBecomeCharacters) {
  const Tokenizer tok = tiny_spm();
  Detokenizer d(tok);
  EXPECT_EQ(d.push(byte(0xF0)), "");
  EXPECT_EQ(d.push(byte('A')), kFffd + "A");  // F0 followed by a non-continuation byte
  EXPECT_EQ(d.push(byte(0x80)), kFffd);       // a stray continuation byte
  EXPECT_EQ(d.push(byte(0xC0)), kFffd);       // never a valid lead byte
  EXPECT_EQ(d.push(byte(0xED)), "");
  EXPECT_EQ(d.push(byte(0xA0)), kFffd + kFffd);  // ED A0 would be a surrogate
  EXPECT_EQ(d.push(byte(0xE2)), "");
  EXPECT_EQ(d.push(byte(0x82)), "");
  EXPECT_EQ(d.flush(), kFffd);  // one U+FFFD for the cut-off sequence E2 82
  EXPECT_EQ(d.pending_bytes(), 0u);
}

TEST(Detokenizer, LeadingSpaceFollowsLlamaCpp) {
  const Tokenizer tok = tiny_spm();
  auto stream = [&](std::vector<int32_t> ids, DecodeOptions o) {
    Detokenizer d(tok, o);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    out += d.flush();
    // The stream gives what decode() gives (no clean-up spaces in this vocabulary).
    EXPECT_EQ(out, tok.decode(ids, o));
    return out;
  };
  DecodeOptions render;  // defaults: keep BOS, render control tokens
  DecodeOptions plain{.remove_special = false, .render_special = false};
  DecodeOptions skip{.remove_special = true, .render_special = false};
  EXPECT_EQ(stream({kSpaceA, kSpaceA}, render), "a a");
  EXPECT_EQ(stream({kSpace, kA}, render), "a");
  // The first token takes the strip, even when it renders as nothing.
  EXPECT_EQ(stream({1, kSpaceA}, render), "<s> a");
  EXPECT_EQ(stream({1, kSpaceA}, plain), " a");
  // A BOS that remove_special drops keeps the space (llama.cpp's detokenizer).
  EXPECT_EQ(stream({1, kSpaceA}, skip), " a");
  EXPECT_EQ(stream({kSpaceA, 2}, skip), "a");  // control tokens render as nothing without render_special
  // A stream that continues a prompt keeps the first token's space.
  EXPECT_EQ(stream({kSpaceA, kSpaceA}, DecodeOptions{.at_start = false}), " a a");
}

TEST(Detokenizer, ResetStartsANewStream) {
  const Tokenizer tok = tiny_spm();
  Detokenizer d(tok);
  EXPECT_EQ(d.push(kSpaceA), "a");
  EXPECT_EQ(d.push(byte(0xF0)), "");
  d.reset();
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.push(kSpaceA), "a");
  EXPECT_THROW((void)d.push(-5), Error);
  EXPECT_THROW((void)d.push(tok.vocab().size()), Error);
}

// Real vocabularies: text in, ids, streamed back out, byte for byte, with tokens that split characters.
TEST(Detokenizer, RoundTripsRealVocabularies) {
  ZINC_REQUIRE_TESTDATA();
  const std::vector<std::string> texts = {
      "Hello 🦙 world 😀😃 👨‍👩‍👧‍👦 ok",
      "中文测试 日本語テキスト 한국어",
      "Ünïcödé ёжик 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 emoji🫠 end",
      "tabs\tand\nnew lines\n\n  indented  spaces",
  };
  for (const char* name : {"gpt-2", "llama-spm", "phi-3", "falcon", "starcoder", "refact", "deepseek-llm", "deepseek-coder",
                           "mpt", "gpt-neox", "baichuan"}) {
    const gguf::File f = gguf::File::open(test::testdata_dir() / "vocab" / (std::string("ggml-vocab-") + name + ".gguf"));
    const Tokenizer tok = Tokenizer::from_gguf(f);
    bool held_back = false;
    for (const auto& text : texts) {
      const auto ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
      Detokenizer d(tok);
      std::string out;
      for (int32_t id : ids) {
        const std::string piece = d.push(id);
        EXPECT_TRUE(unicode::is_valid_utf8(piece)) << name;
        EXPECT_LE(d.pending_bytes(), 3u) << name;
        held_back = held_back || d.pending_bytes() > 0;
        out += piece;
      }
      out += d.flush();
      EXPECT_EQ(out, text) << name;
      // Text encoded as a continuation decodes to itself after text already shown (no space in front).
      const auto cont = tok.encode_continuation(text);
      EXPECT_EQ(tok.decode(cont, {.at_start = false}), text) << name;
    }
    EXPECT_TRUE(held_back) << name << ": no token split a character, so nothing was tested";
  }
}

// Random text (any code point except surrogates and ▁, which SentencePiece reads as a space) must come
// back unchanged: the pre-tokenizers cover every character, and nothing is lost or reordered.
TEST(Detokenizer, RoundTripsRandomText) {
  ZINC_REQUIRE_TESTDATA();
  std::mt19937 rng(12345);
  const std::vector<uint32_t> pool = {' ', ' ', '\t', '\n', '\r', 0xA0, 0x3000, 0x2028, 0x85, 'a', 'Z', '7', '\'', '.',
                                      '<', '|', 0x0301, 0x0E31, 0x4E2D, 0xAC00, 0x1F600, 0x1F3FD, 0x200D, 0xFE0F, 0x0663};
  auto random_text = [&] {
    std::string s;
    const int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      uint32_t cp = pool[rng() % pool.size()];
      if (rng() % 3 == 0) {
        do cp = 0x80 + rng() % (0x110000 - 0x80);
        while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581);
      }
      unicode::append_utf8(s, cp);
    }
    return s;
  };
  for (const char* name : {"gpt-2", "llama-spm", "falcon", "starcoder", "deepseek-llm", "deepseek-coder", "gpt-neox",
                           "baichuan"}) {
    const gguf::File f = gguf::File::open(test::testdata_dir() / "vocab" / (std::string("ggml-vocab-") + name + ".gguf"));
    const Tokenizer tok = Tokenizer::from_gguf(f);
    // Only vocabularies that can spell every byte round-trip everything: a byte-level BPE vocabulary
    // without some byte characters (Falcon's lacks those of bytes that are rare in its training data)
    // drops them, as llama.cpp and Hugging Face do.
    int missing = 0;
    for (int b = 0; b < 256; ++b) {
      const bool have = tok.vocab().byte_encode() && tok.vocab().type() == VocabType::Bpe
                            ? tok.vocab().contains(tok.vocab().byte_symbol(static_cast<uint8_t>(b)))
                            : tok.vocab().byte_token(static_cast<uint8_t>(b)) >= 0;
      missing += have ? 0 : 1;
    }
    std::cout << name << ": " << missing << " of 256 bytes have no token\n";
    if (missing) continue;
    for (int k = 0; k < 200; ++k) {
      const std::string text = random_text();
      Detokenizer d(tok);
      std::string out;
      for (int32_t id : tok.encode(text, false, false)) out += d.push(id);
      out += d.flush();
      ASSERT_EQ(out, text) << name;
    }
  }
}

TEST(Decode, CleanUpSpacesWhereTheVocabularyAsks) {
  ZINC_REQUIRE_TESTDATA();
  // GPT-2's BPE vocabulary cleans up; the text round-trips through encode() unchanged otherwise.
  const gguf::File f = gguf::File::open(test::testdata_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(f);
  ASSERT_TRUE(tok.vocab().clean_spaces());
  EXPECT_EQ(tok.decode(tok.encode("Hello , world ! Is it ? I 'm sure it 's fine . x ' y", false)),
            "Hello, world! Is it? I'm sure it's fine. x'y");
  // deepseek-llm does not clean up.
  const gguf::File g = gguf::File::open(test::testdata_dir() / "vocab" / "ggml-vocab-deepseek-llm.gguf");
  const Tokenizer ds = Tokenizer::from_gguf(g);
  ASSERT_FALSE(ds.vocab().clean_spaces());
  EXPECT_EQ(ds.decode(ds.encode("Hello , world !", false)), "Hello , world !");
}

TEST(Decode, ControlTokensRenderOnlyWhenAsked) {
  ZINC_REQUIRE_TESTDATA();
  const gguf::File f = gguf::File::open(test::testdata_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(tok.token_to_piece(50256, false), "");
  EXPECT_EQ(tok.token_to_piece(tok.vocab().find("\xC4\xA0world")), " world");  // Ġworld
}

}  // namespace
}  // namespace zinc::tokenizer
