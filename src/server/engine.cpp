#include "server/engine.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "backend/exec_common.h"
#include "core/error.h"
#include "model/model.h"

namespace zinc::server {

bool Job::next(std::string& piece, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  piece.clear();
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !pieces_.empty() || finished_; });
  if (!pieces_.empty()) {
    // Hand over everything pending at once: fewer, larger writes when the client reads slowly.
    while (!pieces_.empty()) {
      piece += pieces_.front();
      pieces_.pop_front();
    }
    return true;
  }
  return !finished_;
}

bool Job::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_ && pieces_.empty();
}

void Job::push(std::string_view text) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pieces_.emplace_back(text);
  }
  cv_.notify_all();
}

void Job::finish(runtime::GenerateResult r) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result_ = std::move(r);
    finished_ = true;
  }
  cv_.notify_all();
}

void Job::fail(int status, std::string message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(message);
    error_status_ = status;
    finished_ = true;
  }
  cv_.notify_all();
}

// A long prompt read on a context of its own (ExecOptions::background) beside the slots' steps: the
// slot's first n pending tokens, at positions [from, from + n) of its sequence, on a thread of its own.
struct Engine::Lane {
  std::shared_ptr<backend::Executable> exe;  // one sequence
  std::thread thread;
  Slot* slot = nullptr;       // whose prompt it reads (null: idle)
  std::shared_ptr<Job> job;   // that slot's job as it started (the slot may have moved on since)
  int32_t from = 0, n = 0;
  std::vector<int32_t> tokens;
  std::atomic<bool> done{false}, cancel{false};
  std::string error;
};

struct Engine::Slot {
  std::unique_ptr<runtime::Session> session;
  std::unique_ptr<runtime::Session> draft;     // speculative decoding: the draft model's context
  std::unique_ptr<runtime::Drafter> drafter;   // what drafts (from it, or the model's own head; null: none)
  std::shared_ptr<Job> job;
  std::unique_ptr<sample::Sampler> sampler;
  std::unique_ptr<runtime::Generation> generation;
};

Engine::Engine(const gguf::File& file, const tokenizer::Tokenizer& tok, EngineOptions options)
    : tok_(tok), options_(std::move(options)) {
  if (options_.n_slots < 1) throw Error("the server needs at least one slot (--parallel)");
  const model::Model model = model::load(file);
  backend_ = backend::make_backend_for(options_.backend, model.graph, options_.device, options_.threads);
  // The weights once, and one context holding a sequence per slot (each its own KV rows and state):
  // a step carries every active slot's tokens and reads each weight once for all of them.
  weights_ = backend_->load(model.graph, file);
  backend_name_ = backend_->name();
  backend::ExecOptions exec = options_.exec;
  exec.n_seq = options_.n_slots;
  exec.max_tokens = std::max(exec.max_tokens, options_.n_slots);
  if (options_.cache_bytes > 0) {
    // The cache's blocks beside the slots' own: as many as its bytes buy (a model without attention
    // layers has blocks of no bytes: then one context's worth).
    const uint64_t block_bytes = backend::kv_block_bytes(backend::kv_row_bytes(model.graph, backend::kv_storage_type(exec.kv_type)));
    exec.cache_blocks = static_cast<int32_t>(std::max<uint64_t>(
        1, block_bytes ? std::min<uint64_t>(options_.cache_bytes / block_bytes, 1u << 20) : backend::kv_blocks(exec.n_ctx)));
  }
  // A draft model, else the model's own multi-token-prediction head.
  const bool drafting = (!options_.draft_model.empty() || model.graph.mtp) && options_.spec != runtime::SpecMode::Off;
  const bool draft_model = drafting && !options_.draft_model.empty();
  backend::ExecOptions draft_exec = exec;
  if (drafting) exec.kept_states = options_.draft_max + 1;  // a hybrid goes back to any token of a verifying step
  drafting_ = !drafting ? "" : draft_model ? options_.draft_model : "the model's own prediction head";
  if (draft_model) {
    draft_file_ = std::make_unique<gguf::File>(gguf::File::open(options_.draft_model));
    runtime::check_draft_vocab(tok_, tokenizer::Tokenizer::from_gguf(*draft_file_), options_.draft_model);
    draft_weights_ = backend_->load(model::load(*draft_file_).graph, *draft_file_);
    draft_exec.n_seq = 1;
    draft_exec.cache_blocks = 0;
  }
  exe_ = weights_->instantiate(exec);
  exe_->warm_up();  // a GPU's pipelines made now, not in the first requests' time
  const bool auto_lane = options_.prompt_lane < 0;
  // (One slot never decodes beside another's prompt: no lane then.)
  if (auto_lane) options_.prompt_lane = weights_->steps_side_by_side() && options_.n_slots > 1 ? kAutoPromptLane : 0;
  if (options_.prompt_lane > 0 && exe_->can_rewind()) {  // (a recurrent state's checkpoints come from the slots' own steps)
    backend::ExecOptions lane = exec;
    lane.n_seq = 1;
    lane.cache_blocks = 0;
    lane.kept_states = 0;
    lane.background = true;
    lane_ = std::make_unique<Lane>();
    try {
      lane_->exe = weights_->instantiate(lane);
      lane_->exe->warm_up();
    } catch (const Error& e) {
      if (!auto_lane) throw;
      // (By default the lane is a convenience: a device without room for its context serves as before.)
      spdlog::warn("no room for the prompt lane's context ({}): long prompts go in chunks within the decoding steps", e.what());
      lane_.reset();
      options_.prompt_lane = 0;
    }
    if (lane_ && !weights_->steps_side_by_side()) {
      spdlog::warn("--prompt-lane: the {} backend runs one context's step at a time, so a long prompt's chunks read "
                   "beside the others hold their steps for a whole chunk (it pays where contexts run side by side: CUDA)",
                   backend_name_);
    }
  }
  if (options_.cache_bytes > 0) cache_ = std::make_shared<runtime::PrefixCache>(exe_, options_.cache_bytes, options_.cache_host_bytes);
  for (int i = 0; i < options_.n_slots; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->session = std::make_unique<runtime::Session>(weights_, exe_, i);
    slot->session->set_prefix_cache(cache_);
    if (draft_model) {  // each slot drafts in a context of its own over the draft model's weights
      slot->draft = std::make_unique<runtime::Session>(draft_weights_, draft_exec);
      auto drafter = std::make_unique<runtime::ModelDrafter>(*slot->draft, options_.draft_max, options_.spec);
      drafter->check_target(*slot->session);
      slot->drafter = std::move(drafter);
    } else if (drafting) {  // or from the model's own head, in a context of the slot's own
      slot->drafter = std::make_unique<runtime::MtpDrafter>(*slot->session, options_.draft_max, options_.spec);
    }
    slots_.push_back(std::move(slot));
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (lane_ && lane_->thread.joinable()) {
    lane_->cancel = true;
    lane_->thread.join();
  }
  for (auto& job : queue_) job->fail(503, "the server is shutting down");
  for (auto& slot : slots_) {
    if (slot->job) slot->job->fail(503, "the server is shutting down");
  }
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Room: the free slots (the scheduler has not picked their jobs up yet) plus the queue limit.
    int free_slots = 0;
    for (const auto& slot : slots_) free_slots += slot->job == nullptr;
    if (static_cast<int>(queue_.size()) >= options_.queue_limit + free_slots) return false;
    job->submitted_ = std::chrono::steady_clock::now();
    queue_.push_back(job);
  }
  cv_.notify_all();
  return true;
}

uint64_t Engine::contexts_device_bytes() const { return exe_->device_bytes() + (lane_ ? lane_->exe->device_bytes() : 0); }

std::vector<std::vector<float>> Engine::embed(const std::vector<std::vector<int32_t>>& inputs, runtime::Pooling pooling,
                                              bool normalize) {
  const std::lock_guard<std::mutex> lock(embed_mutex_);
  if (!embedder_) {
    embedder_ = std::make_unique<runtime::Embedder>(weights_, options_.exec.n_ctx, std::max(options_.exec.max_tokens, 1));
  }
  std::vector<std::vector<float>> out;
  out.reserve(inputs.size());
  for (const auto& ids : inputs) out.push_back(embedder_->embed(ids, pooling, normalize));
  return out;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats s = counters_;
  s.n_slots = static_cast<int>(slots_.size());
  s.queued = static_cast<int>(queue_.size());
  for (const auto& slot : slots_) s.busy_slots += slot->job != nullptr;
  if (cache_) s.cache = cache_->stats();
  return s;
}

// Called with mutex_ held.
void Engine::start_job(Slot& slot, std::shared_ptr<Job> job) {
  slot.job = std::move(job);
  Job* j = slot.job.get();
  j->queue_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - j->submitted_).count();
  j->options_.draft = slot.drafter.get();
  try {
    slot.sampler = std::make_unique<sample::Sampler>(j->sampling_, &tok_);
    slot.generation = std::make_unique<runtime::Generation>(*slot.session, tok_, *slot.sampler, j->prompt_, j->options_,
                                                            [j](std::string_view text) { j->push(text); });
  } catch (const Error& e) {
    j->fail(400, e.what());
    slot.job.reset();
  }
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        if (stop_ || !queue_.empty()) return true;
        return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->job != nullptr; });
      });
      if (stop_) return;
      // Fill free slots, each waiting job (oldest first) going to the free slot whose context shares
      // the longest prefix with its prompt: a conversation's next turn lands where its last one was.
      while (!queue_.empty()) {
        Slot* best = nullptr;
        size_t best_common = 0;
        const auto& prompt = queue_.front()->prompt_;
        for (auto& s : slots_) {
          if (s->job) continue;
          const auto& h = s->session->history();
          size_t c = 0;
          while (c < h.size() && c < prompt.size() && h[c] == prompt[c]) ++c;
          if (!best || c > best_common) {
            best = s.get();
            best_common = c;
          }
        }
        if (!best) break;
        auto job = queue_.front();
        queue_.pop_front();
        if (job->cancel_.load()) {
          job->fail(499, "cancelled before it started");
          continue;
        }
        start_job(*best, std::move(job));  // cheap: the prefill runs in the first step
      }
    }
    // Each active slot's next piece of work: a new request queues its prompt, one whose tokens have
    // run samples its next token and queues it (or ends); one still waiting for its tokens does nothing.
    for (auto& s : slots_) {
      if (!s->job) continue;
      bool more = false;
      try {
        more = s->generation->step();
        s->job->generated_.store(static_cast<int>(s->generation->result().tokens.size()));
      } catch (const Error& e) {
        s->job->fail(400, e.what());
        end_job(*s);
        continue;
      }
      if (!more) {
        auto r = s->generation->take_result();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          counters_.draft_tokens += r.draft_tokens;
          counters_.draft_accepted += r.draft_accepted;
        }
        s->job->finish(std::move(r));
        end_job(*s);
      }
    }
    finish_lane();
    start_lane();
    if (!run_step() && lane_ && lane_->slot) {  // (nothing but the background prompt: wait for it)
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || lane_->done || !queue_.empty(); });
    }
  }
}

void Engine::start_lane() {
  if (!lane_ || lane_->slot) return;
  Slot* pick = nullptr;
  bool decoding = false;
  for (auto& s : slots_) {
    if (!s->job) continue;
    const runtime::Session& ss = *s->session;
    if (ss.pending().size() == 1 || ss.pending_speculative()) {
      decoding = true;
    } else if (!pick && static_cast<int64_t>(ss.pending().size()) > options_.prompt_lane && !ss.observed()) {
      pick = s.get();
    }
  }
  if (!pick || !decoding) return;  // (alone, a prompt takes whole steps of its own)
  const runtime::Session& ss = *pick->session;
  Lane& l = *lane_;
  l.from = ss.n_past();
  l.n = static_cast<int32_t>(ss.pending().size()) - 1;  // (the last token in the slot's own step: its logits there)
  l.tokens.assign(ss.pending().begin(), ss.pending().begin() + l.n);
  try {
    if (l.from > 0) {
      l.exe->seq_take(*exe_, ss.seq(), 0, l.from);  // what the slot holds already (a reused prefix)
    } else {
      l.exe->seq_clear(0);
    }
  } catch (const Error&) {
    return;  // (the prompt goes through the slot's own steps)
  }
  l.slot = pick;
  l.job = pick->job;
  l.done = false;
  l.cancel = false;
  l.error.clear();
  l.thread = std::thread([this, &l] {
    try {
      const int32_t chunk = l.exe->options().max_tokens;
      for (int32_t at = 0; at < l.n && !l.cancel && !l.job->cancel_.load(); at += chunk) {  // (a client gone: stop)
        const int32_t m = std::min(chunk, l.n - at);
        graph::StepParams step;
        step.add(0, l.from + at, std::vector<int32_t>(l.tokens.begin() + at, l.tokens.begin() + at + m));
        l.exe->run(step);
      }
    } catch (const std::exception& e) {
      l.error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      l.done = true;
    }
    cv_.notify_all();
  });
}

void Engine::finish_lane() {
  if (!lane_ || !lane_->slot || !lane_->done) return;
  Lane& l = *lane_;
  l.thread.join();
  Slot& s = *l.slot;
  l.slot = nullptr;
  const std::shared_ptr<Job> job = std::move(l.job);
  // A job cancelled or ended meanwhile: nothing to move. A failed read: the tokens are still pending,
  // and the slot's own steps read them.
  if (s.job != job || l.cancel || job->cancel_.load() || !l.error.empty()) return;
  try {
    exe_->seq_take(*l.exe, 0, s.session->seq(), l.from + l.n);
    s.session->committed_elsewhere(l.n);
  } catch (const Error& e) {
    // Not expected: the request fails, its sequence starts again from nothing (as a failed step's).
    s.job->fail(500, e.what());
    exe_->seq_clear(s.session->seq());
    s.session->reset();
    end_job(s);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.lane_tokens += l.n;
  ++counters_.lane_prompts;
}

void Engine::end_job(Slot& s) {
  if (lane_ && lane_->slot == &s) lane_->cancel = true;
  s.session->drop_pending();
  s.generation.reset();
  std::lock_guard<std::mutex> lock(mutex_);
  s.job.reset();
}

int32_t prompt_room(double decode_s, double per_token_s, double factor, int32_t min_tokens, int32_t max_tokens,
                    int32_t few_room) {
  if (factor <= 1) return max_tokens;
  const int32_t least = std::min(min_tokens, max_tokens);
  if (few_room > 0) max_tokens = std::max(least, std::min(max_tokens, few_room));
  if (decode_s <= 0 || per_token_s <= 0) return max_tokens;
  const double n = (factor - 1) * decode_s / per_token_s;
  if (n >= static_cast<double>(max_tokens)) return max_tokens;
  return std::max(static_cast<int32_t>(n), least);
}

namespace {
// The power of two a step of `rows` rows counts as: b with rows in (2^(b-1), 2^b].
int size_of(int64_t rows) { return rows <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<uint64_t>(rows - 1))); }
}  // namespace

int32_t fitted_prompt_room(int32_t decoding, int32_t linear, int32_t cap, std::span<const double> step_s, double limit_s,
                           int32_t min_tokens) {
  if (cap <= 0) return 0;
  if (limit_s <= 0) return std::min(linear, cap);
  int32_t best = 0;
  for (int b = size_of(decoding + 1); b < static_cast<int>(step_s.size()); ++b) {
    const int64_t size = int64_t{1} << b;
    const auto chunk = static_cast<int32_t>(std::min<int64_t>(cap, size - decoding));
    if (chunk <= best) break;  // (cap reached)
    const double t = step_s[static_cast<size_t>(b)];
    if (t > 0 ? t > limit_s : static_cast<int64_t>(decoding) + linear <= size / 2) break;  // (unmeasured: tried where linear reaches)
    best = chunk;
  }
  return best > 0 ? best : std::min(min_tokens, cap);
}

void forget_stale_step_times(std::span<double> step_s, std::span<const int64_t> measured_at, int64_t steps, int64_t stale_steps,
                             double limit_s) {
  for (size_t b = 0; b < step_s.size() && b < measured_at.size(); ++b)
    if (steps - measured_at[b] > stale_steps && step_s[b] <= limit_s) step_s[b] = 0;
}

void record_step_time(double& estimate, double t, double limit_s) {
  estimate = estimate > 0 ? 0.8 * estimate + 0.2 * t : t;
  if (limit_s > 0 && t > limit_s) estimate = std::max(estimate, t);
}

// One step over every slot with queued tokens: each decoding slot's token first, then prompt chunks
// while the step has room (max_tokens, and beside decoding slots what decode_latency allows, within
// the backend's few_rows()): a long prompt arriving does not stall the streams decoding.
bool Engine::run_step() {
  graph::StepParams step;
  std::vector<std::pair<Slot*, int32_t>> parts;
  int32_t room = exe_->options().max_tokens, prompt_tokens = 0, decoding_parts = 0, decoding_tokens = 0;
  for (const bool decoding : {true, false}) {
    if (!decoding && decoding_parts > 0 && options_.decode_latency > 0) {
      const int32_t few = exe_->few_rows();
      const int32_t few_room = few > 0 ? std::max(1, few - decoding_tokens) : 0;
      const int32_t linear = prompt_room(decode_step_s_, prompt_token_s_, options_.decode_latency, 8, room, few_room);
      if (few > 0) {  // (a backend whose few-row products take tokens in groups: fitted to its step sizes)
        std::array<double, kSizes> known = size_s_;
        const double limit = options_.decode_latency * decode_step_s_;
        forget_stale_step_times(known, size_at_, counters_.steps, kStaleSteps, limit);
        room = std::min(room, fitted_prompt_room(decoding_tokens, linear, std::min(room, few_room), known, limit, 8));
      } else {
        room = std::min(room, linear);
      }
    }
    for (auto& s : slots_) {
      if (!s->job || room == 0) continue;
      if (lane_ && lane_->slot == s.get() && lane_->job == s->job) continue;  // (its prompt is being read beside)
      const auto& p = s->session->pending();
      // A decoding slot's next token, or its next token and the drafts after it (taken whole, where
      // they fit); then prompts.
      const bool spec = s->session->pending_speculative();
      if (p.empty() || (p.size() == 1 || spec) != decoding) continue;
      if (spec && static_cast<int32_t>(p.size()) > room) continue;
      const int32_t n = spec ? static_cast<int32_t>(p.size()) : s->session->chunk(static_cast<int64_t>(p.size()), room);
      s->session->add_to(step, n);
      parts.emplace_back(s.get(), n);
      room -= n;
      if (!decoding) prompt_tokens += n;
      else ++decoding_parts, decoding_tokens += n;
    }
  }
  if (parts.empty()) return false;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    exe_->run(step);
    // The estimates behind decode_latency: a step of decoding slots alone, and what each prompt token
    // beside them adds (moving averages: the step sizes change as requests come and go).
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (const int b = size_of(static_cast<int64_t>(step.tokens.size())); exe_->few_rows() > 0 && b < kSizes) {
      // (fitted_prompt_room's times: only where steps are fitted)
      record_step_time(size_s_[static_cast<size_t>(b)], t, decode_step_s_ > 0 ? options_.decode_latency * decode_step_s_ : 0.0);
      size_at_[static_cast<size_t>(b)] = counters_.steps;
    }
    if (prompt_tokens == 0) {
      record_step_time(decode_step_s_, t, 0);
    } else if (decoding_parts == 0 || decode_step_s_ > 0) {
      record_step_time(prompt_token_s_, std::max(0.0, t - (decoding_parts > 0 ? decode_step_s_ : 0.0)) / prompt_tokens, 0);
    }
  } catch (const Error& e) {
    // Not expected (every session checked its tokens): the step's requests fail, their sequences start
    // again from nothing.
    for (auto& [s, n] : parts) {
      s->job->fail(500, e.what());
      exe_->seq_clear(s->session->seq());
      s->session->reset();
      end_job(*s);
    }
    return true;
  }
  // Each part's logits rows: one, or (a speculative step's) one per token, committed() given the first.
  int64_t row = 0, first = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const auto& part = step.seqs[k];
    const int64_t rows = part.all_logits ? part.n_tokens : 1;
    parts[k].first->session->committed(parts[k].second, part.all_logits ? row : row + rows - 1, first);
    row += rows;
    first += part.n_tokens;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.steps;
  counters_.step_sequences += static_cast<int64_t>(parts.size());
  counters_.step_tokens += static_cast<int64_t>(step.tokens.size());
  counters_.step_prompt_tokens += prompt_tokens;
  counters_.max_step_sequences = std::max(counters_.max_step_sequences, static_cast<int>(parts.size()));
  return true;
}

}  // namespace zinc::server
