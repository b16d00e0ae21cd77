// Grammars for constrained sampling, in GBNF (the grammar notation llama.cpp reads; its files work here).
//
//   root   ::= object
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value          # a comment
//   ws     ::= [ \t\n]*
//
// A rule is `name ::= alternatives`; alternatives are separated by `|`; a sequence is made of
//   "literal"  with escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (characters are Unicode code points)
//   [a-z_0-9]  a class of characters, [^...] its complement; `.` is any character
//   name       another rule;  ( ... )  a group
//   <[id]>     one token of the model's vocabulary by its id; <text> the token whose text that is
//              (<think>, <|channel|>: the text must be exactly one token); !<[id]> and !<text> any
//              one token but that one (never an end-of-generation token)
// each optionally followed by *, +, ?, {m}, {m,} or {m,n}. A rule ends at the end of its line unless a
// group is open (or the next line starts with `|`). Repetitions are rewritten into generated rules, so
// the compiled form has only sequences, alternatives, rule references, character sets and tokens.
// A token element matches a whole token where a token begins: control tokens, which have no text, are
// written this way (a Harmony header's <|channel|>), and no character set ever matches one.
//
// parse() refuses what the matcher could not run: an undefined rule, no root, left recursion (a rule
// that can reach itself without consuming a character), or a grammar larger than the limits, with a
// zinc::Error naming the line and column.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace zinc::sample {

// One element of a compiled rule. A rule is its alternatives one after another, each ended by Alt
// (between alternatives) or End (after the last). A character set is Char/CharNot followed by any
// number of CharAlt and RangeUpper (which turns the element before it into the range [before, value]).
enum class GrammarOp : uint8_t {
  End,         // end of the rule
  Alt,         // end of an alternative, another follows
  Ref,         // value: a rule id
  Char,        // value: a code point; starts a character set
  CharNot,     // value: a code point; starts a complemented set
  CharAlt,     // value: another code point of the set
  RangeUpper,  // value: the upper end of a range whose lower end is the element before
  Any,         // any code point (`.`)
  Token,       // value: a token id; the whole token
  TokenNot,    // value: a token id; any one token but it (and but end-of-generation tokens)
};

struct GrammarElem {
  GrammarOp op;
  uint32_t value;
};

struct Grammar {
  std::vector<std::vector<GrammarElem>> rules;  // by rule id
  std::vector<std::string> names;               // by rule id (generated rules: "name-3")
  uint32_t root = 0;

  // A token written by its text (<think>) to its id: -1 when the text is not exactly one token.
  using TokenLookup = std::function<int32_t(std::string_view text)>;
  // `tokens` resolves <text> elements; without it they are an error (<[id]> needs none).
  static Grammar parse(std::string_view text, std::string_view root_rule = "root", const TokenLookup& tokens = {});
  // Back to GBNF (generated rules included): what the parser understood, for errors and tests.
  std::string to_gbnf() const;
  size_t size() const;  // elements in all rules
};

// A TokenLookup taking every <text> (as token 0): a grammar's syntax checked before its model is at
// hand; the model's own lookup decides when it runs.
inline int32_t any_token(std::string_view) { return 0; }

// A GBNF string literal matching exactly these bytes (quotes, backslashes and control bytes escaped).
std::string gbnf_literal(std::string_view text);

// True when the element starts a character set rather than being a token, a reference or an end.
inline bool is_char_elem(GrammarOp op) { return op == GrammarOp::Char || op == GrammarOp::CharNot || op == GrammarOp::Any; }
inline bool is_token_elem(GrammarOp op) { return op == GrammarOp::Token || op == GrammarOp::TokenNot; }
// A terminal: what a stack's top always is (a character set or a token).
inline bool is_terminal(GrammarOp op) { return is_char_elem(op) || is_token_elem(op); }
inline bool is_end_of_sequence(GrammarOp op) { return op == GrammarOp::End || op == GrammarOp::Alt; }

// Whether the character set starting at `set` contains `cp`; `set` points at a terminal (a token
// element contains no character).
bool char_set_matches(const GrammarElem* set, uint32_t cp);
// Whether the set contains any code point in [lo, hi].
bool char_set_intersects(const GrammarElem* set, uint32_t lo, uint32_t hi);
// The element after the terminal starting at `set`.
const GrammarElem* char_set_end(const GrammarElem* set);

}  // namespace zinc::sample
