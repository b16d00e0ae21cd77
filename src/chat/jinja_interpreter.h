// Jinja interpreter: walks the syntax tree and writes the rendered text.
//
// Scoping follows the reference renderer: a for loop opens one scope for all its iterations (a `set`
// inside the loop is visible to later iterations but not after the loop), `if` opens none, a macro runs
// in a scope whose parent is the scope it is called from, and {% break %} / {% continue %} discard what
// the current iteration had written so far. Every evaluation counts against a step budget and a nesting
// limit, so no template, however hostile, can loop or recurse without bound.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace zinc::chat::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // also the longest string a template may build, even midway
  size_t max_string_bytes = size_t{256} << 20; // bytes of the strings a template built that are alive at once
  size_t max_items = size_t{1} << 20;          // longest array (range(), +, append)
  size_t max_heap_values = size_t{8} << 20;    // array items alive at once (about 32 bytes each)
  size_t max_heap_objects = size_t{1} << 20;   // arrays, objects, scopes and functions alive at once
  uint64_t max_steps = 50'000'000;             // evaluations of expressions and statements, loop iterations
  int max_depth = 1500;                        // nested evaluations, across macro calls
  int max_call_depth = 100;                    // nested macro calls
};

struct RenderOptions {
  // The clock strftime_now() reads (tests pin it); the system clock when unset.
  std::optional<std::chrono::system_clock::time_point> now;
  RenderLimits limits;
};

// A scope: variables set here, then the enclosing scope. Scopes are freed when their construct ends,
// unless a {% call %} block's caller() still refers to the scope it was written in.
struct Env : std::enable_shared_from_this<Env> {
  Env(Budget* budget, std::shared_ptr<Env> p);
  ~Env();
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  std::shared_ptr<Env> parent;
  std::vector<std::pair<std::string, Value>> vars;
  Budget* budget;

  const Value* lookup(std::string_view name) const;
  void set(const std::string& name, Value v);
};

class Interpreter {
 public:
  Interpreter(const Program& program, const RenderOptions& options);

  // Renders the program with `context` (a JSON object) as its global variables.
  std::string render(const nlohmann::ordered_json& context);

  // ---- used by the built-in filters, tests and functions ----
  Heap& heap() { return heap_; }
  const RenderOptions& options() const { return options_; }
  Value new_string(std::string s);
  Value new_array(std::vector<Value> items);
  Value concat(const std::string& a, const std::string& b);
  std::shared_ptr<Env> new_scope(Env* parent);
  Value call(const Value& fn, std::vector<Value>& args, Env* scope);
  void check_items(size_t n) const;
  void count_step();

 private:
  friend struct EvalGuard;

  // Statements append to `out`; expressions return values.
  void exec_block(const NodeList& body, Env* env, std::string& out);
  void exec(const Node& n, Env* env, std::string& out);
  Value eval(const Node& n, Env* env);
  Value eval_kind(const Node& n, Env* env);

  void exec_set(const SetStmt& n, Env* env);
  void exec_for(const ForStmt& n, Env* env, std::string& out);
  void exec_call_block(const CallBlockStmt& n, Env* env, std::string& out);
  void define_macro(const MacroStmt& n, Env* env);
  void bind_arguments(const std::string& display, const NodeList& params, bool uses_kwargs, bool uses_varargs,
                      std::vector<Value> args, Env* scope);
  void assign_target(const Node& target, const Value& v, Env* env);

  Value eval_object(const ObjectLit& n, Env* env);
  Value eval_member(const Member& n, Env* env);
  Value eval_slice(const Value& object, const Slice& n, Env* env);
  Value eval_call(const Call& n, Env* env);
  Value eval_binary(const Binary& n, Env* env);
  Value eval_unary(const Unary& n, Env* env);
  Value eval_test(const TestExpr& n, Env* env);
  // Positional arguments (with *spread) then keyword arguments (with **spread).
  std::pair<std::vector<Value>, ObjectRef> eval_arguments(const NodeList& args, Env* env);
  std::vector<Value> eval_call_args(const NodeList& args, Env* env);

  // jinja_builtins.cpp
  Value apply_filter(const Value& operand, const Node& filter, Env* env);
  Value apply_filter_name(const Value& operand, const std::string& name, Env* env);
  Value apply_filter_call(const Value& operand, const Call& call, const std::string& name, Env* env);
  Value filter_with_args(const Value& operand, const std::string& name, std::vector<Value> args, Env* env);
  bool run_test(const std::string& name, const Value& operand, const std::vector<Value>& args);
  // jinja_methods.cpp
  Value member_builtin(const Value& object, const std::string& name);
  Value string_method(const Value& s, const std::string& name);
  Value array_method(const Value& a, const std::string& name);
  Value object_method(const Value& o, const std::string& name);
  void install_globals(Env* env);

  const Program& program_;
  const RenderOptions& options_;
  Heap heap_;
  std::shared_ptr<StringBytes> string_bytes_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
};

// Keyword arguments arrive as a trailing keyword-arguments object, as in the reference renderer.
struct CallArgs {
  std::vector<Value> positional;
  const ObjectData* kwargs = nullptr;  // owned by kwargs_value
  Value kwargs_value;

  explicit CallArgs(const std::vector<Value>& args);
  const Value* kw(std::string_view name) const;
  // positional[i], else the keyword argument `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
};

}  // namespace zinc::chat::jinja
