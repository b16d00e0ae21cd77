// Grammar benchmark: what constrained sampling costs per token on a real vocabulary. A JSON document is
// tokenized with the model's tokenizer and fed to a matcher token by token (as generation would); at
// each position it times allows() of the next token (the fast path: the sampler's choice fits) and
// fill_mask() over the whole vocabulary (the slow path: it did not). Prints one line per document
// position kind and the totals, in microseconds.
//
// Usage: zinc_grammar_bench MODEL.gguf [SCHEMA.json | -] [DOCUMENT.json]
//   defaults: a schema with nested objects, arrays, enums, integers and strings, and a document of it.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "sample/grammar_matcher.h"
#include "sample/json_schema.h"
#include "tokenizer/tokenizer.h"

using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "count": {"type": "integer"}, "status": {"enum": ["open", "closed", "pending"]},
  "items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}, "label": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["id", "label", "tags"]}}},
  "required": ["name", "count", "status", "items"]})";

const char* kDocument = R"({"name": "Quarterly report for the northern region", "count": 3, "status": "pending", "items": [
  {"id": 1, "label": "Revenue grew by twelve percent", "tags": ["finance", "growth"]},
  {"id": 2, "label": "Two new offices opened in Oslo and Bergen", "tags": ["expansion"]},
  {"id": 3, "label": "Customer satisfaction reached 91 out of 100", "tags": ["customers", "survey", "quality"]}]})";

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: zinc_grammar_bench MODEL.gguf [SCHEMA.json] [DOCUMENT.json]\n");
    return 2;
  }
  const auto file = zinc::gguf::File::open(argv[1]);
  const auto tok = zinc::tokenizer::Tokenizer::from_gguf(file);
  const std::string schema = argc > 2 && std::string(argv[2]) != "-" ? slurp(argv[2]) : kSchema;
  const std::string doc = argc > 3 ? slurp(argv[3]) : kDocument;

  auto t0 = Clock::now();
  const auto vocab = zinc::sample::GrammarVocab::from_tokenizer(tok);
  const double vocab_ms = us_since(t0) / 1e3;
  t0 = Clock::now();
  auto grammar = std::make_shared<const zinc::sample::Grammar>(
      zinc::sample::Grammar::parse(zinc::sample::json_schema_to_gbnf(nlohmann::ordered_json::parse(schema))));
  const double grammar_ms = us_since(t0) / 1e3;
  const auto ids = tok.encode(doc, false, false);

  zinc::sample::GrammarMatcher m(grammar, vocab);
  std::vector<uint8_t> mask;
  std::vector<double> mask_us, allows_us;
  std::vector<size_t> allowed_counts;
  for (int32_t id : ids) {
    auto t = Clock::now();
    m.fill_mask(mask);
    mask_us.push_back(us_since(t));
    allowed_counts.push_back(static_cast<size_t>(std::count(mask.begin(), mask.end(), 1)));
    t = Clock::now();
    const bool ok = m.allows(id);
    allows_us.push_back(us_since(t));
    if (!ok || !mask[static_cast<size_t>(id)]) {
      fmt::print(stderr, "the document leaves the grammar at token {} ({:?})\n", id, tok.token_to_piece(id));
      return 1;
    }
    m.accept(id);
  }
  auto sum = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  };
  std::vector<double> sorted = mask_us;
  std::sort(sorted.begin(), sorted.end());
  fmt::print("vocabulary {} tokens (view built in {:.1f} ms), grammar {} elements (built in {:.2f} ms), document {} tokens\n",
             vocab->size(), vocab_ms, grammar->size(), grammar_ms, ids.size());
  fmt::print("| per token | mean µs | median µs | max µs |\n|---|---|---|---|\n");
  fmt::print("| allows (the sampler's choice fits) | {:.2f} | | {:.2f} |\n", sum(allows_us) / static_cast<double>(ids.size()),
             *std::max_element(allows_us.begin(), allows_us.end()));
  fmt::print("| fill_mask (whole vocabulary) | {:.0f} | {:.0f} | {:.0f} |\n", sum(mask_us) / static_cast<double>(ids.size()),
             sorted[sorted.size() / 2], sorted.back());
  // The slowest and fastest positions, with how many tokens were allowed there.
  std::vector<size_t> order(ids.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mask_us[a] > mask_us[b]; });
  fmt::print("slowest masks: ");
  for (size_t k = 0; k < std::min<size_t>(5, order.size()); ++k) {
    const size_t i = order[k];
    fmt::print("{:.0f} µs before {:?} ({} allowed); ", mask_us[i], tok.token_to_piece(ids[i]), allowed_counts[i]);
  }
  fmt::print("\n");
  return 0;
}
