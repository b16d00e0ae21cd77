// Values of the Jinja interpreter and the conversions whose exact bytes matter: printing, JSON, equality.
#include "chat/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "chat/jinja_text.h"
#include "core/json_bounded.h"

namespace zinc::chat::jinja {

namespace {
thread_local size_t t_string_cap = SIZE_MAX;
}  // namespace

void check_string_room(const std::string& building) {
  if (building.size() > t_string_cap) throw RenderError(fmt::format("string longer than {} bytes", t_string_cap));
}

StringCapScope::StringCapScope(size_t cap) : saved_(t_string_cap) { t_string_cap = cap; }
StringCapScope::~StringCapScope() { t_string_cap = saved_; }


bool Value::is_tuple() const { return type_ == ValueType::Array && as_array().tuple; }
bool Value::is_dict() const { return type_ == ValueType::Object && as_object().kind != ObjectKind::Namespace; }
bool Value::is_namespace() const { return type_ == ValueType::Object && as_object().kind == ObjectKind::Namespace; }
bool Value::is_kwargs() const { return type_ == ValueType::Object && as_object().kind == ObjectKind::Kwargs; }

bool Value::truthy() const {
  switch (type_) {
    case ValueType::Undefined:
    case ValueType::None: return false;
    case ValueType::Bool: return b_;
    case ValueType::Int: return i_ != 0;
    case ValueType::Float: return f_ != 0 && !std::isnan(f_);
    case ValueType::String: return !as_string().empty();
    case ValueType::Array: return !as_array().items.empty();
    // A namespace has no mapping behaviour in the reference, so it is always true.
    case ValueType::Object: return as_object().kind == ObjectKind::Namespace || as_object().size() > 0;
    case ValueType::Function: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (type_) {
    case ValueType::Undefined: return "undefined";
    case ValueType::None: return "none";
    case ValueType::Bool: return "boolean";
    case ValueType::Int: return "integer";
    case ValueType::Float: return "float";
    case ValueType::String: return "string";
    case ValueType::Array: return as_array().tuple ? "tuple" : "array";
    case ValueType::Object:
      return as_object().kind == ObjectKind::Namespace ? "namespace"
             : as_object().kind == ObjectKind::Kwargs  ? "keyword arguments"
                                                       : "object";
    case ValueType::Function: return "function";
  }
  return "?";
}

std::string Value::a_type() const {
  switch (type_) {
    case ValueType::Undefined: return "an undefined value";
    case ValueType::None: return "none";
    case ValueType::Object:
      if (as_object().kind == ObjectKind::Kwargs) return "keyword arguments";
      break;
    default: break;
  }
  const std::string name = type_name();
  return (name[0] == 'a' || name[0] == 'i' || name[0] == 'o' ? "an " : "a ") + name;
}

// ---- containers and their budget ----

void Budget::charge_values(size_t n) {
  values += n;
  if (values > max_values) {
    values -= n;
    throw RenderError(fmt::format("template holds more than {} array items at once", max_values));
  }
}

void Budget::charge_object() {
  if (++objects > max_objects) {
    --objects;
    throw RenderError(fmt::format("template holds more than {} arrays, objects and scopes at once", max_objects));
  }
}

ArrayData::ArrayData(Budget* budget, std::vector<Value> items_, bool tuple_)
    : items(std::move(items_)), tuple(tuple_), budget_(budget), charged_(0) {
  budget_->charge_object();
  try {
    budget_->charge_values(items.size());
  } catch (...) {
    --budget_->objects;
    throw;
  }
  charged_ = items.size();
}

ArrayData::~ArrayData() {
  budget_->values -= charged_;
  --budget_->objects;
}

void ArrayData::reserve_more(size_t n) {
  budget_->charge_values(n);
  charged_ += n;
}

ObjectData::ObjectData(Budget* budget, ObjectKind kind_) : kind(kind_), budget_(budget) { budget_->charge_object(); }
ObjectData::~ObjectData() { --budget_->objects; }

FunctionData::FunctionData(Budget* budget, std::string name_, NativeFunction call_)
    : name(std::move(name_)), call(std::move(call_)), budget_(budget) {
  budget_->charge_object();
}
FunctionData::~FunctionData() { --budget_->objects; }

Value* ObjectData::find_mutable(std::string_view key) {
  if (entries_.size() < kIndexFrom) {
    for (auto& [k, v] : entries_) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* ObjectData::find(std::string_view key) const { return const_cast<ObjectData*>(this)->find_mutable(key); }

void ObjectData::set(const std::string& key, Value v) {
  if (Value* existing = find_mutable(key)) {
    *existing = std::move(v);
    return;
  }
  entries_.emplace_back(key, std::move(v));
  if (entries_.size() == kIndexFrom) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  } else if (entries_.size() > kIndexFrom) {
    index_.emplace(key, entries_.size() - 1);
  }
}

bool ObjectData::erase(std::string_view key) {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == key; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  index_.clear();
  if (entries_.size() >= kIndexFrom) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  }
  return true;
}

void ObjectData::clear() {
  // Moved out first: destroying the values may free other containers, which must not see this one
  // half-cleared.
  auto old = std::move(entries_);
  entries_.clear();
  index_.clear();
}

// ---- Heap ----

Heap::~Heap() {
  // Empty every container that may be in a cycle; then everything is freed by reference counting.
  for (const Value& v : mutated_) {
    if (v.is_array()) {
      auto old = std::move(v.as_array().items);
      v.as_array().items.clear();
    } else if (v.is_object()) {
      v.as_object().clear();
    }
  }
  mutated_.clear();
}

ArrayRef Heap::new_array(std::vector<Value> items, bool tuple) {
  return std::make_shared<ArrayData>(&budget, std::move(items), tuple);
}

ObjectRef Heap::new_object(ObjectKind kind) { return std::make_shared<ObjectData>(&budget, kind); }

FunctionRef Heap::new_function(std::string name, NativeFunction fn) {
  return std::make_shared<FunctionData>(&budget, std::move(name), std::move(fn));
}

void Heap::note_store(const Value& container, const Value& stored) {
  if (!stored.is_container() || !container.is_container()) return;
  if (mutated_index_.insert(container.identity()).second) mutated_.push_back(container);
}

// ---- Printing ----

std::string js_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (v == 0) return "0";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  std::string sign = v < 0 ? "-" : "";
  // Shortest round-trip digits, as "d.ddde±x": split into the digit string and the decimal exponent.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exp10 = 0;
  std::from_chars(sci.data() + e_pos + (sci[e_pos + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp10);
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;  // value = 0.digits × 10^n
  if (k <= n && n <= 21) return sign + digits + std::string(static_cast<size_t>(n - k), '0');
  if (0 < n && n <= 21) return sign + digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  if (-6 < n && n <= 0) return sign + "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  std::string out = sign + digits.substr(0, 1);
  if (k > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{}", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
  return out;
}

namespace {

// Integers are JavaScript numbers in the reference: beyond 2^53 they print as the nearest double does.
std::string int_str(int64_t i) {
  constexpr int64_t kExact = int64_t{1} << 53;
  if (i > kExact || i < -kExact) return js_number(static_cast<double>(i));
  return std::to_string(i);
}

// How the reference prints a float: integral values with one decimal (toFixed(1)), others as JavaScript does.
std::string float_str(double f) {
  if (f == 0 && std::signbit(f)) return "-0.0";
  if (std::isfinite(f) && f == std::floor(f)) {
    if (std::fabs(f) >= 1e21) return js_number(f);
    return fmt::format("{:.1f}", f);
  }
  return js_number(f);
}

[[noreturn]] void cannot_convert_to_json(const Value& v) {
  throw RenderError(fmt::format("cannot convert {} to JSON", v.a_type()));
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.type()) {
    case ValueType::Undefined: return "undefined";
    case ValueType::None: return "null";
    case ValueType::Bool: return v.as_bool() ? "true" : "false";
    case ValueType::Int: return int_str(v.as_int());
    case ValueType::Float: return float_str(v.as_float());
    case ValueType::String: return v.as_string();
    case ValueType::Array:
    case ValueType::Object: {
      JsonOptions o;
      o.undefined_as_null = false;
      return to_json(v, o);
    }
    case ValueType::Function: return "function " + v.as_function().name + "() { [native code] }";
  }
  return "";
}

std::string js_string(const Value& v) {
  switch (v.type()) {
    case ValueType::Float: return js_number(v.as_float());
    case ValueType::Array: {
      // Array.prototype.toString: elements joined with ",", each printed as the template prints it.
      std::string out;
      bool first = true;
      for (const Value& item : v.as_array().items) {
        if (!first) out += ',';
        first = false;
        out += to_str(item);
        check_string_room(out);
      }
      return out;
    }
    case ValueType::Object: return "[object Map]";
    default: return to_str(v);
  }
}

std::string js_join(const std::vector<Value>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    if (!items[i].is_none() && !items[i].is_undefined()) out += js_string(items[i]);
    check_string_room(out);
  }
  return out;
}

// ---- JSON ----

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || (c == 0x7F && ensure_ascii)) {
            out += fmt::format("\\u{:04x}", c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    const text::Decoded d = text::decode(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(i, d.len));
    } else if (d.cp >= 0x10000) {
      const uint32_t u = d.cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", d.cp);
    }
    i += d.len;
  }
  out += '"';
}

// An approximation of String.prototype.localeCompare (ICU root collation), which the reference uses
// for sort_keys: punctuation before digits before letters, letters compared case-insensitively first,
// then lowercase before uppercase, then code points.
int collation_class(uint32_t cp) {
  if (cp < 0x80) {
    const char c = static_cast<char>(cp);
    if (c >= 'a' && c <= 'z') return 3000 + (c - 'a') * 2;
    if (c >= 'A' && c <= 'Z') return 3000 + (c - 'A') * 2;
    if (text::is_ascii_digit(c)) return 2000 + (c - '0');
    return 1000 + static_cast<int>(cp);
  }
  return 4000 + static_cast<int>(cp);
}

int locale_compare(std::string_view a, std::string_view b) {
  auto primary = [](std::string_view s) {
    std::vector<int> out;
    for (size_t i = 0; i < s.size();) {
      const text::Decoded d = text::decode(s, i);
      out.push_back(collation_class(d.cp));
      i += d.len;
    }
    return out;
  };
  const auto pa = primary(a), pb = primary(b);
  if (pa != pb) return std::lexicographical_compare(pa.begin(), pa.end(), pb.begin(), pb.end()) ? -1 : 1;
  auto tertiary = [](std::string_view s) {
    std::vector<int> out;
    for (char c : s) out.push_back(c >= 'A' && c <= 'Z' ? 1 : 0);
    return out;
  };
  const auto ta = tertiary(a), tb = tertiary(b);
  if (ta != tb) return std::lexicographical_compare(ta.begin(), ta.end(), tb.begin(), tb.end()) ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

constexpr int kMaxJsonDepth = 256;

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > kMaxJsonDepth) throw RenderError("value nested too deeply to convert to JSON (does it contain itself?)");
  check_string_room(out);  // once per value: an indent of a million spaces cannot run far
  std::string item_sep, key_sep;
  const bool indenting = o.indent && *o.indent != 0;
  if (o.separators) {
    item_sep = o.separators->first;
    key_sep = o.separators->second;
  } else {
    item_sep = indenting ? "," : ", ";
    key_sep = ": ";
  }
  switch (v.type()) {
    case ValueType::None: out += "null"; return;
    case ValueType::Undefined: out += o.undefined_as_null ? "null" : "undefined"; return;
    case ValueType::Bool: out += v.as_bool() ? "true" : "false"; return;
    case ValueType::Int: out += int_str(v.as_int()); return;
    case ValueType::Float:
      out += std::isfinite(v.as_float()) ? js_number(v.as_float()) : "null";
      return;
    case ValueType::String: json_string(out, v.as_string(), o.ensure_ascii); return;
    case ValueType::Function: cannot_convert_to_json(v);
    case ValueType::Array:
    case ValueType::Object: break;
  }
  if (v.is_tuple() || v.is_kwargs()) cannot_convert_to_json(v);
  if (indenting && *o.indent < 0) throw RenderError("tojson: indent must not be negative");
  if (indenting && static_cast<uint64_t>(*o.indent) * static_cast<uint64_t>(depth + 1) > t_string_cap) {
    throw RenderError(fmt::format("string longer than {} bytes", t_string_cap));
  }
  const std::string unit = indenting ? std::string(static_cast<size_t>(*o.indent), ' ') : "";
  std::string base_pad = "\n";
  for (int i = 0; i < depth; ++i) base_pad += unit;
  const std::string child_pad = base_pad + unit;
  if (v.is_array()) {
    const auto& items = v.as_array().items;
    out += '[';
    if (indenting && !items.empty()) out += child_pad;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) {
        out += item_sep;
        if (indenting) out += child_pad;
      }
      json_value(out, items[i], o, depth + 1);
      check_string_room(out);
    }
    if (indenting && !items.empty()) out += base_pad;
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& e : v.as_object().entries()) entries.push_back(&e);
  if (o.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto* a, const auto* b) { return locale_compare(a->first, b->first) < 0; });
  }
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += item_sep;
    if (indenting) out += child_pad;
    json_string(out, entries[i]->first, o.ensure_ascii);
    out += key_sep;
    json_value(out, entries[i]->second, o, depth + 1);
    check_string_room(out);
  }
  if (indenting && !entries.empty()) out += base_pad;
  out += '}';
}

// JavaScript orders an object's integer-like keys ("0", "17"; below 2^32 - 1) first, ascending.
bool is_array_index(const std::string& k, uint64_t& index) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  index = 0;
  for (char c : k) {
    if (!text::is_ascii_digit(c)) return false;
    index = index * 10 + static_cast<uint64_t>(c - '0');
  }
  return index < 4294967295ull;
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

namespace {

// Values arrive from requests and files; every parser of them bounds the nesting (core/json_bounded.h),
// and this conversion, which recurses once per level, checks again so no caller can overflow the stack.
Value from_json_at(Heap& heap, const nlohmann::ordered_json& j, int depth) {
  using nlohmann::ordered_json;
  if (j.is_structured() && depth >= kJsonMaxDepth) throw JsonTooDeep(kJsonMaxDepth);
  switch (j.type()) {
    case ordered_json::value_t::null: return Value::none();
    case ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                   : Value::number(static_cast<double>(u));
    }
    case ordered_json::value_t::number_float: {
      const double f = j.get<double>();
      // JavaScript has one number type: 2.0 arrives as the integer 2.
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18) return Value::integer(static_cast<int64_t>(f));
      return Value::number(f);
    }
    case ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(heap, e, depth + 1));
      return Value::array(heap.new_array(std::move(items)));
    }
    case ordered_json::value_t::object: {
      ObjectRef o = heap.new_object();
      std::vector<std::pair<uint64_t, const std::string*>> indexed;
      for (const auto& [k, e] : j.items()) {
        uint64_t index;
        if (is_array_index(k, index)) indexed.emplace_back(index, &k);
      }
      std::sort(indexed.begin(), indexed.end());
      for (const auto& [index, k] : indexed) o->set(*k, from_json_at(heap, j.at(*k), depth + 1));
      for (const auto& [k, e] : j.items()) {
        uint64_t index;
        if (!is_array_index(k, index)) o->set(k, from_json_at(heap, e, depth + 1));
      }
      return Value::object(o);
    }
    case ordered_json::value_t::binary:
    case ordered_json::value_t::discarded: break;
  }
  return Value::none();
}

}  // namespace

Value from_json(Heap& heap, const nlohmann::ordered_json& j) { return from_json_at(heap, j, 0); }

// ---- Equality and ordering ----

double js_to_number(std::string_view s) {
  s = text::trim(s);
  if (s.empty()) return 0;
  if (s == "Infinity" || s == "+Infinity") return INFINITY;
  if (s == "-Infinity") return -INFINITY;
  if (s.size() > 2 && s[0] == '0') {
    int base = 0;
    if (s[1] == 'x' || s[1] == 'X') base = 16;
    if (s[1] == 'o' || s[1] == 'O') base = 8;
    if (s[1] == 'b' || s[1] == 'B') base = 2;
    if (base) {
      double r = 0;
      for (char c : s.substr(2)) {
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d < 0 || d >= base) return NAN;
        r = r * base + d;
      }
      return r;
    }
  }
  // StrDecimalLiteral: [+-] (digits [. digits] | . digits) [e [+-] digits], the whole string.
  size_t i = 0;
  if (s[i] == '+' || s[i] == '-') ++i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && text::is_ascii_digit(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && text::is_ascii_digit(s[i])) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return NAN;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && text::is_ascii_digit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return NAN;
  }
  if (i != s.size()) return NAN;
  return std::strtod(std::string(s).c_str(), nullptr);
}

namespace {

enum class JsKind { Undefined, Null, Boolean, Number, String, Object };

JsKind js_kind(const Value& v) {
  switch (v.type()) {
    case ValueType::Undefined: return JsKind::Undefined;
    case ValueType::None: return JsKind::Null;
    case ValueType::Bool: return JsKind::Boolean;
    case ValueType::Int:
    case ValueType::Float: return JsKind::Number;
    case ValueType::String: return JsKind::String;
    default: return JsKind::Object;
  }
}

bool numbers_equal(const Value& a, const Value& b) {
  if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
  return a.numeric() == b.numeric();
}

bool loose_equals_depth(const Value& a, const Value& b, int depth);

bool loose_number_vs(double x, const Value& b, int depth) { return loose_equals_depth(Value::number(x), b, depth); }

bool loose_equals_depth(const Value& a, const Value& b, int depth) {
  const JsKind ka = js_kind(a), kb = js_kind(b);
  if (ka == kb) return strict_equals(a, b);
  const auto nullish = [](JsKind k) { return k == JsKind::Undefined || k == JsKind::Null; };
  if (nullish(ka) || nullish(kb)) return nullish(ka) && nullish(kb);
  if (depth > 4) return false;
  if (ka == JsKind::Boolean) return loose_number_vs(a.as_bool() ? 1 : 0, b, depth + 1);
  if (kb == JsKind::Boolean) return loose_number_vs(b.as_bool() ? 1 : 0, a, depth + 1);
  if (ka == JsKind::Number && kb == JsKind::String) return a.numeric() == js_to_number(b.as_string());
  if (ka == JsKind::String && kb == JsKind::Number) return js_to_number(a.as_string()) == b.numeric();
  // A container against a primitive compares its string form (Array.prototype.toString, "[object Map]").
  if (ka == JsKind::Object) return loose_equals_depth(Value::string(js_string(a)), b, depth + 1);
  if (kb == JsKind::Object) return loose_equals_depth(a, Value::string(js_string(b)), depth + 1);
  return false;
}

}  // namespace

bool loose_equals(const Value& a, const Value& b) { return loose_equals_depth(a, b, 0); }

bool strict_equals(const Value& a, const Value& b) {
  const JsKind ka = js_kind(a), kb = js_kind(b);
  if (ka != kb) return false;
  switch (ka) {
    case JsKind::Undefined:
    case JsKind::Null: return true;
    case JsKind::Boolean: return a.as_bool() == b.as_bool();
    case JsKind::Number: return numbers_equal(a, b);
    case JsKind::String: return a.as_string() == b.as_string();
    case JsKind::Object: return a.identity() == b.identity();
  }
  return false;
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_none() || b.is_none() || a.is_undefined() != b.is_undefined()) {
    throw RenderError(fmt::format("cannot compare {} with {}", a.a_type(), b.a_type()));
  }
  if (a.is_undefined()) return 0;
  const auto numeric_like = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (numeric_like(a) && numeric_like(b)) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    const double x = a.numeric(), y = b.numeric();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.type() != b.type() || a.is_tuple() != b.is_tuple()) {
    throw RenderError(fmt::format("cannot compare {} with {}", a.a_type(), b.a_type()));
  }
  if (!a.is_string()) throw RenderError(fmt::format("cannot order {}", a.a_type()));
  if (case_sensitive) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  const std::string x = text::to_lower(a.as_string()), y = text::to_lower(b.as_string());
  return x < y ? -1 : x > y ? 1 : 0;
}

}  // namespace zinc::chat::jinja
