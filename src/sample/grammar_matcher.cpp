#include "sample/grammar_matcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace zinc::sample {

namespace {

// The length of a UTF-8 sequence from its first byte; 0 for a byte that cannot start one.
size_t utf8_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

uint32_t lead_bits(uint8_t lead, size_t n) { return n == 1 ? lead : lead & (0x7Fu >> n); }

// Whether `b` may follow `lead` as the continuation byte at `index` (1..3) of a well-formed sequence:
// no overlong forms, no surrogates, nothing past U+10FFFF (RFC 3629).
bool continuation_ok(uint8_t lead, size_t index, uint8_t b) {
  if (index == 1) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  }
  return (b & 0xC0) == 0x80;
}

}  // namespace

GrammarVocab::GrammarVocab(std::vector<std::string> pieces, std::vector<bool> eog) : pieces_(std::move(pieces)), eog_(std::move(eog)) {
  eog_.resize(pieces_.size(), false);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (eog_[i]) eog_ids_.push_back(static_cast<int32_t>(i));
    else if (!pieces_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
    max_piece_ = std::max(max_piece_, pieces_[i].size());
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)];
  });
}

std::shared_ptr<const GrammarVocab> GrammarVocab::from_tokenizer(const tokenizer::Tokenizer& tok) {
  const auto& v = tok.vocab();
  std::vector<std::string> pieces(static_cast<size_t>(v.size()));
  std::vector<bool> eog(pieces.size());
  for (int32_t i = 0; i < v.size(); ++i) {
    // Control tokens have no text here (special = false): a grammar never allows them.
    pieces[static_cast<size_t>(i)] = tok.token_to_piece(i, false);
    eog[static_cast<size_t>(i)] = v.is_eog(i);
  }
  return std::make_shared<const GrammarVocab>(std::move(pieces), std::move(eog));
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  reset();
}

void GrammarMatcher::reset() {
  arena_.clear();
  stacks_.clear();
  partial_.clear();
  // Each alternative of the root on an empty stack.
  const GrammarElem* alt = grammar_->rules[grammar_->root].data();
  for (;;) {
    expand(is_end_of_sequence(alt->op) ? kEmpty : push(alt, kEmpty), stacks_);
    while (!is_end_of_sequence(alt->op)) ++alt;
    if (alt->op == GrammarOp::End) break;
    ++alt;
  }
}

uint32_t GrammarMatcher::push(const GrammarElem* pos, uint32_t parent) const {
  arena_.push_back({pos, parent});
  return static_cast<uint32_t>(arena_.size() - 1);
}

bool GrammarMatcher::same_stack(uint32_t a, uint32_t b) const {
  while (a != b) {
    if (a == kEmpty || b == kEmpty || arena_[a].pos != arena_[b].pos) return false;
    a = arena_[a].parent;
    b = arena_[b].parent;
  }
  return true;
}

void GrammarMatcher::add_unique(std::vector<uint32_t>& out, uint32_t stack) const {
  for (uint32_t s : out) {
    if (same_stack(s, stack)) return;
  }
  // Each reading of an ambiguous grammar is a stack; a grammar with this many at once would make every
  // character cost too much.
  if (out.size() >= kMaxStacks) throw Error(fmt::format("grammar: over {} ways to read the text at once (too ambiguous)", kMaxStacks));
  out.push_back(stack);
}

// Expands references on top of the stack until a character set is on top, for every alternative
// (an explicit work list: a chain of rules as long as the grammar allows must not exhaust the C++ stack).
void GrammarMatcher::expand(uint32_t stack, std::vector<uint32_t>& out) const {
  std::vector<uint32_t>& todo = expand_todo_;
  todo.clear();
  todo.push_back(stack);
  while (!todo.empty()) {
    const uint32_t s = todo.back();
    todo.pop_back();
    if (s == kEmpty || arena_[s].pos->op != GrammarOp::Ref) {  // empty, or a character set on top
      add_unique(out, s);
      continue;
    }
    const GrammarElem* pos = arena_[s].pos;
    uint32_t base = arena_[s].parent;
    if (!is_end_of_sequence(pos[1].op)) base = push(pos + 1, base);
    const GrammarElem* alt = grammar_->rules[pos->value].data();
    for (;;) {
      todo.push_back(is_end_of_sequence(alt->op) ? base : push(alt, base));
      while (!is_end_of_sequence(alt->op)) ++alt;
      if (alt->op == GrammarOp::End) break;
      ++alt;
    }
  }
}

void GrammarMatcher::step(const std::vector<uint32_t>& in, uint32_t cp, std::vector<uint32_t>& out) const {
  out.clear();
  for (uint32_t s : in) {
    if (s == kEmpty) continue;
    const GrammarElem* pos = arena_[s].pos;
    if (!char_set_matches(pos, cp)) continue;
    const GrammarElem* next = char_set_end(pos);
    uint32_t base = arena_[s].parent;
    if (!is_end_of_sequence(next->op)) base = push(next, base);
    expand(base, out);
  }
}

bool GrammarMatcher::partial_possible(const std::vector<uint32_t>& stacks, std::string_view partial) const {
  const auto lead = static_cast<uint8_t>(partial[0]);
  const size_t n = utf8_length(lead);
  uint32_t v = lead_bits(lead, n);
  for (size_t i = 1; i < partial.size(); ++i) v = (v << 6) | (static_cast<uint8_t>(partial[i]) & 0x3Fu);
  const size_t missing = n - partial.size();
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};  // below: an overlong form
  const uint32_t lo = std::max(v << (6 * missing), kMin[n]);
  const uint32_t hi = std::min((v << (6 * missing)) | ((1u << (6 * missing)) - 1), 0x10FFFFu);
  if (lo > hi) return false;
  for (uint32_t s : stacks) {
    if (s != kEmpty && char_set_intersects(arena_[s].pos, lo, hi)) return true;
  }
  return false;
}

bool GrammarMatcher::run(std::vector<uint32_t>& stacks, std::string& partial, std::string_view bytes) const {
  std::string buf = partial;
  buf.append(bytes);
  size_t i = 0;
  while (i < buf.size()) {
    const auto lead = static_cast<uint8_t>(buf[i]);
    const size_t n = utf8_length(lead);
    if (n == 0) return false;
    const size_t have = std::min(n, buf.size() - i);
    for (size_t k = 1; k < have; ++k) {
      if (!continuation_ok(lead, k, static_cast<uint8_t>(buf[i + k]))) return false;
    }
    if (have < n) {  // the token ends inside a character
      partial = buf.substr(i);
      return partial_possible(stacks, partial);
    }
    uint32_t cp = lead_bits(lead, n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(buf[i + k]) & 0x3Fu);
    step(stacks, cp, scratch_);
    stacks.swap(scratch_);
    if (stacks.empty()) return false;
    i += n;
  }
  partial.clear();
  return true;
}

bool GrammarMatcher::complete() const { return std::find(stacks_.begin(), stacks_.end(), kEmpty) != stacks_.end() && partial_.empty(); }

bool GrammarMatcher::exhausted() const { return complete() && stacks_.size() == 1; }

bool GrammarMatcher::allows(int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= vocab_->size()) return false;
  if (vocab_->eog(token)) return complete();
  const std::string& piece = vocab_->piece(token);
  if (piece.empty()) return false;
  const size_t mark = arena_.size();
  std::vector<uint32_t> stacks = stacks_;
  std::string partial = partial_;
  const bool ok = run(stacks, partial, piece);
  arena_.resize(mark);
  return ok;
}

void GrammarMatcher::accept(int32_t token) {
  if (token >= 0 && static_cast<size_t>(token) < vocab_->size() && vocab_->eog(token)) {
    if (!complete()) throw Error("grammar: the output ended before the grammar allows it");
    stacks_.assign(1, kEmpty);
    return;
  }
  if (token < 0 || static_cast<size_t>(token) >= vocab_->size() || vocab_->piece(token).empty() ||
      !accept_text(vocab_->piece(token))) {
    throw Error(fmt::format("grammar: token {} is not allowed here", token));
  }
}

bool GrammarMatcher::accept_text(std::string_view bytes) {
  const size_t mark = arena_.size();
  std::vector<uint32_t> stacks = stacks_;
  std::string partial = partial_;
  if (!run(stacks, partial, bytes)) {
    arena_.resize(mark);
    return false;
  }
  stacks_ = std::move(stacks);
  partial_ = std::move(partial);
  if (arena_.size() > (size_t{1} << 16)) compact();
  return true;
}

// Copies the live stacks into a fresh arena (shared tails stay shared); the rest was garbage.
void GrammarMatcher::compact() {
  std::vector<Node> fresh;
  std::unordered_map<uint32_t, uint32_t> moved;
  const auto copy = [&](uint32_t s) {
    std::vector<uint32_t> chain;
    while (s != kEmpty && !moved.count(s)) {
      chain.push_back(s);
      s = arena_[s].parent;
    }
    uint32_t parent = s == kEmpty ? kEmpty : moved[s];
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      fresh.push_back({arena_[*it].pos, parent});
      parent = static_cast<uint32_t>(fresh.size() - 1);
      moved[*it] = parent;
    }
    return parent;
  };
  for (uint32_t& s : stacks_) s = copy(s);
  arena_ = std::move(fresh);
}

void GrammarMatcher::walk(size_t begin, size_t end, size_t depth, std::vector<uint8_t>& allowed) const {
  const auto& sorted = vocab_->sorted();
  const auto piece = [&](size_t i) -> const std::string& { return vocab_->piece(sorted[i]); };
  size_t i = begin;
  // Tokens that end here: their bytes are all accepted.
  for (; i < end && piece(i).size() == depth; ++i) allowed[static_cast<size_t>(sorted[i])] = 1;
  while (i < end) {
    const auto b = static_cast<uint8_t>(piece(i)[depth]);
    const size_t j = static_cast<size_t>(
        std::partition_point(sorted.begin() + static_cast<std::ptrdiff_t>(i), sorted.begin() + static_cast<std::ptrdiff_t>(end),
                             [&](int32_t t) { return static_cast<uint8_t>(vocab_->piece(t)[depth]) <= b; }) -
        sorted.begin());
    const size_t mark = arena_.size();
    std::string& partial = depth_partial_[depth + 1];
    partial = depth_partial_[depth];
    partial.push_back(static_cast<char>(b));
    std::vector<uint32_t>& next = depth_stacks_[depth + 1];
    next.clear();
    const auto lead = static_cast<uint8_t>(partial[0]);
    const size_t n = utf8_length(lead);
    bool ok = n != 0 && (partial.size() == 1 || continuation_ok(lead, partial.size() - 1, b));
    if (ok && partial.size() == n) {
      uint32_t cp = lead_bits(lead, n);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(partial[k]) & 0x3Fu);
      step(depth_stacks_[depth], cp, next);
      partial.clear();
      ok = !next.empty();
    } else if (ok) {
      next = depth_stacks_[depth];
      ok = partial_possible(next, partial);
    }
    if (ok) walk(i, j, depth + 1, allowed);
    arena_.resize(mark);
    i = j;
  }
}

void GrammarMatcher::fill_mask(std::vector<uint8_t>& allowed) const {
  allowed.assign(vocab_->size(), 0);
  depth_stacks_.resize(vocab_->max_piece() + 2);  // never resized during the walk
  depth_partial_.resize(vocab_->max_piece() + 2);
  depth_stacks_[0] = stacks_;
  depth_partial_[0] = partial_;
  const size_t mark = arena_.size();
  walk(0, vocab_->sorted().size(), 0, allowed);
  arena_.resize(mark);
  if (complete()) {
    for (int32_t t : vocab_->eog_tokens()) allowed[static_cast<size_t>(t)] = 1;
  }
}

}  // namespace zinc::sample
