// Compares ZINC's chat-template rendering with @huggingface/jinja's (rendered by render_oracle.mjs) for
// every template x conversation pair, byte for byte. Where the oracle raises, ZINC must raise too.
//
// Usage: zinc_chat_oracle_compare TEMPLATES_DIR CONVERSATIONS.json CASES.json EXPECTED.json KNOWN.json [--verbose]
//
// CASES.json holds one-construct templates with their contexts; they must all match unless listed.
// KNOWN.json lists the target templates (which must match everywhere) and the known mismatches of the
// other templates with their reasons. The run fails on any mismatch not listed, on a listed mismatch
// that now matches (so the list stays exact), and on any listed target template.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "chat/chat_template.h"

namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::chrono::system_clock::time_point parse_utc(const std::string& iso) {
  std::tm tm{};
  if (sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
             &tm.tm_sec) != 6) {
    throw std::runtime_error("bad time: " + iso);
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out;
}

std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  return fmt::format("first difference at byte {} (oracle {} bytes, zinc {} bytes)\n        oracle: ...{}\n        zinc:   ...{}", i,
                     want.size(), got.size(), escape(want.substr(from, 140)), escape(got.substr(from, 140)));
}

struct Outcome {
  bool ok = false;
  std::string text;  // output or error
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: zinc_chat_oracle_compare TEMPLATES_DIR CONVERSATIONS.json CASES.json EXPECTED.json KNOWN.json "
                 "[--verbose]\n";
    return 2;
  }
  const fs::path templates_dir = argv[1];
  const bool verbose = argc > 6 && std::string(argv[6]) == "--verbose";
  const ordered_json suite = ordered_json::parse(slurp(argv[2]));
  const ordered_json cases = ordered_json::parse(slurp(argv[3]));
  const ordered_json expected = ordered_json::parse(slurp(argv[4]));
  const char* known_path = argv[5];
  const ordered_json known = ordered_json::parse(slurp(known_path));

  std::set<std::string> targets;
  for (const auto& t : known.at("targets")) targets.insert(t.get<std::string>());
  std::map<std::string, std::pair<std::set<std::string>, std::string>> allowed;  // template -> (conversations, reason)
  for (const auto& [file, entry] : known.at("known_mismatches").items()) {
    std::set<std::string> convs;
    for (const auto& c : entry.at("conversations")) convs.insert(c.get<std::string>());
    allowed[file] = {convs, entry.at("reason").get<std::string>()};
  }

  zinc::chat::jinja::RenderOptions options;
  options.now = parse_utc(suite.at("now").get<std::string>());
  const std::string bos = suite.at("bos_token"), eos = suite.at("eos_token");

  int failures = 0, full_matches = 0, templates = 0, pairs = 0, pairs_matched = 0;
  std::vector<std::string> matched_names;
  std::cout << fmt::format("ZINC vs {} on {} conversations\n\n", expected.value("renderer", std::string("oracle")),
                           suite.at("conversations").size());
  for (const auto& [file, results] : expected.at("templates").items()) {
    ++templates;
    const std::string stem = fs::path(file).stem().string();
    const bool is_target = targets.count(stem) > 0;
    std::optional<zinc::chat::ChatTemplate> tmpl;
    std::string parse_error;
    try {
      tmpl.emplace(slurp(templates_dir / file), bos, eos, file);
    } catch (const std::exception& e) {
      parse_error = e.what();
    }
    std::vector<std::string> mismatches;
    std::string details, both_raise;
    int matched = 0;
    for (const auto& conv : suite.at("conversations")) {
      const std::string name = conv.at("name");
      const ordered_json& want_j = results.at(name);
      Outcome want{want_j.at("ok").get<bool>(), want_j.contains("output") ? want_j.at("output").get<std::string>()
                                                                           : want_j.at("error").get<std::string>()};
      Outcome got;
      if (!tmpl) {
        got = {false, parse_error};
      } else {
        zinc::chat::ChatRequest req;
        req.messages = conv.at("messages");
        req.tools = conv.value("tools", ordered_json());
        req.add_generation_prompt = conv.at("add_generation_prompt").get<bool>();
        if (conv.contains("enable_thinking")) req.enable_thinking = conv.at("enable_thinking").get<bool>();
        if (conv.contains("extra")) req.extra = conv.at("extra");
        try {
          got = {true, tmpl->render(req, options)};
        } catch (const std::exception& e) {
          got = {false, e.what()};
        }
      }
      ++pairs;
      const bool same = want.ok == got.ok && (!want.ok || want.text == got.text);
      if (same) {
        ++matched;
        ++pairs_matched;
        if (verbose && !want.ok) both_raise += fmt::format("    {}: both raise\n      oracle: {}\n      zinc:   {}\n", name, want.text, got.text);
        continue;
      }
      mismatches.push_back(name);
      if (want.ok && got.ok) {
        details += fmt::format("    {}: {}\n", name, first_difference(want.text, got.text));
      } else if (want.ok) {
        details += fmt::format("    {}: oracle renders, zinc raises: {}\n", name, got.text);
      } else {
        details += fmt::format("    {}: oracle raises ({}), zinc renders\n", name, want.text);
      }
    }
    const int total = static_cast<int>(results.size());
    const auto known_it = allowed.find(file);
    if (mismatches.empty()) {
      ++full_matches;
      matched_names.push_back(stem);
      std::cout << fmt::format("  match     {:<55} {}/{}{}\n", stem, matched, total, is_target ? "  (target)" : "");
      std::cout << both_raise;
      if (known_it != allowed.end()) {
        std::cout << fmt::format("    FAIL: listed as a known mismatch but now matches: remove it from {}\n", known_path);
        ++failures;
      }
      continue;
    }
    bool all_known = known_it != allowed.end() && !is_target;
    if (all_known) {
      for (const auto& m : mismatches) all_known = all_known && (known_it->second.first.count(m) || known_it->second.first.count("*"));
      if (!known_it->second.first.count("*")) {
        for (const auto& listed : known_it->second.first) {
          if (std::find(mismatches.begin(), mismatches.end(), listed) == mismatches.end()) {
            std::cout << fmt::format("    FAIL: {} x {} is listed as a known mismatch but matches now\n", stem, listed);
            ++failures;
          }
        }
      }
    }
    if (all_known) {
      std::cout << fmt::format("  known     {:<55} {}/{}  ({})\n", stem, matched, total, known_it->second.second);
      if (verbose) std::cout << details;
    } else {
      ++failures;
      std::cout << fmt::format("  MISMATCH  {:<55} {}/{}{}\n{}", stem, matched, total,
                               is_target ? "  (target family: must match)" : "", details);
    }
  }
  for (const auto& [file, entry] : allowed) {
    if (!expected.at("templates").contains(file)) {
      std::cout << fmt::format("  FAIL: known mismatch for {} which is not in the template set\n", file);
      ++failures;
    }
  }
  std::cout << fmt::format("\n{} of {} templates match on every conversation; {} of {} renders match\n", full_matches,
                           templates, pairs_matched, pairs);

  // One-construct cases.
  std::map<std::string, std::string> known_cases;
  if (known.contains("known_case_mismatches")) {
    for (const auto& [name, reason] : known.at("known_case_mismatches").items()) known_cases[name] = reason.get<std::string>();
  }
  int cases_matched = 0;
  std::cout << "\n";
  for (const auto& c : cases.at("cases")) {
    const std::string name = c.at("name");
    const ordered_json& want_j = expected.at("cases").at(name);
    Outcome want{want_j.at("ok").get<bool>(), want_j.contains("output") ? want_j.at("output").get<std::string>()
                                                                         : want_j.at("error").get<std::string>()};
    Outcome got;
    try {
      const auto t = zinc::chat::Template::parse(c.at("template").get<std::string>(), name);
      got = {true, t.render(c.value("context", ordered_json::object()), options)};
    } catch (const std::exception& e) {
      got = {false, e.what()};
    }
    const bool same = want.ok == got.ok && (!want.ok || want.text == got.text);
    const auto k = known_cases.find(name);
    if (same) {
      ++cases_matched;
      if (verbose) std::cout << fmt::format("  match     case {}{}\n", name, want.ok ? "" : fmt::format(" (both raise; zinc: {})", got.text));
      if (k != known_cases.end()) {
        std::cout << fmt::format("  FAIL: case {} is listed as a known mismatch but matches now\n", name);
        ++failures;
      }
      continue;
    }
    std::string detail = want.ok && got.ok ? first_difference(want.text, got.text)
                         : want.ok         ? "oracle renders, zinc raises: " + got.text
                                           : "oracle raises (" + want.text + "), zinc renders: " + escape(got.text);
    if (k != known_cases.end()) {
      std::cout << fmt::format("  known     case {} ({})\n", name, k->second);
      if (verbose) std::cout << "    " << detail << "\n";
    } else {
      ++failures;
      std::cout << fmt::format("  MISMATCH  case {}\n    {}\n", name, detail);
    }
  }
  std::cout << fmt::format("{} of {} one-construct cases match\n", cases_matched, cases.at("cases").size());
  for (const auto& t : targets) {
    if (std::find(matched_names.begin(), matched_names.end(), t) == matched_names.end()) {
      std::cout << fmt::format("target template {} does not match fully\n", t);
    }
  }
  std::cout << (failures ? fmt::format("FAILED ({} problems)\n", failures) : std::string("PASSED\n"));
  return failures ? 1 : 0;
}
