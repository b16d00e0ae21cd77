// Built-in filters and tests.
//
// Every filter and test the reference renderer has works here the way it works there, down to which
// operand types it accepts: a filter applied to a type the reference refuses raises here too, because a
// template that fails in the reference must fail in ZINC rather than render something unverified.
// Beyond that ZINC adds standard Jinja built-ins the reference lacks entirely (select, reject, map with a
// filter name, min, max, sum, round; tests float, divisibleby, sameas, ne, lt, le, gt, ge, in) with
// Jinja's semantics.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_text.h"

namespace zinc::chat::jinja {

namespace {

[[noreturn]] void filter_type_error(const std::string& name, const Value& v) {
  throw RenderError(fmt::format("filter '{}' cannot be applied to {}", name, v.a_type()));
}

[[noreturn]] void unknown_filter(const std::string& name, const Value& v) {
  throw RenderError(fmt::format("unknown filter '{}' for {}", name, v.a_type()));
}

// JavaScript's parseInt(s, 10): optional whitespace and sign, then the leading digits; nullopt for none.
std::optional<int64_t> js_parse_int(std::string_view s) {
  s = text::trim_start(s);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  const size_t start = i;
  double v = 0;
  while (i < s.size() && text::is_ascii_digit(s[i])) v = v * 10 + (s[i++] - '0');
  if (i == start) return std::nullopt;
  if (v >= 9.2e18) throw RenderError(fmt::format("integer '{}' is too large", s.substr(0, i)));
  return static_cast<int64_t>(neg ? -v : v);
}

// JavaScript's parseFloat: the longest leading decimal literal (or Infinity); nullopt for none.
std::optional<double> js_parse_float(std::string_view s) {
  s = text::trim_start(s);
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (s.substr(i).starts_with("Infinity")) return s[0] == '-' ? -INFINITY : INFINITY;
  size_t digits = 0;
  while (i < s.size() && text::is_ascii_digit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1, frac = 0;
    while (j < s.size() && text::is_ascii_digit(s[j])) ++j, ++frac;
    if (digits + frac > 0) {
      i = j;
      digits += frac;
    }
  }
  if (digits == 0) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t exp_start = j;
    while (j < s.size() && text::is_ascii_digit(s[j])) ++j;
    if (j > exp_start) i = j;
  }
  return std::strtod(std::string(s.substr(0, i)).c_str(), nullptr);
}

// JavaScript truthiness of a raw value: containers are always true.
bool raw_truthy(const Value& v) {
  if (v.is_array() || v.is_object() || v.is_function()) return true;
  return v.truthy();
}

// "a.b.0": keys of objects and indices of arrays; undefined as soon as a step fails.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_object()) {
      const Value* found = v.as_object().find(part);
      v = found ? *found : Value();
    } else if (v.is_array()) {
      const auto index = js_parse_int(part);
      const auto& items = v.as_array().items;
      if (!index || *index < 0 || static_cast<size_t>(*index) >= items.size()) return Value();
      v = items[static_cast<size_t>(*index)];
    } else {
      return Value();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::string indent_lines(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t line_start = 0;
  for (size_t line = 0;; ++line) {
    const size_t nl = s.find('\n', line_start);
    const std::string_view l = std::string_view(s).substr(line_start, nl == std::string::npos ? std::string::npos : nl - line_start);
    if (!((!first && line == 0) || (!blank && l.empty()))) out += pad;
    out += l;
    check_string_room(out);
    if (nl == std::string::npos) break;
    out += '\n';
    line_start = nl + 1;
  }
  return out;
}

void stable_sort_values(std::vector<Value>& items, const std::function<int(const Value&, const Value&)>& cmp) {
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) { return cmp(a, b) < 0; });
}

bool bool_arg(const Value* v, bool fallback, const char* what) {
  if (!v) return fallback;
  if (!v->is_bool()) throw RenderError(fmt::format("{} must be a boolean", what));
  return v->as_bool();
}

std::string unique_key(const Value& v) {
  switch (v.type()) {
    case ValueType::Undefined: return "u";
    case ValueType::None: return "n";
    case ValueType::Bool: return v.as_bool() ? "b1" : "b0";
    case ValueType::Int:
    case ValueType::Float: return "d" + js_number(v.numeric());
    case ValueType::String: return "s" + v.as_string();
    default: return fmt::format("o{}", v.identity());
  }
}

}  // namespace

Value Interpreter::apply_filter(const Value& operand, const Node& filter, Env* env) {
  if (filter.kind == NodeKind::Ident) return apply_filter_name(operand, static_cast<const Ident&>(filter).name, env);
  if (filter.kind == NodeKind::Call) {
    const auto& call = static_cast<const Call&>(filter);
    if (call.callee->kind != NodeKind::Ident) throw RenderError("a filter must be a name", filter.pos);
    return apply_filter_call(operand, call, static_cast<const Ident&>(*call.callee).name, env);
  }
  throw RenderError("a filter must be a name or a call", filter.pos);
}

// `x | name` without arguments.
Value Interpreter::apply_filter_name(const Value& operand, const std::string& name, Env* env) {
  if (name == "safe") return operand;
  if (name == "tojson") return new_string(to_json(operand, {}));
  if (operand.is_array()) {
    const auto& items = operand.as_array().items;
    if (name == "list") return operand;
    if (name == "first" || name == "last") {
      if (items.empty()) throw RenderError(fmt::format("filter '{}' applied to an empty array", name));
      return name == "first" ? items.front() : items.back();
    }
    if (name == "length") return Value::integer(static_cast<int64_t>(items.size()));
    if (name == "reverse") return new_array(std::vector<Value>(items.rbegin(), items.rend()));
    if (name == "sort") {
      std::vector<Value> sorted = items;
      stable_sort_values(sorted, [](const Value& a, const Value& b) { return compare_values(a, b, false); });
      return new_array(std::move(sorted));
    }
    if (name == "join") return new_string(js_join(items, ""));
    if (name == "string") {
      JsonOptions o;
      o.undefined_as_null = false;
      return new_string(to_json(operand, o));
    }
    if (name == "unique") {
      std::unordered_set<std::string> seen;
      std::vector<Value> out;
      for (const Value& v : items) {
        if (seen.insert(unique_key(v)).second) out.push_back(v);
      }
      return new_array(std::move(out));
    }
    // ZINC additions (Jinja built-ins the reference lacks).
    if (name == "select" || name == "reject" || name == "min" || name == "max" || name == "sum") {
      return filter_with_args(operand, name, {}, env);
    }
    unknown_filter(name, operand);
  }
  if (operand.is_string()) {
    const std::string& s = operand.as_string();
    if (name == "length") return Value::integer(static_cast<int64_t>(text::utf16_length(s)));
    if (name == "upper") return new_string(text::to_upper(s));
    if (name == "lower") return new_string(text::to_lower(s));
    if (name == "title") return new_string(text::title_case(s));
    if (name == "capitalize") return new_string(text::capitalize_first(s));
    if (name == "trim") return new_string(std::string(text::trim(s)));
    if (name == "indent") return new_string(indent_lines(s, "    ", false, false));
    if (name == "join" || name == "string") return operand;
    if (name == "int") return Value::integer(js_parse_int(s).value_or(0));
    if (name == "float") return Value::number(js_parse_float(s).value_or(0.0));
    unknown_filter(name, operand);
  }
  if (operand.is_number()) {
    if (name == "abs") {
      if (operand.is_int()) {
        if (operand.as_int() == INT64_MIN) throw RenderError("integer overflow in 'abs'");
        return Value::integer(std::llabs(operand.as_int()));
      }
      return Value::number(std::fabs(operand.as_float()));
    }
    if (name == "int") {
      if (operand.is_int()) return operand;
      const double f = std::floor(operand.as_float());
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) throw RenderError("filter 'int': number out of range");
      return Value::integer(static_cast<int64_t>(f));
    }
    if (name == "float") return Value::number(operand.numeric());
    if (name == "string") return new_string(to_str(operand));
    if (name == "round") return filter_with_args(operand, name, {}, env);
    unknown_filter(name, operand);
  }
  if (operand.is_dict()) {
    if (name == "items" || name == "length" || name == "get" || name == "keys" || name == "values" || name == "dictsort") {
      if (name == "length") return Value::integer(static_cast<int64_t>(operand.as_object().size()));
      std::vector<Value> no_args;
      return call(object_method(operand, name), no_args, env);
    }
    unknown_filter(name, operand);
  }
  if (operand.is_bool()) {
    if (name == "bool") return operand;
    if (name == "int") return Value::integer(operand.as_bool() ? 1 : 0);
    if (name == "float") return Value::number(operand.as_bool() ? 1.0 : 0.0);
    if (name == "string") return new_string(operand.as_bool() ? "true" : "false");
    unknown_filter(name, operand);
  }
  filter_type_error(name, operand);
}

// `x | name(args)`.
Value Interpreter::apply_filter_call(const Value& operand, const Call& call_node, const std::string& name, Env* env) {
  if (name == "selectattr" || name == "rejectattr") {
    // The reference only takes string literals here (attribute, test name, test argument).
    for (const auto& a : call_node.args) {
      if (a->kind != NodeKind::StrLit) throw RenderError(fmt::format("the arguments of '{}' must be strings", name), a->pos);
    }
  }
  return filter_with_args(operand, name, eval_call_args(call_node.args, env), env);
}

// A filter with evaluated arguments (keyword arguments as a trailing keyword-arguments object).
Value Interpreter::filter_with_args(const Value& operand, const std::string& name, std::vector<Value> raw, Env* env) {
  const CallArgs args(raw);

  if (name == "tojson") {
    JsonOptions o;
    if (const Value* v = args.kw("indent")) {
      if (v->is_int()) {
        o.indent = v->as_int();
      } else if (!v->is_none()) {
        throw RenderError("tojson: indent must be an integer");
      }
    }
    if (const Value* v = args.kw("ensure_ascii")) {
      if (!v->is_bool()) throw RenderError("tojson: ensure_ascii must be a boolean");
      o.ensure_ascii = v->as_bool();
    }
    if (const Value* v = args.kw("sort_keys")) {
      if (!v->is_bool()) throw RenderError("tojson: sort_keys must be a boolean");
      o.sort_keys = v->as_bool();
    }
    if (const Value* v = args.kw("separators")) {
      if (v->is_array()) {
        const auto& seps = v->as_array().items;
        if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
          throw RenderError("tojson: separators must be a pair of strings");
        }
        o.separators = std::make_pair(seps[0].as_string(), seps[1].as_string());
      } else if (!v->is_none()) {
        throw RenderError("tojson: separators must be a pair of strings");
      }
    }
    return new_string(to_json(operand, o));
  }
  if (name == "join") {
    const Value sep = args.get(0, "separator") ? *args.get(0, "separator") : Value::string(std::string());
    if (!sep.is_string()) throw RenderError("join: the separator must be a string");
    if (operand.is_string()) {
      std::string out;
      const std::string& s = operand.as_string();
      for (size_t i = 0; i < s.size();) {
        const size_t len = text::decode(s, i).len;
        if (i) out += sep.as_string();
        out.append(s, i, len);
        check_string_room(out);
        i += len;
      }
      return new_string(std::move(out));
    }
    if (operand.is_array()) return new_string(js_join(operand.as_array().items, sep.as_string()));
    filter_type_error(name, operand);
  }
  if (name == "int" || name == "float") {
    const bool is_int = name == "int";
    const Value* d = args.get(0, "default");
    const Value fallback = d ? *d : is_int ? Value::integer(0) : Value::number(0.0);
    if (operand.is_string()) {
      if (is_int) {
        const auto v = js_parse_int(operand.as_string());
        return v ? Value::integer(*v) : fallback;
      }
      const auto v = js_parse_float(operand.as_string());
      return v ? Value::number(*v) : fallback;
    }
    if (operand.is_number()) return operand;  // the reference leaves numbers as they are here
    if (operand.is_bool()) return is_int ? Value::integer(operand.as_bool()) : Value::number(operand.as_bool());
    filter_type_error(name, operand);
  }
  if (name == "default") {
    const Value fallback = !args.positional.empty() ? args.positional[0] : Value::string(std::string());
    const bool boolean = bool_arg(args.get(1, "boolean"), false, "default: the second argument");
    if (operand.is_undefined() || (boolean && !operand.truthy())) return fallback;
    return operand;
  }

  if (operand.is_array()) {
    const auto& items = operand.as_array().items;
    if (name == "sort") {
      const bool reverse = bool_arg(args.get(0, "reverse"), false, "sort: reverse");
      const bool case_sensitive = bool_arg(args.get(1, "case_sensitive"), false, "sort: case_sensitive");
      const Value* attr = args.get(2, "attribute");
      std::optional<std::string> path;
      if (attr && attr->is_string()) path = attr->as_string();
      else if (attr && attr->is_int()) path = std::to_string(attr->as_int());
      else if (attr && !attr->is_none()) throw RenderError("sort: attribute must be a string, an integer or none");
      std::vector<Value> sorted = items;
      stable_sort_values(sorted, [&](const Value& a, const Value& b) {
        const int c = path ? compare_values(attribute_path(a, *path), attribute_path(b, *path), case_sensitive)
                           : compare_values(a, b, case_sensitive);
        return reverse ? -c : c;
      });
      return new_array(std::move(sorted));
    }
    if (name == "selectattr" || name == "rejectattr") {
      for (const Value& item : items) {
        if (!item.is_object()) throw RenderError(fmt::format("'{}' can only be applied to an array of objects", name));
      }
      if (args.positional.empty()) throw RenderError(fmt::format("'{}' needs an attribute name", name));
      const std::string& attr = args.positional[0].as_string();
      std::vector<Value> test_args;
      if (args.positional.size() > 2) test_args.push_back(args.positional[2]);
      std::vector<Value> out;
      for (const Value& item : items) {
        const Value* a = item.as_object().find(attr);
        bool result = false;
        if (a) result = args.positional.size() > 1 ? run_test(args.positional[1].as_string(), *a, test_args) : a->truthy();
        if (result == (name == "selectattr")) out.push_back(item);
      }
      return new_array(std::move(out));
    }
    if (name == "map") {
      if (const Value* attr = args.kw("attribute")) {
        if (!attr->is_string()) throw RenderError("map: attribute must be a string");
        const Value* fallback = args.kw("default");
        std::vector<Value> out;
        for (const Value& item : items) {
          if (!item.is_object()) throw RenderError("map(attribute=...) needs an array of objects");
          const Value v = attribute_path(item, attr->as_string());
          out.push_back(v.is_undefined() && fallback ? *fallback : v);
        }
        return new_array(std::move(out));
      }
      // ZINC addition: map('filter', args...) applies a filter to every item.
      if (args.positional.empty() || !args.positional[0].is_string()) {
        throw RenderError("map needs attribute=... or the name of a filter");
      }
      const std::string filter = args.positional[0].as_string();
      std::vector<Value> rest(args.positional.begin() + 1, args.positional.end());
      if (args.kwargs) rest.push_back(raw.back());
      std::vector<Value> out;
      for (const Value& item : items) {
        out.push_back(rest.empty() ? apply_filter_name(item, filter, env) : filter_with_args(item, filter, rest, env));
      }
      return new_array(std::move(out));
    }
    // ZINC additions.
    if (name == "select" || name == "reject") {
      std::vector<Value> out;
      std::vector<Value> test_args(args.positional.size() > 1 ? args.positional.begin() + 1 : args.positional.end(),
                                   args.positional.end());
      for (const Value& item : items) {
        bool result;
        if (args.positional.empty()) {
          result = item.truthy();
        } else {
          if (!args.positional[0].is_string()) throw RenderError(fmt::format("{}: the test name must be a string", name));
          result = run_test(args.positional[0].as_string(), item, test_args);
        }
        if (result == (name == "select")) out.push_back(item);
      }
      return new_array(std::move(out));
    }
    if (name == "min" || name == "max") {
      if (items.empty()) return Value();
      const bool case_sensitive = bool_arg(args.get(0, "case_sensitive"), false, "case_sensitive");
      const Value* attr = args.get(1, "attribute");
      auto key = [&](const Value& v) { return attr && attr->is_string() ? attribute_path(v, attr->as_string()) : v; };
      const Value* best = &items[0];
      for (const Value& v : items) {
        const int c = compare_values(key(v), key(*best), case_sensitive);
        if (name == "min" ? c < 0 : c > 0) best = &v;
      }
      return *best;
    }
    if (name == "sum") {
      const Value* attr = args.get(0, "attribute");
      const Value* start = args.get(1, "start");
      Value total = start ? *start : Value::integer(0);
      for (const Value& item : items) {
        const Value v = attr && attr->is_string() ? attribute_path(item, attr->as_string()) : item;
        if (!total.is_number() || !v.is_number()) throw RenderError("sum: items must be numbers");
        if (total.is_float() || v.is_float()) {
          total = Value::number(total.numeric() + v.numeric());
        } else {
          int64_t r;
          if (__builtin_add_overflow(total.as_int(), v.as_int(), &r)) {
            throw RenderError("integer overflow in 'sum'");
          }
          total = Value::integer(r);
        }
      }
      return total;
    }
    unknown_filter(name, operand);
  }
  if (operand.is_string()) {
    if (name == "indent") {
      const Value* width = args.get(0, "width");
      if (width && !width->is_int()) throw RenderError("indent: width must be an integer");
      const int64_t w = width ? width->as_int() : 4;
      if (w < 0 || w > 4096) throw RenderError("indent: width out of range");
      const Value* first = args.get(1, "first");
      const Value* blank = args.get(2, "blank");
      return new_string(indent_lines(operand.as_string(), std::string(static_cast<size_t>(w), ' '),
                                     first && raw_truthy(*first), blank && raw_truthy(*blank)));
    }
    if (name == "replace") {
      std::vector<Value> forwarded = args.positional;
      ObjectRef kw = heap_.new_object(ObjectKind::Kwargs);
      if (args.kwargs) {
        for (const auto& [k, v] : args.kwargs->entries()) kw->set(k, v);
      }
      forwarded.push_back(Value::object(kw));
      return call(string_method(operand, "replace"), forwarded, env);
    }
    unknown_filter(name, operand);
  }
  if (operand.is_number() && name == "round") {
    const Value* precision = args.get(0, "precision");
    const Value* method = args.get(1, "method");
    if (precision && !precision->is_int()) throw RenderError("round: precision must be an integer");
    const int64_t p = precision ? precision->as_int() : 0;
    const std::string m = method && method->is_string() ? method->as_string() : "common";
    if (m != "common" && m != "floor" && m != "ceil") throw RenderError("round: method must be 'common', 'floor' or 'ceil'");
    // Python's round() keeps an integer an integer; Jinja's floor and ceil always give a float.
    if (m == "common" && operand.is_int() && p >= 0) return operand;
    const double scale = std::pow(10.0, static_cast<double>(p));
    const double x = operand.numeric() * scale;
    const double r = m == "common" ? std::nearbyint(x) : m == "floor" ? std::floor(x) : std::ceil(x);  // ties to even
    return Value::number(r / scale);
  }
  if (operand.is_dict()) {
    static const std::unordered_set<std::string> methods = {"get", "items", "keys", "values", "dictsort"};
    if (methods.count(name)) return call(object_method(operand, name), raw, env);
    unknown_filter(name, operand);
  }
  filter_type_error(name, operand);
}

bool Interpreter::run_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  auto arg = [&]() -> const Value& {
    if (args.empty()) throw RenderError(fmt::format("test '{}' needs an argument", name));
    return args[0];
  };
  if (name == "boolean") return v.is_bool();
  if (name == "callable") return v.is_function();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) throw RenderError(fmt::format("test '{}' needs an integer, got {}", name, v.a_type()));
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "iterable") return (v.is_array() && !v.is_tuple()) || v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_array() || v.is_dict() || v.is_string();
  if (name == "lower") return v.is_string() && v.as_string() == text::to_lower(v.as_string());
  if (name == "upper") return v.is_string() && v.as_string() == text::to_upper(v.as_string());
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "equalto" || name == "eq" || name == "==") return strict_equals(v, arg());
  // ZINC additions.
  if (name == "float") return v.is_float();
  if (name == "ne" || name == "!=") return !strict_equals(v, arg());
  if (name == "sameas") return strict_equals(v, arg());
  if (name == "divisibleby") {
    const Value& d = arg();
    if (!v.is_int() || !d.is_int() || d.as_int() == 0) throw RenderError("test 'divisibleby' needs two integers, the second not 0");
    return d.as_int() == -1 || v.as_int() % d.as_int() == 0;
  }
  if (name == "lt" || name == "le" || name == "gt" || name == "ge" || name == "<" || name == "<=" || name == ">" ||
      name == ">=") {
    const Value& o = arg();
    if (!v.is_number() || !o.is_number()) throw RenderError(fmt::format("test '{}' compares numbers only", name));
    const double a = v.numeric(), b = o.numeric();
    if (name == "lt" || name == "<") return a < b;
    if (name == "le" || name == "<=") return a <= b;
    if (name == "gt" || name == ">") return a > b;
    return a >= b;
  }
  if (name == "in") {
    const Value& seq = arg();
    if (seq.is_array()) {
      for (const Value& item : seq.as_array().items) {
        if (strict_equals(item, v)) return true;
      }
      return false;
    }
    if (seq.is_string() && v.is_string()) return seq.as_string().find(v.as_string()) != std::string::npos;
    if (seq.is_dict() && v.is_string()) return seq.as_object().find(v.as_string()) != nullptr;
    throw RenderError(fmt::format("test 'in' cannot look in {}", seq.a_type()));
  }
  throw RenderError(fmt::format("unknown test '{}'", name));
}

}  // namespace zinc::chat::jinja
