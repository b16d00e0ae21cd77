// Unit tests for encoding: Unicode and UTF-8 helpers, special-token handling, add_bos/add_eos, errors.
// Small vocabularies are built by hand so the expected ids follow from the algorithm's definition;
// facts about real vocabularies come from the files themselves (their token lists and configs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tiny_vocab.h"
#include "vocab_cases.h"

namespace zinc::tokenizer {
namespace {

using ::testing::HasSubstr;
using test::kByte0;
using test::kFirstPiece;
using test::make_vocab;
using test::spm_vocab;
using test::Tok;
using gguf::Metadata;
using gguf::Value;

// ---- Unicode and UTF-8 ----

TEST(Unicode, GeneralCategories) {
  using unicode::Category;
  EXPECT_EQ(unicode::category('A'), Category::Lu);
  EXPECT_EQ(unicode::category('z'), Category::Ll);
  EXPECT_EQ(unicode::category(0x01C5), Category::Lt);   // ǅ
  EXPECT_EQ(unicode::category(0x02B0), Category::Lm);   // ʰ
  EXPECT_EQ(unicode::category(0x4E2D), Category::Lo);   // 中
  EXPECT_EQ(unicode::category(0x0301), Category::Mn);   // combining acute
  EXPECT_EQ(unicode::category(0x0663), Category::Nd);   // ٣
  EXPECT_EQ(unicode::category(0x216B), Category::Nl);   // Ⅻ
  EXPECT_EQ(unicode::category(0x00BD), Category::No);   // ½
  EXPECT_EQ(unicode::category('_'), Category::Pc);
  EXPECT_EQ(unicode::category('$'), Category::Sc);
  EXPECT_EQ(unicode::category(0x1F600), Category::So);  // 😀
  EXPECT_EQ(unicode::category(0x10FFFF), Category::Cn);
  EXPECT_EQ(unicode::category(0x20000), Category::Lo);  // CJK extension B
}

TEST(Unicode, WhiteSpaceProperty) {
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u, 0x2029u, 0x202Fu,
                      0x205Fu, 0x3000u}) {
    EXPECT_TRUE(unicode::is_space(cp)) << std::hex << cp;
  }
  for (uint32_t cp : {0x1Cu, 0x180Eu, 0x200Bu, 0xFEFFu, 0x61u}) EXPECT_FALSE(unicode::is_space(cp)) << std::hex << cp;
}

TEST(Unicode, LowercaseAndAccentStripping) {
  EXPECT_EQ(unicode::to_lower('A'), uint32_t('a'));
  EXPECT_EQ(unicode::to_lower(0x0100), 0x0101u);  // Ā -> ā
  EXPECT_EQ(unicode::to_lower(0x0410), 0x0430u);  // А -> а
  EXPECT_EQ(unicode::to_lower('a'), uint32_t('a'));
  uint32_t out[3];
  ASSERT_EQ(unicode::strip_accents(0x00C4, out), 1);  // Ä = A + U+0308
  EXPECT_EQ(out[0], uint32_t('A'));
  EXPECT_EQ(unicode::strip_accents(0x0301, out), 0);
  ASSERT_EQ(unicode::strip_accents(0x0439, out), 1);  // й = и + U+0306
  EXPECT_EQ(out[0], 0x0438u);
}

TEST(Utf8, ValidationFollowsRfc3629) {
  EXPECT_TRUE(unicode::is_valid_utf8("plain ascii"));
  EXPECT_TRUE(unicode::is_valid_utf8("\xF0\x9F\xA6\x99"));            // U+1F999
  EXPECT_TRUE(unicode::is_valid_utf8("\xF4\x8F\xBF\xBF"));            // U+10FFFF
  EXPECT_FALSE(unicode::is_valid_utf8("\xC0\xAF"));                   // overlong "/"
  EXPECT_FALSE(unicode::is_valid_utf8("\xE0\x80\xAF"));               // overlong
  EXPECT_FALSE(unicode::is_valid_utf8("\xED\xA0\x80"));               // surrogate U+D800
  EXPECT_FALSE(unicode::is_valid_utf8("\xF4\x90\x80\x80"));           // above U+10FFFF
  EXPECT_FALSE(unicode::is_valid_utf8("\xE2\x82"));                   // cut off
  EXPECT_FALSE(unicode::is_valid_utf8("\x80"));                       // stray continuation
  EXPECT_EQ(unicode::utf8_first_invalid("ab\xFF"), 2u);
}

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  // The Unicode Standard's example (chapter 3, "U+FFFD Substitution of Maximal Subparts").
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(unicode::sanitize_utf8(in), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(unicode::sanitize_utf8("ok \xF0\x9F\xA6\x99"), "ok \xF0\x9F\xA6\x99");
}

// ---- SentencePiece ----

TEST(Spm, MergesByScoreThenFallsBackToBytes) {
  // ▁a (-1) beats ab (-2); then ▁a + b = ▁ab (-0.5).
  const Tokenizer tok(Vocab::load(spm_vocab({{"\xE2\x96\x81", -3}, {"a", -4}, {"b", -5}, {"\xE2\x96\x81" "a", -1},
                                             {"ab", -2}, {"\xE2\x96\x81" "ab", -0.5f}})));
  const int32_t space = kFirstPiece, a = kFirstPiece + 1, b = kFirstPiece + 2, space_ab = kFirstPiece + 5;
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{space_ab}));
  EXPECT_EQ(tok.encode("ba", false), (std::vector<int32_t>{space, b, a}));
  // "c" is not a piece: its byte token.
  EXPECT_EQ(tok.encode("c", false), (std::vector<int32_t>{space, kByte0 + 'c'}));
  // A 4-byte character falls back to four byte tokens.
  EXPECT_EQ(tok.encode("\xF0\x9F\xA6\x99", false),
            (std::vector<int32_t>{space, kByte0 + 0xF0, kByte0 + 0x9F, kByte0 + 0xA6, kByte0 + 0x99}));
}

TEST(Spm, AddsBosAndSpacePrefixAfterSpecialTokens) {
  const Tokenizer tok(Vocab::load(spm_vocab({{"\xE2\x96\x81", -3}, {"a", -4}, {"\xE2\x96\x81" "a", -1}})));
  const int32_t space_a = kFirstPiece + 2, a = kFirstPiece + 1;
  EXPECT_EQ(tok.encode("a", true), (std::vector<int32_t>{1, space_a}));
  EXPECT_EQ(tok.encode("a", false), (std::vector<int32_t>{space_a}));
  EXPECT_TRUE(tok.encode("", false).empty());
  EXPECT_EQ(tok.encode("", true), (std::vector<int32_t>{1}));
  // After a special token the text again starts with ▁ (llama.cpp: "prefix with space if previous is special").
  EXPECT_EQ(tok.encode("a</s>a", false, true), (std::vector<int32_t>{space_a, 2, space_a}));
  // Without parse_special, "</s>" is text: < / s > fall back to bytes.
  const auto plain = tok.encode("a</s>a", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(plain.back(), a);
  // A continuation (text the engine writes after generated tokens): no ▁ anywhere, specials parsed, no BOS.
  EXPECT_EQ(tok.encode_continuation("a</s>a"), (std::vector<int32_t>{a, 2, a}));
}

TEST(Spm, AddEosWhenAsked) {
  Metadata md = spm_vocab({{"\xE2\x96\x81", -3}});
  md.set("tokenizer.ggml.add_eos_token", Value::boolean(true));
  md.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  const Tokenizer tok(Vocab::load(md));
  EXPECT_EQ(tok.encode(" ", true), (std::vector<int32_t>{kFirstPiece, kFirstPiece, 2}));
}

// ---- special tokens ----

TEST(SpecialTokens, UserDefinedAlwaysControlOnlyWhenParsed) {
  Metadata md = spm_vocab({{"\xE2\x96\x81", -3}, {"x", -4}, {"<tag>", 0, TokenType::UserDefined},
                           {"<|ctl|>", 0, TokenType::Control}, {"<|ctl|>long", 0, TokenType::Control}});
  md.set("tokenizer.ggml.add_space_prefix", Value::boolean(false));
  const Tokenizer tok(Vocab::load(md));
  const int32_t x = kFirstPiece + 1, tag = kFirstPiece + 2, ctl = kFirstPiece + 3, ctl_long = kFirstPiece + 4;
  EXPECT_EQ(tok.encode("x<tag>x", false, false), (std::vector<int32_t>{x, tag, x}));
  EXPECT_EQ(tok.encode("x<|ctl|>x", false, true), (std::vector<int32_t>{x, ctl, x}));
  const auto unparsed = tok.encode("x<|ctl|>x", false, false);
  EXPECT_EQ(std::count(unparsed.begin(), unparsed.end(), ctl), 0);
  // Longest match at a position wins.
  EXPECT_EQ(tok.encode("<|ctl|>long", false, true), (std::vector<int32_t>{ctl_long}));
  EXPECT_EQ(tok.encode("<|ctl|>lon", false, true)[0], ctl);
}

TEST(SpecialTokens, RealVocabularies) {
  ZINC_REQUIRE_TESTDATA();
  const auto dir = test::testdata_dir() / "vocab";
  {
    const gguf::File f = gguf::File::open(dir / "ggml-vocab-gpt-2.gguf");
    const Tokenizer tok = Tokenizer::from_gguf(f);
    const int32_t eot = tok.vocab().find("<|endoftext|>");
    ASSERT_EQ(eot, 50256);  // GPT-2's end of text
    EXPECT_TRUE(tok.vocab().is_control(eot));
    EXPECT_TRUE(tok.vocab().is_eog(eot));
    const std::string text = "one<|endoftext|>two";
    const auto parsed = tok.encode(text, false, true);
    EXPECT_EQ(std::count(parsed.begin(), parsed.end(), eot), 1);
    const auto plain = tok.encode(text, false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
    EXPECT_EQ(tok.decode(plain), text);  // tokenized as the characters it is made of
    EXPECT_FALSE(tok.vocab().add_bos());
    EXPECT_EQ(tok.encode("x", true), tok.encode("x", false));
  }
  {
    // Phi-3: </s> is a user-defined token (matched even without parse_special) that swallows the
    // whitespace after it (llama.cpp gives Phi-3's special tokens rstrip).
    const gguf::File f = gguf::File::open(dir / "ggml-vocab-phi-3.gguf");
    const Tokenizer tok = Tokenizer::from_gguf(f);
    const auto ids = tok.encode("a</s>  b", false, false);
    ASSERT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
    EXPECT_EQ(ids, tok.encode("a</s>b", false, false));
    EXPECT_EQ(tok.encode("x", true)[0], 1);  // add_bos_token = true in the file
  }
}

// ---- BPE ----

TEST(Bpe, ByteLevelMergesByRank) {
  // Byte-level alphabet for "a", "b", "c", " " (Ġ), merges a b -> ab (rank 0), Ġ ab -> Ġab (rank 1).
  const Tokenizer tok(Vocab::load(make_vocab("gpt2", {{"a"}, {"b"}, {"c"}, {"\xC4\xA0"}, {"ab"}, {"\xC4\xA0" "ab"}},
                                             {"a b", "\xC4\xA0 ab"}, "gpt-2")));
  EXPECT_EQ(tok.encode("ab ab c", false), (std::vector<int32_t>{4, 5, 3, 2}));
  EXPECT_EQ(tok.decode(tok.encode("ab ab c", false)), "ab ab c");
}

TEST(Bpe, BosFromPreTypeAndKeys) {
  const std::vector<Tok> toks = {{"a"}, {"<|bos|>", 0, TokenType::Control}};
  Metadata md = make_vocab("gpt2", toks, {"a a"}, "llama-bpe");  // Llama 3 adds BOS
  md.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  EXPECT_EQ(Tokenizer(Vocab::load(md)).encode("a", true), (std::vector<int32_t>{1, 0}));
  md.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  EXPECT_EQ(Tokenizer(Vocab::load(md)).encode("a", true), (std::vector<int32_t>{0}));
}

// ---- errors ----

TEST(Errors, MissingOrUnsupportedMetadata) {
  Metadata none;
  none.set("general.architecture", Value::str("llama"));
  try {
    (void)Vocab::load(none, "model.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.gguf"));
    EXPECT_THAT(e.what(), HasSubstr("tokenizer.ggml.model"));
  }
  Metadata t5 = make_vocab("t5", {{"a"}});
  EXPECT_THROW(
      {
        try {
          (void)Vocab::load(t5);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("'t5'"));
          throw;
        }
      },
      Error);
  Metadata bad_pre = make_vocab("gpt2", {{"a"}}, {"a a"}, "no-such-pre");
  EXPECT_THROW(
      {
        try {
          (void)Vocab::load(bad_pre);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("no-such-pre"));
          throw;
        }
      },
      Error);
  EXPECT_THROW((void)Vocab::load(make_vocab("gpt2", {{"a"}}, {}, "gpt-2")), Error);  // no merges
  Metadata wrong_type = make_vocab("llama", {{"a"}});
  wrong_type.set("tokenizer.ggml.tokens", Value::u32(3));
  EXPECT_THROW((void)Vocab::load(wrong_type), Error);
  Metadata short_types = make_vocab("llama", {{"a"}, {"b"}});
  short_types.set("tokenizer.ggml.token_type", Value::i32s(std::vector<int32_t>{1}));
  EXPECT_THROW((void)Vocab::load(short_types), Error);
  EXPECT_THROW((void)Vocab::load(make_vocab("llama", {{"a"}, {"a"}})), Error);  // duplicate token
}

TEST(Errors, InvalidTextAndIds) {
  const Tokenizer tok(Vocab::load(spm_vocab({{"\xE2\x96\x81", -3}})));
  EXPECT_THROW((void)tok.encode("ok \xFF"), Error);
  EXPECT_THROW((void)tok.encode("\xED\xA0\x80"), Error);
  EXPECT_THROW((void)tok.token_to_piece(tok.vocab().size()), Error);
  EXPECT_THROW((void)tok.token_to_piece(-1), Error);
  const std::vector<int32_t> ids = {1, 99999};
  EXPECT_THROW((void)tok.decode(ids), Error);
}

TEST(Errors, GgufWithoutTokenizer) {
  ZINC_REQUIRE_TESTDATA();
  // A real file whose tokenizer keys are removed.
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models" / "stories260K.gguf");
  Metadata md;
  for (const auto& kv : f.metadata()) {
    if (!kv.key.starts_with("tokenizer.")) md.set(kv.key, Value::copy_of(kv.value));
  }
  EXPECT_THROW((void)Vocab::load(md, "stripped"), Error);
  // And the original loads.
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.vocab().size(), 512);
}

}  // namespace
}  // namespace zinc::tokenizer
