// Throughput measurement of a session: prefill and decode tok/s over repeated runs with random token
// ids (the speed of a model does not depend on what the tokens say), time to first token, and the bytes
// a decode step must read, from which achieved bandwidth follows.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace zinc::runtime {

struct BenchCase {
  int32_t prompt = 512;    // prefill this many tokens (0: no prefill test)
  int32_t generate = 128;  // then decode this many (0: no decode test)
  int32_t depth = 0;       // tokens already in the context before the timed part
};

struct BenchSpread {
  double median = 0, min = 0, max = 0;
};

struct BenchCaseResult {
  BenchCase c;
  std::vector<double> prefill_tps, decode_tps, first_token_s;
  BenchSpread prefill, decode, first_token;
};

// Runs `warmup` untimed and `runs` timed repetitions of the case, each from an empty context, through
// the generation loop `zinc run` uses (greedy: the backend's argmax, the detokenizer, the stop checks).
// The session's context must hold depth + prompt + generate tokens.
BenchCaseResult run_bench_case(Session& session, const tokenizer::Tokenizer& tok, const BenchCase& c, int runs, int warmup,
                               uint32_t seed);

// Decode of `sequences` sequences stepped together (one token each per step, the weights read once
// per step): each sequence starts from `depth` random tokens (prefilled one sequence at a time, not
// timed), then `generate` steps each take every sequence's greedy token (the backend's argmax per
// sequence). tok/s counts every sequence's tokens. Uses its own context over the session's weights.
struct ParallelDecodeResult {
  std::vector<double> tps;  // aggregate tokens per second, per timed run
  BenchSpread spread;
};
ParallelDecodeResult run_parallel_decode(const std::shared_ptr<backend::Weights>& weights, const backend::ExecOptions& opts,
                                         int32_t sequences, const BenchCase& c, int runs, int warmup, uint32_t seed);

// A prompt read on a context of its own beside sequences decoding in another (both over `weights`):
// `sequences` sequences each start from 64 random tokens, then step together, one greedy token each a
// step; a prompt of `prompt` random tokens goes in chunks of `chunk` on a context with
// ExecOptions::background as given. Measured: the decode steps alone, the prompt alone, then `runs`
// rounds of the prompt read while the decode steps go on (the steps ending with it). What a server
// gains by reading a long prompt beside its streams instead of in chunks within their steps: on a GPU
// whose contexts' steps run side by side, the prompt at nearly its speed alone, the streams' steps
// slower by what it takes of the device.
struct PromptLaneResult {
  double step_p50_alone = 0;                     // a decode step, seconds
  double step_p50_during = 0, step_p99_during = 0;
  int steps_during = 0;                          // decode steps that ended while the prompt was read
  double prompt_alone = 0, prompt_during = 0;    // seconds from the prompt's first chunk to its last one's end (medians)
  int rounds_cut = 0;  // rounds whose decode steps stopped after max_during_s, the prompt then finishing alone
};
// (A round's decode steps stop after max_during_s: a background context at the least priority can wait
// as long as the others' steps keep the device busy.)
constexpr double kPromptLaneMaxDuringS = 20;
PromptLaneResult run_prompt_lane(const std::shared_ptr<backend::Weights>& weights, const backend::ExecOptions& opts, int32_t sequences,
                                 int32_t prompt, int32_t chunk, bool background, int runs, uint32_t seed,
                                 double max_during_s = kPromptLaneMaxDuringS);

// A multi-turn chat with a long shared system prompt: each turn appends a user message and generates
// an answer; the context keeps what it holds, so a turn evaluates only its new tokens.
struct ChatBenchCase {
  int32_t system = 1024, turns = 4, user = 64, answer = 64;
  // The first `reasoning` tokens of each answer are left out of the next turn's prompt, as templates
  // that drop past reasoning do (the session then holds tokens the conversation no longer has).
  int32_t reasoning = 0;
};

struct ChatTurnResult {
  int64_t prompt_tokens = 0;     // the whole conversation so far
  int64_t evaluated_tokens = 0;  // of which evaluated this turn (the rest reused)
  double first_token_s = 0, decode_tps = 0;
};

std::vector<ChatTurnResult> run_chat_bench(Session& session, const ChatBenchCase& c, uint32_t seed);

// Bytes one decode step reads with `context` tokens attended: every weight once (an embedding only
// used for lookup: one row) and, per attention layer, the cached K and V rows it attends.
uint64_t decode_bytes_per_token(const graph::Graph& g, const gguf::File& file, backend::KvType kv, int64_t context);
// The same for a step of `sequences` sequences each decoding one token with `context` tokens attended:
// the weights once (experts: those p uniformly routed tokens select, on average), per sequence its
// embedding row, recurrent state and cache rows.
uint64_t decode_bytes_per_step(const graph::Graph& g, const gguf::File& file, backend::KvType kv, int64_t context,
                               int32_t sequences);

BenchSpread spread(std::vector<double> v);
// The q-quantile of the values (nearest rank; 0 for none).
double percentile(std::vector<double> v, double q);

// What speculative decoding costs on a model (zinc bench --spec-cost K): after `depth` random tokens,
// the median seconds of a decode step (one token), of a verifying step of k + 1 tokens for k = 1..K
// (each row's logits kept, a recurrent state after each token), and, with a draft model, of one of its
// decode steps. Uses its own contexts over the sessions' weights.
struct SpecCost {
  double step_s = 0;
  std::vector<double> verify_s;  // [k - 1]: a step verifying k drafted tokens
  double draft_s = 0;            // a step of the draft model, or of the model's own prediction head (0: neither)
  bool head = false;             // draft_s is the model's multi-token-prediction head's
  // Generated tokens per second over plain decoding when each drafted token is accepted with
  // probability a and k are drafted: expected tokens per step against the step's cost.
  double speedup(double a, int32_t k) const;
  // The acceptance at which drafting k tokens breaks even (1 where it never does).
  double break_even(int32_t k) const;
};
SpecCost measure_spec_cost(const std::shared_ptr<backend::Weights>& target, const std::shared_ptr<backend::Weights>& draft,
                           const backend::ExecOptions& opts, int32_t max_draft, int32_t depth, int runs, uint32_t seed);

}  // namespace zinc::runtime
