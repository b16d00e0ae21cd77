// Syntax tree of a parsed Jinja template. Statements and expressions share one node base: a kind tag,
// the offset in the original source where the construct starts (for error messages), and the height of
// the subtree, which the parser caps so hostile templates cannot exhaust the stack later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace zinc::chat::jinja {

enum class NodeKind : uint8_t {
  // Statements
  Text,         // StrLit: literal template text
  Set,          // {% set x = e %} / {% set x %}...{% endset %}
  If,           // {% if %}{% elif %}{% else %}{% endif %}
  For,          // {% for x in e [if c] %}...{% else %}...{% endfor %}
  Macro,        // {% macro name(params) %}...{% endmacro %}
  CallBlock,    // {% call(params) macro(args) %}...{% endcall %}
  FilterBlock,  // {% filter f %}...{% endfilter %}
  Break,
  Continue,
  Comment,
  // Expressions
  IntLit,
  FloatLit,
  StrLit,
  Ident,
  ArrayLit,  // [a, b]
  TupleLit,  // (a, b) or a, b
  ObjectLit, // {k: v}
  Member,    // a.b, a[b]
  Slice,     // inside a[...]: start:stop:step
  Call,      // f(args)
  Binary,
  Unary,
  Filter,    // e | f, e | f(args)
  Test,      // e is [not] t
  Select,    // e if c (no else): undefined when c is false
  Ternary,   // a if c else b
  KwArg,     // name=value in calls, name=default in parameter lists
  Spread,    // *e in calls
  KwSpread,  // **e in calls
};

struct Node {
  Node(NodeKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  NodeKind kind;
  uint16_t height = 1;
  uint32_t pos;  // byte offset in the original source
};

using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct StrLit : Node {
  StrLit(NodeKind k, uint32_t p, Str v) : Node(k, p), value(std::move(v)) {}
  Str value;
};

struct IntLit : Node {
  IntLit(uint32_t p, int64_t v) : Node(NodeKind::IntLit, p), value(v) {}
  int64_t value;
};

struct FloatLit : Node {
  FloatLit(uint32_t p, double v) : Node(NodeKind::FloatLit, p), value(v) {}
  double value;
};

struct Ident : Node {
  Ident(uint32_t p, std::string n) : Node(NodeKind::Ident, p), name(std::move(n)) {}
  std::string name;
};

struct ListLit : Node {  // ArrayLit and TupleLit
  ListLit(NodeKind k, uint32_t p) : Node(k, p) {}
  NodeList items;
};

struct ObjectLit : Node {
  explicit ObjectLit(uint32_t p) : Node(NodeKind::ObjectLit, p) {}
  std::vector<std::pair<NodePtr, NodePtr>> pairs;
};

struct Member : Node {
  Member(uint32_t p, NodePtr o, NodePtr prop, bool c)
      : Node(NodeKind::Member, p), object(std::move(o)), property(std::move(prop)), computed(c) {}
  NodePtr object, property;
  bool computed;  // a[b] rather than a.b
};

struct Slice : Node {
  explicit Slice(uint32_t p) : Node(NodeKind::Slice, p) {}
  NodePtr start, stop, step;  // null where omitted
};

struct Call : Node {
  Call(uint32_t p, NodePtr c) : Node(NodeKind::Call, p), callee(std::move(c)) {}
  NodePtr callee;
  NodeList args;  // expressions, KwArg, Spread, KwSpread
};

enum class BinOp : uint8_t { Or, And, Eq, Ne, Lt, Gt, Le, Ge, In, NotIn, Add, Sub, Concat, Mul, Div, FloorDiv, Mod, Pow };
const char* binop_text(BinOp op);

struct Binary : Node {
  Binary(uint32_t p, BinOp o, NodePtr l, NodePtr r)
      : Node(NodeKind::Binary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinOp op;
  NodePtr left, right;
};

enum class UnOp : uint8_t { Not, Neg, Pos };

struct Unary : Node {
  Unary(uint32_t p, UnOp o, NodePtr a) : Node(NodeKind::Unary, p), op(o), arg(std::move(a)) {}
  UnOp op;
  NodePtr arg;
};

struct FilterExpr : Node {
  FilterExpr(uint32_t p, NodePtr o, NodePtr f) : Node(NodeKind::Filter, p), operand(std::move(o)), filter(std::move(f)) {}
  NodePtr operand;
  NodePtr filter;  // Ident, or Call whose callee is an Ident
};

struct TestExpr : Node {
  TestExpr(uint32_t p, NodePtr o, bool n, std::string t)
      : Node(NodeKind::Test, p), operand(std::move(o)), negate(n), name(std::move(t)) {}
  NodePtr operand;
  bool negate;
  std::string name;
  NodeList args;  // `is divisibleby(3)`, `is sameas x`: accepted by ZINC only
};

struct Select : Node {
  Select(uint32_t p, NodePtr l, NodePtr t) : Node(NodeKind::Select, p), lhs(std::move(l)), test(std::move(t)) {}
  NodePtr lhs, test;
};

struct Ternary : Node {
  Ternary(uint32_t p, NodePtr c, NodePtr y, NodePtr n)
      : Node(NodeKind::Ternary, p), cond(std::move(c)), yes(std::move(y)), no(std::move(n)) {}
  NodePtr cond, yes, no;
};

struct KwArg : Node {
  KwArg(uint32_t p, std::string k, NodePtr v) : Node(NodeKind::KwArg, p), key(std::move(k)), value(std::move(v)) {}
  std::string key;
  NodePtr value;
};

struct SpreadExpr : Node {  // Spread and KwSpread
  SpreadExpr(NodeKind k, uint32_t p, NodePtr a) : Node(k, p), arg(std::move(a)) {}
  NodePtr arg;
};

struct SetStmt : Node {
  SetStmt(uint32_t p, NodePtr t) : Node(NodeKind::Set, p), target(std::move(t)) {}
  NodePtr target;  // Ident, TupleLit of Idents, or Member (namespace attribute)
  NodePtr value;   // null for a block set, whose rendered body is the value
  NodeList body;
};

struct IfStmt : Node {
  IfStmt(uint32_t p, NodePtr t) : Node(NodeKind::If, p), test(std::move(t)) {}
  NodePtr test;
  NodeList body, alternate;  // an elif is an IfStmt alone in `alternate`
};

struct ForStmt : Node {
  explicit ForStmt(uint32_t p) : Node(NodeKind::For, p) {}
  NodePtr target;    // Ident or TupleLit of Idents
  NodePtr iterable;  // a Select node when the loop filters (for x in xs if cond)
  NodeList body, otherwise;
};

// Parameters are Ident or KwArg (name=default). Which of the special names `kwargs` / `varargs` the body
// reads decides whether extra arguments are collected or refused, as in Jinja.
struct MacroStmt : Node {
  MacroStmt(uint32_t p, std::string n) : Node(NodeKind::Macro, p), name(std::move(n)) {}
  std::string name;
  NodeList params;
  NodeList body;
  bool uses_kwargs = false, uses_varargs = false;
};

struct CallBlockStmt : Node {
  explicit CallBlockStmt(uint32_t p) : Node(NodeKind::CallBlock, p) {}
  std::unique_ptr<Call> call;
  NodeList caller_params;
  NodeList body;
  bool uses_kwargs = false, uses_varargs = false;
};

struct FilterBlockStmt : Node {
  explicit FilterBlockStmt(uint32_t p) : Node(NodeKind::FilterBlock, p) {}
  NodePtr filter;  // Ident or Call
  NodeList body;
};

// Calls fn(const Node&) for each direct child, in source order.
template <class F>
void for_each_child(const Node& n, F&& fn) {
  auto one = [&](const NodePtr& c) {
    if (c) fn(*c);
  };
  auto list = [&](const NodeList& l) {
    for (const auto& c : l) one(c);
  };
  switch (n.kind) {
    case NodeKind::Set: {
      const auto& s = static_cast<const SetStmt&>(n);
      one(s.target); one(s.value); list(s.body);
      break;
    }
    case NodeKind::If: {
      const auto& s = static_cast<const IfStmt&>(n);
      one(s.test); list(s.body); list(s.alternate);
      break;
    }
    case NodeKind::For: {
      const auto& s = static_cast<const ForStmt&>(n);
      one(s.target); one(s.iterable); list(s.body); list(s.otherwise);
      break;
    }
    case NodeKind::Macro: {
      const auto& s = static_cast<const MacroStmt&>(n);
      list(s.params); list(s.body);
      break;
    }
    case NodeKind::CallBlock: {
      const auto& s = static_cast<const CallBlockStmt&>(n);
      if (s.call) fn(static_cast<const Node&>(*s.call));
      list(s.caller_params); list(s.body);
      break;
    }
    case NodeKind::FilterBlock: {
      const auto& s = static_cast<const FilterBlockStmt&>(n);
      list(s.body); one(s.filter);
      break;
    }
    case NodeKind::ArrayLit:
    case NodeKind::TupleLit: list(static_cast<const ListLit&>(n).items); break;
    case NodeKind::ObjectLit:
      for (const auto& [k, v] : static_cast<const ObjectLit&>(n).pairs) {
        one(k);
        one(v);
      }
      break;
    case NodeKind::Member: {
      const auto& m = static_cast<const Member&>(n);
      one(m.object); one(m.property);
      break;
    }
    case NodeKind::Slice: {
      const auto& s = static_cast<const Slice&>(n);
      one(s.start); one(s.stop); one(s.step);
      break;
    }
    case NodeKind::Call: {
      const auto& c = static_cast<const Call&>(n);
      one(c.callee); list(c.args);
      break;
    }
    case NodeKind::Binary: {
      const auto& b = static_cast<const Binary&>(n);
      one(b.left); one(b.right);
      break;
    }
    case NodeKind::Unary: one(static_cast<const Unary&>(n).arg); break;
    case NodeKind::Filter: {
      const auto& f = static_cast<const FilterExpr&>(n);
      one(f.operand); one(f.filter);
      break;
    }
    case NodeKind::Test: {
      const auto& t = static_cast<const TestExpr&>(n);
      one(t.operand); list(t.args);
      break;
    }
    case NodeKind::Select: {
      const auto& s = static_cast<const Select&>(n);
      one(s.lhs); one(s.test);
      break;
    }
    case NodeKind::Ternary: {
      const auto& t = static_cast<const Ternary&>(n);
      one(t.cond); one(t.yes); one(t.no);
      break;
    }
    case NodeKind::KwArg: one(static_cast<const KwArg&>(n).value); break;
    case NodeKind::Spread:
    case NodeKind::KwSpread: one(static_cast<const SpreadExpr&>(n).arg); break;
    case NodeKind::Text:
    case NodeKind::Break:
    case NodeKind::Continue:
    case NodeKind::Comment:
    case NodeKind::IntLit:
    case NodeKind::FloatLit:
    case NodeKind::StrLit:
    case NodeKind::Ident: break;
  }
}

// A parsed template: the source is kept for line/column lookup in error messages.
struct Program {
  std::string name;
  std::string source;
  NodeList body;
};

}  // namespace zinc::chat::jinja
