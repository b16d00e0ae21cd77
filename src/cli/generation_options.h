// Options shared by the commands that generate text (run, chat, and later serve): model loading,
// context, threads, KV cache type, sampling, stop strings, chat-template switches; and the loading
// itself, timed.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "gguf/reader.h"
#include "runtime/generate.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace zinc::cli {

struct GenerationArgs {
  std::string model;
  int n_predict = -1;  // per answer; < 0: until the context is full (run sets its own default)
  int ctx = 4096;
  unsigned threads = 0;
  std::string backend = "auto";  // cpu, vulkan, cuda, auto (a GPU through Vulkan when there is one)
  int device = -1;               // the Vulkan device's index (zinc check lists them); -1: the first discrete GPU
  std::string kv_type = "f16";
  bool context_shift = false;
  int n_keep = 0;
  // Sampling: the command's preset (run: greedy; chat: SamplerParams::chat()), changed by the options.
  sample::SamplerParams sampling;
  std::string samplers;                 // --samplers: stage names separated by ';' or ','
  std::vector<std::string> logit_bias;  // --logit-bias TOKEN+BIAS / TOKEN-BIAS
  std::vector<std::string> stop;
  // Output constrained to a grammar: GBNF text or file, or a JSON schema (text or file).
  std::string grammar, grammar_file, json_schema, json_schema_file;
  // Chat templates.
  std::string system;
  bool think = false, no_think = false;
  int reasoning_budget = -1;  // reasoning tokens before the engine concludes it; < 0: no limit
  bool drop_old_turns = false;
  std::string chat_template_file;  // overrides the model's template
  // The prefix cache (chat, serve): GB for KV blocks of earlier prompts and recurrent-state checkpoints.
  double cache_mem_gb = 1.0;
  double cache_ram_gb = 0;    // its host tier: GB of host memory for blocks evicted from the device
  bool prefix_cache = false;  // the command has one (chat_options)
  // Speculative decoding: a draft model of the same vocabulary (else the model's own multi-token-
  // prediction head, where it has one), the tokens drafted per step (0: 6 for a draft model, 3 for a
  // head) and whether to (on, off, auto: while the acceptance measured pays for it).
  std::string draft_model;
  int draft_max = 0;
  int32_t draft_tokens() const { return draft_max > 0 ? draft_max : draft_model.empty() ? 3 : 6; }
  std::string spec = "auto";

  std::optional<bool> enable_thinking() const;
  backend::ExecOptions exec_options() const;  // context, threads, KV type; 256-token prefill steps
  sample::SamplerParams sampler_params(int32_t n_ctx) const;
  // Throws zinc::Error for a grammar it cannot read. `backend`: the loaded backend's name (a GPU's
  // masks are computed while it evaluates).
  // `tok` resolves the grammar's <text> token elements (none: they are an error).
  runtime::GenerateOptions generate_options(const std::string& backend = "cpu", const tokenizer::Tokenizer* tok = nullptr) const;
  // The grammar --grammar, --grammar-file, --json-schema or --json-schema-file give, as GBNF ("" for none).
  std::string grammar_gbnf() const;
};

// "f16", "f32" or "q8_0" (the choices --kv-type accepts).
backend::KvType kv_type_from_name(const std::string& name);

// Adds the model, context, sampling and stop options to `cmd`. `chat` adds --system/--think/--no-think
// and the context policy.
void add_generation_options(CLI::App* cmd, GenerationArgs& a, bool chat_options);

struct LoadedModel {
  gguf::File file;
  tokenizer::Tokenizer tok;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<runtime::Session> session;
  double load_s = 0;
  // --draft: the draft model's file and session; what drafts (from it, or from the model's own
  // multi-token-prediction head; null: nothing).
  std::unique_ptr<gguf::File> draft_file;
  std::unique_ptr<runtime::Session> draft_session;
  std::unique_ptr<runtime::Drafter> drafter;
};

// Loads the draft model `path` for `m`'s session on its backend (the same context size; the
// target's session must keep enough states for a hybrid: ExecOptions::kept_states). Throws
// zinc::Error for a draft whose vocabulary is not the model's.
void load_draft(LoadedModel& m, const std::string& path, int32_t max_draft, runtime::SpecMode mode);

std::unique_ptr<LoadedModel> load_model(const GenerationArgs& a);

// The chat template: --chat-template's file, else the model's, else ChatML.
chat::ChatTemplate chat_template(const GenerationArgs& a, const gguf::File& file, const tokenizer::Tokenizer& tok);

}  // namespace zinc::cli
