// libFuzzer target for the tokenizers: the input is text from a user (or a client of the server), fed
// to every vocabulary in $ZINC_TEST_FUZZ_VOCABS (GGUF files, colon-separated). Encoding must either succeed
// with ids in range or reject ill-formed UTF-8 with zinc::Error; decoding the ids and streaming them
// through the detokenizer must not fail, and sanitized text must always encode.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

std::vector<std::unique_ptr<zinc::tokenizer::Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<zinc::tokenizer::Tokenizer>> t;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* list = std::getenv("ZINC_TEST_FUZZ_VOCABS");
  if (!list) return 0;
  std::string s = list;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t colon = std::min(s.find(':', pos), s.size());
    const std::string path = s.substr(pos, colon - pos);
    if (!path.empty()) {
      const auto f = zinc::gguf::File::open(path);
      tokenizers().push_back(std::make_unique<zinc::tokenizer::Tokenizer>(zinc::tokenizer::Tokenizer::from_gguf(f)));
    }
    pos = colon + 1;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& tok : tokenizers()) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids;
      try {
        ids = tok->encode(text, special, special);
      } catch (const zinc::Error&) {
        ids = tok->encode(zinc::tokenizer::unicode::sanitize_utf8(text), special, special);  // must not throw
      }
      tok->check_ids(ids);
      (void)tok->decode(ids);
      zinc::tokenizer::Detokenizer detok(*tok);
      std::string streamed;
      for (int32_t id : ids) streamed += detok.push(id);
      streamed += detok.flush();
    }
  }
  return 0;
}
