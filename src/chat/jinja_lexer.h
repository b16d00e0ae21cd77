// Jinja lexer: template source to tokens.
//
// First the source is preprocessed the way transformers configures Jinja and the reference renderer
// reproduces it: one trailing newline dropped, lstrip_blocks (spaces and tabs before a block tag at the
// start of a line removed), trim_blocks (the newline after a block tag removed), and transformers'
// {% generation %} / {% endgeneration %} markers removed. Then text, tags and the tokens inside tags are
// split out, applying the "-" whitespace control of {%- -%} {{- -}} {#- -#}. Every token remembers where it
// started in the original source, so errors can name a line and column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zinc::chat::jinja {

enum class Tok : uint8_t {
  Text,            // text between tags
  Number,          // 12, 1.5, -3 (a sign is part of the literal where it cannot be a binary operator)
  String,          // 'a' "b", escapes resolved
  Identifier,      // names and keywords (if, for, in, not, is, and, or, ...)
  Equals,          // =
  OpenParen,       // (
  CloseParen,      // )
  OpenStatement,   // {%
  CloseStatement,  // %}
  OpenExpression,  // {{
  CloseExpression, // }}
  OpenSquare,      // [
  CloseSquare,     // ]
  OpenCurly,       // {
  CloseCurly,      // }
  Comma,
  Dot,
  Colon,
  Pipe,
  Additive,        // + - ~
  Multiplicative,  // * / // %
  Power,           // **
  Comparison,      // == != < > <= >=
  Unary,           // a sign that is not followed by a number: -x
  Comment,         // {# ... #}
};

const char* tok_name(Tok t);

struct Token {
  Tok type;
  std::string value;
  uint32_t pos;  // byte offset in the original source
};

// Throws RenderError (with the offset of the offending character) for malformed input.
std::vector<Token> tokenize(std::string_view source);

}  // namespace zinc::chat::jinja
