// The grammar of a tool call, written in the model's own tool-call format so the output parser reads it
// back as tool calls: each call's arguments follow the tool's parameters schema. A forced call
// (tool_choice required, or naming a tool) is the whole output; with tool_choice auto the model writes
// freely and, in the formats whose calls open with a tag, the grammar takes over from that tag.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "chat/output_parser.h"

namespace zinc::server {

struct CompletionRequest;

// `tools`: the OpenAI tools array; `only`: the tool that must be called ("" for any of them); `several`:
// one or more calls (else exactly one; Harmony has one call per turn); `lazy`: the grammar of calls that
// begin at the trigger output_constraint names rather than of the whole answer (differs for Harmony
// only). Throws ApiError (400) for a format whose calls cannot be constrained, or a schema that cannot.
// Harmony's grammar names control tokens (<|channel|>): it compiles only against a vocabulary that has them.
std::string tool_call_grammar(chat::OutputFormat format, const nlohmann::ordered_json& tools, const std::string& only,
                              bool several, bool lazy = false);

// What a request's output must follow: a GBNF grammar ("" for none) and the text from which it applies
// ("" for the whole output). In order: the request's own grammar (response_format, grammar, json_schema);
// a forced tool call (with a grammar of its own too: a 400); the server's default grammar; for tool_choice
// auto, the calls' grammar from where a call opens: Hermes "<tool_call>", Harmony a message's
// "to=functions.", Llama 3 a "{" that begins the answer (none when a tool's schema cannot be written as a
// grammar: those calls stay free, as without it).
struct OutputConstraint {
  std::string gbnf, trigger;
  bool trigger_at_start = false;  // the trigger counts only where it begins the answer (after whitespace)
  std::string param;              // the request field the grammar came from, for a 400 ("" the server's)
};
OutputConstraint output_constraint(chat::OutputFormat format, const CompletionRequest& r, const std::string& server_grammar);

// A grammar that constrains the whole answer of a thinking model whose prompt does not open its
// reasoning block (Qwen3 writes <think> itself, GPT-OSS its analysis message): `gbnf` with a rule
// kAfterReasoning that lets the answer begin with the block's opening (the block's body is outside the
// grammar; it resumes after the block ends) and, for Harmony, the final channel's header. "" for a
// format without reasoning. Names the format's tokens (<think>, <|channel|>): compile it against the
// model's vocabulary and fall back to `gbnf` alone when that fails.
inline constexpr const char* kAfterReasoning = "zinc-answer-after-reasoning";
std::string with_reasoning_lead(chat::OutputFormat format, const std::string& gbnf);

}  // namespace zinc::server
