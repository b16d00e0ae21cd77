// GBNF text to compiled rules: a recursive-descent parser, repetitions rewritten into generated rules,
// then the checks the matcher relies on (every rule defined, no left recursion, bounded size).
#include "sample/grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"

namespace zinc::sample {

namespace {

// Bounds that keep a hostile grammar (a request field) from costing unbounded memory or time.
constexpr size_t kMaxElements = 1u << 20;
constexpr size_t kMaxRules = 1u << 16;
constexpr uint32_t kMaxRepeat = 4096;
constexpr int kMaxNesting = 128;  // groups inside groups (the parser recurses once per level)

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  Parser(std::string_view text, const Grammar::TokenLookup& tokens) : text_(text), tokens_(tokens) {}

  Grammar run(std::string_view root_rule) {
    for (;;) {
      skip_space(true);
      if (at_end()) break;
      const size_t name_at = pos_;
      const std::string name = parse_name();
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") fail("expected ::= after the rule name");
      pos_ += 3;
      skip_space(true);
      const uint32_t id = symbol(name);
      if (defined_[id]) fail_at(name_at, fmt::format("rule '{}' is defined twice", name));
      defined_[id] = true;
      std::vector<GrammarElem> rule;
      parse_alternates(name, rule, false);
      rule.push_back({GrammarOp::End, 0});
      set_rule(id, std::move(rule));
      if (!at_end() && peek() != '\n' && peek() != '\r') fail("expected the end of the line after the rule");
    }
    for (uint32_t i = 0; i < g_.names.size(); ++i) {
      if (!defined_[i]) fail_at(first_use_[i], fmt::format("rule '{}' is used but never defined", g_.names[i]));
    }
    const auto root = ids_.find(std::string(root_rule));
    if (root == ids_.end()) throw Error(fmt::format("grammar: no '{}' rule (the rule generation starts from)", root_rule));
    g_.root = root->second;
    check_left_recursion();
    return std::move(g_);
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(fmt::format("grammar, line {} column {}: {}", line, col, what));
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  // Spaces, tabs and comments; newlines too when `newlines` (inside a group, or between rules).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if ((c == '\n' || c == '\r') && newlines) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t symbol(const std::string& name) {
    auto [it, fresh] = ids_.emplace(name, static_cast<uint32_t>(g_.names.size()));
    if (fresh) {
      if (g_.names.size() >= kMaxRules) fail("too many rules");
      g_.names.push_back(name);
      g_.rules.emplace_back();
      defined_.push_back(false);
      first_use_.push_back(pos_);
    }
    return it->second;
  }

  uint32_t generated(const std::string& base) {
    std::string name;
    do {
      name = fmt::format("{}-{}", base, ++generated_count_);
    } while (ids_.count(name));
    const uint32_t id = symbol(name);
    defined_[id] = true;
    return id;
  }

  void set_rule(uint32_t id, std::vector<GrammarElem> rule) {
    elements_ += rule.size();
    if (elements_ > kMaxElements) fail(fmt::format("the grammar is too large (over {} elements)", kMaxElements));
    g_.rules[id] = std::move(rule);
  }

  // One code point of a literal or a class, escapes decoded.
  uint32_t parse_char() {
    const auto c = static_cast<unsigned char>(peek());
    if (c == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(e);
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: fail_at(pos_ - 2, fmt::format("unknown escape '\\{}'", e));
      }
    }
    // UTF-8
    int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > text_.size()) fail("the grammar is not valid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(text_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) fail("the grammar is not valid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) fail(fmt::format("expected {} hexadecimal digits", digits));
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF) fail("a code point beyond U+10FFFF");
    return v;
  }

  uint32_t parse_count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > kMaxRepeat) fail(fmt::format("a repetition count above {}", kMaxRepeat));
      ++pos_;
    }
    if (pos_ == start) fail("expected a number");
    return static_cast<uint32_t>(v);
  }

  void parse_alternates(const std::string& rule_name, std::vector<GrammarElem>& out, bool nested) {
    parse_sequence(rule_name, out, nested);
    for (;;) {
      if (!nested) {
        // A top-level rule may continue on the next line when that line starts with `|`.
        const size_t save = pos_;
        skip_space(true);
        if (peek() != '|') {
          pos_ = save;
          return;
        }
      }
      if (peek() != '|') return;
      out.push_back({GrammarOp::Alt, 0});
      ++pos_;
      skip_space(true);
      parse_sequence(rule_name, out, nested);
    }
  }

  void parse_sequence(const std::string& rule_name, std::vector<GrammarElem>& out, bool nested) {
    size_t last_start = out.size();
    bool have_last = false;
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        ++pos_;
        last_start = out.size();
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("a string literal is not closed");
          out.push_back({GrammarOp::Char, parse_char()});
        }
        ++pos_;
        have_last = true;
      } else if (c == '[') {
        ++pos_;
        last_start = out.size();
        GrammarOp first = GrammarOp::Char;
        if (peek() == '^') {
          ++pos_;
          first = GrammarOp::CharNot;
        }
        bool any = false;
        while (peek() != ']') {
          if (at_end() || peek() == '\n') fail("a character class is not closed");
          const uint32_t lo = parse_char();
          out.push_back({any ? GrammarOp::CharAlt : first, lo});
          any = true;
          if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
            ++pos_;
            const uint32_t hi = parse_char();
            if (hi < lo) fail("a character range whose end is below its start");
            out.push_back({GrammarOp::RangeUpper, hi});
          }
        }
        if (!any) fail("an empty character class");
        ++pos_;
        have_last = true;
      } else if (is_name_char(c)) {
        last_start = out.size();
        out.push_back({GrammarOp::Ref, symbol(parse_name())});
        have_last = true;
      } else if (c == '(') {
        if (++nesting_ > kMaxNesting) fail(fmt::format("groups nested more than {} deep", kMaxNesting));
        ++pos_;
        skip_space(true);
        const uint32_t sub = generated(rule_name);
        std::vector<GrammarElem> body;
        parse_alternates(rule_name, body, true);
        body.push_back({GrammarOp::End, 0});
        set_rule(sub, std::move(body));
        if (peek() != ')') fail("expected ')'");
        ++pos_;
        --nesting_;
        last_start = out.size();
        out.push_back({GrammarOp::Ref, sub});
        have_last = true;
      } else if (c == '<' || (c == '!' && peek(1) == '<')) {
        last_start = out.size();
        out.push_back(parse_token());
        have_last = true;
      } else if (c == '.') {
        ++pos_;
        last_start = out.size();
        out.push_back({GrammarOp::Any, 0});
        have_last = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) fail(fmt::format("'{}' repeats nothing", c));
        uint32_t min = 0, max = UINT32_MAX;  // UINT32_MAX: unbounded
        ++pos_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          skip_space(false);
          min = parse_count();
          skip_space(false);
          max = min;
          if (peek() == ',') {
            ++pos_;
            skip_space(false);
            max = peek() == '}' ? UINT32_MAX : parse_count();
            skip_space(false);
          }
          if (peek() != '}') fail("expected '}'");
          ++pos_;
          if (max < min) fail("a repetition whose maximum is below its minimum");
        }
        repeat(rule_name, out, last_start, min, max);
        have_last = false;  // x** is an error, as in llama.cpp
      } else {
        break;
      }
      skip_space(nested);
    }
  }

  // <[id]>, <text>, !<[id]> or !<text>.
  GrammarElem parse_token() {
    const size_t start = pos_;
    const bool negated = peek() == '!';
    if (negated) ++pos_;
    const size_t open = pos_++;
    int64_t id = -1;
    if (peek() == '[') {
      ++pos_;
      const size_t digits = pos_;
      id = 0;
      while (peek() >= '0' && peek() <= '9') {
        id = id * 10 + (peek() - '0');
        if (id > INT32_MAX) fail("a token id beyond the vocabulary");
        ++pos_;
      }
      if (pos_ == digits || peek() != ']' || peek(1) != '>') fail("expected a token id: <[123]>");
      pos_ += 2;
    } else {
      while (!at_end() && peek() != '>' && peek() != '\n') ++pos_;
      if (peek() != '>') fail_at(start, "a token <...> is not closed");
      ++pos_;
      const std::string_view text = text_.substr(open, pos_ - open);
      if (!tokens_) fail_at(start, fmt::format("the token {} needs the model's vocabulary (write <[id]> where there is none)", text));
      id = tokens_(text);
      if (id < 0) fail_at(start, fmt::format("{} is not one token of this model's vocabulary", text));
    }
    return {negated ? GrammarOp::TokenNot : GrammarOp::Token, static_cast<uint32_t>(id)};
  }

  // out[last_start..] repeated min..max times (max UINT32_MAX: no bound), with generated rules:
  //   x{2,4} -> x x r2    r2 ::= x r1 |    r1 ::= x |       x{1,} -> x r    r ::= x r |
  void repeat(const std::string& rule_name, std::vector<GrammarElem>& out, size_t last_start, uint32_t min, uint32_t max) {
    const std::vector<GrammarElem> item(out.begin() + static_cast<std::ptrdiff_t>(last_start), out.end());
    out.resize(last_start);
    // (Nothing, such as "", repeated any number of times is nothing: no chain of rules that match
    // nothing, which made every step of a matcher walk them all.)
    if (item.empty()) return;
    if (static_cast<uint64_t>(item.size()) * std::max<uint64_t>(min, 1) + elements_ > kMaxElements) {
      fail(fmt::format("the grammar is too large (over {} elements)", kMaxElements));
    }
    for (uint32_t i = 0; i < min; ++i) out.insert(out.end(), item.begin(), item.end());
    if (max == min) return;
    const auto optional_rule = [&](std::optional<uint32_t> tail) {
      const uint32_t id = generated(rule_name);
      std::vector<GrammarElem> body = item;
      if (tail) body.push_back({GrammarOp::Ref, *tail});
      body.push_back({GrammarOp::Alt, 0});
      body.push_back({GrammarOp::End, 0});
      set_rule(id, std::move(body));
      return id;
    };
    if (max == UINT32_MAX) {
      const uint32_t id = generated(rule_name);
      std::vector<GrammarElem> body = item;
      body.push_back({GrammarOp::Ref, id});
      body.push_back({GrammarOp::Alt, 0});
      body.push_back({GrammarOp::End, 0});
      set_rule(id, std::move(body));
      out.push_back({GrammarOp::Ref, id});
      return;
    }
    std::optional<uint32_t> tail;
    for (uint32_t i = min; i < max; ++i) tail = optional_rule(tail);
    out.push_back({GrammarOp::Ref, *tail});
  }

  // A rule that can reach itself before consuming a character would expand forever.
  void check_left_recursion() {
    const size_t n = g_.rules.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        bool alt_nullable = true;
        for (const GrammarElem& e : g_.rules[r]) {
          if (is_end_of_sequence(e.op)) {
            if (alt_nullable) {
              nullable[r] = changed = true;
              break;
            }
            alt_nullable = true;
          } else if (e.op == GrammarOp::Ref) {
            alt_nullable = alt_nullable && nullable[e.value];
          } else if (is_terminal(e.op)) {
            alt_nullable = false;
          }
        }
      }
    }
    // Edges r -> s where s is referenced with only nullable elements before it in an alternative.
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      bool prefix_nullable = true;
      for (const GrammarElem& e : g_.rules[r]) {
        if (is_end_of_sequence(e.op)) {
          prefix_nullable = true;
        } else if (e.op == GrammarOp::Ref) {
          if (prefix_nullable) left[r].push_back(e.value);
          prefix_nullable = prefix_nullable && nullable[e.value];
        } else if (is_terminal(e.op)) {
          prefix_nullable = false;
        }
      }
    }
    std::vector<uint8_t> state(n, 0);  // 0 unvisited, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t start = 0; start < n; ++start) {
      if (state[start]) continue;
      path.push_back({start, 0});
      state[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next < left[r].size()) {
          const uint32_t s = left[r][next++];
          if (state[s] == 1) throw Error(fmt::format("grammar: rule '{}' is left-recursive", g_.names[s]));
          if (state[s] == 0) {
            state[s] = 1;
            path.push_back({s, 0});
          }
        } else {
          state[r] = 2;
          path.pop_back();
        }
      }
    }
  }

  std::string_view text_;
  const Grammar::TokenLookup& tokens_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  size_t elements_ = 0;
  int generated_count_ = 0;
  int nesting_ = 0;
};

void append_cp(std::string& out, uint32_t cp, bool in_class) {
  if (cp == '\n') return out.append("\\n"), void();
  if (cp == '\r') return out.append("\\r"), void();
  if (cp == '\t') return out.append("\\t"), void();
  if (cp == '\\' || (!in_class && cp == '"') || (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '['))) {
    out.push_back('\\');
    out.push_back(static_cast<char>(cp));
    return;
  }
  if (cp < 0x20 || cp == 0x7F) return out.append(fmt::format("\\x{:02X}", cp)), void();
  if (cp < 0x80) return out.push_back(static_cast<char>(cp)), void();
  out.append(cp <= 0xFFFF ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp));
}

}  // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out + "\"";
}

Grammar Grammar::parse(std::string_view text, std::string_view root_rule, const TokenLookup& tokens) {
  return Parser(text, tokens).run(root_rule);
}

size_t Grammar::size() const {
  size_t n = 0;
  for (const auto& r : rules) n += r.size();
  return n;
}

std::string Grammar::to_gbnf() const {
  std::string out;
  for (size_t r = 0; r < rules.size(); ++r) {
    out += names[r] + " ::=";
    const auto& rule = rules[r];
    bool empty = true;  // the alternative so far has no element (written as "")
    for (size_t i = 0; i < rule.size(); ++i) {
      const GrammarElem& e = rule[i];
      if (is_end_of_sequence(e.op) && empty) out += " \"\"";
      empty = is_end_of_sequence(e.op);
      switch (e.op) {
        case GrammarOp::End: break;
        case GrammarOp::Alt: out += " |"; break;
        case GrammarOp::Ref: out += " " + names[e.value]; break;
        case GrammarOp::Any: out += " ."; break;
        case GrammarOp::Token: out += fmt::format(" <[{}]>", e.value); break;
        case GrammarOp::TokenNot: out += fmt::format(" !<[{}]>", e.value); break;
        case GrammarOp::Char:
        case GrammarOp::CharNot: {
          out += e.op == GrammarOp::CharNot ? " [^" : " [";
          size_t j = i;
          for (;;) {
            append_cp(out, rule[j].value, true);
            if (j + 1 < rule.size() && rule[j + 1].op == GrammarOp::RangeUpper) {
              out += "-";
              append_cp(out, rule[++j].value, true);
            }
            if (j + 1 < rule.size() && rule[j + 1].op == GrammarOp::CharAlt) {
              ++j;
              continue;
            }
            break;
          }
          out += "]";
          i = j;
          break;
        }
        case GrammarOp::CharAlt:
        case GrammarOp::RangeUpper: break;  // consumed with their set
      }
    }
    out += "\n";
  }
  return out;
}

bool char_set_matches(const GrammarElem* set, uint32_t cp) {
  if (set->op == GrammarOp::Any) return true;
  if (is_token_elem(set->op)) return false;
  const bool negated = set->op == GrammarOp::CharNot;
  bool found = false;
  const GrammarElem* e = set;
  do {
    if (e[1].op == GrammarOp::RangeUpper) {
      found = found || (e->value <= cp && cp <= e[1].value);
      e += 2;
    } else {
      found = found || e->value == cp;
      e += 1;
    }
  } while (e->op == GrammarOp::CharAlt);
  return found != negated;
}

bool char_set_intersects(const GrammarElem* set, uint32_t lo, uint32_t hi) {
  if (set->op == GrammarOp::Any) return true;
  if (is_token_elem(set->op)) return false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  const GrammarElem* e = set;
  do {
    if (e[1].op == GrammarOp::RangeUpper) {
      ranges.push_back({e->value, e[1].value});
      e += 2;
    } else {
      ranges.push_back({e->value, e->value});
      e += 1;
    }
  } while (e->op == GrammarOp::CharAlt);
  if (set->op == GrammarOp::Char) {
    for (const auto& [a, b] : ranges) {
      if (a <= hi && lo <= b) return true;
    }
    return false;
  }
  // Complemented: [lo, hi] meets the complement unless the ranges cover all of it.
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = lo;  // the first code point not yet covered
  for (const auto& [a, b] : ranges) {
    if (a > next) break;
    next = std::max<uint64_t>(next, static_cast<uint64_t>(b) + 1);
    if (next > hi) return false;
  }
  return next <= hi;
}

const GrammarElem* char_set_end(const GrammarElem* set) {
  if (set->op == GrammarOp::Any || is_token_elem(set->op)) return set + 1;
  const GrammarElem* e = set;
  do {
    e += e[1].op == GrammarOp::RangeUpper ? 2 : 1;
  } while (e->op == GrammarOp::CharAlt);
  return e;
}

}  // namespace zinc::sample
