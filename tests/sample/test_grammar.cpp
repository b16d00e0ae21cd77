// The grammar engine on hand-written cases: GBNF parsing and its errors, the matcher's acceptance of
// text (UTF-8 split across tokens, overlong forms refused, the end of a sentence), the vocabulary mask
// against checking every token one by one, and JSON schemas. Generation under grammars is compared with
// llama.cpp's grammar engine in grammar_vs_llamacpp.mjs.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "sample/grammar.h"
#include "sample/grammar_matcher.h"
#include "sample/json_schema.h"

namespace zinc::sample {
namespace {

std::shared_ptr<const Grammar> parse(std::string_view text) { return std::make_shared<const Grammar>(Grammar::parse(text)); }

// A vocabulary of the given pieces (ids in order), with token 0 ending generation.
std::shared_ptr<const GrammarVocab> vocab(std::vector<std::string> pieces) {
  std::vector<bool> eog(pieces.size(), false);
  eog[0] = true;
  return std::make_shared<const GrammarVocab>(std::move(pieces), std::move(eog));
}

// Whether the whole text is a sentence of the grammar (accepted, then complete).
bool sentence(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g, vocab({"</s>"}));
  return m.accept_text(text) && m.complete();
}

bool prefix(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g, vocab({"</s>"}));
  return m.accept_text(text);
}

void expect_error(std::string_view text, std::string_view needle) {
  try {
    Grammar::parse(text);
    ADD_FAILURE() << "no error for: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Grammar, ParsesEachConstruct) {
  auto g = parse(R"(root ::= "a" [b-d]+ ( "x" | "yz" )? [^0-9]{2} . "\n\x41\u00e9" # comment
)");
  EXPECT_TRUE(sentence(g, "abcx##!\nAé"));
  EXPECT_TRUE(sentence(g, "adddyz...\nAé"));
  EXPECT_TRUE(sentence(g, "abqq🦙\nAé"));
  EXPECT_FALSE(sentence(g, "ax##!\nAé"));   // + needs one
  EXPECT_FALSE(sentence(g, "ab1q!\nAé"));   // [^0-9]
  EXPECT_FALSE(sentence(g, "abq!\nAé"));    // {2}
  EXPECT_TRUE(prefix(g, "abcx#"));
  EXPECT_FALSE(sentence(g, "abcx#"));       // a prefix, not a sentence
}

// Nothing repeated ("" {1,1949}) is nothing: no chain of a thousand rules that match nothing, which the
// grammar fuzzer found making one matcher step run for seconds.
TEST(Grammar, RepeatingNothingAddsNoRules) {
  auto g = parse("root ::= (\"a\" root \"b\")* \"\" {1,1949} \"\" {1,1949}\n");
  EXPECT_LE(g->rules.size(), 3u);
  EXPECT_TRUE(sentence(g, ""));
  EXPECT_TRUE(sentence(g, "aabbab"));
  EXPECT_FALSE(sentence(g, "aab"));
}

TEST(Grammar, CountsAndRulesAcrossLines) {
  auto g = parse("root ::= item (\",\" item){1,3}\n"
                 "  | \"none\"\n"
                 "item ::= [a-z]{2,}\n");
  EXPECT_TRUE(sentence(g, "ab,cd"));
  EXPECT_TRUE(sentence(g, "ab,cd,ef,gh"));
  EXPECT_FALSE(sentence(g, "ab,cd,ef,gh,ij"));  // at most 3 more
  EXPECT_FALSE(sentence(g, "ab"));              // at least 1 more
  EXPECT_FALSE(sentence(g, "a,bc"));            // items of 2 or more
  EXPECT_TRUE(sentence(g, "none"));
  // Round trip through the printer: the same language.
  auto again = parse(g->to_gbnf());
  for (const char* s : {"ab,cd", "ab,cd,ef,gh", "none", "ab", "ab,cd,ef,gh,ij"}) EXPECT_EQ(sentence(g, s), sentence(again, s)) << s;
}

TEST(Grammar, RefusesWhatCannotRun) {
  expect_error("root ::= foo", "'foo' is used but never defined");
  expect_error("start ::= \"a\"", "no 'root' rule");
  expect_error("root ::= root \"a\" | \"b\"", "left-recursive");
  expect_error("root ::= x \"a\"\nx ::= \"\" | root", "left-recursive");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
  expect_error("root ::= \"abc", "not closed");
  expect_error("root ::= [a-", "not closed");
  expect_error("root ::= [z-a]", "below its start");
  expect_error("root ::= \"a\"{3,2}", "below its minimum");
  expect_error("root ::= \"a\"{99999}", "above 4096");
  expect_error("root ::= ( \"a\"", "expected ')'");
  expect_error("root ::= \"\\q\"", "unknown escape");
  expect_error("root ::= * \"a\"", "repeats nothing");
  expect_error("root := \"a\"", "line 1 column 6: expected ::=");
  expect_error("root ::= \"a\"\n\n  x ::= [", "line 3");
  // A grammar that would be enormous once repetitions are expanded.
  expect_error("root ::= \"" + std::string(300, 'a') + "\"{4000}", "too large");
}

TEST(GrammarMatcher, TokensSplittingACharacter) {
  // "é" is C3 A9; "🦙" is F0 9F A6 99. Tokens may end inside a character.
  auto g = parse(R"(root ::= "é" [a-z] | "🦙")");
  auto v = vocab({"</s>", "\xC3", "\xA9", "x", "\xF0\x9F", "\xA6\x99", "\xF0\x9F\xA6\x99", "\xC3\xA9x", "\xC3\xA8"});
  GrammarMatcher m(g, v);
  EXPECT_TRUE(m.allows(1));   // C3: é can follow
  EXPECT_FALSE(m.allows(2));  // A9 alone is not UTF-8
  EXPECT_TRUE(m.allows(4));   // F0 9F: 🦙 can follow
  EXPECT_TRUE(m.allows(6));
  EXPECT_TRUE(m.allows(7));
  EXPECT_FALSE(m.allows(8));  // è
  m.accept(1);
  EXPECT_TRUE(m.allows(2));
  EXPECT_FALSE(m.allows(3));
  EXPECT_FALSE(m.complete());
  m.accept(2);
  EXPECT_TRUE(m.allows(3));
  EXPECT_FALSE(m.allows(0));  // not complete: no end yet
  m.accept(3);
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.exhausted());
  EXPECT_TRUE(m.allows(0));
  EXPECT_THROW(m.accept(3), Error);
}

TEST(GrammarMatcher, RefusesOverlongFormsAndSurrogates) {
  auto g = parse(R"(root ::= [^x]+)");
  GrammarMatcher m(g, vocab({"</s>"}));
  EXPECT_FALSE(m.accept_text("\xC0\xBB"));          // overlong '{' (2 bytes)
  EXPECT_FALSE(m.accept_text("\xF0\x80\x81\xBB"));  // overlong '{' (4 bytes)
  EXPECT_FALSE(m.accept_text("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(m.accept_text("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(m.accept_text("\xF0\x80"));          // can only become overlong
  EXPECT_TRUE(m.accept_text("\xF0\x9F"));           // can still become 🦙
}

TEST(GrammarMatcher, AmbiguousGrammarsKeepEveryReading) {
  // "ab" may be the first alternative's whole or the start of the second's.
  auto g = parse(R"(root ::= x | x "c"
x ::= "a" "b" | "a" [a-z]+)");
  GrammarMatcher m(g, vocab({"</s>"}));
  ASSERT_TRUE(m.accept_text("ab"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.exhausted());
  ASSERT_TRUE(m.accept_text("c"));
  EXPECT_TRUE(m.complete());
  m.reset();
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.accept_text("b"));
}

TEST(GrammarMatcher, MaskEqualsCheckingEachToken) {
  // A vocabulary of random byte strings (ASCII, multi-byte characters, stray bytes) against several
  // grammars, at every step of a walk: the mask and allows() must agree on every token.
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "{", "}", "\"", ",", " ", "\n", "1", "é", "\xC3", "\xA9", "🦙", "\xF0\x9F", "\xA6", "x"};
  std::vector<std::string> pieces = {"</s>", ""};
  for (int i = 0; i < 3000; ++i) {
    std::string p;
    const int len = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) p += alphabet[rng() % alphabet.size()];
    pieces.push_back(p);
  }
  auto v = vocab(pieces);
  for (const char* text : {R"(root ::= "{" ( "\"" [a-z]* "\"" ( "," " "? "\"" [a-z]* "\"" )* )? "}")",
                           R"(root ::= ( [^"{] | "é" )+ "}")",
                           R"(root ::= ( "a" | "ab" | "🦙" [0-9]? )* "\n")",
                           // The same string rule in different places: masks cached for one are reused in the
                           // others, with what follows each string decided on its own stack.
                           R"(root ::= "{" str ":" str ( "," str ":" "[" str ( "," str )* "]" )* "}"
str ::= "\"" ( [a-z b{}] | "é" )* "\"")",
                           // Token elements (token 1 has no text, a control token) beside text: masks of
                           // cached top frames plus the tokens the elements take.
                           R"(root ::= ( <[1]> [a-z{}]* | !<[1]> "}" | "{" str <[1]> )+ "\n"
str ::= "\"" ( [a-z b{}] | "é" )* "\"")"}) {
    GrammarMatcher m(parse(text), v);
    std::vector<uint8_t> mask;
    for (int step = 0; step < 40; ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < static_cast<int32_t>(pieces.size()); ++t) {
        ASSERT_EQ(mask[static_cast<size_t>(t)] != 0, m.allows(t)) << text << " step " << step << " token " << t;
        if (mask[static_cast<size_t>(t)] && t != 0) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      m.accept(allowed[rng() % allowed.size()]);
    }
  }
}

TEST(GrammarMatcher, ManyEmptyWaysToTheSamePlaceAreReadOnce) {
  // Grammars whose readings reach the same place along very many paths (found by fuzzing: a request's
  // grammar kept the matcher busy for over a minute, then out of memory). Each path is the same stack,
  // so expanding it once is enough, and the matcher answers as for the plain grammar.
  std::string chain = "root ::= g0 \"y\"\n";  // g_k ::= g_k+1 | g_k+1: 2^24 ways to "x"
  for (int k = 0; k < 24; ++k) chain += "g" + std::to_string(k) + " ::= g" + std::to_string(k + 1) + " | g" + std::to_string(k + 1) + "\n";
  chain += "g24 ::= \"x\"\n";
  for (const std::string& text : {std::string(R"(root ::= "x" "" {1,2000} "" {1,2000} ( "" | "" ) {1,2000} "y")"), chain}) {
    auto g = parse(text);
    GrammarMatcher m(g, vocab({"</s>", "x", "y", "xy", "a"}));
    std::vector<uint8_t> mask;
    m.fill_mask(mask);
    EXPECT_EQ(mask, (std::vector<uint8_t>{0, 1, 0, 1, 0})) << text.substr(0, 60);
    m.accept(1);
    m.fill_mask(mask);
    EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 0, 0})) << text.substr(0, 60);
    m.accept(2);
    EXPECT_TRUE(m.complete());
  }
  // Here the readings differ (an "a" in any of 2,000 nested optional places): the clear error for too
  // many at once, as soon as they are counted, not after four million paths to them.
  GrammarMatcher m(parse(R"(root ::= "x" ( "a"? ) {0,2000} ( "b"? ) {0,2000} "y")"), vocab({"</s>", "x", "y", "a"}));
  try {
    m.accept(1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

// Words with an optional space between them, up to 60: "abab" reads as 1 to 4 words, so after a few
// characters every count of words so far is a reading (dozens at once, each step comparing them all).
// With 300 words, masks over a real vocabulary took seconds to minutes (a request held, and what waited
// on it); now an operation past its work fails with the clear error (here a small budget), and the
// matcher's state is as before it.
TEST(GrammarMatcher, TooMuchWorkForOneTokenIsAClearErrorAndLosesNothing) {
  auto g = parse("root ::= ([a-h]* \" \"?){1,60}\n");
  std::vector<std::string> pieces = {"</s>"};
  for (const char* p : {"a", "b", "ab", "ba", "abc", " ", "a ", "h", "hh", "abab"}) pieces.push_back(p);
  std::vector<bool> eog(pieces.size(), false);
  eog[0] = true;
  const auto v = std::make_shared<const GrammarVocab>(pieces, std::move(eog));
  GrammarMatcher m(g, v);
  ASSERT_TRUE(m.accept_text("ab ab"));
  m.set_max_work(uint64_t{1} << 18);
  std::string taken = "ab ab";
  bool failed = false;
  for (int i = 0; i < 40 && !failed; ++i) {
    try {
      if (!m.accept_text("abab")) break;
      taken += "abab";
    } catch (const Error& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
      EXPECT_GT(m.last_work(), uint64_t{1} << 18);
    }
  }
  ASSERT_TRUE(failed) << "160 characters of words within 2^18 steps of work each";
  // The text taken before the failing piece is all there is: with room to work, the matcher goes on
  // as one that never failed.
  m.set_max_work(uint64_t{1} << 40);
  GrammarMatcher fresh(g, v);
  ASSERT_TRUE(fresh.accept_text(taken));
  std::vector<uint8_t> mask, want;
  for (const char* piece : {"abab", " h", "a "}) {
    ASSERT_TRUE(m.accept_text(piece));
    ASSERT_TRUE(fresh.accept_text(piece));
    m.fill_mask(mask);
    fresh.fill_mask(want);
    EXPECT_EQ(mask, want) << piece;
  }
  EXPECT_EQ(mask[0], 1);  // complete
  // A grammar without such readings stays far inside the default: each step's work is small.
  GrammarMatcher j(parse("root ::= \"[\" ([a-h]+ (\",\" [a-h]+)*)? \"]\"\n"), vocab({"</s>", "[", "]", "ab", ",", "h"}));
  ASSERT_TRUE(j.accept_text("[ab,h,abab"));
  j.fill_mask(mask);
  EXPECT_LT(j.last_work(), 1000u);
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1}));
}

// A vocabulary with control tokens (no text) beside text tokens, as a Harmony model's: 0 ends
// generation, 1 <|channel|>, 2 <|message|>, 9 <|call|> (also ends generation).
std::shared_ptr<const GrammarVocab> control_vocab() {
  std::vector<std::string> pieces = {"</s>", "", "", "ab", "a", "b", "\xC3", "\xA9", "<|channel|>", ""};
  std::vector<bool> eog(pieces.size(), false);
  eog[0] = eog[9] = true;
  return std::make_shared<const GrammarVocab>(std::move(pieces), std::move(eog));
}

int32_t control_ids(std::string_view text) {
  if (text == "<|channel|>") return 1;
  if (text == "<|message|>") return 2;
  if (text == "<|call|>") return 9;
  return -1;
}

TEST(Grammar, TokenElements) {
  const auto g = Grammar::parse(R"(root ::= <[1]> "a" !<[2]>* <|message|> <|call|>?)", "root", control_ids);
  EXPECT_EQ(g.to_gbnf(), "root ::= <[1]> [a] root-1 <[2]> root-2\nroot-1 ::= !<[2]> root-1 | \"\"\nroot-2 ::= <[9]> | \"\"\n");
  EXPECT_EQ(Grammar::parse(g.to_gbnf()).to_gbnf(), g.to_gbnf());  // ids need no vocabulary
  expect_error(R"(root ::= <|channel|>)", "needs the model's vocabulary");
  try {
    Grammar::parse(R"(root ::= <|nope|>)", "root", control_ids);
    ADD_FAILURE() << "an unknown token was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|nope|> is not one token"), std::string::npos) << e.what();
  }
  expect_error(R"(root ::= <[12)", "expected a token id");
  expect_error(R"(root ::= <[]>)", "expected a token id");
  expect_error(R"(root ::= <|channel|)", "not closed");
  expect_error(R"(root ::= <[99999999999]>)", "beyond the vocabulary");
  // A token consumes: a rule behind one is not left-recursive.
  EXPECT_NO_THROW(Grammar::parse(R"(root ::= <[1]> root | "a")"));
  expect_error(R"(root ::= x <[1]>
x ::= root "a")", "left-recursive");
}

TEST(GrammarMatcher, TokenElementsTakeWholeTokens) {
  auto v = control_vocab();
  GrammarMatcher m(std::make_shared<const Grammar>(
                       Grammar::parse(R"(root ::= <|channel|> "ab" <|message|> [a-z]* !<|message|> "é" <|call|>)", "root", control_ids)),
                   v);
  const auto allowed = [&] {
    std::vector<uint8_t> mask;
    m.fill_mask(mask);
    std::vector<int32_t> ids;
    for (int32_t t = 0; t < static_cast<int32_t>(mask.size()); ++t) {
      EXPECT_EQ(mask[static_cast<size_t>(t)] != 0, m.allows(t)) << "token " << t;
      if (mask[static_cast<size_t>(t)]) ids.push_back(t);
    }
    return ids;
  };
  // Only the control token, not the text token spelling it.
  EXPECT_EQ(allowed(), (std::vector<int32_t>{1}));
  m.accept(1);
  EXPECT_EQ(allowed(), (std::vector<int32_t>{3, 4}));  // "ab", "a"
  m.accept(3);
  EXPECT_EQ(allowed(), (std::vector<int32_t>{2}));
  m.accept(2);
  // [a-z]* then any one token but <|message|> (never one that ends generation): text tokens by their
  // text or whole, and the other control token.
  EXPECT_EQ(allowed(), (std::vector<int32_t>{1, 3, 4, 5, 6, 7, 8}));
  EXPECT_THROW(m.accept(2), Error);
  m.accept(6);  // "\xC3": first byte of é, taken whole by !<|message|>
  EXPECT_FALSE(m.complete());
  EXPECT_EQ(allowed(), (std::vector<int32_t>{6}));  // then "é" ("\xC3" "\xA9" would need a second byte first)
  m.accept(6);
  EXPECT_EQ(allowed(), (std::vector<int32_t>{7}));  // a character's bytes pending: no token element
  m.accept(7);
  // <|call|> ends generation but is taken by its element before the grammar is complete.
  EXPECT_FALSE(m.complete());
  EXPECT_EQ(allowed(), (std::vector<int32_t>{9}));
  m.accept(9);
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.exhausted());
}

TEST(JsonSchema, PropertiesInOrderRequiredAndOptional) {
  const auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
      "required": ["name", "tags"]})");
  auto g = parse(json_schema_to_gbnf(schema));
  EXPECT_TRUE(sentence(g, R"({"name": "Ann", "age": 3, "tags": []})"));
  EXPECT_TRUE(sentence(g, R"({"name":"Ann","tags":["a","b"]})"));
  EXPECT_TRUE(sentence(g, "{\n  \"name\": \"A\\\"n\\u00e9\",\n  \"tags\": [\"x\"]\n}"));
  EXPECT_FALSE(sentence(g, R"({"age": 3, "name": "Ann", "tags": []})"));    // the listed order
  EXPECT_FALSE(sentence(g, R"({"name": "Ann", "age": 3})"));                 // tags is required
  EXPECT_FALSE(sentence(g, R"({"name": "Ann", "tags": ["a", "b", "c"]})"));  // maxItems
  auto at_least = parse(json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "array", "minItems": 3})")));
  EXPECT_FALSE(sentence(at_least, "[1, 2]"));
  EXPECT_TRUE(sentence(at_least, "[1, 2, 3]"));
  EXPECT_TRUE(sentence(at_least, "[1, 2, 3, 4, 5]"));
  EXPECT_FALSE(sentence(g, R"({"name": "Ann", "tags": [], "x": 1})"));       // no other properties
  EXPECT_FALSE(sentence(g, R"({"name": "Ann", "age": 3.5, "tags": []})"));   // an integer
  EXPECT_FALSE(sentence(g, "{\"name\": \"a\nb\", \"tags\": []}"));           // a raw newline in a string
  EXPECT_FALSE(prefix(g, std::string("{") + std::string(30, ' ')));           // whitespace is bounded
}

TEST(JsonSchema, EnumsConstsUnionsRefsAndFormats) {
  const auto schema = nlohmann::ordered_json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                       "required": ["v", "next"]}},
    "type": "object",
    "properties": {"kind": {"enum": ["a", 1, null]}, "fixed": {"const": {"k": [1]}}, "list": {"$ref": "#/$defs/node"},
                   "when": {"type": "string", "format": "date"}, "id": {"type": ["string", "null"], "maxLength": 3}},
    "required": ["kind", "fixed", "list", "when", "id"]})");
  auto g = parse(json_schema_to_gbnf(schema));
  EXPECT_TRUE(sentence(g, R"({"kind": "a", "fixed": {"k":[1]}, "list": {"v": 1, "next": {"v": 2, "next": null}}, "when": "2026-11-26", "id": null})"));
  EXPECT_TRUE(sentence(g, R"({"kind": null, "fixed": {"k":[1]}, "list": {"v": 1, "next": null}, "when": "2026-01-31", "id": "abc"})"));
  EXPECT_FALSE(sentence(g, R"({"kind": "b", "fixed": {"k":[1]}, "list": {"v": 1, "next": null}, "when": "2026-11-26", "id": null})"));
  EXPECT_FALSE(sentence(g, R"({"kind": 1, "fixed": {"k":[2]}, "list": {"v": 1, "next": null}, "when": "2026-11-26", "id": null})"));
  EXPECT_FALSE(sentence(g, R"({"kind": 1, "fixed": {"k":[1]}, "list": {"v": 1, "next": null}, "when": "2026-13-26", "id": null})"));
  EXPECT_FALSE(sentence(g, R"({"kind": 1, "fixed": {"k":[1]}, "list": {"v": 1, "next": null}, "when": "2026-11-26", "id": "abcd"})"));
  // Any JSON value; any object.
  auto any = parse(json_value_gbnf(false));
  EXPECT_TRUE(sentence(any, R"([1, -2.5e3, "x", {"a": [true, false, null]}, {}])"));
  EXPECT_TRUE(sentence(any, "42"));
  EXPECT_FALSE(sentence(any, "[1,]"));
  EXPECT_FALSE(sentence(any, "01"));
  auto object = parse(json_value_gbnf(true));
  EXPECT_TRUE(sentence(object, R"({"a": {"b": [1, {}]}, "c": "d"})"));
  EXPECT_FALSE(sentence(object, "[1]"));
}

TEST(JsonSchema, RefusesWhatItCannotEnforce) {
  const auto error_of = [](const char* s) {
    try {
      json_schema_to_gbnf(nlohmann::ordered_json::parse(s));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^a+$"})").find("'pattern' is not supported"), std::string::npos);
  EXPECT_NE(error_of(R"({"properties": {"a": false}})").find("at schema/properties/a"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "http://example.com/s.json"})").find("only #"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "float"})").find("unknown type"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "properties": {}, "required": ["a"]})").find("not in properties"), std::string::npos);
}

}  // namespace
}  // namespace zinc::sample
