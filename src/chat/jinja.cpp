// Jinja templates: parsing and rendering behind one entry point, with errors turned into messages that
// name the template, line and column.
#include "chat/jinja.h"

#include <fmt/format.h>

#include "chat/jinja_parser.h"
#include "chat/jinja_text.h"

namespace zinc::chat {

namespace {

TemplateError located(const std::string& name, const std::string& source, const jinja::RenderError& e) {
  int line = 0, column = 0;
  if (e.pos != jinja::RenderError::kNoPos) {
    const size_t pos = std::min<size_t>(e.pos, source.size());
    line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos; ++i) {
      if (source[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    column = static_cast<int>(jinja::text::code_points(std::string_view(source).substr(line_start, pos - line_start))) + 1;
  }
  std::string where = line ? fmt::format("{}:{}:{}", name, line, column) : name;
  std::string message = e.raised_by_template ? fmt::format("{}: the template raised an error: {}", where, e.what())
                                             : fmt::format("{}: {}", where, e.what());
  return TemplateError(message, line, column, e.raised_by_template);
}

}  // namespace

Template Template::parse(std::string source, std::string name) {
  Template t;
  try {
    t.program_ = jinja::parse(source, name);
  } catch (const jinja::RenderError& e) {
    throw located(name, source, e);
  }
  return t;
}

std::string Template::render(const nlohmann::ordered_json& context, const jinja::RenderOptions& options) const {
  try {
    jinja::Interpreter interpreter(*program_, options);
    return interpreter.render(context);
  } catch (const jinja::RenderError& e) {
    throw located(program_->name, program_->source, e);
  }
}

}  // namespace zinc::chat
