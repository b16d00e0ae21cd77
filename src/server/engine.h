// The server's engine: N slots over one model, each a sequence of one shared context (its own KV rows
// and recurrent state; one loaded copy of the weights), a bounded queue of waiting requests, and one
// scheduler thread running continuous batching: every step carries each decoding slot's next token and,
// while there is room (ExecOptions::max_tokens; beside decoding slots, what decode_latency allows),
// chunks of the prompts waiting to be evaluated, so each weight is read once per step for all of them
// and a long prompt does not stall the others. Sampling
// stays per request. A request's text reaches its HTTP handler through the job's channel; a handler
// that loses its client cancels the job and its sequence is freed at the next step.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "runtime/embed.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "runtime/prefix_cache.h"
#include "runtime/session.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace zinc::server {

struct EngineOptions {
  int n_slots = 1;
  int queue_limit = 32;  // waiting requests beyond the busy slots; more are refused
  backend::ExecOptions exec;
  std::string backend = "cpu";  // cpu, vulkan or auto
  int device = -1;
  unsigned threads = 0;  // CPU threads (0: every physical core)
  // The prefix cache shared by the slots (0: none; each slot then reuses only its own last prompt):
  // bytes of KV blocks set aside beside the slots' contexts plus recurrent-state checkpoints.
  uint64_t cache_bytes = 0;
  // Its host tier (0: none): bytes of host memory for blocks evicted from the device (and their
  // checkpoints), written back when a prompt matches them.
  uint64_t cache_host_bytes = 0;
  // While slots decode, the prompt tokens a step carries are held to what keeps the step within this
  // many times a step of the decoding slots alone (both measured as the steps run), so a long prompt
  // arriving raises the streams' gaps between tokens by at most this factor; 0: prompts take the
  // step's whole budget (exec.max_tokens).
  double decode_latency = 3;
  // A prompt of more than this many tokens arriving while other slots decode is read on a context of
  // its own (ExecOptions::background), one such prompt at a time, beside the slots' steps instead of in
  // chunks within them, then moved into its slot's sequence (its last token read there); 0: never. It
  // pays where the backend runs contexts' steps side by side (CUDA): the prompt at nearly its speed
  // alone, the streams' steps slower by what it takes of the device. Not for a model with recurrent
  // state, nor a slot whose drafts need the steps' hidden rows. -1: kAutoPromptLane where the backend
  // runs contexts' steps side by side and there is more than one slot, else never.
  int prompt_lane = -1;
  // Speculative decoding: a draft model of the same vocabulary (a GGUF path; "" for none), loaded on
  // the same backend with a context per slot, drafting up to draft_max tokens per step.
  std::string draft_model;
  int draft_max = 6;
  runtime::SpecMode spec = runtime::SpecMode::Auto;
};

// The prompt lane's threshold where EngineOptions::prompt_lane is -1 and the backend runs contexts'
// steps side by side (CUDA: a 4,096-token prompt beside 8 decoding streams meets both of its bounds).
constexpr int kAutoPromptLane = 512;

class Job {
 public:
  Job(std::vector<int32_t> prompt, sample::SamplerParams sampling, runtime::GenerateOptions options)
      : prompt_(std::move(prompt)), sampling_(std::move(sampling)), options_(std::move(options)) {
    options_.cancel = &cancel_;
  }

  // Handler side: waits for text (returns true with `piece`), or the end (returns false; then result()
  // or error() tells how it went). Gives up waiting after `timeout_ms` with an empty piece.
  bool next(std::string& piece, int timeout_ms = 1000);
  void cancel() { cancel_.store(true); }
  bool finished() const;
  const runtime::GenerateResult& result() const { return result_; }  // after next() returned false
  const std::string& error() const { return error_; }                // non-empty when it failed
  int error_status() const { return error_status_; }
  size_t prompt_size() const { return prompt_.size(); }
  // Seconds it waited in the queue for a slot (known once it started).
  double queue_wait_s() const { return queue_wait_s_.load(); }
  // Tokens it has generated so far (its text may hold fewer pieces).
  int generated() const { return generated_.load(); }

 private:
  friend class Engine;
  void push(std::string_view text);
  void finish(runtime::GenerateResult r);
  void fail(int status, std::string message);

  std::vector<int32_t> prompt_;
  sample::SamplerParams sampling_;
  runtime::GenerateOptions options_;
  std::atomic<bool> cancel_{false};
  std::chrono::steady_clock::time_point submitted_;
  std::atomic<double> queue_wait_s_{0.0};
  std::atomic<int> generated_{0};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  bool finished_ = false;
  runtime::GenerateResult result_;
  std::string error_;
  int error_status_ = 0;
};

// Prompt tokens a step beside decoding slots may carry so that it takes at most `factor` times a step
// of those slots alone: (factor - 1) decode_s / per_token_s, at least min_tokens (prompts always move),
// at most max_tokens; max_tokens while either time is not known yet (0). few_room > 0: also at most
// that many (the prompt tokens that keep the step within the backend's few_rows()), but not below
// min_tokens.
int32_t prompt_room(double decode_s, double per_token_s, double factor, int32_t min_tokens, int32_t max_tokens,
                    int32_t few_room = 0);

// That room fitted to the step's rows (`decoding` of them decode): steps cost about what steps of their
// rows rounded up to a power of two do (a GPU's products take tokens in groups: 33 rows read the
// weights as 64 do), so the step is filled to the largest such size that keeps within limit_s, as the
// times measured for each size say (step_s[b]: rows in (2^(b-1), 2^b]; 0 where none is known); a size
// not measured yet is tried where `linear` (prompt_room's tokens) reaches into it. At most cap tokens; at
// least min_tokens (or cap) when none fits. limit_s <= 0: linear. The scheduler fits steps so on
// backends with few_rows() (CUDA); elsewhere a step's cost grows with its rows and the linear room stands.
int32_t fitted_prompt_room(int32_t decoding, int32_t linear, int32_t cap, std::span<const double> step_s, double limit_s,
                           int32_t min_tokens);

// The sizes' times fitted_prompt_room goes by: step_s[b], forgotten (0: the size tried afresh) where it
// was last measured more than stale_steps steps before `steps` and within limit_s. A size measured past
// the limit stays known, so it is not tried blindly again (beside decoding streams one such step sets
// their gaps' p99: a 64-row step of 11.6 ms beside 8 streams of 3.2, retried once its estimate aged).
void forget_stale_step_times(std::span<double> step_s, std::span<const int64_t> measured_at, int64_t steps, int64_t stale_steps,
                             double limit_s);

// A step's time into an estimate (the scheduler's moving averages; fitted_prompt_room's step_s[b]
// with its limit): a moving average, but a step
// past limit_s (> 0) sets it to at least that time at once, so the size is left out from the next step
// on; one step near the limit on either side of it no longer takes several over it before the average
// crosses (a prompt's steps cost more as its depth grows: beside 8 streams, 64-row steps at 9.5-11 ms
// against a limit of 10.4 put the streams' gaps' p99 at 3.3-3.7x their median).
void record_step_time(double& estimate, double t, double limit_s);

struct EngineStats {
  int busy_slots = 0, queued = 0, n_slots = 0;
  // Since the start: steps run, the sequences and tokens they carried (prompt tokens among them),
  // the most sequences one step carried.
  int64_t steps = 0, step_sequences = 0, step_tokens = 0, step_prompt_tokens = 0;
  // Prompt tokens read on the background context (EngineOptions::prompt_lane), and the prompts.
  int64_t lane_tokens = 0, lane_prompts = 0;
  int max_step_sequences = 0;
  // Speculative decoding, over finished requests: tokens drafted and verified, and of those the ones
  // the model chose.
  int64_t draft_tokens = 0, draft_accepted = 0;
  runtime::PrefixCacheStats cache;  // the prefix cache shared by the slots (all zero without one)
};

class Engine {
 public:
  // `file` and `tok` must outlive the engine.
  Engine(const gguf::File& file, const tokenizer::Tokenizer& tok, EngineOptions options);
  ~Engine();

  // Queues a job; false when the queue is full (the caller answers 503).
  bool submit(const std::shared_ptr<Job>& job);
  EngineStats stats() const;
  // Device memory: the weights (held once) and the contexts of all slots together (0 on the CPU).
  uint64_t weights_device_bytes() const { return weights_->device_bytes(); }
  uint64_t contexts_device_bytes() const;
  const std::string& backend_name() const { return backend_name_; }
  // What drafts tokens for speculative decoding: the draft model's path, "the model's own prediction
  // head", or "" (nothing).
  const std::string& drafting() const { return drafting_; }
  // Each input's embedding (runtime::Embedder over the same weights: a context of its own, made at
  // the first call, whose steps take turns with the slots'). One caller at a time; throws zinc::Error
  // for an input longer than the context.
  std::vector<std::vector<float>> embed(const std::vector<std::vector<int32_t>>& inputs, runtime::Pooling pooling,
                                        bool normalize);
  int32_t n_ctx() const { return options_.exec.n_ctx; }
  // The prompts read on a context of their own: those of more than this many tokens (0: none), as
  // EngineOptions::prompt_lane resolved for the backend.
  int prompt_lane() const { return options_.prompt_lane; }

 private:
  struct Slot;
  void loop();
  void start_job(Slot& slot, std::shared_ptr<Job> job);
  void end_job(Slot& slot);
  bool run_step();  // false: no slot had tokens for a step
  // The background context's prompt (prompt_lane): started between steps where a slot's prompt
  // qualifies, finished (moved into the slot's sequence) once read.
  struct Lane;
  void start_lane();
  void finish_lane();

  const tokenizer::Tokenizer& tok_;
  EngineOptions options_;
  std::unique_ptr<backend::Backend> backend_;
  std::shared_ptr<backend::Weights> weights_;  // loaded once
  std::unique_ptr<gguf::File> draft_file_;     // speculative decoding: the draft model (or none)
  std::shared_ptr<backend::Weights> draft_weights_;
  std::shared_ptr<backend::Executable> exe_;   // one context; slot i is its sequence i
  std::shared_ptr<runtime::PrefixCache> cache_;  // over exe_'s blocks, shared by the slots (or none)
  EngineStats counters_;                       // the step counters (under mutex_)
  std::string backend_name_;
  std::string drafting_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::thread thread_;
  std::mutex embed_mutex_;
  std::unique_ptr<runtime::Embedder> embedder_;  // made at the first embeddings request
  // The scheduler thread's running estimates (seconds): a step of the decoding slots alone, and each
  // prompt token a step carries beside them.
  double decode_step_s_ = 0, prompt_token_s_ = 0;
  // Steps' times by their rows rounded up to a power of two (fitted_prompt_room), and the step each
  // was last measured at (an estimate within the limit not renewed for kStaleSteps steps is forgotten:
  // depth and load change what a size costs; forget_stale_step_times).
  static constexpr int kSizes = 16;
  static constexpr int64_t kStaleSteps = 256;
  std::array<double, kSizes> size_s_{};
  std::array<int64_t, kSizes> size_at_{};
  std::unique_ptr<Lane> lane_;  // (prompt_lane > 0)
};

}  // namespace zinc::server
