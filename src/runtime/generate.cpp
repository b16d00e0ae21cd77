#include "runtime/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

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

GenerateResult generate(Session& session, const tokenizer::Tokenizer& tok, sample::Sampler& sampler,
                        std::span<const int32_t> prompt, const GenerateOptions& opts, const TextSink& on_text) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  if (prompt.empty()) throw Error("nothing to generate from: the prompt has no tokens");
  if (static_cast<int64_t>(prompt.size()) >= session.n_ctx()) {
    throw Error(fmt::format("the prompt ({} tokens) does not fit the context of {} tokens (raise --ctx)", prompt.size(),
                            session.n_ctx()));
  }
  if (opts.context_shift && (opts.n_keep < 0 || opts.n_keep >= session.n_ctx() - 1)) {
    throw Error(fmt::format("cannot keep {} tokens when shifting a context of {}", opts.n_keep, session.n_ctx()));
  }
  sample::StopMatcher stops(opts.stop);
  tokenizer::Detokenizer detok(tok, opts.decode);
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());

  const auto t0 = Clock::now();
  auto logits = session.eval_reusing_prefix(prompt, opts.cancel);
  r.cached_tokens = session.reused_tokens();
  if (logits.empty()) {  // cancelled between chunks of a long prompt
    r.reason = StopReason::Cancelled;
    r.prefill_s = seconds(t0, Clock::now());
    return r;
  }
  if (opts.sampler_sees_prompt) {
    for (size_t i = static_cast<size_t>(r.cached_tokens); i < prompt.size(); ++i) sampler.accept(prompt[i]);
  }
  const auto t1 = Clock::now();
  r.prefill_s = seconds(t0, t1);

  auto emit = [&](const sample::StopMatcher::Out& out) {
    if (!out.text.empty()) {
      r.text += out.text;
      if (on_text) on_text(out.text);
    }
    if (out.stopped) {
      r.reason = StopReason::StopString;
      r.stop_index = out.stop_index;
    }
    return out.stopped;
  };
  bool first = true;
  for (;;) {
    if (opts.max_tokens >= 0 && static_cast<int64_t>(r.tokens.size()) >= opts.max_tokens) {
      r.reason = StopReason::Length;
      break;
    }
    if (opts.cancel && opts.cancel->load()) {
      r.reason = StopReason::Cancelled;
      break;
    }
    const int32_t next = sampler.sample(logits);
    sampler.accept(next);
    if (first) {
      r.first_token_s = seconds(t0, Clock::now());
      first = false;
    }
    if (tok.vocab().is_eog(next)) {
      r.reason = StopReason::EndOfGeneration;
      break;
    }
    r.tokens.push_back(next);
    if (emit(stops.push(detok.push(next)))) break;
    if (opts.max_tokens >= 0 && static_cast<int64_t>(r.tokens.size()) >= opts.max_tokens) {
      r.reason = StopReason::Length;
      break;  // the last token needs no evaluation
    }
    if (session.n_past() >= session.n_ctx()) {
      if (!opts.context_shift) {
        r.reason = StopReason::ContextFull;
        break;
      }
      const int32_t n_discard = (session.n_past() - opts.n_keep) / 2;
      session.shift(opts.n_keep, std::max(1, n_discard));
      ++r.context_shifts;
    }
    logits = session.eval(std::span<const int32_t>(&r.tokens.back(), 1));
  }
  if (r.reason != StopReason::StopString) {
    if (!emit(stops.push(detok.flush()))) emit({stops.flush(), false, -1});
  }
  r.decode_s = seconds(t1, Clock::now());
  return r;
}

}  // namespace zinc::runtime
