#include "runtime/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <deque>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <limits>

#include "core/error.h"
#include "sample/stop_matcher.h"

namespace zinc::runtime {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Length: return "length";
    case StopReason::EndOfGeneration: return "eog";
    case StopReason::StopString: return "stop";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::ContextFull: return "context_full";
  }
  return "?";
}

double GenerateResult::prefill_tokens_per_s() const {
  const auto n = static_cast<double>(prompt_tokens - cached_tokens);
  return prefill_s > 0 ? n / prefill_s : 0.0;
}

double GenerateResult::decode_tokens_per_s() const {
  return decode_s > 0 && !tokens.empty() ? static_cast<double>(tokens.size()) / decode_s : 0.0;
}

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// log softmax of the chosen token and the k largest (computed in double: a 150k-entry sum).
TokenLogprobs logprobs_of(std::span<const float> logits, int32_t chosen, int32_t k) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  const double log_z = static_cast<double>(mx) + std::log(sum);
  auto lp = [&](int32_t t) { return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(t)]) - log_z); };
  TokenLogprobs out;
  out.chosen = {chosen, lp(chosen)};
  if (k > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const auto kk = std::min<size_t>(static_cast<size_t>(k), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(kk), ids.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    });
    for (size_t i = 0; i < kk; ++i) out.top.push_back({ids[i], lp(ids[i])});
  }
  return out;
}

}  // namespace

struct Generation::Impl {
  Impl(sample::StopMatcher s, tokenizer::Detokenizer d) : stops(std::move(s)), detok(std::move(d)) {}
  sample::StopMatcher stops;
  tokenizer::Detokenizer detok;
  Clock::time_point t0, t1;
  // The reasoning budget: whether the text so far is inside the reasoning block, the end of that text
  // a marker may still complete, and the conclusion's tokens not yet written.
  bool reasoning = false;
  std::string marker_tail;
  std::deque<int32_t> forced;
  std::unique_ptr<sample::GrammarMatcher> grammar;
  bool grammar_active = true;     // a lazy grammar is inactive until its trigger appears
  std::string trigger_tail;       // the output since the last place its trigger could begin
  bool trigger_missed = false;    // a trigger that must begin the answer did not
  int64_t grammar_state = 0;      // tokens the grammar has taken: names the state a mask belongs to
  std::vector<uint64_t> bits;     // the grammar's mask, when the best few candidates could not decide
  // grammar_overlap: a mask computed on another thread, over a snapshot of the grammar's state, while
  // the model evaluates; used when its state is the one the step needs, never waited for otherwise.
  struct MaskWorker {
    std::thread thread;
    std::mutex mutex;
    std::condition_variable cv;
    std::unique_ptr<sample::GrammarMatcher> matcher;  // the state to compute (null: none waiting)
    int64_t state = -1;                                // the state of the job queued, running or done
    bool running = false, done = false, stop = false;
    std::vector<uint64_t> bits;
    std::exception_ptr error;

    void loop() {
      std::unique_lock<std::mutex> lock(mutex);
      for (;;) {
        cv.wait(lock, [&] { return stop || matcher; });
        if (stop) return;
        std::unique_ptr<sample::GrammarMatcher> m = std::move(matcher);
        running = true;
        lock.unlock();
        std::vector<uint64_t> out;
        std::exception_ptr err;
        try {
          m->fill_mask_bits(out);
        } catch (...) {
          err = std::current_exception();
        }
        lock.lock();
        bits.swap(out);
        error = err;
        running = false;
        done = true;
        cv.notify_all();
      }
    }
    ~MaskWorker() {
      if (!thread.joinable()) return;
      {
        std::lock_guard<std::mutex> lock(mutex);
        stop = true;
      }
      cv.notify_all();
      thread.join();
    }
  };
  std::unique_ptr<MaskWorker> worker;
  // Speculative decoding: the tokens drafted after the last evaluated one, and how many of them the
  // model has chosen so far (the session stands at that row of the verifying step).
  std::vector<int32_t> drafts;
  size_t draft_at = 0;
  // The target step under way for the drafter's measure: its tokens and when it was asked for (its
  // logits arrive by the next decode_one: at once, or after a scheduler's step).
  int32_t step_tokens = 0;
  Clock::time_point step_at;

  // The worker has finished this state's mask (waiting for it costs nothing).
  bool worker_done(int64_t state) {
    if (!worker) return false;
    std::lock_guard<std::mutex> lock(worker->mutex);
    return worker->state == state && worker->done;
  }
  // The mask of the grammar's current state: the worker's when it has (or is computing) this state.
  void current_mask() {
    if (worker) {
      std::unique_lock<std::mutex> lock(worker->mutex);
      if (worker->state == grammar_state && (worker->running || worker->done || worker->matcher)) {
        worker->cv.wait(lock, [&] { return worker->done && !worker->matcher && !worker->running; });
        if (worker->error) std::rethrow_exception(worker->error);
        bits.swap(worker->bits);
        worker->done = false;
        worker->state = -1;
        return;
      }
    }
    grammar->fill_mask_bits(bits);
  }
  void start_mask_job() {
    if (!worker) {
      worker = std::make_unique<MaskWorker>();
      worker->thread = std::thread([w = worker.get()] { w->loop(); });
    }
    std::lock_guard<std::mutex> lock(worker->mutex);
    if (worker->running) return;  // still on an older state: this step's mask will be computed here if needed
    worker->matcher = std::make_unique<sample::GrammarMatcher>(grammar->snapshot());
    worker->state = grammar_state;
    worker->done = false;
    worker->cv.notify_all();
  }
};

Generation::Generation(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler,
                       std::span<const int32_t> prompt, GenerateOptions options, TextSink on_text)
    : session_(session),
      tok_(tok),
      sampler_(sampler),
      prompt_(prompt.begin(), prompt.end()),
      opts_(std::move(options)),
      on_text_(std::move(on_text)) {
  if (prompt_.empty()) throw Error("nothing to generate from: the prompt has no tokens");
  if (static_cast<int64_t>(prompt_.size()) >= session_.n_ctx()) {
    throw Error(fmt::format("the prompt ({} tokens) does not fit the context of {} tokens (raise --ctx)", prompt_.size(),
                            session_.n_ctx()));
  }
  if (opts_.context_shift && (opts_.n_keep < 0 || opts_.n_keep >= session_.n_ctx() - 1)) {
    throw Error(fmt::format("cannot keep {} tokens when shifting a context of {}", opts_.n_keep, session_.n_ctx()));
  }
  if (opts_.reasoning.limited() && !opts_.reasoning.starts_inside && opts_.reasoning.open.empty()) {
    throw Error("a reasoning budget needs the marker that opens reasoning, or a prompt that opened it");
  }
  impl_ = std::make_unique<Impl>(sample::StopMatcher(opts_.stop), tokenizer::Detokenizer(tok_, opts_.decode));
  impl_->reasoning = opts_.reasoning.tracked() && opts_.reasoning.starts_inside;
  if (opts_.grammar) {
    impl_->grammar = std::make_unique<sample::GrammarMatcher>(
        opts_.grammar, opts_.grammar_vocab ? opts_.grammar_vocab : sample::GrammarVocab::from_tokenizer(tok_),
        opts_.grammar_cache);
    impl_->grammar_active = opts_.grammar_trigger.empty();
  }
  r_.prompt_tokens = static_cast<int64_t>(prompt_.size());
}

Generation::~Generation() = default;

bool Generation::step() {
  if (done_) return false;
  bool more = true;
  if (!session_.pending().empty()) {
    // A batched session whose tokens the scheduler has not run yet: nothing to do but notice a cancel.
    if (!(opts_.cancel && opts_.cancel->load())) return true;
    session_.drop_pending();
    impl_->drafts.clear();  // never verified
    r_.reason = StopReason::Cancelled;
    more = false;
  } else if (!started_) {
    more = prefill();
  } else if (awaiting_prefill_) {
    more = prefilled() && decode_one();
  } else {
    more = decode_one();
  }
  started_ = true;
  if (!more) finish();
  return more;
}

bool Generation::prefill() {
  impl_->t0 = Clock::now();
  const auto l = session_.eval_reusing_prefix(prompt_, opts_.cancel);
  r_.cached_tokens = session_.reused_tokens();
  if (session_.batched()) {  // queued: the scheduler runs it, in chunks beside other sequences' tokens
    awaiting_prefill_ = true;
    return true;
  }
  if (l.empty()) {  // cancelled between chunks of a long prompt
    r_.prefill_s = since(impl_->t0);
    r_.reason = StopReason::Cancelled;
    return false;
  }
  return prefilled();
}

bool Generation::prefilled() {
  awaiting_prefill_ = false;
  r_.prefill_s = since(impl_->t0);
  session_.remember();  // the prompt, for the next request sharing its beginning
  impl_->t1 = Clock::now();
  if (opts_.sampler_sees_prompt) {
    for (size_t i = static_cast<size_t>(r_.cached_tokens); i < prompt_.size(); ++i) sampler_.accept(prompt_[i]);
  }
  if (opts_.max_tokens == 0) {
    r_.reason = StopReason::Length;
    return false;
  }
  return true;
}

bool Generation::emit_text(std::string text) {
  const auto out = impl_->stops.push(text);
  if (!out.text.empty()) {
    r_.text += out.text;
    if (on_text_) on_text_(out.text);
  }
  if (out.stopped) {
    r_.reason = StopReason::StopString;
    r_.stop_index = out.stop_index;
  }
  return out.stopped;
}

namespace {

// Keeps only the end of `tail` that could still begin `marker` (its last marker.size() - 1 bytes): the
// text after which a marker split over several tokens can still be found, and no more.
void keep_partial_marker(std::string& tail, const std::string& marker) {
  if (tail.size() >= marker.size()) tail.erase(0, tail.size() - (marker.size() - 1));
}

}  // namespace

void Generation::track_reasoning(std::string_view text) {
  std::string& t = impl_->marker_tail;
  t += text;
  for (;;) {
    const std::string& marker = impl_->reasoning ? opts_.reasoning.close : opts_.reasoning.open;
    if (marker.empty()) {  // no opening marker: once closed, reasoning does not start again
      t.clear();
      return;
    }
    const size_t at = t.find(marker);
    if (at == std::string::npos) return keep_partial_marker(t, marker);
    t.erase(0, at + marker.size());
    impl_->reasoning = !impl_->reasoning;
  }
}

void Generation::watch_trigger(std::string_view text) {
  const std::string& trigger = opts_.grammar_trigger;
  std::string& t = impl_->trigger_tail;
  t += text;
  if (opts_.grammar_trigger_at_start) {
    const size_t begin = t.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return t.clear();
    const std::string_view answer = std::string_view(t).substr(begin);
    if (answer.size() < trigger.size() && std::string_view(trigger).starts_with(answer)) return;  // may still be it
    impl_->grammar->reset();
    if (answer.starts_with(trigger) && impl_->grammar->accept_text(answer)) {
      impl_->grammar_active = true;
      ++impl_->grammar_state;
    } else {
      impl_->trigger_missed = true;
    }
    return t.clear();
  }
  for (size_t at; (at = t.find(trigger)) != std::string::npos;) {
    // The grammar takes the output from the trigger on, or this occurrence is not where it starts.
    impl_->grammar->reset();
    if (impl_->grammar->accept_text(std::string_view(t).substr(at))) {
      impl_->grammar_active = true;
      ++impl_->grammar_state;
      t.clear();
      return;
    }
    t.erase(0, at + 1);
  }
  keep_partial_marker(t, trigger);
}

bool Generation::decode_one() {
  if (impl_->step_tokens > 0) {
    opts_.draft->target_step(impl_->step_tokens, since(impl_->step_at));
    impl_->step_tokens = 0;
  }
  if (opts_.cancel && opts_.cancel->load()) {
    r_.reason = StopReason::Cancelled;
    return false;
  }
  // Reasoning over its budget: the engine writes the conclusion in the model's place.
  const bool was_reasoning = impl_->reasoning;
  if (was_reasoning && opts_.reasoning.limited() && impl_->forced.empty() && !r_.reasoning_concluded &&
      r_.reasoning_tokens >= opts_.reasoning.tokens) {
    const auto ids = tok_.encode_continuation(opts_.reasoning.conclusion);
    impl_->forced.assign(ids.begin(), ids.end());
    r_.reasoning_concluded = true;
  }
  const bool forced = !impl_->forced.empty();
  sample::GrammarMatcher* grammar = !forced && !was_reasoning && impl_->grammar_active ? impl_->grammar.get() : nullptr;
  if (grammar && grammar->exhausted()) {  // the grammar's sentence is complete and nothing may follow
    r_.reason = StopReason::EndOfGeneration;
    return false;
  }
  // Greedy with nothing that reads the logits: the backend's argmax (a GPU computes it and hands back
  // one id instead of a row of logits).
  const bool backend_pick = forced ? opts_.top_logprobs < 0 : !sampler_.needs_logits() && opts_.top_logprobs < 0;
  std::span<const float> logits = backend_pick ? std::span<const float>() : session_.last_logits();
  int32_t next = 0;
  if (forced) {
    next = impl_->forced.front();
    impl_->forced.pop_front();
  } else if (!grammar) {
    next = backend_pick ? session_.last_argmax() : sampler_.sample(logits);
  } else {
    const auto t_grammar = Clock::now();
    // Under a grammar the choice is the chain's over the logits with the refused tokens removed. The
    // device's argmax is that when the grammar allows it; else a mask the worker has finished decides
    // it at once; else the best few candidates usually do (Sampler::sample_allowed); only when they
    // cannot is the whole vocabulary's mask waited for or computed.
    next = backend_pick ? session_.last_argmax() : -1;
    if (next < 0 || !grammar->allows(next)) {
      if (logits.empty()) logits = session_.last_logits();
      const bool to_mask = impl_->worker_done(impl_->grammar_state);
      next = to_mask ? -1 : sampler_.sample_allowed(logits, [grammar](int32_t t) { return grammar->allows(t); });
    }
    if (next < 0) {
      // The whole mask: the chain over the tokens it allows (its top-k one pass over the row).
      impl_->current_mask();
      next = sampler_.sample_masked(logits, impl_->bits);
      if (next < 0) {  // the grammar allows no token of this vocabulary: stop rather than break it
        r_.reason = StopReason::EndOfGeneration;
        return false;
      }
      ++r_.grammar_resamples;
    }
    grammar->accept(next);
    ++impl_->grammar_state;
    r_.grammar_s += since(t_grammar);
  }
  sampler_.accept(next);
  if (opts_.token_times) {
    r_.token_times.push_back(std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
  }
  if (first_) {
    r_.first_token_s = since(impl_->t0);
    first_ = false;
  }
  if (!forced && !opts_.ignore_eog && tok_.vocab().is_eog(next)) {
    r_.reason = StopReason::EndOfGeneration;
    return false;
  }
  if (opts_.top_logprobs >= 0) r_.logprobs.push_back(logprobs_of(logits, next, opts_.top_logprobs));
  r_.tokens.push_back(next);
  if (was_reasoning) ++r_.reasoning_tokens;
  std::string text = impl_->detok.push(next);
  if (opts_.reasoning.tracked()) track_reasoning(text);
  if (!impl_->grammar_active && impl_->grammar && !impl_->trigger_missed && !was_reasoning && !impl_->reasoning) {
    watch_trigger(text);
  }
  if (emit_text(std::move(text))) return false;
  if (opts_.max_tokens >= 0 && static_cast<int64_t>(r_.tokens.size()) >= opts_.max_tokens) {
    r_.reason = StopReason::Length;
    return false;  // the last token needs no evaluation
  }
  if (took_draft(next)) return true;
  if (session_.n_past() >= session_.n_ctx()) {
    if (!opts_.context_shift) {
      r_.reason = StopReason::ContextFull;
      return false;
    }
    const int32_t n_discard = (session_.n_past() - opts_.n_keep) / 2;
    session_.shift(opts_.n_keep, std::max(1, n_discard));
    ++r_.context_shifts;
  }
  if (impl_->grammar && impl_->grammar_active && opts_.grammar_overlap && !impl_->reasoning && impl_->forced.empty()) {
    impl_->start_mask_job();
  }
  evaluate(next);
  return true;
}

bool Generation::took_draft(int32_t next) {
  auto& d = impl_->drafts;
  if (impl_->draft_at < d.size() && d[impl_->draft_at] == next) {
    ++impl_->draft_at;
    ++r_.draft_accepted;
    session_.speculative_accept();
    return true;
  }
  end_draft();
  return false;
}

void Generation::end_draft() {
  if (impl_->drafts.empty()) return;
  opts_.draft->accepted(static_cast<int32_t>(impl_->drafts.size()), static_cast<int32_t>(impl_->draft_at));
  impl_->drafts.clear();
  impl_->draft_at = 0;
  session_.speculative_end();
}

void Generation::evaluate(int32_t next) {
  if (opts_.draft && impl_->forced.empty()) {
    // Drafted tokens the model could still choose: within the token limit (the last token is never
    // evaluated), the context and the step (with recurrent state: the states it keeps).
    const auto& eo = session_.executable().options();
    int64_t room = std::min<int64_t>(session_.n_ctx() - session_.n_past(), eo.max_tokens) - 1;
    if (!session_.executable().can_rewind()) room = std::min<int64_t>(room, eo.kept_states - 1);
    if (opts_.max_tokens >= 0) room = std::min<int64_t>(room, opts_.max_tokens - static_cast<int64_t>(r_.tokens.size()) - 1);
    if (room > 0) {
      std::vector<int32_t> context(session_.history());
      context.push_back(next);
      impl_->drafts = opts_.draft->propose(context, static_cast<int32_t>(room));
    }
    impl_->step_at = Clock::now();
    impl_->step_tokens = 1 + static_cast<int32_t>(impl_->drafts.size());
    if (!impl_->drafts.empty()) {
      std::vector<int32_t> step{next};
      step.insert(step.end(), impl_->drafts.begin(), impl_->drafts.end());
      session_.eval_speculative(step);  // queued where the session is batched
      impl_->draft_at = 0;
      r_.draft_tokens += static_cast<int32_t>(impl_->drafts.size());
      return;
    }
  }
  session_.feed(std::span<const int32_t>(&next, 1));  // queued where the session is batched
}

void Generation::finish() {
  done_ = true;
  if (opts_.draft) end_draft();
  session_.remember();  // the whole exchange, for the conversation's next turn
  if (r_.reason != StopReason::StopString && !emit_text(impl_->detok.flush())) {
    const std::string held = impl_->stops.flush();
    if (!held.empty()) {
      r_.text += held;
      if (on_text_) on_text_(held);
    }
  }
  r_.decode_s = first_ ? 0.0 : since(impl_->t1);
}

GenerateResult generate(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler,
                        std::span<const int32_t> prompt, const GenerateOptions& options, const TextSink& on_text) {
  Generation g(session, tok, sampler, prompt, options, on_text);
  while (g.step()) {
  }
  return g.take_result();
}

}  // namespace zinc::runtime
