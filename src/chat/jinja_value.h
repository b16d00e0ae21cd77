// Values of the Jinja interpreter: undefined, none, bool, int, float, string, array (or tuple), object
// (a dict with ordered keys, a namespace, or the keyword arguments of a call) and function.
//
// The semantics are those of the reference renderer, @huggingface/jinja, which transformers-compatible
// tooling uses to check chat templates: its values are JavaScript values underneath, so printing a
// number, comparing with == and concatenating with ~ follow JavaScript rules (the comments at each
// function say which). Strings, arrays, objects and functions are shared by reference, as in Python
// and JavaScript: a namespace changed inside a loop is changed everywhere.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace zinc::chat::jinja {

class Value;
class Interpreter;
struct Env;

// A failure while evaluating a template. `pos` (an offset into the template source) is filled in by
// the innermost node being evaluated when the error passes through it.
class RenderError : public std::runtime_error {
 public:
  static constexpr uint32_t kNoPos = UINT32_MAX;
  explicit RenderError(const std::string& what, uint32_t pos_ = kNoPos) : std::runtime_error(what), pos(pos_) {}
  uint32_t pos;
  bool raised_by_template = false;  // raise_exception(): the template's own message
};

using Str = std::shared_ptr<const std::string>;

enum class ValueType : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Function };
enum class ObjectKind : uint8_t { Dict, Namespace, Kwargs };

struct ArrayData;
struct ObjectData;
struct FunctionData;
using ArrayRef = std::shared_ptr<ArrayData>;
using ObjectRef = std::shared_ptr<ObjectData>;
using FunctionRef = std::shared_ptr<FunctionData>;

class Value {
 public:
  Value() : i_(0) {}  // undefined

  static Value none() { return Value(ValueType::None); }
  static Value boolean(bool b) {
    Value v(ValueType::Bool);
    v.b_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(ValueType::Int);
    v.i_ = i;
    return v;
  }
  static Value number(double f) {
    Value v(ValueType::Float);
    v.f_ = f;
    return v;
  }
  static Value string(Str s) {
    Value v(ValueType::String);
    v.ref_ = std::move(s);
    return v;
  }
  static Value string(std::string s) { return string(std::make_shared<const std::string>(std::move(s))); }
  static Value array(ArrayRef a) {
    Value v(ValueType::Array);
    v.ref_ = std::move(a);
    return v;
  }
  static Value object(ObjectRef o) {
    Value v(ValueType::Object);
    v.ref_ = std::move(o);
    return v;
  }
  static Value function(FunctionRef f) {
    Value v(ValueType::Function);
    v.ref_ = std::move(f);
    return v;
  }

  ValueType type() const { return type_; }
  bool is_undefined() const { return type_ == ValueType::Undefined; }
  bool is_none() const { return type_ == ValueType::None; }
  bool is_bool() const { return type_ == ValueType::Bool; }
  bool is_int() const { return type_ == ValueType::Int; }
  bool is_float() const { return type_ == ValueType::Float; }
  bool is_number() const { return type_ == ValueType::Int || type_ == ValueType::Float; }
  bool is_string() const { return type_ == ValueType::String; }
  bool is_array() const { return type_ == ValueType::Array; }  // arrays and tuples
  bool is_object() const { return type_ == ValueType::Object; }
  bool is_function() const { return type_ == ValueType::Function; }
  bool is_container() const { return is_array() || is_object() || is_function(); }  // shared by reference
  bool is_tuple() const;
  bool is_dict() const;       // a mapping: a dict or a call's keyword arguments
  bool is_namespace() const;
  bool is_kwargs() const;

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  const std::string& as_string() const { return *static_cast<const std::string*>(ref_.get()); }
  Str shared_string() const { return std::static_pointer_cast<const std::string>(ref_); }
  ArrayData& as_array() const { return *static_cast<ArrayData*>(const_cast<void*>(ref_.get())); }
  ObjectData& as_object() const { return *static_cast<ObjectData*>(const_cast<void*>(ref_.get())); }
  FunctionData& as_function() const { return *static_cast<FunctionData*>(const_cast<void*>(ref_.get())); }
  ArrayRef array_ref() const { return std::const_pointer_cast<ArrayData>(std::static_pointer_cast<const ArrayData>(ref_)); }
  ObjectRef object_ref() const { return std::const_pointer_cast<ObjectData>(std::static_pointer_cast<const ObjectData>(ref_)); }
  // The shared container or function, for identity comparisons (null for other types).
  const void* identity() const { return is_container() ? ref_.get() : nullptr; }

  // Int, Float and Bool as a double (Bool counts as 0/1 where Jinja treats it as a number).
  double numeric() const { return type_ == ValueType::Float ? f_ : type_ == ValueType::Int ? static_cast<double>(i_) : b_; }

  bool truthy() const;
  // A short name for messages: "undefined", "none", "boolean", "integer", "float", "string", "array",
  // "tuple", "object", "namespace", "keyword arguments", "function".
  const char* type_name() const;
  // The type with an article, for messages: "an integer", "a string", "an undefined value", "none".
  std::string a_type() const;

 private:
  explicit Value(ValueType t) : type_(t), i_(0) {}
  ValueType type_ = ValueType::Undefined;
  union {
    bool b_;
    int64_t i_;
    double f_;
  };
  std::shared_ptr<const void> ref_;  // the string, ArrayData, ObjectData or FunctionData
};

// Bytes of the strings a render built (new_string, concat) that are alive now. Each string credits back
// its size when freed; the count is shared so a string may outlive the render that made it.
struct StringBytes {
  size_t live = 0, max = SIZE_MAX;
};

// The longest string the current render may build (its RenderLimits::max_output_bytes; set per thread
// while a render runs). Helpers that build a string piece by piece (replace, join, indent, format,
// tojson) call check_string_room() as it grows, so no intermediate result outgrows the limit before
// the interpreter sees it: a replace() over a long string must not allocate gigabytes first.
void check_string_room(const std::string& building);
class StringCapScope {
 public:
  explicit StringCapScope(size_t cap);
  ~StringCapScope();
  StringCapScope(const StringCapScope&) = delete;
  StringCapScope& operator=(const StringCapScope&) = delete;

 private:
  size_t saved_;
};

// What a render may hold at once: array items and containers (arrays, objects, functions) alive now.
// Each container credits back what it was charged when it is freed.
struct Budget {
  size_t values = 0, objects = 0;
  size_t max_values = SIZE_MAX, max_objects = SIZE_MAX;
  void charge_values(size_t n);
  void charge_object();
};

struct ArrayData {
  ArrayData(Budget* budget, std::vector<Value> items_, bool tuple_);
  ~ArrayData();
  ArrayData(const ArrayData&) = delete;
  ArrayData& operator=(const ArrayData&) = delete;
  void reserve_more(size_t n);  // charge the budget before adding n items

  std::vector<Value> items;
  bool tuple = false;

 private:
  Budget* budget_;
  size_t charged_;
};

// Ordered string-keyed map (insertion order, like a Python dict or a JavaScript Map).
struct ObjectData {
  ObjectData(Budget* budget, ObjectKind kind_);
  ~ObjectData();
  ObjectData(const ObjectData&) = delete;
  ObjectData& operator=(const ObjectData&) = delete;

  ObjectKind kind = ObjectKind::Dict;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);  // an existing key keeps its position
  bool erase(std::string_view key);
  void clear();
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  Value* find_mutable(std::string_view key);
  static constexpr size_t kIndexFrom = 16;  // small objects are searched linearly
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
  Budget* budget_;
};

using NativeFunction = std::function<Value(Interpreter&, std::vector<Value>& args, Env* scope)>;

struct FunctionData {
  FunctionData(Budget* budget, std::string name_, NativeFunction call_);
  ~FunctionData();
  FunctionData(const FunctionData&) = delete;
  FunctionData& operator=(const FunctionData&) = delete;

  std::string name;
  NativeFunction call;

 private:
  Budget* budget_;
};

// Creates the containers of one render. Containers are reference-counted, so
// temporaries are freed as soon as nothing holds them. A reference cycle can only be made by storing a
// container into an older one (a namespace attribute, append, update), so those containers are kept in a
// list and emptied when the render ends, which frees every cycle.
class Heap {
 public:
  Heap() = default;
  ~Heap();
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  Budget budget;

  ArrayRef new_array(std::vector<Value> items = {}, bool tuple = false);
  ObjectRef new_object(ObjectKind kind = ObjectKind::Dict);
  FunctionRef new_function(std::string name, NativeFunction fn);
  // `container` was just given `stored`: remember it for cycle breaking if `stored` is a container.
  void note_store(const Value& container, const Value& stored);

 private:
  std::vector<Value> mutated_;  // containers that may be part of a cycle
  std::unordered_set<const void*> mutated_index_;
};

// ---- Conversions that follow the reference renderer (JavaScript underneath) ----

// Number.prototype.toString(): shortest round-trip digits; exponent form below 1e-6 and from 1e21.
std::string js_number(double v);

// How a value prints in template output ({{ x }}): floats keep a ".0" when integral, booleans print as
// true/false, arrays and objects as JSON. Tuples and keyword arguments cannot be printed (they throw,
// as in the reference). None and undefined print as "null"/"undefined"; the output statement skips them.
std::string to_str(const Value& v);

// JavaScript's String(value) of the raw value, which `~` and `+` use: floats lose ".0", arrays join
// their elements with ",", objects become "[object Map]".
std::string js_string(const Value& v);

// Array.prototype.join on the raw values: none and undefined become empty strings, the rest js_string().
std::string js_join(const std::vector<Value>& items, std::string_view sep);

struct JsonOptions {
  std::optional<int64_t> indent;
  bool ensure_ascii = false;
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool sort_keys = false;
  bool undefined_as_null = true;  // false: `undefined` prints as the bare word (string conversion)
};
// The reference's JSON: Python json.dumps spacing (", " and ": ", or "," with indent), strings escaped
// as JSON.stringify does, non-ASCII kept unless ensure_ascii.
std::string to_json(const Value& v, const JsonOptions& options);

// A JSON document as template values. Whole floats become integers and object keys that look like array
// indices come first, as when the reference receives the parsed JSON.
Value from_json(Heap& heap, const nlohmann::ordered_json& j);

// JavaScript's == on the raw values (1 == "1", null == undefined; containers by identity).
bool loose_equals(const Value& a, const Value& b);
// JavaScript's === on the raw values.
bool strict_equals(const Value& a, const Value& b);
// Ordering used by sort and dictsort: numbers (and booleans) with numbers, strings with strings
// (case-insensitively unless asked), none with none; anything else throws.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

// JavaScript's Number(string): whole-string decimal, hex/octal/binary prefixes, Infinity; NaN otherwise.
double js_to_number(std::string_view s);

}  // namespace zinc::chat::jinja
