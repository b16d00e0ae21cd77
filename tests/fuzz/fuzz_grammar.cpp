// libFuzzer target: grammars and JSON schemas from untrusted bytes (a request's `grammar` and
// `response_format` fields). The first byte picks the input's kind:
//   even: GBNF text. It parses or throws zinc::Error; a grammar that parses prints back to GBNF that
//         parses again, and a matcher over a small vocabulary gives a mask equal to checking each token.
//         The vocabulary has two control tokens (no text), <|a|> and <|b|> to token elements.
//   odd:  a JSON schema. It converts or throws zinc::Error; what it converts to always parses.
// Any other exception, a crash or a sanitizer report is a failure.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/json_bounded.h"
#include "sample/grammar.h"
#include "sample/grammar_matcher.h"
#include "sample/json_schema.h"

namespace {

std::shared_ptr<const zinc::sample::GrammarVocab> small_vocab() {
  static const auto v = std::make_shared<const zinc::sample::GrammarVocab>(
      std::vector<std::string>{"</s>", "a", "b", "ab", "{", "}", "\"", " ", "\n", "1", "\xC3", "\xA9", "\xC3\xA9", "\xF0\x9F",
                               "\xA6\x99", "[", "]", ",", ":", "null", "true", "x\xFF", "", ""},
      std::vector<bool>{true});
  return v;
}

int32_t control_token(std::string_view text) { return text == "<|a|>" ? 22 : text == "<|b|>" ? 23 : -1; }

void exercise(const zinc::sample::Grammar& g) {
  using namespace zinc::sample;
  const auto again = Grammar::parse(g.to_gbnf(), g.names[g.root]);  // must not throw
  if (again.rules.size() != g.rules.size()) std::abort();
  GrammarMatcher m(std::make_shared<const Grammar>(g), small_vocab());
  m.set_max_work(uint64_t{1} << 24);  // (an input that reads the text too many ways: its clear error, soon)
  std::vector<uint8_t> mask;
  for (int step = 0; step < 6; ++step) {
    m.fill_mask(mask);
    int32_t next = -1;
    for (int32_t t = 0; t < static_cast<int32_t>(mask.size()); ++t) {
      if ((mask[static_cast<size_t>(t)] != 0) != m.allows(t)) std::abort();
      if (mask[static_cast<size_t>(t)] && t != 0 && next < 0) next = t;
    }
    if (next < 0) break;
    m.accept(next);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      exercise(zinc::sample::Grammar::parse(text, "root", control_token));
    } else {
      nlohmann::ordered_json schema;
      try {
        schema = zinc::parse_json_bounded<nlohmann::ordered_json>(text);
      } catch (const zinc::JsonTooDeep&) {
        return 0;
      } catch (const nlohmann::json::exception&) {
        return 0;
      }
      const std::string gbnf = zinc::sample::json_schema_to_gbnf(schema);
      std::optional<zinc::sample::Grammar> g;
      try {
        g = zinc::sample::Grammar::parse(gbnf);
      } catch (const zinc::Error&) {
        std::abort();  // the converter wrote a grammar the parser refuses
      }
      exercise(*g);
    }
  } catch (const zinc::Error&) {
  }
  return 0;
}
