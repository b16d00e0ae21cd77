// Methods reachable through member access (s.strip(), d.items(), ...) and the global functions
// (namespace, range, raise_exception, strftime_now).
//
// The reference renderer's methods behave as JavaScript's string functions do: strip/lstrip/rstrip take
// no characters (any argument is ignored and all whitespace goes), `s.length` is the UTF-16 length, split
// and replace follow Python. ZINC adds Python list and dict methods the reference lacks (append, pop,
// insert, extend, index, count; update, pop, setdefault) and a few str methods (find, count, join,
// format).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_text.h"

namespace zinc::chat::jinja {

namespace {

using Method = std::function<Value(Interpreter&, const CallArgs&, std::vector<Value>& raw, Env*)>;

Value make_method(Interpreter& in, const std::string& name, Method m) {
  return Value::function(in.heap().new_function(name, [m = std::move(m)](Interpreter& i, std::vector<Value>& raw, Env* env) {
    const CallArgs args(raw);
    return m(i, args, raw, env);
  }));
}

const std::string& string_arg(const CallArgs& args, size_t i, const char* method) {
  if (i >= args.positional.size() || !args.positional[i].is_string()) {
    throw RenderError(fmt::format("{}() needs a string argument", method));
  }
  return args.positional[i].as_string();
}

bool prefix_match(const std::string& s, const Value& pattern, bool ends, const char* method) {
  auto test = [&](const std::string& p) { return ends ? s.ends_with(p) : s.starts_with(p); };
  if (pattern.is_string()) return test(pattern.as_string());
  if (pattern.is_array()) {
    for (const Value& item : pattern.as_array().items) {
      if (!item.is_string()) throw RenderError(fmt::format("{}(): tuple elements must be strings", method));
      if (test(item.as_string())) return true;
    }
    return false;
  }
  throw RenderError(fmt::format("{}() argument must be a string or a tuple of strings", method));
}

std::vector<std::string> split_string(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none()) {
    // Runs of whitespace separate; no empty strings at the ends.
    const std::string_view t = text::trim_start(s);
    size_t i = 0;
    while (i < t.size()) {
      const size_t start = i;
      while (i < t.size() && !text::js_space_at(t, i)) i += text::decode(t, i).len;
      if (maxsplit != -1 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.emplace_back(t.substr(start));
        return out;
      }
      out.emplace_back(t.substr(start, i - start));
      while (size_t n = text::js_space_at(t, i)) i += n;
    }
    return out;
  }
  const std::string& d = sep.as_string();
  if (d.empty()) throw RenderError("split(): empty separator");
  size_t start = 0;
  while (true) {
    const size_t at = s.find(d, start);
    if (at == std::string::npos || (maxsplit != -1 && static_cast<int64_t>(out.size()) >= maxsplit)) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, at - start));
    start = at + d.size();
  }
}

std::string replace_string(const std::string& s, const std::string& from, const std::string& to, std::optional<int64_t> count) {
  if (count && *count == 0) return s;
  int64_t remaining = !count || *count < 0 ? INT64_MAX : *count;
  std::string out;
  if (from.empty()) {
    // Between every pair of code points, and at both ends.
    for (size_t i = 0;; ) {
      if (remaining > 0) {
        out += to;
        --remaining;
      }
      if (i >= s.size()) break;
      const size_t len = text::decode(s, i).len;
      out.append(s, i, len);
      check_string_room(out);
      i += len;
    }
    return out;
  }
  size_t start = 0;
  while (remaining > 0) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    check_string_room(out);
    start = at + from.size();
    --remaining;
  }
  out.append(s, start, std::string::npos);
  return out;
}

// Python's str.format for positional fields: {} {0} {1}, with {{ and }} for braces.
std::string python_format(const std::string& f, const std::vector<Value>& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = f.find('}', i);
      if (close == std::string::npos) throw RenderError("format(): unmatched '{'");
      const std::string field = f.substr(i + 1, close - i - 1);
      size_t index = auto_index++;
      if (!field.empty()) {
        index = 0;
        for (char d : field) {
          if (!text::is_ascii_digit(d)) throw RenderError("format(): only positional fields ({} or {0}) are supported");
          index = index * 10 + static_cast<size_t>(d - '0');
        }
      }
      if (index >= args.size()) throw RenderError("format(): not enough arguments");
      const Value& v = args[index];
      if (!v.is_undefined()) out += v.is_none() ? "None" : js_string(v);
      check_string_room(out);
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Value Interpreter::member_builtin(const Value& object, const std::string& name) {
  if (object.is_string()) {
    if (name == "length") return Value::integer(static_cast<int64_t>(text::utf16_length(object.as_string())));
    return string_method(object, name);
  }
  if (object.is_array()) {
    if (name == "length") return Value::integer(static_cast<int64_t>(object.as_array().items.size()));
    return array_method(object, name);
  }
  if (object.is_dict()) return object_method(object, name);
  return Value();
}

Value Interpreter::string_method(const Value& self, const std::string& name) {
  const Str str = self.shared_string();
  auto simple = [&](std::function<std::string(const std::string&)> f) {
    return make_method(*this, name, [str, f](Interpreter& in, const CallArgs&, std::vector<Value>&, Env*) {
      return in.new_string(f(*str));
    });
  };
  if (name == "upper") return simple([](const std::string& x) { return text::to_upper(x); });
  if (name == "lower") return simple([](const std::string& x) { return text::to_lower(x); });
  if (name == "strip") return simple([](const std::string& x) { return std::string(text::trim(x)); });
  if (name == "lstrip") return simple([](const std::string& x) { return std::string(text::trim_start(x)); });
  if (name == "rstrip") return simple([](const std::string& x) { return std::string(text::trim_end(x)); });
  if (name == "title") return simple([](const std::string& x) { return text::title_case(x); });
  if (name == "capitalize") {
    return simple([](const std::string& x) { return text::capitalize_first(x); });
  }
  if (name == "startswith" || name == "endswith") {
    const bool ends = name == "endswith";
    return make_method(*this, name, [str, ends](Interpreter&, const CallArgs& args, std::vector<Value>& raw, Env*) {
      const char* method = ends ? "endswith" : "startswith";
      if (raw.empty()) throw RenderError(fmt::format("{}() needs an argument", method));
      (void)args;
      return Value::boolean(prefix_match(*str, raw[0], ends, method));
    });
  }
  if (name == "split") {
    return make_method(*this, name, [str](Interpreter& in, const CallArgs&, std::vector<Value>& raw, Env*) {
      const Value sep = !raw.empty() ? raw[0] : Value::none();
      if (!sep.is_string() && !sep.is_none()) throw RenderError("split(): the separator must be a string or none");
      const Value maxsplit = raw.size() > 1 ? raw[1] : Value::integer(-1);
      if (!maxsplit.is_int()) throw RenderError("split(): maxsplit must be an integer");
      std::vector<Value> parts;
      for (auto& p : split_string(*str, sep, maxsplit.as_int())) parts.push_back(Value::string(std::move(p)));
      return in.new_array(std::move(parts));
    });
  }
  if (name == "replace") {
    return make_method(*this, name, [str](Interpreter& in, const CallArgs&, std::vector<Value>& raw, Env*) {
      if (raw.size() < 2) throw RenderError("replace() needs two arguments");
      if (!raw[0].is_string() || !raw[1].is_string()) throw RenderError("replace(): arguments must be strings");
      Value count = Value::none();
      if (raw.size() > 2) {
        if (raw[2].is_kwargs()) {
          const Value* c = raw[2].as_object().find("count");
          count = c ? *c : Value::none();
        } else {
          count = raw[2];
        }
      }
      if (!count.is_int() && !count.is_none()) throw RenderError("replace(): count must be an integer or none");
      return in.new_string(replace_string(*str, raw[0].as_string(), raw[1].as_string(),
                                          count.is_int() ? std::optional<int64_t>(count.as_int()) : std::nullopt));
    });
  }
  // ZINC additions (Python str methods the reference lacks).
  if (name == "find" || name == "count") {
    const bool is_find = name == "find";
    return make_method(*this, name, [str, is_find](Interpreter&, const CallArgs& args, std::vector<Value>&, Env*) {
      const std::string& sub = string_arg(args, 0, is_find ? "find" : "count");
      if (is_find) {
        const size_t at = str->find(sub);
        return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(text::code_points(str->substr(0, at))));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(text::code_points(*str) + 1));
      int64_t n = 0;
      for (size_t at = str->find(sub); at != std::string::npos; at = str->find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return make_method(*this, name, [str](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      if (args.positional.empty() || !args.positional[0].is_array()) throw RenderError("join() needs an array");
      for (const Value& v : args.positional[0].as_array().items) {
        if (!v.is_string()) throw RenderError("join(): items must be strings");
      }
      return in.new_string(js_join(args.positional[0].as_array().items, *str));
    });
  }
  if (name == "format") {
    return make_method(*this, name, [str](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      return in.new_string(python_format(*str, args.positional));
    });
  }
  return Value();
}

Value Interpreter::array_method(const Value& self, const std::string& name) {
  // Methods hold their receiver, so a method kept in a variable keeps its array alive.
  ArrayRef a = self.array_ref();
  if (name == "append") {
    return make_method(*this, name, [a](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      if (args.positional.size() != 1) throw RenderError("append() takes exactly one argument");
      in.check_items(a->items.size() + 1);
      a->reserve_more(1);
      a->items.push_back(args.positional[0]);
      in.heap().note_store(Value::array(a), args.positional[0]);
      return Value::none();
    });
  }
  if (name == "extend") {
    return make_method(*this, name, [a](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      if (args.positional.size() != 1 || !args.positional[0].is_array()) throw RenderError("extend() needs an array");
      const std::vector<Value> more = args.positional[0].as_array().items;
      in.check_items(a->items.size() + more.size());
      a->reserve_more(more.size());
      a->items.insert(a->items.end(), more.begin(), more.end());
      for (const Value& v : more) in.heap().note_store(Value::array(a), v);
      return Value::none();
    });
  }
  if (name == "pop") {
    return make_method(*this, name, [a](Interpreter&, const CallArgs& args, std::vector<Value>&, Env*) {
      if (a->items.empty()) throw RenderError("pop() from an empty array");
      const int64_t size = static_cast<int64_t>(a->items.size());
      int64_t i = size - 1;
      if (!args.positional.empty()) {
        if (!args.positional[0].is_int()) throw RenderError("pop(): the index must be an integer");
        i = args.positional[0].as_int();
        if (i < 0) i += size;
      }
      if (i < 0 || i >= size) throw RenderError("pop(): index out of range");
      Value v = a->items[static_cast<size_t>(i)];
      a->items.erase(a->items.begin() + i);
      return v;
    });
  }
  if (name == "insert") {
    return make_method(*this, name, [a](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      if (args.positional.size() != 2 || !args.positional[0].is_int()) throw RenderError("insert() needs an index and a value");
      in.check_items(a->items.size() + 1);
      a->reserve_more(1);
      in.heap().note_store(Value::array(a), args.positional[1]);
      const int64_t size = static_cast<int64_t>(a->items.size());
      int64_t i = args.positional[0].as_int();
      if (i < 0) i = std::max<int64_t>(0, i + size);
      i = std::min(i, size);
      a->items.insert(a->items.begin() + i, args.positional[1]);
      return Value::none();
    });
  }
  if (name == "index" || name == "count") {
    const bool is_index = name == "index";
    return make_method(*this, name, [a, is_index](Interpreter&, const CallArgs& args, std::vector<Value>&, Env*) {
      if (args.positional.empty()) throw RenderError(fmt::format("{}() needs an argument", is_index ? "index" : "count"));
      int64_t n = 0;
      for (size_t i = 0; i < a->items.size(); ++i) {
        if (!strict_equals(a->items[i], args.positional[0])) continue;
        if (is_index) return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (is_index) throw RenderError("index(): value is not in the array");
      return Value::integer(n);
    });
  }
  return Value();
}

Value Interpreter::object_method(const Value& self, const std::string& name) {
  ObjectRef o = self.object_ref();
  if (name == "get") {
    return make_method(*this, name, [o](Interpreter&, const CallArgs&, std::vector<Value>& raw, Env*) {
      if (raw.empty() || !raw[0].is_string()) {
        throw RenderError(fmt::format("get(): the key must be a string, got {}", raw.empty() ? "nothing" : raw[0].a_type()));
      }
      if (const Value* v = o->find(raw[0].as_string())) return *v;
      return raw.size() > 1 ? raw[1] : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    const int which = name == "items" ? 0 : name == "keys" ? 1 : 2;
    return make_method(*this, name, [o, which](Interpreter& in, const CallArgs&, std::vector<Value>&, Env*) {
      std::vector<Value> out;
      for (const auto& [k, v] : o->entries()) {
        if (which == 0) out.push_back(in.new_array({Value::string(k), v}));
        if (which == 1) out.push_back(Value::string(k));
        if (which == 2) out.push_back(v);
      }
      return in.new_array(std::move(out));
    });
  }
  if (name == "dictsort") {
    return make_method(*this, name, [o](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      const Value* cs = args.get(0, "case_sensitive");
      if (cs && !cs->is_bool()) throw RenderError("dictsort: case_sensitive must be a boolean");
      const Value* by = args.get(1, "by");
      if (by && !by->is_string()) throw RenderError("dictsort: by must be a string");
      const std::string by_s = by ? by->as_string() : "key";
      if (by_s != "key" && by_s != "value") throw RenderError("dictsort: by must be 'key' or 'value'");
      const Value* rev = args.get(2, "reverse");
      if (rev && !rev->is_bool()) throw RenderError("dictsort: reverse must be a boolean");
      const bool case_sensitive = cs && cs->as_bool(), reverse = rev && rev->as_bool();
      std::vector<std::pair<Value, Value>> pairs;
      for (const auto& [k, v] : o->entries()) pairs.emplace_back(Value::string(k), v);
      std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& a, const auto& b) {
        const int c = by_s == "key" ? compare_values(a.first, b.first, case_sensitive)
                                    : compare_values(a.second, b.second, case_sensitive);
        return (reverse ? -c : c) < 0;
      });
      std::vector<Value> out;
      for (auto& [k, v] : pairs) out.push_back(in.new_array({k, v}));
      return in.new_array(std::move(out));
    });
  }
  // ZINC additions (Python dict methods the reference lacks).
  if (name == "update") {
    return make_method(*this, name, [o](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      std::vector<std::pair<std::string, Value>> updates;  // copied first: d.update(d) reads what it writes
      for (const Value& src : args.positional) {
        if (!src.is_object()) throw RenderError("update() needs a mapping");
        updates.insert(updates.end(), src.as_object().entries().begin(), src.as_object().entries().end());
      }
      if (args.kwargs) updates.insert(updates.end(), args.kwargs->entries().begin(), args.kwargs->entries().end());
      for (auto& [k, v] : updates) {
        in.heap().note_store(Value::object(o), v);
        o->set(k, std::move(v));
      }
      return Value::none();
    });
  }
  if (name == "pop" || name == "setdefault") {
    const bool is_pop = name == "pop";
    return make_method(*this, name, [o, is_pop](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
      const std::string& key = string_arg(args, 0, is_pop ? "pop" : "setdefault");
      const Value* found = o->find(key);
      if (found) {
        Value v = *found;
        if (is_pop) o->erase(key);
        return v;
      }
      if (is_pop) {
        if (args.positional.size() < 2) throw RenderError(fmt::format("pop(): key '{}' not found", key));
        return args.positional[1];
      }
      const Value v = args.positional.size() > 1 ? args.positional[1] : Value::none();
      in.heap().note_store(Value::object(o), v);
      o->set(key, v);
      return v;
    });
  }
  return Value();
}

// ---- globals ----

namespace {

std::string strftime_like(const std::string& format, std::chrono::system_clock::time_point now) {
  static const char* const kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                        "July",    "August",   "September", "October", "November", "December"};
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    // Only the directives the reference knows; any other stays as written.
    switch (format[i + 1]) {
      case 'Y': out += std::to_string(tm.tm_year + 1900); break;
      case 'm': out += fmt::format("{:02}", tm.tm_mon + 1); break;
      case 'd': out += fmt::format("{:02}", tm.tm_mday); break;
      case 'b': out += std::string(kMonths[tm.tm_mon]).substr(0, 3); break;
      case 'B': out += kMonths[tm.tm_mon]; break;
      case 'H': out += fmt::format("{:02}", tm.tm_hour); break;
      case 'M': out += fmt::format("{:02}", tm.tm_min); break;
      case '%': out += '%'; break;
      default: out += format.substr(i, 2);
    }
    ++i;
  }
  return out;
}

}  // namespace

void Interpreter::install_globals(Env* env) {
  env->set("true", Value::boolean(true));
  env->set("false", Value::boolean(false));
  env->set("none", Value::none());
  env->set("True", Value::boolean(true));
  env->set("False", Value::boolean(false));
  env->set("None", Value::none());

  env->set("namespace", make_method(*this, "namespace", [](Interpreter& in, const CallArgs& args, std::vector<Value>&, Env*) {
    if (args.positional.size() > 1) {
      throw RenderError(fmt::format("namespace() takes at most 1 positional argument, got {}", args.positional.size()));
    }
    ObjectRef ns = in.heap().new_object(ObjectKind::Namespace);
    if (args.positional.size() == 1) {
      const Value& src = args.positional[0];
      if (src.is_dict()) {
        for (const auto& [k, v] : src.as_object().entries()) ns->set(k, v);
      } else if (src.is_array()) {
        for (const Value& pair : src.as_array().items) {
          std::vector<Value> kv;
          if (pair.is_array()) {
            kv = pair.as_array().items;
          } else if (pair.is_string()) {
            const std::string& p = pair.as_string();
            for (size_t i = 0; i < p.size();) {
              const size_t len = text::decode(p, i).len;
              kv.push_back(Value::string(p.substr(i, len)));
              i += len;
            }
          }
          if (kv.size() != 2) throw RenderError("namespace() expects an object or a list of [key, value] pairs");
          if (!kv[0].is_string()) throw RenderError("namespace() keys must be strings");
          ns->set(kv[0].as_string(), kv[1]);
        }
      } else {
        throw RenderError(fmt::format("namespace() cannot take its values from {}", src.a_type()));
      }
    }
    if (args.kwargs) {
      for (const auto& [k, v] : args.kwargs->entries()) ns->set(k, v);
    }
    return Value::object(ns);
  }));

  env->set("raise_exception", make_method(*this, "raise_exception", [](Interpreter&, const CallArgs&, std::vector<Value>& raw, Env*) -> Value {
    RenderError e(js_join(raw, ","));
    e.raised_by_template = true;
    throw e;
  }));

  env->set("range", make_method(*this, "range", [](Interpreter& in, const CallArgs&, std::vector<Value>& raw, Env*) {
    for (const Value& v : raw) {
      if (!v.is_number()) throw RenderError(fmt::format("range() needs numbers, got {}", v.a_type()));
    }
    if (raw.empty() || raw.size() > 3) throw RenderError("range() takes 1 to 3 arguments");
    double start = 0, stop, step = 1;
    if (raw.size() == 1) {
      stop = raw[0].numeric();
    } else {
      start = raw[0].numeric();
      stop = raw[1].numeric();
      if (raw.size() == 3) step = raw[2].numeric();
    }
    if (step == 0) throw RenderError("range() step must not be zero");
    const double span = step > 0 ? stop - start : start - stop;
    const double n = span > 0 ? std::ceil(span / std::fabs(step)) : 0;
    if (!(n <= static_cast<double>(in.options().limits.max_items))) in.check_items(SIZE_MAX);
    std::vector<Value> out;
    for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.push_back(i == std::floor(i) && std::fabs(i) < 9.2e18 ? Value::integer(static_cast<int64_t>(i)) : Value::number(i));
      in.check_items(out.size());
    }
    return in.new_array(std::move(out));
  }));

  env->set("strftime_now", make_method(*this, "strftime_now", [](Interpreter& in, const CallArgs&, std::vector<Value>& raw, Env*) {
    if (raw.empty() || !raw[0].is_string()) throw RenderError("strftime_now() needs a format string");
    const auto now = in.options().now.value_or(std::chrono::system_clock::now());
    return in.new_string(strftime_like(raw[0].as_string(), now));
  }));
}

}  // namespace zinc::chat::jinja
