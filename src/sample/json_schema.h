// JSON Schema to a GBNF grammar (grammar.h) whose sentences are JSON documents the schema accepts: what
// `response_format: json_schema`, tool arguments and `zinc run --json-schema` constrain output to.
//
// Supported: type (one or a list), properties / required (properties come in the order listed; the
// optional ones may be left out), additionalProperties (false unless given: properties not listed are
// not generated; true or a schema allows more after the listed ones), items, prefixItems, minItems,
// maxItems, enum, const, anyOf / oneOf, allOf of objects, $ref into $defs / definitions (recursive
// schemas too), minLength / maxLength, and the string formats date, time, date-time and uuid. A schema
// of {} or true is any JSON value. Not enforced (the value is still valid JSON of the right type):
// minimum / maximum, multipleOf, other formats. A `pattern` or a false schema is refused with a
// zinc::Error naming where it is.
//
// Whitespace between tokens is optional and bounded (a space, or a newline and up to 20 indentation
// characters) so that a model cannot loop on it forever.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>

namespace zinc::sample {

// Several schemas in one grammar (a tool call's arguments, one schema per tool): add() turns a schema
// into the rule `name` (the rules it needs are named after it); gbnf() is every rule added, the shared
// JSON rules they use (ws, string, value, ...), and `extra_rules` (GBNF lines that refer to them) first.
class JsonGrammar {
 public:
  std::string add(const nlohmann::ordered_json& schema, const std::string& name);  // returns the rule's name
  std::string use(const std::string& primitive);  // a shared rule (ws, string, ...) extra_rules refer to
  std::string gbnf(const std::string& extra_rules = "") const;

 private:
  std::map<std::string, std::string> rules_;
  std::set<std::string> used_;
};

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);  // properties in their listed order

// Any JSON value (object_only: any JSON object, what response_format json_object asks for).
std::string json_value_gbnf(bool object_only);

}  // namespace zinc::sample
