// Jinja parser: tokens to a syntax tree. The grammar and operator precedence are those of the reference
// renderer (lowest first): `a if c else b`, or, and, not, comparisons and `in` (left-associative, not
// chained), + - ~, * / // %, ** (left-associative), `is` tests, `|` filters, unary signs, calls and
// member access, primaries. Statements: set (also block set), if/elif/else, for (with loop filter and
// else), macro, call blocks, filter blocks, break, continue.
#pragma once

#include <memory>
#include <string>

#include "chat/jinja_ast.h"

namespace zinc::chat::jinja {

// Subtrees deeper than this are refused at parse time, which bounds every later recursion.
inline constexpr int kMaxTreeHeight = 256;

// Throws RenderError carrying the offset of the offending token.
std::unique_ptr<Program> parse(std::string source, std::string name);

}  // namespace zinc::chat::jinja
