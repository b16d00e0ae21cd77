// Jinja interpreter: statements, expressions, scopes, loops and macros. Operators follow the reference
// renderer: == is JavaScript's loose equality, + concatenates when either side is a string, / always gives
// a float, % takes the sign of the dividend, comparisons (< > <= >=) work on numbers only.
#include "chat/jinja_interpreter.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "chat/jinja_text.h"

namespace zinc::chat::jinja {

namespace {

// {% break %} and {% continue %} unwind to the innermost loop.
struct BreakSignal {};
struct ContinueSignal {};

std::string describe_callee(const Node& n) {
  if (n.kind == NodeKind::Ident) return fmt::format("'{}'", static_cast<const Ident&>(n).name);
  if (n.kind == NodeKind::Member) {
    const auto& m = static_cast<const Member&>(n);
    if (!m.computed && m.property->kind == NodeKind::Ident) {
      return fmt::format("'{}'", static_cast<const Ident&>(*m.property).name);
    }
  }
  return "the expression";
}

}  // namespace

// ---- Env ----

Env::Env(Budget* b, std::shared_ptr<Env> p) : parent(std::move(p)), budget(b) { budget->charge_object(); }
Env::~Env() { --budget->objects; }

const Value* Env::lookup(std::string_view name) const {
  for (const Env* e = this; e; e = e->parent.get()) {
    for (const auto& [k, v] : e->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Env::set(const std::string& name, Value v) {
  for (auto& [k, existing] : vars) {
    if (k == name) {
      existing = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

// ---- CallArgs ----

CallArgs::CallArgs(const std::vector<Value>& args) : positional(args) {
  if (!positional.empty() && positional.back().is_kwargs()) {
    kwargs_value = positional.back();
    kwargs = &kwargs_value.as_object();
    positional.pop_back();
  }
}

const Value* CallArgs::kw(std::string_view name) const { return kwargs ? kwargs->find(name) : nullptr; }

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < positional.size()) return &positional[i];
  return kw(name);
}

// ---- Interpreter ----

struct EvalGuard {
  explicit EvalGuard(Interpreter& i) : in(i) {
    if (++in.depth_ > in.options_.limits.max_depth) {
      throw RenderError(fmt::format("template evaluation nested deeper than {} levels", in.options_.limits.max_depth));
    }
    in.count_step();
  }
  ~EvalGuard() { --in.depth_; }
  Interpreter& in;
};

Interpreter::Interpreter(const Program& program, const RenderOptions& options)
    : program_(program), options_(options), string_bytes_(std::make_shared<StringBytes>()) {
  heap_.budget.max_values = options.limits.max_heap_values;
  heap_.budget.max_objects = options.limits.max_heap_objects;
  string_bytes_->max = options.limits.max_string_bytes;
}

void Interpreter::count_step() {
  if (++steps_ > options_.limits.max_steps) {
    throw RenderError(fmt::format("template took more than {} evaluation steps", options_.limits.max_steps));
  }
}

Value Interpreter::new_string(std::string s) {
  if (s.size() > options_.limits.max_output_bytes) {
    throw RenderError(fmt::format("string longer than {} bytes", options_.limits.max_output_bytes));
  }
  // Charged while alive: many long strings held at once (in a list, a namespace) are refused too.
  StringBytes& bytes = *string_bytes_;
  if (s.size() > bytes.max - bytes.live) {
    throw RenderError(fmt::format("the template holds more than {} bytes of strings", bytes.max));
  }
  const size_t n = s.size();
  bytes.live += n;
  return Value::string(Str(new std::string(std::move(s)), [counter = string_bytes_, n](const std::string* p) {
    counter->live -= n;
    delete p;
  }));
}

Value Interpreter::new_array(std::vector<Value> items) {
  check_items(items.size());
  return Value::array(heap_.new_array(std::move(items)));
}

std::shared_ptr<Env> Interpreter::new_scope(Env* parent) {
  return std::make_shared<Env>(&heap_.budget, parent ? parent->shared_from_this() : nullptr);
}

Value Interpreter::concat(const std::string& a, const std::string& b) {
  if (a.size() + b.size() > options_.limits.max_output_bytes) {
    throw RenderError(fmt::format("string longer than {} bytes", options_.limits.max_output_bytes));
  }
  return new_string(a + b);
}

void Interpreter::check_items(size_t n) const {
  if (n > options_.limits.max_items) throw RenderError(fmt::format("array longer than {} items", options_.limits.max_items));
}

std::string Interpreter::render(const nlohmann::ordered_json& context) {
  const StringCapScope cap(options_.limits.max_output_bytes);
  const std::shared_ptr<Env> global_scope = new_scope(nullptr);
  Env* global = global_scope.get();
  install_globals(global);
  if (!context.is_null() && !context.is_object()) throw RenderError("the template context must be a JSON object", 0);
  if (context.is_object()) {
    for (const auto& [key, value] : context.items()) {
      // The reference refuses to redeclare its globals (true, none, range, ...).
      if (global->lookup(key)) throw RenderError(fmt::format("variable '{}' is already declared", key), 0);
      global->set(key, from_json(heap_, value));
    }
  }
  std::string out;
  try {
    exec_block(program_.body, global, out);
  } catch (const BreakSignal&) {
    throw RenderError("'{% break %}' outside of a loop", 0);
  } catch (const ContinueSignal&) {
    throw RenderError("'{% continue %}' outside of a loop", 0);
  }
  return out;
}

void Interpreter::exec_block(const NodeList& body, Env* env, std::string& out) {
  for (const auto& n : body) {
    exec(*n, env, out);
    if (out.size() > options_.limits.max_output_bytes) {
      throw RenderError(fmt::format("output longer than {} bytes", options_.limits.max_output_bytes), n->pos);
    }
  }
}

void Interpreter::exec(const Node& n, Env* env, std::string& out) {
  EvalGuard guard(*this);
  try {
    switch (n.kind) {
      case NodeKind::Text: out += *static_cast<const StrLit&>(n).value; return;
      case NodeKind::Comment: return;
      case NodeKind::Set: exec_set(static_cast<const SetStmt&>(n), env); return;
      case NodeKind::If: {
        const auto& s = static_cast<const IfStmt&>(n);
        exec_block(eval(*s.test, env).truthy() ? s.body : s.alternate, env, out);
        return;
      }
      case NodeKind::For: exec_for(static_cast<const ForStmt&>(n), env, out); return;
      case NodeKind::Macro: define_macro(static_cast<const MacroStmt&>(n), env); return;
      case NodeKind::CallBlock: exec_call_block(static_cast<const CallBlockStmt&>(n), env, out); return;
      case NodeKind::FilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(n);
        std::string body;
        exec_block(s.body, env, body);
        const Value v = apply_filter(new_string(std::move(body)), *s.filter, env);
        if (!v.is_none() && !v.is_undefined()) out += to_str(v);
        return;
      }
      case NodeKind::Break: throw BreakSignal{};
      case NodeKind::Continue: throw ContinueSignal{};
      default: {
        const Value v = eval(n, env);
        if (!v.is_none() && !v.is_undefined()) {
          if (v.is_string()) {
            out += v.as_string();
          } else {
            out += to_str(v);
          }
        }
      }
    }
  } catch (RenderError& e) {
    if (e.pos == RenderError::kNoPos) e.pos = n.pos;
    throw;
  }
}

Value Interpreter::eval(const Node& n, Env* env) {
  EvalGuard guard(*this);
  try {
    return eval_kind(n, env);
  } catch (RenderError& e) {
    if (e.pos == RenderError::kNoPos) e.pos = n.pos;
    throw;
  }
}

Value Interpreter::eval_kind(const Node& n, Env* env) {
  switch (n.kind) {
    case NodeKind::IntLit: return Value::integer(static_cast<const IntLit&>(n).value);
    case NodeKind::FloatLit: return Value::number(static_cast<const FloatLit&>(n).value);
    case NodeKind::Text:
    case NodeKind::StrLit: return Value::string(static_cast<const StrLit&>(n).value);
    case NodeKind::Ident: {
      const Value* v = env->lookup(static_cast<const Ident&>(n).name);
      return v ? *v : Value();
    }
    case NodeKind::ArrayLit:
    case NodeKind::TupleLit: {
      const auto& l = static_cast<const ListLit&>(n);
      std::vector<Value> items;
      items.reserve(l.items.size());
      for (const auto& item : l.items) items.push_back(eval(*item, env));
      return Value::array(heap_.new_array(std::move(items), n.kind == NodeKind::TupleLit));
    }
    case NodeKind::ObjectLit: return eval_object(static_cast<const ObjectLit&>(n), env);
    case NodeKind::Member: return eval_member(static_cast<const Member&>(n), env);
    case NodeKind::Call: return eval_call(static_cast<const Call&>(n), env);
    case NodeKind::Binary: return eval_binary(static_cast<const Binary&>(n), env);
    case NodeKind::Unary: return eval_unary(static_cast<const Unary&>(n), env);
    case NodeKind::Filter: {
      const auto& f = static_cast<const FilterExpr&>(n);
      return apply_filter(eval(*f.operand, env), *f.filter, env);
    }
    case NodeKind::Test: return eval_test(static_cast<const TestExpr&>(n), env);
    case NodeKind::Select: {
      const auto& s = static_cast<const Select&>(n);
      if (!eval(*s.test, env).truthy()) return Value();
      return eval(*s.lhs, env);
    }
    case NodeKind::Ternary: {
      const auto& t = static_cast<const Ternary&>(n);
      return eval(eval(*t.cond, env).truthy() ? *t.yes : *t.no, env);
    }
    case NodeKind::KwArg: throw RenderError("a keyword argument (name=value) is only allowed in a call");
    case NodeKind::Spread:
    case NodeKind::KwSpread: throw RenderError("argument unpacking (*x, **x) is only allowed in a call");
    case NodeKind::Slice: throw RenderError("a slice (a:b) is only allowed inside []");
    default: throw RenderError("statement used as an expression");
  }
}

// ---- statements ----

void Interpreter::assign_target(const Node& target, const Value& v, Env* env) {
  if (target.kind == NodeKind::Ident) {
    env->set(static_cast<const Ident&>(target).name, v);
    return;
  }
  throw RenderError("can only assign to names", target.pos);
}

void Interpreter::exec_set(const SetStmt& n, Env* env) {
  Value rhs;
  if (n.value) {
    rhs = eval(*n.value, env);
  } else {
    std::string body;
    exec_block(n.body, env, body);
    rhs = new_string(std::move(body));
  }
  const Node& target = *n.target;
  switch (target.kind) {
    case NodeKind::Ident: env->set(static_cast<const Ident&>(target).name, rhs); return;
    case NodeKind::TupleLit: {
      const auto& names = static_cast<const ListLit&>(target).items;
      if (!rhs.is_array()) throw RenderError(fmt::format("cannot unpack {} in '{{% set %}}'", rhs.a_type()));
      const auto& items = rhs.as_array().items;
      if (items.size() != names.size()) {
        throw RenderError(fmt::format("too {} values to unpack in '{{% set %}}' (expected {}, got {})",
                                      names.size() > items.size() ? "few" : "many", names.size(), items.size()));
      }
      for (size_t i = 0; i < names.size(); ++i) assign_target(*names[i], items[i], env);
      return;
    }
    case NodeKind::Member: {
      const auto& m = static_cast<const Member&>(target);
      const Value object = eval(*m.object, env);
      if (!object.is_namespace()) {
        throw RenderError(fmt::format("cannot set an attribute on {}: only a namespace() can be changed with "
                                      "'{{% set x.attr = ... %}}'",
                                      object.a_type()));
      }
      // Like the reference, the property must be written as a name (ns.x; ns[x] also sets "x").
      if (m.property->kind != NodeKind::Ident) throw RenderError("cannot assign to a computed attribute");
      heap_.note_store(object, rhs);
      object.as_object().set(static_cast<const Ident&>(*m.property).name, rhs);
      return;
    }
    default: throw RenderError("invalid target in '{% set %}': expected a name, names or namespace.attribute");
  }
}

void Interpreter::exec_for(const ForStmt& n, Env* env, std::string& out) {
  const std::shared_ptr<Env> scope_ref = new_scope(env);
  Env* scope = scope_ref.get();
  const Node* test = nullptr;
  Value iterable;
  if (n.iterable->kind == NodeKind::Select) {
    const auto& sel = static_cast<const Select&>(*n.iterable);
    iterable = eval(*sel.lhs, scope);
    test = sel.test.get();
  } else {
    iterable = eval(*n.iterable, scope);
  }
  std::vector<Value> all;
  if (iterable.is_array()) {
    all = iterable.as_array().items;  // a copy: the body may change the array
  } else if (iterable.is_dict()) {
    for (const auto& [k, v] : iterable.as_object().entries()) all.push_back(new_string(k));
  } else {
    throw RenderError(fmt::format("'{{% for %}}' cannot loop over {}", iterable.a_type()),
                      n.iterable->pos);
  }

  const Node& target = *n.target;
  auto assign = [&](Env* e, const Value& item) {
    if (target.kind == NodeKind::Ident) {
      e->set(static_cast<const Ident&>(target).name, item);
      return;
    }
    const auto& names = static_cast<const ListLit&>(target).items;
    for (size_t j = 0; j < names.size(); ++j) assign_target(*names[j], item.as_array().items[j], e);
  };
  std::vector<Value> items;
  for (const Value& item : all) {
    count_step();  // an empty loop body costs no evaluations, the iteration itself does
    if (target.kind == NodeKind::TupleLit) {
      const size_t want = static_cast<const ListLit&>(target).items.size();
      if (!item.is_array() || item.is_tuple()) {
        throw RenderError(fmt::format("cannot unpack {} into the loop variables", item.a_type()), target.pos);
      }
      if (item.as_array().items.size() != want) {
        throw RenderError(fmt::format("too {} values to unpack into the loop variables (expected {}, got {})",
                                      want > item.as_array().items.size() ? "few" : "many", want,
                                      item.as_array().items.size()),
                          target.pos);
      }
    }
    if (test) {
      const std::shared_ptr<Env> filter_scope = new_scope(scope);
      assign(filter_scope.get(), item);
      if (!eval(*test, filter_scope.get()).truthy()) continue;
    }
    items.push_back(item);
  }

  bool iterated = false;
  const auto count = static_cast<int64_t>(items.size());
  ObjectRef loop;
  for (int64_t i = 0; i < count; ++i) {
    count_step();
    // One loop object serves every iteration unless the template kept a reference to it.
    if (!loop || loop.use_count() > 2) loop = heap_.new_object();
    loop->set("index", Value::integer(i + 1));
    loop->set("index0", Value::integer(i));
    loop->set("revindex", Value::integer(count - i));
    loop->set("revindex0", Value::integer(count - i - 1));
    loop->set("first", Value::boolean(i == 0));
    loop->set("last", Value::boolean(i == count - 1));
    loop->set("length", Value::integer(count));
    loop->set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
    loop->set("nextitem", i < count - 1 ? items[static_cast<size_t>(i + 1)] : Value());
    scope->set("loop", Value::object(loop));
    assign(scope, items[static_cast<size_t>(i)]);
    const size_t mark = out.size();
    try {
      exec_block(n.body, scope, out);
    } catch (const ContinueSignal&) {
      out.resize(mark);  // the reference drops what the interrupted iteration wrote
      continue;
    } catch (const BreakSignal&) {
      out.resize(mark);
      break;
    }
    iterated = true;
  }
  if (!iterated) exec_block(n.otherwise, scope, out);
}

void Interpreter::bind_arguments(const std::string& display, const NodeList& params, bool uses_kwargs,
                                 bool uses_varargs, std::vector<Value> args, Env* scope) {
  ObjectRef kwargs = heap_.new_object();
  if (!args.empty() && args.back().is_kwargs()) {
    for (const auto& [k, v] : args.back().as_object().entries()) kwargs->set(k, v);
    args.pop_back();
  }
  std::vector<std::pair<const std::string*, const Node*>> pending_defaults;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& p = *params[i];
    const std::string& name = p.kind == NodeKind::Ident ? static_cast<const Ident&>(p).name : static_cast<const KwArg&>(p).key;
    std::optional<Value> value;
    if (i < args.size()) value = args[i];
    if (!value) {
      if (const Value* kv = kwargs->find(name)) {
        value = *kv;
        kwargs->erase(name);
      }
    }
    if (!value && p.kind == NodeKind::KwArg) pending_defaults.emplace_back(&name, static_cast<const KwArg&>(p).value.get());
    scope->set(name, value ? *value : Value());
  }
  if (uses_kwargs) {
    scope->set("kwargs", Value::object(kwargs));
  } else if (kwargs->size() > 0) {
    throw RenderError(fmt::format("macro {} takes no keyword argument '{}'", display, kwargs->entries().front().first));
  }
  if (uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = params.size(); i < args.size(); ++i) rest.push_back(args[i]);
    scope->set("varargs", new_array(std::move(rest)));
  } else if (args.size() > params.size()) {
    throw RenderError(fmt::format("macro {} takes not more than {} argument(s), got {}", display, params.size(), args.size()));
  }
  for (const auto& [name, def] : pending_defaults) scope->set(*name, eval(*def, scope));
}

void Interpreter::define_macro(const MacroStmt& n, Env* env) {
  const MacroStmt* macro = &n;
  FunctionRef fn = heap_.new_function(n.name, [macro](Interpreter& in, std::vector<Value>& args, Env* scope) {
    if (++in.call_depth_ > in.options_.limits.max_call_depth) {
      --in.call_depth_;
      throw RenderError(fmt::format("macro calls nested deeper than {} (endless recursion?)", in.options_.limits.max_call_depth));
    }
    struct Release {
      int& depth;
      ~Release() { --depth; }
    } release{in.call_depth_};
    const std::shared_ptr<Env> macro_scope = in.new_scope(scope);
    in.bind_arguments("'" + macro->name + "'", macro->params, macro->uses_kwargs, macro->uses_varargs, args, macro_scope.get());
    std::string out;
    in.exec_block(macro->body, macro_scope.get(), out);
    return in.new_string(std::move(out));
  });
  env->set(n.name, Value::function(fn));
}

void Interpreter::exec_call_block(const CallBlockStmt& n, Env* env, std::string& out) {
  const CallBlockStmt* block = &n;
  // caller() runs the block in the scope it was written in, which it keeps alive.
  std::shared_ptr<Env> definition = env->shared_from_this();
  FunctionRef caller = heap_.new_function("caller", [block, definition](Interpreter& in, std::vector<Value>& args, Env*) {
    const std::shared_ptr<Env> scope = in.new_scope(definition.get());
    in.bind_arguments("None", block->caller_params, block->uses_kwargs, block->uses_varargs, args, scope.get());
    std::string body;
    in.exec_block(block->body, scope.get(), body);
    return in.new_string(std::move(body));
  });
  auto [args, kwargs] = eval_arguments(n.call->args, env);
  args.push_back(Value::object(kwargs));
  const Value fn = eval(*n.call->callee, env);
  if (!fn.is_function()) {
    throw RenderError(fmt::format("'{{% call %}}' needs a macro, but {} is {}", describe_callee(*n.call->callee), fn.a_type()));
  }
  const std::shared_ptr<Env> call_env = new_scope(env);
  call_env->set("caller", Value::function(caller));
  const Value v = call(fn, args, call_env.get());
  if (!v.is_none() && !v.is_undefined()) out += to_str(v);
}

// ---- expressions ----

Value Interpreter::eval_object(const ObjectLit& n, Env* env) {
  ObjectRef o = heap_.new_object();
  for (const auto& [k, v] : n.pairs) {
    const Value key = eval(*k, env);
    if (!key.is_string()) throw RenderError(fmt::format("object keys must be strings, got {}", key.a_type()), k->pos);
    o->set(key.as_string(), eval(*v, env));
  }
  return Value::object(o);
}

Value Interpreter::eval_member(const Member& n, Env* env) {
  const Value object = eval(*n.object, env);
  Value property;
  if (n.computed) {
    if (n.property->kind == NodeKind::Slice) return eval_slice(object, static_cast<const Slice&>(*n.property), env);
    property = eval(*n.property, env);
  } else if (n.property->kind == NodeKind::IntLit) {
    property = Value::integer(static_cast<const IntLit&>(*n.property).value);
  } else {
    property = Value::string(static_cast<const Ident&>(*n.property).name);
  }

  if (object.is_object()) {
    if (!property.is_string()) {
      throw RenderError(fmt::format("cannot look up {} in {}: keys are strings", property.a_type(),
                                    object.is_namespace() ? "a namespace" : "an object"));
    }
    if (const Value* v = object.as_object().find(property.as_string())) return *v;
    return object.is_namespace() ? Value() : member_builtin(object, property.as_string());
  }
  if (object.is_array() || object.is_string()) {
    if (property.is_int()) {
      const int64_t i = property.as_int();
      if (object.is_array()) {
        const auto& items = object.as_array().items;
        const int64_t size = static_cast<int64_t>(items.size());
        const int64_t at = i < 0 ? size + i : i;
        return at >= 0 && at < size ? items[static_cast<size_t>(at)] : Value();
      }
      // String indexing counts UTF-16 code units, as JavaScript does.
      const std::string& s = object.as_string();
      const int64_t size = static_cast<int64_t>(text::utf16_length(s));
      const int64_t at = i < 0 ? size + i : i;
      if (at < 0 || at >= size) return Value();
      int64_t unit = 0;
      for (size_t b = 0; b < s.size();) {
        const text::Decoded d = text::decode(s, b);
        const int64_t width = d.cp >= 0x10000 ? 2 : 1;
        if (at < unit + width) return new_string(s.substr(b, d.len));
        unit += width;
        b += d.len;
      }
      return Value();
    }
    if (property.is_string()) return member_builtin(object, property.as_string());
    throw RenderError(fmt::format("cannot index {} with {}", object.a_type(), property.a_type()));
  }
  if (!property.is_string()) {
    throw RenderError(fmt::format("cannot index {} with {}", object.a_type(), property.a_type()));
  }
  // The reference gives undefined for attributes of none, undefined, numbers and booleans.
  return Value();
}

Value Interpreter::eval_slice(const Value& object, const Slice& n, Env* env) {
  if (!object.is_array() && !object.is_string()) {
    throw RenderError(fmt::format("cannot slice {}: only arrays and strings can be sliced", object.a_type()));
  }
  auto bound = [&](const NodePtr& e, const char* what) -> std::optional<int64_t> {
    if (!e) return std::nullopt;
    const Value v = eval(*e, env);
    if (v.is_undefined()) return std::nullopt;
    if (!v.is_int()) throw RenderError(fmt::format("slice {} must be an integer, got {}", what, v.a_type()), e->pos);
    return v.as_int();
  };
  const auto start_v = bound(n.start, "start"), stop_v = bound(n.stop, "stop"), step_v = bound(n.step, "step");
  // Strings are sliced by code point.
  std::vector<std::string_view> chars;
  if (object.is_string()) {
    const std::string& s = object.as_string();
    for (size_t i = 0; i < s.size();) {
      const size_t len = text::decode(s, i).len;
      chars.push_back(std::string_view(s).substr(i, len));
      i += len;
    }
  }
  const int64_t len = object.is_array() ? static_cast<int64_t>(object.as_array().items.size()) : static_cast<int64_t>(chars.size());
  const int64_t step = step_v.value_or(1);
  std::vector<int64_t> picked;
  if (step > 0) {
    int64_t start = start_v.value_or(0), stop = stop_v.value_or(len);
    start = start < 0 ? std::max<int64_t>(len + start, 0) : std::min(start, len);
    stop = stop < 0 ? std::max<int64_t>(len + stop, 0) : std::min(stop, len);
    for (int64_t i = start; i < stop; i += step) picked.push_back(i);
  } else if (step < 0) {
    int64_t start = start_v.value_or(len - 1), stop = stop_v.value_or(-1);
    start = start < 0 ? std::max<int64_t>(len + start, -1) : std::min(start, len - 1);
    stop = stop < -1 ? std::max<int64_t>(len + stop, -1) : std::min(stop, len - 1);
    for (int64_t i = start; i > stop; i += step) picked.push_back(i);
  }  // a zero step selects nothing in the reference
  if (object.is_array()) {
    std::vector<Value> out;
    for (int64_t i : picked) out.push_back(object.as_array().items[static_cast<size_t>(i)]);
    return new_array(std::move(out));
  }
  std::string out;
  for (int64_t i : picked) out += chars[static_cast<size_t>(i)];
  return new_string(std::move(out));
}

std::pair<std::vector<Value>, ObjectRef> Interpreter::eval_arguments(const NodeList& args, Env* env) {
  std::vector<Value> positional;
  ObjectRef kwargs = heap_.new_object(ObjectKind::Kwargs);
  for (const auto& a : args) {
    if (a->kind == NodeKind::Spread) {
      const Value v = eval(*static_cast<const SpreadExpr&>(*a).arg, env);
      if (!v.is_array()) throw RenderError(fmt::format("cannot unpack {} with '*'", v.a_type()), a->pos);
      for (const Value& item : v.as_array().items) positional.push_back(item);
    } else if (a->kind != NodeKind::KwArg && a->kind != NodeKind::KwSpread) {
      positional.push_back(eval(*a, env));
    }
  }
  auto add = [&](const std::string& key, Value v, uint32_t pos) {
    if (kwargs->find(key)) throw RenderError(fmt::format("got multiple values for keyword argument '{}'", key), pos);
    kwargs->set(key, std::move(v));
  };
  for (const auto& a : args) {
    if (a->kind == NodeKind::KwArg) {
      const auto& kw = static_cast<const KwArg&>(*a);
      add(kw.key, eval(*kw.value, env), a->pos);
    } else if (a->kind == NodeKind::KwSpread) {
      const Value v = eval(*static_cast<const SpreadExpr&>(*a).arg, env);
      if (!v.is_dict()) throw RenderError(fmt::format("the argument after '**' must be a mapping, not {}", v.a_type()), a->pos);
      for (const auto& [k, item] : v.as_object().entries()) add(k, item, a->pos);
    }
  }
  return {std::move(positional), kwargs};
}

std::vector<Value> Interpreter::eval_call_args(const NodeList& args, Env* env) {
  auto [positional, kwargs] = eval_arguments(args, env);
  if (kwargs->size() > 0) positional.push_back(Value::object(kwargs));
  return positional;
}

Value Interpreter::call(const Value& fn, std::vector<Value>& args, Env* scope) {
  if (!fn.is_function()) throw RenderError(fmt::format("cannot call {}", fn.a_type()));
  return fn.as_function().call(*this, args, scope);
}

Value Interpreter::eval_call(const Call& n, Env* env) {
  std::vector<Value> args = eval_call_args(n.args, env);
  const Value fn = eval(*n.callee, env);
  if (!fn.is_function()) {
    throw RenderError(fmt::format("cannot call {}: it is {}", describe_callee(*n.callee), fn.a_type()));
  }
  return call(fn, args, env);
}

namespace {

bool numeric_like(const Value& v) { return v.is_number() || v.is_bool(); }

[[noreturn]] void operator_error(BinOp op, const Value& a, const Value& b) {
  throw RenderError(fmt::format("unsupported operator '{}' between {} and {}", binop_text(op), a.a_type(), b.a_type()));
}

Value int_or_float(bool is_float, double f, int64_t i) { return is_float ? Value::number(f) : Value::integer(i); }

}  // namespace

Value Interpreter::eval_binary(const Binary& n, Env* env) {
  const Value left = eval(*n.left, env);
  if (n.op == BinOp::And) return left.truthy() ? eval(*n.right, env) : left;
  if (n.op == BinOp::Or) return left.truthy() ? left : eval(*n.right, env);
  const Value right = eval(*n.right, env);
  const BinOp op = n.op;
  if (op == BinOp::Eq) return Value::boolean(loose_equals(left, right));
  if (op == BinOp::Ne) return Value::boolean(!loose_equals(left, right));

  if (left.is_undefined() || right.is_undefined()) {
    // `x in undefined` is false and `x not in undefined` true; anything else on undefined is an error.
    if (right.is_undefined() && (op == BinOp::In || op == BinOp::NotIn)) return Value::boolean(op == BinOp::NotIn);
    throw RenderError(fmt::format("cannot apply '{}' to an undefined value", binop_text(op)));
  }
  if (left.is_none() || right.is_none()) throw RenderError(fmt::format("cannot apply '{}' to none", binop_text(op)));
  if (op == BinOp::Concat) return concat(js_string(left), js_string(right));

  if (op == BinOp::Pow && numeric_like(left) && numeric_like(right)) {
    const double a = left.numeric(), b = right.numeric();
    if (a == 0 && b < 0) throw RenderError("0 cannot be raised to a negative power");
    const double r = std::pow(a, b);
    if (!std::isfinite(r)) throw RenderError("'**' result is not a finite real number");
    const bool is_float = left.is_float() || right.is_float() || b < 0;
    if (!is_float && std::fabs(r) >= 9.2e18) throw RenderError("'**' result is too large for an integer");
    return int_or_float(is_float, r, static_cast<int64_t>(r));
  }
  if (left.is_number() && right.is_number()) {
    const bool both_int = left.is_int() && right.is_int();
    const double a = left.numeric(), b = right.numeric();
    switch (op) {
      case BinOp::Add:
      case BinOp::Sub:
      case BinOp::Mul: {
        if (both_int) {
          int64_t r;
          const int64_t x = left.as_int(), y = right.as_int();
          const bool overflow = op == BinOp::Add   ? __builtin_add_overflow(x, y, &r)
                                : op == BinOp::Sub ? __builtin_sub_overflow(x, y, &r)
                                                   : __builtin_mul_overflow(x, y, &r);
          if (overflow) throw RenderError(fmt::format("integer overflow in '{}'", binop_text(op)));
          return Value::integer(r);
        }
        return Value::number(op == BinOp::Add ? a + b : op == BinOp::Sub ? a - b : a * b);
      }
      case BinOp::Div: return Value::number(a / b);
      case BinOp::FloorDiv:
        if (both_int) {
          const int64_t x = left.as_int(), y = right.as_int();
          if (y == 0) throw RenderError("integer division by zero");
          if (y == -1) {
            if (x == std::numeric_limits<int64_t>::min()) throw RenderError("integer overflow in '//'");
            return Value::integer(-x);
          }
          int64_t q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          return Value::integer(q);
        }
        return Value::number(std::floor(a / b));
      case BinOp::Mod:
        if (both_int) {
          const int64_t x = left.as_int(), y = right.as_int();
          if (y == 0) throw RenderError("integer modulo by zero");
          return Value::integer(y == -1 ? 0 : x % y);  // the sign of the dividend, as in JavaScript
        }
        return Value::number(std::fmod(a, b));
      case BinOp::Lt: return Value::boolean(both_int ? left.as_int() < right.as_int() : a < b);
      case BinOp::Gt: return Value::boolean(both_int ? left.as_int() > right.as_int() : a > b);
      case BinOp::Le: return Value::boolean(both_int ? left.as_int() <= right.as_int() : a <= b);
      case BinOp::Ge: return Value::boolean(both_int ? left.as_int() >= right.as_int() : a >= b);
      default: break;
    }
  } else if (left.is_array() && right.is_array()) {
    if (op == BinOp::Add) {
      std::vector<Value> items = left.as_array().items;
      check_items(items.size() + right.as_array().items.size());
      items.insert(items.end(), right.as_array().items.begin(), right.as_array().items.end());
      return new_array(std::move(items));
    }
  } else if (right.is_array()) {
    if (op == BinOp::In || op == BinOp::NotIn) {
      bool found = false;
      for (const Value& item : right.as_array().items) {
        if (strict_equals(item, left)) {
          found = true;
          break;
        }
      }
      return Value::boolean(found == (op == BinOp::In));
    }
  }
  if ((left.is_string() || right.is_string()) && op == BinOp::Add) return concat(js_string(left), js_string(right));
  if (left.is_string() && right.is_string() && (op == BinOp::In || op == BinOp::NotIn)) {
    const bool found = right.as_string().find(left.as_string()) != std::string::npos;
    return Value::boolean(found == (op == BinOp::In));
  }
  if (left.is_string() && right.is_dict() && (op == BinOp::In || op == BinOp::NotIn)) {
    const bool found = right.as_object().find(left.as_string()) != nullptr;
    return Value::boolean(found == (op == BinOp::In));
  }
  operator_error(op, left, right);
}

Value Interpreter::eval_unary(const Unary& n, Env* env) {
  const Value v = eval(*n.arg, env);
  if (n.op == UnOp::Not) return Value::boolean(!v.truthy());
  const bool neg = n.op == UnOp::Neg;
  if (v.is_float()) return Value::number(neg ? -v.as_float() : v.as_float());
  if (v.is_int() || v.is_bool()) {
    const int64_t i = v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int();
    if (neg && i == std::numeric_limits<int64_t>::min()) throw RenderError("integer overflow in unary '-'");
    return Value::integer(neg ? -i : i);
  }
  throw RenderError(fmt::format("unary '{}' needs a number, got {}", neg ? "-" : "+", v.a_type()));
}

Value Interpreter::eval_test(const TestExpr& n, Env* env) {
  const Value operand = eval(*n.operand, env);
  std::vector<Value> args;
  for (const auto& a : n.args) args.push_back(eval(*a, env));
  const bool result = run_test(n.name, operand, args);
  return Value::boolean(n.negate ? !result : result);
}

}  // namespace zinc::chat::jinja
