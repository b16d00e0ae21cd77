// Jinja templates for chat prompts: parse once, render many times.
//
// The interpreter is ZINC's own (no external engine) and renders byte-for-byte like @huggingface/jinja,
// the JavaScript renderer the Hugging Face ecosystem uses to check chat templates; tests/chat compares the
// two on every template in the shared test data. ZINC additionally implements standard Jinja built-ins
// that renderer lacks (see jinja_builtins.cpp and jinja_methods.cpp).
//
// Errors are zinc::Error (TemplateError) with the template's name, line and column:
//   "chat template:12:5: unknown filter 'wordwrap' for a string"
// A raise_exception() call in the template gives a TemplateError with raised_by_template set.
//
// A parsed Template is immutable; each render has its own interpreter state, so one Template may be
// rendered from several threads at once.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "chat/jinja_interpreter.h"
#include "core/error.h"

namespace zinc::chat {

class TemplateError : public zinc::Error {
 public:
  TemplateError(const std::string& message, int line_, int column_, bool raised)
      : zinc::Error(message), line(line_), column(column_), raised_by_template(raised) {}
  int line;    // 1-based; 0 when unknown
  int column;  // 1-based, in characters
  bool raised_by_template;
};

class Template {
 public:
  // Throws TemplateError for a template that does not parse.
  static Template parse(std::string source, std::string name = "chat template");

  // Renders with `context` (a JSON object) as the template's variables. Throws TemplateError.
  std::string render(const nlohmann::ordered_json& context, const jinja::RenderOptions& options = {}) const;

  const std::string& source() const { return program_->source; }
  const std::string& name() const { return program_->name; }

 private:
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace zinc::chat
