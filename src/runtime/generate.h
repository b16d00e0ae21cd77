// The generation loop shared by `zinc run`, `zinc chat` and the server: prefill a prompt (reusing what
// the context already holds), then sample, stream text, and stop at an end-of-generation token, a stop
// string, the token limit, a cancel request or a full context (or shift the context and go on).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/session.h"
#include "runtime/speculative.h"
#include "sample/grammar_matcher.h"
#include "sample/sampler.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace zinc::runtime {

// A limit on the tokens a model spends reasoning. Inside its reasoning block (after `open` in the
// generated text, or from the start when the prompt opened it, until `close`), once `tokens` tokens
// have been generated there the engine writes `conclusion` as if the model had: the family's closing
// sentence and its end-of-reasoning marker (chat::reasoning_markers). Generation then goes on in the
// answer, so a budget never cuts an answer off. Special tokens in `conclusion` are parsed as such.
struct ReasoningBudget {
  int32_t tokens = -1;  // < 0: no limit
  std::string open, close, conclusion;
  bool starts_inside = false;

  // The markers are known: reasoning tokens are counted (GenerateResult::reasoning_tokens).
  bool tracked() const { return !close.empty(); }
  bool limited() const { return tracked() && tokens >= 0 && !conclusion.empty(); }
};

enum class StopReason { Length, EndOfGeneration, StopString, Cancelled, ContextFull };

// "length", "eog", "stop", "cancelled", "context_full".
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int32_t max_tokens = 128;  // < 0: no limit but the context
  std::vector<std::string> stop;
  // A full context ends generation (ContextFull) unless context_shift is set: then the first n_keep
  // tokens stay, half of the rest is dropped and generation goes on.
  bool context_shift = false;
  int32_t n_keep = 0;
  const std::atomic<bool>* cancel = nullptr;  // polled between tokens (set from a signal handler)
  tokenizer::DecodeOptions decode;            // at_start = false when the text continues shown text
  bool sampler_sees_prompt = true;            // penalties include the prompt tokens not already accepted
  // Log-probabilities of each generated token under the model (softmax of its logits, before any
  // sampling stage), with this many most likely alternatives; -1: not collected.
  int32_t top_logprobs = -1;
  ReasoningBudget reasoning;
  // Output constrained to a grammar (outside the reasoning block, and not the conclusion the budget
  // writes): each token is the sampler's choice among the tokens the grammar allows, and generation
  // ends when the grammar can take nothing more. The vocabulary view is built from the tokenizer when
  // not given (pass one to share it between requests).
  std::shared_ptr<const sample::Grammar> grammar;
  std::shared_ptr<const sample::GrammarVocab> grammar_vocab;
  std::shared_ptr<sample::GrammarMaskCache> grammar_cache;  // masks shared by generations of one grammar
  // A lazy grammar: free text until the output (outside reasoning) contains this text, then the grammar
  // from that text on (the text itself is its first words; a tool call's opening tag, so only the call's
  // arguments are constrained). When the grammar refuses what follows an occurrence, the next one is tried.
  // "": the grammar applies from the first token.
  std::string grammar_trigger;
  // The trigger counts only where it begins the answer (whitespace before it aside, outside reasoning):
  // once the answer has other text, the output stays free (a Llama 3 call is a JSON object opening it).
  bool grammar_trigger_at_start = false;
  // Compute each step's mask on another thread while the model evaluates the previous token, so a
  // choice the grammar refuses is drawn again at once. For GPU backends: on the CPU it would take a
  // core from the model.
  bool grammar_overlap = false;
  // Benchmarks: an end-of-generation token is a token like any other (random weights choose them).
  bool ignore_eog = false;
  // Benchmarks: record when each token was chosen (GenerateResult::token_times).
  bool token_times = false;
  // Speculative decoding: drafted tokens verified in one step of the session (over a batched session,
  // one part of the scheduler's step). The output is the same as without; must outlive the generation.
  Drafter* draft = nullptr;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens, without the end-of-generation token
  std::string text;             // the text streamed, stop string excluded
  StopReason reason = StopReason::Length;
  int32_t stop_index = -1;      // StopString: which one
  int64_t prompt_tokens = 0;    // the prompt's length
  int64_t cached_tokens = 0;    // of which already in the context (not evaluated again)
  int32_t context_shifts = 0;
  int32_t reasoning_tokens = 0;  // generated inside the reasoning block (the conclusion included)
  bool reasoning_concluded = false;  // the budget ran out and the engine wrote the conclusion
  int32_t grammar_resamples = 0;     // tokens chosen over the whole vocabulary's grammar mask
  double grammar_s = 0;              // choosing tokens under the grammar (a mask computed meanwhile excluded)
  double prefill_s = 0;         // evaluating the uncached prompt tokens
  double first_token_s = 0;     // from the call to the first token's text (time to first token)
  double decode_s = 0;          // from the first sampled token to the end
  std::vector<TokenLogprobs> logprobs;  // one per generated token when asked for
  std::vector<double> token_times;      // with GenerateOptions::token_times: steady-clock seconds per token
  int32_t draft_tokens = 0;    // speculative decoding: tokens drafted and verified
  int32_t draft_accepted = 0;  // of which the model chose (generated without a step of their own)

  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;
};

using TextSink = std::function<void(std::string_view text)>;

// Generation one step at a time, so a scheduler can interleave several on one model: the first step()
// prefills the prompt, each later one samples a token and evaluates it. Over a batched session (see
// Session) a step queues the tokens instead and the scheduler runs them with other sequences'; step()
// does nothing while they are queued. The session, tokenizer and
// sampler must outlive it; `prompt` is copied.
class Generation {
 public:
  Generation(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler,
             std::span<const int32_t> prompt, GenerateOptions options, TextSink on_text);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Does the next piece of work; returns false once generation has ended (then result() is final).
  bool step();
  bool done() const { return done_; }
  const GenerateResult& result() const { return r_; }
  GenerateResult take_result() { return std::move(r_); }

 private:
  struct Impl;
  bool prefill();
  bool prefilled();  // the prompt is in the context: timings, the sampler's history, a zero token limit
  bool decode_one();
  void finish();
  bool emit_text(std::string text);
  void track_reasoning(std::string_view text);
  void watch_trigger(std::string_view text);  // activates a lazy grammar where its trigger appears
  bool took_draft(int32_t next);  // the token is the next drafted one: the model has evaluated it already
  void end_draft();               // the drafted tokens after the one reached are dropped
  void evaluate(int32_t next);    // the chosen token into the context, with drafted ones after it where drafting

  Session& session_;
  const tokenizer::Tokenizer& tok_;
  sample::Sampler& sampler_;
  std::vector<int32_t> prompt_;
  GenerateOptions opts_;
  TextSink on_text_;
  std::unique_ptr<Impl> impl_;
  GenerateResult r_;
  bool started_ = false, done_ = false, first_ = true, awaiting_prefill_ = false;
};

// Prefills `prompt` (the whole context wanted: tokens the session already holds as a prefix are
// reused) and generates. on_text receives the text as it becomes certain (never part of a stop string).
// Throws zinc::Error when the prompt itself does not fit the context.
GenerateResult generate(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler,
                        std::span<const int32_t> prompt, const GenerateOptions& options, const TextSink& on_text);

}  // namespace zinc::runtime
