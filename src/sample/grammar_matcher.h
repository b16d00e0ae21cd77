// Which tokens keep generated text inside a grammar (grammar.h): a pushdown automaton over Unicode code
// points, run on the bytes of each token.
//
// The state is a set of stacks of grammar positions (each stack one way the text so far can continue;
// ambiguous grammars keep several). A stack's top is always a terminal (a character set or a token
// element); accepting a character
// pops the sets it matches and expands rule references until a character set is on top again. An
// empty stack means the text so far is a complete sentence: end-of-generation tokens are allowed then.
// Stacks are persistent linked lists in an arena (pushing shares the tail), so trying a token copies
// nothing.
//
// Tokens may split a character's UTF-8 bytes: the bytes of an incomplete character are carried to the
// next token, and a token ending inside a character is allowed when some stack can take a character
// beginning with those bytes. Invalid UTF-8 is never allowed. Tokens without text (control tokens) are
// allowed only where a token element (<[id]>, <|channel|>) takes them, and end-of-generation tokens
// also once the text is complete — as llama.cpp's grammars. A token element takes a whole token where
// a token begins (never while a character's bytes are pending), whatever its text.
//
// The mask over the whole vocabulary walks the tokens sorted by their bytes (an implicit trie), so
// tokens sharing a prefix share the work of checking it, and a prefix the grammar refuses removes
// every token that starts with it at once. The walk sees only the top frames of each stack (the
// position in the innermost rules): a token consumed within them is allowed whatever lies below, one
// refused within them is refused, and one that pops below them is decided afterwards by running its
// rest on the real stack (memoised by the rest's bytes, so `",` and `"}` are run once each). That
// part of the mask depends only on the top frames, so it is cached (GrammarMaskCache) and shared by
// every position with the same innermost rules: every string of a JSON schema, every step inside one.
// "Top frames": each stack's frames down to the deepest node all stacks share (the rule they are all
// inside). XGrammar's context-independent tokens are the same idea.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sample/grammar.h"

namespace zinc::tokenizer {
class Tokenizer;
}

namespace zinc::sample {

// The vocabulary as a grammar sees it: each token's bytes and whether it ends generation. Shared by
// every matcher over the same model.
class GrammarVocab {
 public:
  GrammarVocab(std::vector<std::string> pieces, std::vector<bool> eog);
  static std::shared_ptr<const GrammarVocab> from_tokenizer(const tokenizer::Tokenizer& tok);

  size_t size() const { return pieces_.size(); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  bool eog(int32_t id) const { return eog_[static_cast<size_t>(id)]; }
  // Tokens with text, sorted by their bytes.
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<int32_t>& eog_tokens() const { return eog_ids_; }
  size_t max_piece() const { return max_piece_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<bool> eog_;
  std::vector<int32_t> sorted_, eog_ids_;
  size_t max_piece_ = 0;
};

// <text> token elements of a grammar resolved in a model's vocabulary: the token stored with exactly
// that text (<|channel|>, <think>), else the one token the text encodes to (special tokens parsed).
Grammar::TokenLookup grammar_token_lookup(const tokenizer::Tokenizer& tok);

// Masks of the top frames of stacks, keyed by those frames; shared by the matchers of one grammar and
// vocabulary (several requests with the same schema), safe to use from several threads.
class GrammarMaskCache {
 public:
  struct Pending {  // tokens (a range of the sorted vocabulary) that popped below the top frames
    uint32_t begin, end;  // sorted-vocabulary indices
    uint32_t depth;       // bytes consumed before the pop
  };
  struct Entry {
    std::vector<uint64_t> allowed;  // bits by token id
    std::vector<Pending> pending;
  };
  std::shared_ptr<const Entry> find(const std::string& key) const;
  void put(const std::string& key, std::shared_ptr<const Entry> entry);
  // The pending tokens of an entry that the stack below its cut allows, keyed by the entry's key and
  // that stack's positions: the same each step while the text stays inside one rule (a string).
  using Allowed = std::vector<int32_t>;
  std::shared_ptr<const Allowed> find_pending(const std::string& key) const;
  void put_pending(const std::string& key, std::shared_ptr<const Allowed> allowed);

 private:
  static constexpr size_t kMaxEntries = 256;
  // Both maps: a find under the lock, and a put that starts over once a grammar has this many in use.
  template <class V>
  std::shared_ptr<const V> find_in(const std::unordered_map<std::string, std::shared_ptr<const V>>& map,
                                   const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = map.find(key);
    return it == map.end() ? nullptr : it->second;
  }
  template <class V>
  void put_in(std::unordered_map<std::string, std::shared_ptr<const V>>& map, const std::string& key,
              std::shared_ptr<const V> value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (map.size() >= kMaxEntries) map.clear();
    map[key] = std::move(value);
  }
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> entries_;
  std::unordered_map<std::string, std::shared_ptr<const Allowed>> pending_;
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
                 std::shared_ptr<GrammarMaskCache> cache = nullptr);

  // Whether appending the token keeps the text a prefix of a sentence of the grammar (an
  // end-of-generation token: whether the text is complete).
  bool allows(int32_t token) const;
  // Appends the token; throws zinc::Error when it is not allowed.
  void accept(int32_t token);
  // Appends text directly (tests, and text the engine writes); false (nothing changed) when refused.
  bool accept_text(std::string_view bytes);
  // The text so far is a whole sentence of the grammar.
  bool complete() const;
  // Complete, and no character can follow: generation must end.
  bool exhausted() const;
  // The work one operation may take before it fails (kMaxWork; tests set less), and what the last took.
  void set_max_work(uint64_t units) { max_work_ = units; }
  uint64_t last_work() const { return work_; }
  // allowed[t] = allows(t) for every token (resized to the vocabulary).
  void fill_mask(std::vector<uint8_t>& allowed) const;
  // The same as bits: token t allowed when bit t % 64 of bits[t / 64] is set.
  void fill_mask_bits(std::vector<uint64_t>& bits) const;
  // A copy holding only the live part of the state (for computing a mask on another thread).
  GrammarMatcher snapshot() const;
  // Back to the start of the grammar.
  void reset();

  const Grammar& grammar() const { return *grammar_; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;  // the empty stack (and a node with no parent)
  static constexpr size_t kMaxStacks = 1024;
  // In a mask walk, the frames below the stacks' common node are replaced by the marker kCut.
  static constexpr uint32_t kCut = UINT32_MAX - 1;
  static bool is_marker(uint32_t s) { return s >= kCut; }  // kCut or kEmpty: no node behind it
  struct Node {
    const GrammarElem* pos;  // a character set, or the element a popped rule returns to
    uint32_t parent;
  };

  uint32_t push(const GrammarElem* pos, uint32_t parent) const;
  void expand(uint32_t stack, std::vector<uint32_t>& out) const;
  void add_unique(std::vector<uint32_t>& out, uint32_t stack) const;
  bool same_stack(uint32_t a, uint32_t b) const;
  void step(const std::vector<uint32_t>& in, uint32_t cp, std::vector<uint32_t>& out) const;
  bool partial_possible(const std::vector<uint32_t>& stacks, std::string_view partial) const;
  bool token_matches(const GrammarElem* top, int32_t token) const;
  void token_step(const std::vector<uint32_t>& in, int32_t token, std::vector<uint32_t>& out) const;
  bool token_allowed(int32_t token) const;
  // Runs bytes through the stacks; false when refused. `partial` holds an incomplete character's bytes.
  bool run(std::vector<uint32_t>& stacks, std::string& partial, std::string_view bytes) const;
  void walk(size_t begin, size_t end, size_t depth, std::vector<uint8_t>& allowed,
            std::vector<GrammarMaskCache::Pending>& pending) const;
  std::shared_ptr<const GrammarMaskCache::Entry> top_frames_mask() const;
  uint32_t common_node() const;
  void compact();

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const GrammarVocab> vocab_;
  std::shared_ptr<GrammarMaskCache> cache_;
  mutable std::vector<Node> arena_;
  std::vector<uint32_t> stacks_;
  std::string partial_;
  // fill_mask's scratch: the stacks and partial bytes after each depth of the walk.
  mutable std::vector<std::vector<uint32_t>> depth_stacks_;
  mutable std::vector<std::string> depth_partial_;
  mutable std::vector<uint32_t> scratch_, expand_todo_, allow_stacks_;
  mutable std::string allow_partial_;
  // expand's nodes already taken in its current call (position and parent), once it has taken many.
  struct NodeHash {
    size_t operator()(const std::pair<const GrammarElem*, uint32_t>& n) const {
      return std::hash<const void*>()(n.first) ^ (static_cast<size_t>(n.second) * 0x9E3779B97F4A7C15ull);
    }
  };
  mutable std::unordered_set<std::pair<const GrammarElem*, uint32_t>, NodeHash> expand_seen_;
  // The work of the operation under way (one mask, one token's test or acceptance, or text): nodes
  // expanded and stacks compared. A grammar that reads the same text many ways at once (a repetition
  // of something that can be empty or split in more than one way: ("a"?){1,1000}, (word " "?){1,300})
  // makes each character cost up to kMaxStacks squared; past max_work_ the operation fails with a
  // clear error instead of holding a request (and what waits on it) for minutes.
  // (About 2-3 s on one core; a JSON grammar's masks over a 50k vocabulary took at most 1.1 M.)
  static constexpr uint64_t kMaxWork = uint64_t{1} << 30;
  uint64_t max_work_ = kMaxWork;
  mutable uint64_t work_ = 0;
  void spend(uint64_t units) const;
};

}  // namespace zinc::sample
