#include "sample/json_schema.h"

#include <fmt/format.h>

#include <array>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "sample/grammar.h"

namespace zinc::sample {

using json = nlohmann::ordered_json;

namespace {

// Shared rules, added to a grammar only when used.
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> rules = {
      {"ws", R"(| " " | "\n" [ \t]{0,20})"},
      {"char", R"([^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))"},
      {"string", R"("\"" char* "\"")"},
      {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))"},
      {"number", R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)"},
      {"boolean", R"("true" | "false")"},
      {"null", R"("null")"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" ws ( string ":" ws value ( "," ws string ":" ws value )* ws )? "}")"},
      {"array", R"("[" ws ( value ( "," ws value )* ws )? "]")"},
      {"digit2", R"([0-9] [0-9])"},
      {"date", R"("\"" [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) "\"")"},
      {"time-body", R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] digit2 ":" digit2 ))"},
      {"time", R"("\"" time-body "\"")"},
      {"date-time", R"("\"" [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) "T" time-body "\"")"},
      {"uuid", R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"")"},
  };
  return rules;
}

// What each primitive rule refers to.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> deps = {
      {"string", {"char"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"ws", "string", "value"}},
      {"array", {"ws", "value"}},
      {"time-body", {"digit2"}},
      {"time", {"time-body"}},
      {"date-time", {"time-body"}},
  };
  return deps;
}


std::string rule_name(std::string_view hint) {
  std::string out;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    out.push_back(ok ? c : '-');
  }
  if (out.empty()) out = "r";
  return out;
}

// One schema's rules, named `name` and `name-...`, into shared tables (several schemas may share them).
class Converter {
 public:
  Converter(const json& root, std::map<std::string, std::string>& rules, std::set<std::string>& used)
      : root_(root), rules_(rules), used_(used) {}

  void run(const std::string& name) {
    if (rules_.count(name) || primitives().count(name)) throw Error(fmt::format("grammar: a rule named '{}' exists already", name));
    reserved_.insert(name);
    rules_[name] = visit(root_, name, "schema");
  }

 private:
  [[noreturn]] static void fail(const std::string& where, const std::string& what) {
    throw Error(fmt::format("JSON schema at {}: {}", where, what));
  }

  std::string use(const std::string& primitive) {
    used_.insert(primitive);
    return primitive;
  }

  // A fresh rule name from a hint.
  std::string fresh(const std::string& hint) {
    std::string base = rule_name(hint);
    if (primitives().count(base) || base == "root") base += "-r";
    std::string name = base;
    for (int i = 2; rules_.count(name) || reserved_.count(name) || primitives().count(name); ++i) name = fmt::format("{}-{}", base, i);
    reserved_.insert(name);
    return name;
  }

  std::string define(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    rules_[name] = body;
    return name;
  }

  const json& resolve(const std::string& ref, const std::string& where) {
    std::string path;
    if (ref.rfind("#/$defs/", 0) == 0) path = "/$defs/" + ref.substr(8);
    else if (ref.rfind("#/definitions/", 0) == 0) path = "/definitions/" + ref.substr(14);
    else if (ref == "#") path = "";
    else fail(where, fmt::format("$ref '{}' (only #, #/$defs/... and #/definitions/... are supported)", ref));
    try {
      const json::json_pointer p(path);
      if (!root_.contains(p)) fail(where, fmt::format("$ref '{}' names nothing", ref));
      return root_.at(p);
    } catch (const json::exception&) {
      fail(where, fmt::format("$ref '{}' is not a valid pointer", ref));
    }
  }

  std::string visit(const json& s, const std::string& hint, const std::string& where) {
    if (++depth_ > 64) fail(where, "nested too deeply");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(where, "a false schema accepts nothing");
      return use("value");
    }
    if (!s.is_object()) fail(where, "a schema must be an object or a boolean");
    if (s.contains("pattern")) fail(where, "'pattern' is not supported");
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) fail(where, "$ref must be a string");
      const std::string ref = s["$ref"];
      if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
      const std::string name = fresh(ref.substr(ref.rfind('/') + 1));
      refs_[ref] = name;  // before visiting: a recursive schema refers back to this rule
      rules_[name] = visit(resolve(ref, where), name, ref);
      return name;
    }
    if (s.contains("const")) return gbnf_literal(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(where, "enum must be a non-empty array");
      std::string out;
      for (const auto& v : s["enum"]) out += (out.empty() ? "" : " | ") + gbnf_literal(v.dump());
      return "( " + out + " )";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) fail(where, fmt::format("{} must be a non-empty array", key));
      std::string out;
      for (size_t i = 0; i < s[key].size(); ++i) {
        out += (i ? " | " : "") + visit(s[key][i], fmt::format("{}-{}", hint, i), fmt::format("{}/{}/{}", where, key, i));
      }
      return define(hint, out);
    }
    if (s.contains("allOf")) return visit(merge_all_of(s, where), hint, where);
    if (s.contains("type") && s["type"].is_array()) {
      std::string out;
      for (size_t i = 0; i < s["type"].size(); ++i) {
        json one = s;
        one["type"] = s["type"][i];
        out += (i ? " | " : "") + visit(one, hint, where);
      }
      return "( " + out + " )";
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) fail(where, "type must be a string or an array of strings");
      type = s["type"];
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      type = "object";
    } else if (s.contains("items") || s.contains("prefixItems")) {
      type = "array";
    }
    if (type.empty()) return use("value");
    if (type == "object") return object(s, hint, where);
    if (type == "array") return array(s, hint, where);
    if (type == "string") return string(s, where);
    if (type == "integer" || type == "number" || type == "boolean" || type == "null") return use(type);
    fail(where, fmt::format("unknown type '{}'", type));
  }

  json merge_all_of(const json& s, const std::string& where) {
    if (!s["allOf"].is_array()) fail(where, "allOf must be an array");
    json merged = s;
    merged.erase("allOf");
    for (const auto& part0 : s["allOf"]) {
      const json& part = part0.is_object() && part0.contains("$ref") ? resolve(part0["$ref"], where) : part0;
      if (!part.is_object()) fail(where, "allOf parts must be objects");
      for (const auto& [k, v] : part.items()) {
        if (k == "properties") {
          for (const auto& [pk, pv] : v.items()) merged["properties"][pk] = pv;
        } else if (k == "required") {
          for (const auto& r : v) merged["required"].push_back(r);
        } else if (k == "type") {
          if (merged.contains("type") && merged["type"] != v) fail(where, "allOf parts of different types");
          merged["type"] = v;
        } else if (k != "$ref") {
          merged[k] = v;
        }
      }
    }
    return merged;
  }

  std::string object(const json& s, const std::string& hint, const std::string& where) {
    std::vector<std::pair<std::string, bool>> props;  // (key, required)
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(where, "required must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail(where, "required must list strings");
        required.insert(r.get<std::string>());
      }
    }
    std::vector<std::string> kv;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail(where, "properties must be an object");
      for (const auto& [key, sub] : s["properties"].items()) {
        const std::string value = visit(sub, hint + "-" + key, where + "/properties/" + key);
        kv.push_back(define(hint + "-" + key + "-kv", gbnf_literal(json(key).dump()) + " \":\" " + use("ws") + " " + value));
        props.push_back({key, required.count(key) > 0});
      }
    }
    for (const auto& r : required) {
      if (!s.contains("properties") || !s["properties"].contains(r)) fail(where, fmt::format("required '{}' is not in properties", r));
    }
    std::string extra;  // more key-value pairs after the listed ones
    if (s.contains("additionalProperties") && !(s["additionalProperties"].is_boolean() && !s["additionalProperties"].get<bool>())) {
      const std::string value = visit(s["additionalProperties"], hint + "-additional", where + "/additionalProperties");
      extra = define(hint + "-additional-kv", use("string") + " \":\" " + use("ws") + " " + value);
    }
    // rest(i, emitted): the properties from i on, after something (emitted) or nothing.
    const size_t n = props.size();
    std::vector<std::array<std::string, 2>> rest(n + 1);
    const std::string sep = "\",\" " + use("ws") + " ";
    for (size_t i = n + 1; i-- > 0;) {
      for (int emitted = 0; emitted < 2; ++emitted) {
        std::string body;
        if (i == n) {
          body = extra.empty() ? "" : (emitted ? "( " + sep + extra + " )*" : "( " + extra + " ( " + sep + extra + " )* )?");
        } else {
          const std::string take = (emitted ? sep : "") + kv[i] + " " + rest[i + 1][1];
          body = props[i].second ? take : "( " + take + " | " + rest[i + 1][static_cast<size_t>(emitted)] + " )";
        }
        rest[i][static_cast<size_t>(emitted)] = body.empty() ? "" : define(fmt::format("{}-rest-{}-{}", hint, i, emitted), body);
      }
    }
    const std::string inner = rest[0][0];
    return define(hint, "\"{\" " + use("ws") + " " + (inner.empty() ? "" : inner + " " + use("ws") + " ") + "\"}\"");
  }

  std::string array(const json& s, const std::string& hint, const std::string& where) {
    const std::string sep = "\",\" " + use("ws") + " ";
    std::vector<std::string> tuple;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) fail(where, "prefixItems must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
        tuple.push_back(visit(s["prefixItems"][i], fmt::format("{}-{}", hint, i), fmt::format("{}/prefixItems/{}", where, i)));
      }
    }
    const auto count = [&](const char* key, uint64_t dflt) {
      if (!s.contains(key)) return dflt;
      if (!s[key].is_number_unsigned()) fail(where, fmt::format("{} must be a non-negative integer", key));
      return std::min<uint64_t>(s[key].get<uint64_t>(), 4096);
    };
    if (!tuple.empty()) {
      std::string body;
      for (size_t i = 0; i < tuple.size(); ++i) body += (i ? sep : "") + tuple[i] + " ";
      return define(hint, "\"[\" " + use("ws") + " " + body + use("ws") + " \"]\"");
    }
    const std::string item = s.contains("items") ? visit(s["items"], hint + "-item", where + "/items") : use("value");
    const uint64_t min = count("minItems", 0), max = count("maxItems", UINT64_MAX);
    if (max < min) fail(where, "maxItems is below minItems");
    std::string list;
    if (max == 0) {
      list = "";
    } else {
      const std::string more = "( " + sep + item + " )";
      const uint64_t rest_min = min ? min - 1 : 0;
      const std::string tail = max == UINT64_MAX ? fmt::format("{}{{{},}}", more, rest_min) : fmt::format("{}{{{},{}}}", more, rest_min, max - 1);
      list = item + " " + tail;
      if (min == 0) list = "( " + list + " )?";
    }
    return define(hint, "\"[\" " + use("ws") + " " + (list.empty() ? "" : list + " " + use("ws") + " ") + "\"]\"");
  }

  std::string string(const json& s, const std::string& where) {
    if (s.contains("format") && s["format"].is_string()) {
      const std::string f = s["format"];
      if (f == "date" || f == "time" || f == "date-time" || f == "uuid") return use(f);
    }
    if (s.contains("minLength") || s.contains("maxLength")) {
      const auto len = [&](const char* key, uint64_t dflt) {
        if (!s.contains(key)) return dflt;
        if (!s[key].is_number_unsigned()) fail(where, fmt::format("{} must be a non-negative integer", key));
        return std::min<uint64_t>(s[key].get<uint64_t>(), 4096);
      };
      const uint64_t min = len("minLength", 0), max = len("maxLength", UINT64_MAX);
      if (max < min) fail(where, "maxLength is below minLength");
      use("char");
      return max == UINT64_MAX ? fmt::format("\"\\\"\" char{{{},}} \"\\\"\"", min) : fmt::format("\"\\\"\" char{{{},{}}} \"\\\"\"", min, max);
    }
    return use("string");
  }

  const json& root_;
  std::map<std::string, std::string>& rules_;
  std::set<std::string>& used_;
  std::set<std::string> reserved_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

std::string JsonGrammar::add(const json& schema, const std::string& name) {
  const std::string rule = rule_name(name);
  Converter(schema, rules_, used_).run(rule);
  return rule;
}

std::string JsonGrammar::gbnf(const std::string& extra_rules) const {
  std::string out = extra_rules;
  for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
  std::set<std::string> done;
  std::vector<std::string> todo(used_.begin(), used_.end());
  while (!todo.empty()) {
    const std::string p = todo.back();
    todo.pop_back();
    if (!done.insert(p).second) continue;
    out += p + " ::= " + primitives().at(p) + "\n";
    if (auto d = primitive_deps().find(p); d != primitive_deps().end()) todo.insert(todo.end(), d->second.begin(), d->second.end());
  }
  return out;
}

std::string JsonGrammar::use(const std::string& primitive) {
  if (!primitives().count(primitive)) throw Error(fmt::format("grammar: no JSON rule '{}'", primitive));
  used_.insert(primitive);
  return primitive;
}

std::string json_schema_to_gbnf(const json& schema) {
  JsonGrammar g;
  g.add(schema, "root");
  return g.gbnf();
}

std::string json_value_gbnf(bool object_only) {
  return json_schema_to_gbnf(object_only ? json{{"type", "object"}, {"additionalProperties", true}} : json::object());
}

}  // namespace zinc::sample
