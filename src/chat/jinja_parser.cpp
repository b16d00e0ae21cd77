// Jinja parser: a recursive-descent parser over the lexer's tokens, one function per precedence level.
// It accepts what the reference renderer accepts (including its leniencies: commas between call
// arguments and list items are optional) so templates that render there parse here.
#include "chat/jinja_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string_view>

#include "chat/jinja_lexer.h"

namespace zinc::chat::jinja {

const char* binop_text(BinOp op) {
  switch (op) {
    case BinOp::Or: return "or";
    case BinOp::And: return "and";
    case BinOp::Eq: return "==";
    case BinOp::Ne: return "!=";
    case BinOp::Lt: return "<";
    case BinOp::Gt: return ">";
    case BinOp::Le: return "<=";
    case BinOp::Ge: return ">=";
    case BinOp::In: return "in";
    case BinOp::NotIn: return "not in";
    case BinOp::Add: return "+";
    case BinOp::Sub: return "-";
    case BinOp::Concat: return "~";
    case BinOp::Mul: return "*";
    case BinOp::Div: return "/";
    case BinOp::FloorDiv: return "//";
    case BinOp::Mod: return "%";
    case BinOp::Pow: return "**";
  }
  return "?";
}

namespace {

BinOp binop_from(std::string_view s) {
  static constexpr std::pair<std::string_view, BinOp> table[] = {
      {"==", BinOp::Eq},  {"!=", BinOp::Ne},   {"<", BinOp::Lt},        {">", BinOp::Gt},   {"<=", BinOp::Le},
      {">=", BinOp::Ge},  {"+", BinOp::Add},   {"-", BinOp::Sub},       {"~", BinOp::Concat}, {"*", BinOp::Mul},
      {"/", BinOp::Div},  {"//", BinOp::FloorDiv}, {"%", BinOp::Mod},   {"**", BinOp::Pow}, {"in", BinOp::In},
      {"and", BinOp::And}, {"or", BinOp::Or}};
  for (const auto& [text, op] : table) {
    if (text == s) return op;
  }
  return BinOp::Add;
}

bool is_special_arg(const std::string& name) { return name == "kwargs" || name == "varargs"; }

const std::string& param_name(const Node& p) {
  return p.kind == NodeKind::Ident ? static_cast<const Ident&>(p).name : static_cast<const KwArg&>(p).key;
}

// Which of `kwargs` / `varargs` a macro or call block body reads before anything declares them, visiting
// in Jinja's order (a loop filter after the loop body).
class SpecialArgScan {
 public:
  std::set<std::string> declared, accessed;

  void declare_target(const Node& t) {
    if (t.kind == NodeKind::Ident) {
      const auto& name = static_cast<const Ident&>(t).name;
      if (is_special_arg(name)) declared.insert(name);
    } else if (t.kind == NodeKind::TupleLit) {
      for (const auto& item : static_cast<const ListLit&>(t).items) declare_target(*item);
    }
  }
  void declare_params(const NodeList& params) {
    for (const auto& p : params) {
      if (is_special_arg(param_name(*p))) declared.insert(param_name(*p));
    }
  }
  void visit_defaults(const NodeList& params) {
    for (const auto& p : params) {
      if (p->kind == NodeKind::KwArg) visit(*static_cast<const KwArg&>(*p).value);
    }
  }
  void visit_list(const NodeList& l) {
    for (const auto& n : l) visit(*n);
  }
  void visit_filter(const Node& f) {
    if (f.kind == NodeKind::Call) visit_list(static_cast<const Call&>(f).args);
  }

  void visit(const Node& n) {
    switch (n.kind) {
      case NodeKind::For: {
        const auto& s = static_cast<const ForStmt&>(n);
        declare_target(*s.target);
        if (s.iterable->kind == NodeKind::Select) {
          const auto& sel = static_cast<const Select&>(*s.iterable);
          visit(*sel.lhs);
          visit_list(s.body);
          visit_list(s.otherwise);
          visit(*sel.test);
        } else {
          visit(*s.iterable);
          visit_list(s.body);
          visit_list(s.otherwise);
        }
        return;
      }
      case NodeKind::Set: {
        const auto& s = static_cast<const SetStmt&>(n);
        declare_target(*s.target);
        if (s.value) visit(*s.value);
        visit_list(s.body);
        return;
      }
      case NodeKind::Macro: {
        const auto& s = static_cast<const MacroStmt&>(n);
        declare_params(s.params);
        visit_defaults(s.params);
        visit_list(s.body);
        return;
      }
      case NodeKind::CallBlock: {
        const auto& s = static_cast<const CallBlockStmt&>(n);
        visit(*s.call);
        declare_params(s.caller_params);
        visit_defaults(s.caller_params);
        visit_list(s.body);
        return;
      }
      case NodeKind::FilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(n);
        visit_list(s.body);
        visit_filter(*s.filter);
        return;
      }
      case NodeKind::Ident: {
        const auto& name = static_cast<const Ident&>(n).name;
        if (is_special_arg(name) && !declared.count(name)) accessed.insert(name);
        return;
      }
      case NodeKind::Member: {
        const auto& m = static_cast<const Member&>(n);
        visit(*m.object);
        if (m.computed) visit(*m.property);
        return;
      }
      case NodeKind::Filter: {
        const auto& f = static_cast<const FilterExpr&>(n);
        visit(*f.operand);
        visit_filter(*f.filter);
        return;
      }
      case NodeKind::Test: visit(*static_cast<const TestExpr&>(n).operand); return;
      case NodeKind::Select: {
        const auto& s = static_cast<const Select&>(n);
        visit(*s.test);
        visit(*s.lhs);
        return;
      }
      default: for_each_child(n, [&](const Node& c) { visit(c); });
    }
  }
};

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, size_t source_size) : t_(tokens), end_pos_(static_cast<uint32_t>(source_size)) {}

  NodeList parse_program() {
    NodeList body;
    while (cur_ < t_.size()) body.push_back(parse_any());
    return body;
  }

 private:
  // ---- token helpers ----
  bool at_end() const { return cur_ >= t_.size(); }
  bool is(Tok type, size_t ahead = 0) const { return cur_ + ahead < t_.size() && t_[cur_ + ahead].type == type; }
  bool is_ident(std::string_view name, size_t ahead = 0) const {
    return is(Tok::Identifier, ahead) && t_[cur_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::OpenStatement) || !is(Tok::Identifier, 1)) return false;
    return std::find(names.begin(), names.end(), t_[cur_ + 1].value) != names.end();
  }
  uint32_t here() const { return at_end() ? end_pos_ : t_[cur_].pos; }
  std::string describe_current() const {
    if (at_end()) return "the end of the template";
    const Token& tk = t_[cur_];
    if (tk.type == Tok::Identifier || tk.type == Tok::Number) return fmt::format("'{}'", tk.value);
    if (tk.type == Tok::String) return "a string";
    if (tk.type == Tok::Text) return "template text";
    return tok_name(tk.type);
  }
  [[noreturn]] void fail(const std::string& what, uint32_t pos) const { throw RenderError(what, pos); }
  [[noreturn]] void fail_here(const std::string& what) const { fail(what, here()); }

  const Token& expect(Tok type, const char* what) {
    if (!is(type)) fail_here(fmt::format("expected {}, found {}", what, describe_current()));
    return t_[cur_++];
  }
  void expect_end_tag(std::string_view name, const char* opener, uint32_t open_pos) {
    if (at_end()) fail(fmt::format("{} is not closed: expected '{{% {} %}}'", opener, name), open_pos);
    expect(Tok::OpenStatement, "'{%'");
    if (!is_ident(name)) fail_here(fmt::format("expected '{{% {} %}}' to close {}, found {}", name, opener, describe_current()));
    ++cur_;
    expect(Tok::CloseStatement, "'%}'");
  }
  // Parses statements until one of `names` opens; the caller consumes it.
  NodeList parse_body_until(std::initializer_list<std::string_view> names, const char* opener, uint32_t open_pos) {
    NodeList body;
    while (!is_statement(names)) {
      if (at_end()) {
        fail(fmt::format("{} is not closed: expected '{{% {} %}}'", opener, *(names.end() - 1)), open_pos);
      }
      body.push_back(parse_any());
    }
    return body;
  }

  // Sets the node's height from its children and refuses trees too deep to evaluate safely.
  template <class T>
  std::unique_ptr<T> finish(std::unique_ptr<T> node) {
    int h = 0;
    for_each_child(*node, [&](const Node& c) { h = std::max<int>(h, c.height); });
    if (h + 1 > kMaxTreeHeight) fail(fmt::format("template nested too deeply (more than {} levels)", kMaxTreeHeight), node->pos);
    node->height = static_cast<uint16_t>(h + 1);
    return node;
  }

  // Bounds the parser's own recursion (a nested expression costs about three levels), before the tree
  // height check in finish() can see the subtree.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > 4 * kMaxTreeHeight) parser.fail_here("template nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // ---- statements ----
  NodePtr parse_any() {
    DepthGuard guard(*this);
    const Token& tk = t_[cur_];
    switch (tk.type) {
      case Tok::Comment:
        ++cur_;
        return std::make_unique<Node>(NodeKind::Comment, tk.pos);
      case Tok::Text:
        ++cur_;
        return std::make_unique<StrLit>(NodeKind::Text, tk.pos, std::make_shared<const std::string>(tk.value));
      case Tok::OpenStatement: return parse_statement();
      case Tok::OpenExpression: {
        ++cur_;
        NodePtr e = parse_expression();
        expect(Tok::CloseExpression, "'}}'");
        return e;
      }
      default: fail_here(fmt::format("unexpected {} outside of a tag", describe_current()));
    }
  }

  NodePtr parse_statement() {
    const uint32_t open_pos = here();
    expect(Tok::OpenStatement, "'{%'");
    if (!is(Tok::Identifier)) fail_here(fmt::format("expected a statement name after '{{%', found {}", describe_current()));
    const std::string name = t_[cur_].value;
    ++cur_;
    if (name == "set") return parse_set(open_pos);
    if (name == "if") {
      NodePtr n = parse_if(open_pos);
      expect_end_tag("endif", "'{% if %}'", open_pos);
      return n;
    }
    if (name == "for") {
      NodePtr n = parse_for(open_pos);
      expect_end_tag("endfor", "'{% for %}'", open_pos);
      return n;
    }
    if (name == "macro") {
      NodePtr n = parse_macro(open_pos);
      expect_end_tag("endmacro", "'{% macro %}'", open_pos);
      return n;
    }
    if (name == "call") return parse_call_block(open_pos);
    if (name == "filter") return parse_filter_block(open_pos);
    if (name == "break" || name == "continue") {
      expect(Tok::CloseStatement, "'%}'");
      return std::make_unique<Node>(name == "break" ? NodeKind::Break : NodeKind::Continue, open_pos);
    }
    static const std::set<std::string> closers = {"endif", "endfor", "endmacro", "endset", "endcall", "endfilter",
                                                  "elif", "else"};
    if (closers.count(name)) fail(fmt::format("'{{% {} %}}' without a matching opening statement", name), open_pos);
    fail(fmt::format("unsupported statement '{{% {} %}}'", name), open_pos);
  }

  NodePtr parse_set(uint32_t open_pos) {
    auto n = std::make_unique<SetStmt>(open_pos, parse_expression_sequence(false));
    if (is(Tok::Equals)) {
      ++cur_;
      n->value = parse_expression_sequence(false);
    } else {
      expect(Tok::CloseStatement, "'=' or '%}' in '{% set %}'");
      n->body = parse_body_until({"endset"}, "'{% set %}' block", open_pos);
      expect(Tok::OpenStatement, "'{%'");
      ++cur_;  // endset
    }
    expect(Tok::CloseStatement, "'%}'");
    return finish(std::move(n));
  }

  // After "{% if" or "{% elif": the test, the body, and the elif/else chain (the caller closes it).
  NodePtr parse_if(uint32_t open_pos) {
    DepthGuard guard(*this);
    auto n = std::make_unique<IfStmt>(open_pos, parse_expression());
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_body_until({"elif", "else", "endif"}, "'{% if %}'", open_pos);
    if (is_statement({"elif"})) {
      const uint32_t elif_pos = here();
      cur_ += 2;
      n->alternate.push_back(parse_if(elif_pos));
    } else if (is_statement({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->alternate = parse_body_until({"endif"}, "'{% if %}'", open_pos);
    }
    return finish(std::move(n));
  }

  NodePtr parse_for(uint32_t open_pos) {
    auto n = std::make_unique<ForStmt>(open_pos);
    n->target = parse_expression_sequence(true);
    if (n->target->kind != NodeKind::Ident && n->target->kind != NodeKind::TupleLit) {
      fail(fmt::format("expected a name or names to assign in '{{% for %}}'"), n->target->pos);
    }
    if (!is_ident("in")) fail_here(fmt::format("expected 'in' in '{{% for %}}', found {}", describe_current()));
    ++cur_;
    n->iterable = parse_expression();
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_body_until({"endfor", "else"}, "'{% for %}'", open_pos);
    if (is_statement({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->otherwise = parse_body_until({"endfor"}, "'{% for %}'", open_pos);
    }
    return finish(std::move(n));
  }

  NodePtr parse_macro(uint32_t open_pos) {
    NodePtr name = parse_primary();
    if (name->kind != NodeKind::Ident) fail("expected a macro name after '{% macro'", name->pos);
    auto n = std::make_unique<MacroStmt>(open_pos, static_cast<Ident&>(*name).name);
    n->params = parse_args(true);
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_body_until({"endmacro"}, "'{% macro %}'", open_pos);
    SpecialArgScan scan;
    scan.declare_params(n->params);
    scan.visit_list(n->body);
    n->uses_kwargs = scan.accessed.count("kwargs") > 0;
    n->uses_varargs = scan.accessed.count("varargs") > 0;
    return finish(std::move(n));
  }

  NodePtr parse_call_block(uint32_t open_pos) {
    auto n = std::make_unique<CallBlockStmt>(open_pos);
    if (is(Tok::OpenParen)) n->caller_params = parse_args(true);
    NodePtr callee = parse_primary();
    if (callee->kind != NodeKind::Ident) fail("expected a macro name in '{% call %}'", callee->pos);
    auto call = std::make_unique<Call>(callee->pos, std::move(callee));
    call->args = parse_args(false);
    n->call = finish(std::move(call));
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_body_until({"endcall"}, "'{% call %}'", open_pos);
    expect_end_tag("endcall", "'{% call %}'", open_pos);
    SpecialArgScan scan;
    scan.declare_params(n->caller_params);
    scan.visit_list(n->body);
    n->uses_kwargs = scan.accessed.count("kwargs") > 0;
    n->uses_varargs = scan.accessed.count("varargs") > 0;
    return finish(std::move(n));
  }

  NodePtr parse_filter_block(uint32_t open_pos) {
    auto n = std::make_unique<FilterBlockStmt>(open_pos);
    n->filter = parse_primary();
    if (n->filter->kind == NodeKind::Ident && is(Tok::OpenParen)) n->filter = parse_call(std::move(n->filter));
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_body_until({"endfilter"}, "'{% filter %}'", open_pos);
    expect_end_tag("endfilter", "'{% filter %}'", open_pos);
    return finish(std::move(n));
  }

  // ---- expressions, lowest precedence first ----
  NodePtr parse_expression() { return parse_if_expression(); }

  // a, b, c -> a tuple (for set targets, for loop targets and parenthesised tuples)
  NodePtr parse_expression_sequence(bool primary) {
    const uint32_t pos = here();
    NodePtr first = primary ? parse_primary() : parse_expression();
    if (!is(Tok::Comma)) return first;
    auto tuple = std::make_unique<ListLit>(NodeKind::TupleLit, pos);
    tuple->items.push_back(std::move(first));
    while (is(Tok::Comma)) {
      ++cur_;
      tuple->items.push_back(primary ? parse_primary() : parse_expression());
    }
    return finish(std::move(tuple));
  }

  NodePtr parse_if_expression() {
    DepthGuard guard(*this);
    NodePtr a = parse_or();
    if (!is_ident("if")) return a;
    const uint32_t pos = here();
    ++cur_;
    NodePtr test = parse_or();
    if (is_ident("else")) {
      ++cur_;
      NodePtr no = parse_if_expression();
      return finish(std::make_unique<Ternary>(pos, std::move(test), std::move(a), std::move(no)));
    }
    return finish(std::make_unique<Select>(pos, std::move(a), std::move(test)));
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (is_ident("or")) {
      const uint32_t pos = here();
      ++cur_;
      left = finish(std::make_unique<Binary>(pos, BinOp::Or, std::move(left), parse_and()));
    }
    return left;
  }

  NodePtr parse_and() {
    NodePtr left = parse_not();
    while (is_ident("and")) {
      const uint32_t pos = here();
      ++cur_;
      left = finish(std::make_unique<Binary>(pos, BinOp::And, std::move(left), parse_not()));
    }
    return left;
  }

  NodePtr parse_not() {
    DepthGuard guard(*this);
    NodePtr result;
    while (is_ident("not")) {
      const uint32_t pos = here();
      ++cur_;
      result = finish(std::make_unique<Unary>(pos, UnOp::Not, parse_not()));
    }
    return result ? std::move(result) : parse_comparison();
  }

  NodePtr parse_comparison() {
    NodePtr left = parse_additive();
    while (true) {
      const uint32_t pos = here();
      BinOp op;
      if (is_ident("not") && is_ident("in", 1)) {
        op = BinOp::NotIn;
        cur_ += 2;
      } else if (is_ident("in")) {
        op = BinOp::In;
        ++cur_;
      } else if (is(Tok::Comparison)) {
        op = binop_from(t_[cur_++].value);
      } else {
        break;
      }
      left = finish(std::make_unique<Binary>(pos, op, std::move(left), parse_additive()));
    }
    return left;
  }

  NodePtr parse_additive() {
    NodePtr left = parse_multiplicative();
    while (is(Tok::Additive)) {
      const Token& op = t_[cur_++];
      left = finish(std::make_unique<Binary>(op.pos, binop_from(op.value), std::move(left), parse_multiplicative()));
    }
    return left;
  }

  NodePtr parse_multiplicative() {
    NodePtr left = parse_power();
    while (is(Tok::Multiplicative)) {
      const Token& op = t_[cur_++];
      left = finish(std::make_unique<Binary>(op.pos, binop_from(op.value), std::move(left), parse_power()));
    }
    return left;
  }

  NodePtr parse_power() {
    NodePtr left = parse_test();
    while (is(Tok::Power)) {
      const Token& op = t_[cur_++];
      left = finish(std::make_unique<Binary>(op.pos, BinOp::Pow, std::move(left), parse_test()));
    }
    return left;
  }

  NodePtr parse_test() {
    NodePtr operand = parse_filter();
    while (is_ident("is")) {
      const uint32_t pos = here();
      ++cur_;
      const bool negate = is_ident("not");
      if (negate) ++cur_;
      NodePtr name = parse_primary();
      if (name->kind != NodeKind::Ident) fail("expected a test name after 'is'", name->pos);
      auto test = std::make_unique<TestExpr>(pos, std::move(operand), negate, static_cast<Ident&>(*name).name);
      if (is(Tok::OpenParen)) test->args = parse_args(false);
      operand = finish(std::move(test));
    }
    return operand;
  }

  NodePtr parse_filter() {
    NodePtr operand = parse_unary_sign();
    while (is(Tok::Pipe)) {
      const uint32_t pos = here();
      ++cur_;
      NodePtr filter = parse_primary();
      if (filter->kind != NodeKind::Ident) fail("expected a filter name after '|'", filter->pos);
      if (is(Tok::OpenParen)) filter = parse_call(std::move(filter));
      operand = finish(std::make_unique<FilterExpr>(pos, std::move(operand), std::move(filter)));
    }
    return operand;
  }

  NodePtr parse_unary_sign() {
    DepthGuard guard(*this);
    if ((is(Tok::Unary) || is(Tok::Additive)) && (t_[cur_].value == "-" || t_[cur_].value == "+")) {
      const Token& op = t_[cur_++];
      return finish(std::make_unique<Unary>(op.pos, op.value == "-" ? UnOp::Neg : UnOp::Pos, parse_unary_sign()));
    }
    NodePtr member = parse_member(parse_primary());
    return is(Tok::OpenParen) ? parse_call(std::move(member)) : std::move(member);
  }

  // callee(args), then any .member / [index] / further calls: f(x).y(z)
  NodePtr parse_call(NodePtr callee) {
    while (true) {
      auto call = std::make_unique<Call>(callee->pos, std::move(callee));
      call->args = parse_args(false);
      NodePtr expr = parse_member(finish(std::move(call)));
      if (!is(Tok::OpenParen)) return expr;
      callee = std::move(expr);
    }
  }

  NodeList parse_args(bool parameters) {
    expect(Tok::OpenParen, "'('");
    NodeList args;
    std::set<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!is(Tok::CloseParen)) {
      if (at_end()) fail_here("argument list is not closed: expected ')'");
      const uint32_t pos = here();
      const bool kw_spread = is(Tok::Power);
      const bool spread = is(Tok::Multiplicative) && t_[cur_].value == "*";
      if (parameters && (kw_spread || spread)) fail_here("argument unpacking is not allowed in parameter declarations");
      if (kw_spread) {
        ++cur_;
        args.push_back(finish(std::make_unique<SpreadExpr>(NodeKind::KwSpread, pos, parse_expression())));
        if (is(Tok::Comma)) ++cur_;
        if (!is(Tok::CloseParen)) fail_here("'**' must be applied to the final argument");
        break;
      }
      NodePtr arg;
      if (spread) {
        if (saw_spread) fail_here("only one '*' argument unpacking is allowed");
        saw_spread = true;
        ++cur_;
        arg = finish(std::make_unique<SpreadExpr>(NodeKind::Spread, pos, parse_expression()));
      } else {
        arg = parse_expression();
        if (is(Tok::Equals)) {
          ++cur_;
          if (arg->kind != NodeKind::Ident) {
            fail(parameters ? "expected a name for a parameter" : "expected a name for a keyword argument", arg->pos);
          }
          std::string key = static_cast<Ident&>(*arg).name;
          arg = finish(std::make_unique<KwArg>(pos, std::move(key), parse_expression()));
        }
        if (parameters) {
          if (arg->kind != NodeKind::Ident && arg->kind != NodeKind::KwArg) fail("expected a name for a parameter", arg->pos);
          if (!names.insert(param_name(*arg)).second) fail(fmt::format("duplicate parameter '{}'", param_name(*arg)), arg->pos);
        }
        if (arg->kind == NodeKind::KwArg) {
          saw_keyword = true;
        } else if (saw_keyword) {
          fail(parameters ? "a parameter without a default follows one with a default"
                          : "positional arguments must come before keyword arguments",
               arg->pos);
        } else if (saw_spread) {
          fail("positional arguments must not follow '*' argument unpacking", arg->pos);
        }
      }
      args.push_back(std::move(arg));
      if (is(Tok::Comma)) ++cur_;
    }
    ++cur_;  // ')'
    return args;
  }

  // Inside [...]: an index or a slice start:stop:step.
  NodePtr parse_subscript() {
    const uint32_t pos = here();
    std::vector<NodePtr> parts;
    bool is_slice = false;
    while (!is(Tok::CloseSquare)) {
      if (at_end()) fail_here("expected ']'");
      if (is(Tok::Colon)) {
        parts.push_back(nullptr);
        ++cur_;
        is_slice = true;
      } else {
        parts.push_back(parse_expression());
        if (is(Tok::Colon)) {
          ++cur_;
          is_slice = true;
        }
      }
    }
    if (parts.empty()) fail(fmt::format("expected an index or a slice inside '[]'"), pos);
    if (!is_slice) {
      if (parts.size() > 1) fail("expected ']' after the index", pos);
      return std::move(parts[0]);
    }
    if (parts.size() > 3) fail("a slice has at most three parts (start:stop:step)", pos);
    auto slice = std::make_unique<Slice>(pos);
    slice->start = std::move(parts[0]);
    if (parts.size() > 1) slice->stop = std::move(parts[1]);
    if (parts.size() > 2) slice->step = std::move(parts[2]);
    return finish(std::move(slice));
  }

  NodePtr parse_member(NodePtr object) {
    while (is(Tok::Dot) || is(Tok::OpenSquare)) {
      const uint32_t pos = here();
      const bool computed = is(Tok::OpenSquare);
      ++cur_;
      NodePtr property;
      if (computed) {
        property = parse_subscript();
        expect(Tok::CloseSquare, "']'");
      } else {
        property = parse_primary();
        if (property->kind != NodeKind::Ident && property->kind != NodeKind::IntLit) {
          fail("expected a name or an integer after '.'", property->pos);
        }
      }
      object = finish(std::make_unique<Member>(pos, std::move(object), std::move(property), computed));
    }
    return object;
  }

  NodePtr parse_primary() {
    if (at_end()) fail_here("unexpected end of the template: expected an expression");
    const Token& tk = t_[cur_++];
    switch (tk.type) {
      case Tok::Number: {
        if (tk.value.find('.') != std::string::npos) {
          return std::make_unique<FloatLit>(tk.pos, std::strtod(tk.value.c_str(), nullptr));
        }
        int64_t v = 0;
        const auto r = std::from_chars(tk.value.data(), tk.value.data() + tk.value.size(), v);
        if (r.ec != std::errc()) fail(fmt::format("integer literal {} is too large", tk.value), tk.pos);
        return std::make_unique<IntLit>(tk.pos, v);
      }
      case Tok::String: {
        std::string value = tk.value;
        while (is(Tok::String)) value += t_[cur_++].value;  // "a" "b" is "ab"
        return std::make_unique<StrLit>(NodeKind::StrLit, tk.pos, std::make_shared<const std::string>(std::move(value)));
      }
      case Tok::Identifier: return std::make_unique<Ident>(tk.pos, tk.value);
      case Tok::OpenParen: {
        NodePtr e = parse_expression_sequence(false);
        expect(Tok::CloseParen, "')'");
        return e;
      }
      case Tok::OpenSquare: {
        auto list = std::make_unique<ListLit>(NodeKind::ArrayLit, tk.pos);
        while (!is(Tok::CloseSquare)) {
          if (at_end()) fail("list is not closed: expected ']'", tk.pos);
          list->items.push_back(parse_expression());
          if (is(Tok::Comma)) ++cur_;
        }
        ++cur_;
        return finish(std::move(list));
      }
      case Tok::OpenCurly: {
        auto obj = std::make_unique<ObjectLit>(tk.pos);
        while (!is(Tok::CloseCurly)) {
          if (at_end()) fail("object is not closed: expected '}'", tk.pos);
          NodePtr key = parse_expression();
          expect(Tok::Colon, "':' between key and value");
          NodePtr value = parse_expression();
          obj->pairs.emplace_back(std::move(key), std::move(value));
          if (is(Tok::Comma)) ++cur_;
        }
        ++cur_;
        return finish(std::move(obj));
      }
      default:
        --cur_;
        fail_here(fmt::format("unexpected {}: expected an expression", describe_current()));
    }
  }

  const std::vector<Token>& t_;
  uint32_t end_pos_;
  size_t cur_ = 0;
  int depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse(std::string source, std::string name) {
  auto program = std::make_unique<Program>();
  program->name = std::move(name);
  program->source = std::move(source);
  const std::vector<Token> tokens = tokenize(program->source);
  program->body = Parser(tokens, program->source.size()).parse_program();
  return program;
}

}  // namespace zinc::chat::jinja
