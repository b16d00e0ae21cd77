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
    // Control tokens and protocol markers have no text here: only a token element takes them (so a
    // JSON string never swallows a Harmony header's <|channel|>).
    if (!(v.attr(i) & tokenizer::kAttrFormat)) pieces[static_cast<size_t>(i)] = tok.token_to_piece(i, false);
    eog[static_cast<size_t>(i)] = v.is_eog(i);
  }
  return std::make_shared<const GrammarVocab>(std::move(pieces), std::move(eog));
}

Grammar::TokenLookup grammar_token_lookup(const tokenizer::Tokenizer& tok) {
  return [&tok](std::string_view text) -> int32_t {
    const int32_t id = tok.vocab().find(text);
    if (id >= 0) return id;
    const auto ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
    return ids.size() == 1 ? ids[0] : -1;
  };
}

std::shared_ptr<const GrammarMaskCache::Entry> GrammarMaskCache::find(const std::string& key) const { return find_in(entries_, key); }

void GrammarMaskCache::put(const std::string& key, std::shared_ptr<const Entry> entry) { put_in(entries_, key, std::move(entry)); }

std::shared_ptr<const GrammarMaskCache::Allowed> GrammarMaskCache::find_pending(const std::string& key) const {
  return find_in(pending_, key);
}

void GrammarMaskCache::put_pending(const std::string& key, std::shared_ptr<const Allowed> allowed) {
  put_in(pending_, key, std::move(allowed));
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
                               std::shared_ptr<GrammarMaskCache> cache)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), cache_(cache ? std::move(cache) : std::make_shared<GrammarMaskCache>()) {
  reset();
}

void GrammarMatcher::reset() {
  work_ = 0;
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
    if (is_marker(a) || is_marker(b) || arena_[a].pos != arena_[b].pos) return false;
    a = arena_[a].parent;
    b = arena_[b].parent;
  }
  return true;
}

void GrammarMatcher::spend(uint64_t units) const {
  work_ += units;
  if (work_ > max_work_) {
    throw Error(fmt::format("grammar: over {} steps of work for one token (too ambiguous: it reads the text so far in too many ways at "
                            "once, as a repetition of something that can be empty or split more than one way does, such as "
                            "(\"a\"?){{1,1000}} or (word \" \"?){{1,300}})",
                            max_work_));
  }
}

void GrammarMatcher::add_unique(std::vector<uint32_t>& out, uint32_t stack) const {
  spend(out.size() + 1);
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
// Many paths through the rules can reach the same node: empty alternatives all returning to one frame
// (`"" {1,2000}` twice over is four million ways to the same place), or one rule reached from two
// alternatives at each of 24 levels. Past the first kSeenFrom nodes of a call, a node already taken
// (the same position on the same parent) is skipped: each one is then expanded once, and its frames
// are never made twice, so no parent is duplicated below it either.
void GrammarMatcher::expand(uint32_t stack, std::vector<uint32_t>& out) const {
  constexpr size_t kSeenFrom = 64;  // (most expansions take a handful of nodes: no set for them)
  std::vector<uint32_t>& todo = expand_todo_;
  todo.clear();
  todo.push_back(stack);
  size_t taken = 0;
  while (!todo.empty()) {
    const uint32_t s = todo.back();
    todo.pop_back();
    spend(1);
    if (++taken > kSeenFrom && !is_marker(s)) {
      if (taken == kSeenFrom + 1) expand_seen_.clear();
      if (!expand_seen_.insert({arena_[s].pos, arena_[s].parent}).second) continue;
    }
    if (is_marker(s) || arena_[s].pos->op != GrammarOp::Ref) {  // empty, cut, or a character set on top
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
    if (is_marker(s)) continue;
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
    if (!is_marker(s) && char_set_intersects(arena_[s].pos, lo, hi)) return true;
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

bool GrammarMatcher::token_matches(const GrammarElem* top, int32_t token) const {
  if (top->op == GrammarOp::Token) return top->value == static_cast<uint32_t>(token);
  return top->op == GrammarOp::TokenNot && top->value != static_cast<uint32_t>(token) && !vocab_->eog(token);
}

// The stacks whose top is a token element taking `token`, with it consumed. A token element matches
// only where a token begins, so never while a character's bytes are pending.
void GrammarMatcher::token_step(const std::vector<uint32_t>& in, int32_t token, std::vector<uint32_t>& out) const {
  out.clear();
  if (!partial_.empty()) return;
  for (uint32_t s : in) {
    if (is_marker(s) || !token_matches(arena_[s].pos, token)) continue;
    const GrammarElem* next = arena_[s].pos + 1;
    expand(is_end_of_sequence(next->op) ? arena_[s].parent : push(next, arena_[s].parent), out);
  }
}

bool GrammarMatcher::token_allowed(int32_t token) const {
  if (!partial_.empty()) return false;
  for (uint32_t s : stacks_) {
    if (!is_marker(s) && token_matches(arena_[s].pos, token)) return true;
  }
  return false;
}

bool GrammarMatcher::complete() const { return std::find(stacks_.begin(), stacks_.end(), kEmpty) != stacks_.end() && partial_.empty(); }

bool GrammarMatcher::exhausted() const { return complete() && stacks_.size() == 1; }

bool GrammarMatcher::allows(int32_t token) const {
  work_ = 0;
  if (token < 0 || static_cast<size_t>(token) >= vocab_->size()) return false;
  if (token_allowed(token)) return true;
  if (vocab_->eog(token)) return complete();
  const std::string& piece = vocab_->piece(token);
  if (piece.empty()) return false;
  const size_t mark = arena_.size();
  allow_stacks_ = stacks_;  // scratch kept between calls: no allocation per token tried
  allow_partial_ = partial_;
  const bool ok = run(allow_stacks_, allow_partial_, piece);
  arena_.resize(mark);
  return ok;
}

void GrammarMatcher::accept(int32_t token) {
  work_ = 0;
  if (token < 0 || static_cast<size_t>(token) >= vocab_->size()) throw Error(fmt::format("grammar: token {} is not in the vocabulary", token));
  // Readings where a token element takes the whole token, and readings of its text.
  std::vector<uint32_t> by_token;
  token_step(stacks_, token, by_token);
  if (vocab_->eog(token)) {
    if (by_token.empty()) {
      if (!complete()) throw Error("grammar: the output ended before the grammar allows it");
      by_token.assign(1, kEmpty);
    }
    stacks_ = std::move(by_token);
    return;
  }
  const std::string& piece = vocab_->piece(token);
  if (by_token.empty()) {
    if (piece.empty() || !accept_text(piece)) throw Error(fmt::format("grammar: token {} is not allowed here", token));
    return;
  }
  const size_t mark = arena_.size();
  std::vector<uint32_t> by_text = stacks_;
  std::string partial;
  // A text reading that ends inside a character cannot share a state with the token readings (its
  // bytes pending): the token readings are kept.
  if (!piece.empty() && run(by_text, partial, piece) && partial.empty()) {
    for (uint32_t st : by_text) add_unique(by_token, st);
  } else {
    arena_.resize(mark);  // the text reading's nodes; the token readings lie below the mark
  }
  stacks_ = std::move(by_token);
  if (arena_.size() > (size_t{1} << 13)) compact();
}

bool GrammarMatcher::accept_text(std::string_view bytes) {
  work_ = 0;
  const size_t mark = arena_.size();
  std::vector<uint32_t> stacks = stacks_;
  std::string partial = partial_;
  if (!run(stacks, partial, bytes)) {
    arena_.resize(mark);
    return false;
  }
  stacks_ = std::move(stacks);
  partial_ = std::move(partial);
  if (arena_.size() > (size_t{1} << 13)) compact();
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

void GrammarMatcher::walk(size_t begin, size_t end, size_t depth, std::vector<uint8_t>& allowed,
                          std::vector<GrammarMaskCache::Pending>& pending) const {
  const auto& sorted = vocab_->sorted();
  const auto piece = [&](size_t i) -> const std::string& { return vocab_->piece(sorted[i]); };
  size_t i = begin;
  // Tokens that end here: their bytes are all accepted (a stack that popped below its top frames is
  // still a valid state: what lies below can always take the next step of its own rule).
  for (; i < end && piece(i).size() == depth; ++i) allowed[static_cast<size_t>(sorted[i])] = 1;
  // Stacks that popped below their top frames: the rest of these tokens is decided on the real stack.
  std::vector<uint32_t>& here = depth_stacks_[depth];
  if (std::any_of(here.begin(), here.end(), is_marker)) {
    if (i < end && std::find(here.begin(), here.end(), kCut) != here.end()) {
      pending.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(end), static_cast<uint32_t>(depth)});
    }
    here.erase(std::remove_if(here.begin(), here.end(), is_marker), here.end());
    if (here.empty()) return;
  }
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
    if (ok) walk(i, j, depth + 1, allowed, pending);
    arena_.resize(mark);
    i = j;
  }
}

// The node every stack passes through nearest their tops (a stack may be that node itself); kEmpty
// when they share none. Popping it is where what the stacks have in common begins to matter.
uint32_t GrammarMatcher::common_node() const {
  if (stacks_.empty() || stacks_[0] == kEmpty) return kEmpty;
  std::vector<uint32_t> chain;  // the first stack's nodes, top first
  for (uint32_t n = stacks_[0]; n != kEmpty; n = arena_[n].parent) chain.push_back(n);
  size_t best = 0;  // index in chain of the deepest-needed common node so far
  for (size_t i = 1; i < stacks_.size(); ++i) {
    if (stacks_[i] == kEmpty) return kEmpty;
    size_t found = chain.size();
    for (uint32_t n = stacks_[i]; n != kEmpty && found == chain.size(); n = arena_[n].parent) {
      const auto it = std::find(chain.begin() + static_cast<std::ptrdiff_t>(best), chain.end(), n);
      if (it != chain.end()) found = static_cast<size_t>(it - chain.begin());
    }
    if (found == chain.size()) return kEmpty;
    best = found;
  }
  return chain[best];
}

// The mask of the stacks' frames above their common node's parent (the cut, a marker in the walk),
// walked over the vocabulary.
std::shared_ptr<const GrammarMaskCache::Entry> GrammarMatcher::top_frames_mask() const {
  const size_t mark = arena_.size();
  depth_stacks_.resize(vocab_->max_piece() + 2);  // never resized during the walk
  depth_partial_.resize(vocab_->max_piece() + 2);
  std::vector<uint32_t>& top = depth_stacks_[0];
  top.clear();
  const uint32_t common = common_node();
  const uint32_t cut = common == kEmpty ? kEmpty : arena_[common].parent;
  for (uint32_t s : stacks_) {
    std::vector<const GrammarElem*> frames;
    for (uint32_t n = s; n != cut; n = arena_[n].parent) frames.push_back(arena_[n].pos);
    uint32_t base = cut == kEmpty ? kEmpty : kCut;
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) base = push(*it, base);
    top.push_back(base);
  }
  depth_partial_[0] = partial_;
  std::vector<uint8_t> allowed(vocab_->size(), 0);
  auto entry = std::make_shared<GrammarMaskCache::Entry>();
  walk(0, vocab_->sorted().size(), 0, allowed, entry->pending);
  arena_.resize(mark);
  entry->allowed.assign((allowed.size() + 63) / 64, 0);
  for (size_t t = 0; t < allowed.size(); ++t) {
    if (allowed[t]) entry->allowed[t / 64] |= uint64_t{1} << (t % 64);
  }
  return entry;
}

void GrammarMatcher::fill_mask(std::vector<uint8_t>& allowed) const {
  std::vector<uint64_t> bits;
  fill_mask_bits(bits);
  allowed.assign(vocab_->size(), 0);
  for (size_t t = 0; t < allowed.size(); ++t) allowed[t] = (bits[t / 64] >> (t % 64)) & 1;
}

void GrammarMatcher::fill_mask_bits(std::vector<uint64_t>& bits) const {
  work_ = 0;
  // The key: each stack's frames above the cut (and whether there is one), and the pending UTF-8 bytes.
  const uint32_t common = common_node();
  const uint32_t cut = common == kEmpty ? kEmpty : arena_[common].parent;
  std::string key;
  for (uint32_t s : stacks_) {
    for (uint32_t n = s; n != cut; n = arena_[n].parent) {
      const GrammarElem* pos = arena_[n].pos;
      key.append(reinterpret_cast<const char*>(&pos), sizeof pos);
    }
    key.push_back(cut == kEmpty ? 'E' : 'C');
  }
  key += partial_;
  std::shared_ptr<const GrammarMaskCache::Entry> entry = cache_->find(key);
  if (!entry) {
    entry = top_frames_mask();
    cache_->put(key, entry);
  }
  bits = entry->allowed;
  const auto set = [&](int32_t t) { bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (static_cast<size_t>(t) % 64); };
  const auto get = [&](int32_t t) { return (bits[static_cast<size_t>(t) / 64] >> (static_cast<size_t>(t) % 64)) & 1; };
  // Tokens that popped below the top frames: their rest, run on the stack below the cut (memoised),
  // the answer kept with the entry's key and that stack's positions.
  if (!entry->pending.empty()) {
    std::string pending_key = key;
    pending_key.push_back('\0');
    for (uint32_t n = cut; n != kEmpty; n = arena_[n].parent) {
      const GrammarElem* pos = arena_[n].pos;
      pending_key.append(reinterpret_cast<const char*>(&pos), sizeof pos);
    }
    std::shared_ptr<const GrammarMaskCache::Allowed> allowed = cache_->find_pending(pending_key);
    if (!allowed) {
      auto found = std::make_shared<GrammarMaskCache::Allowed>();
      const size_t mark = arena_.size();
      std::vector<uint32_t> below;  // the stacks once the common frames are popped
      expand(cut, below);
      std::unordered_map<std::string_view, bool> memo;
      const auto& sorted = vocab_->sorted();
      for (const auto& p : entry->pending) {
        for (uint32_t idx = p.begin; idx < p.end; ++idx) {
          const int32_t t = sorted[idx];
          if (get(t)) continue;
          const std::string_view rest = std::string_view(vocab_->piece(t)).substr(p.depth);
          auto [it, fresh] = memo.try_emplace(rest, false);
          if (fresh) {
            std::vector<uint32_t> stacks = below;
            std::string partial;
            it->second = run(stacks, partial, rest);
          }
          if (it->second) found->push_back(t);
        }
      }
      arena_.resize(mark);
      allowed = found;
      cache_->put_pending(pending_key, allowed);
    }
    for (int32_t t : *allowed) set(t);
  }
  if (complete()) {
    for (int32_t t : vocab_->eog_tokens()) set(t);
  }
  // Token elements on top of a stack: their tokens, whatever their text.
  if (!partial_.empty()) return;
  for (uint32_t s : stacks_) {
    if (is_marker(s)) continue;
    const GrammarElem* top = arena_[s].pos;
    if (top->op == GrammarOp::Token && top->value < vocab_->size()) {
      set(static_cast<int32_t>(top->value));
    } else if (top->op == GrammarOp::TokenNot) {
      for (size_t t = 0; t < vocab_->size(); ++t) {
        if (t != top->value && !vocab_->eog(static_cast<int32_t>(t))) set(static_cast<int32_t>(t));
      }
    }
  }
}

GrammarMatcher GrammarMatcher::snapshot() const {
  GrammarMatcher copy(grammar_, vocab_, cache_);
  copy.max_work_ = max_work_;
  copy.arena_ = arena_;
  copy.stacks_ = stacks_;
  copy.partial_ = partial_;
  copy.compact();
  return copy;
}

}  // namespace zinc::sample
