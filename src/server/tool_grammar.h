// The grammar of a forced tool call (tool_choice required, or naming a tool), written in the model's own
// tool-call format so the output parser reads it back as tool calls: each call's arguments follow the
// tool's parameters schema.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "chat/output_parser.h"

namespace zinc::server {

// `tools`: the OpenAI tools array; `only`: the tool that must be called ("" for any of them); `several`:
// one or more calls (else exactly one). Throws ApiError (400) for a format whose calls cannot be
// constrained, or a schema that cannot.
std::string tool_call_grammar(chat::OutputFormat format, const nlohmann::ordered_json& tools, const std::string& only,
                              bool several);

}  // namespace zinc::server
