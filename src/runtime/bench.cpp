#include "runtime/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "quant/quant.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "sample/sampler.h"

namespace zinc::runtime {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

BenchSpread spread(std::vector<double> v) {
  BenchSpread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

BenchCaseResult run_bench_case(Session& session, const tokenizer::Tokenizer& tok, const BenchCase& c, int runs, int warmup,
                               uint32_t seed) {
  if (c.prompt < 0 || c.generate < 0 || c.depth < 0 || c.prompt + c.generate == 0) {
    throw Error("a benchmark case needs a prompt or tokens to generate");
  }
  const int64_t need = static_cast<int64_t>(c.depth) + c.prompt + c.generate + 1;
  if (need > session.n_ctx()) {
    throw Error(fmt::format("the case needs a context of {} tokens, the session has {}", need, session.n_ctx()));
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(session.n_vocab() - 1));
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = any(rng);
    return t;
  };
  BenchCaseResult r;
  r.c = c;
  sample::Sampler greedy(sample::SamplerParams::greedy());
  for (int i = 0; i < warmup + runs; ++i) {
    const bool timed = i >= warmup;
    session.reset();
    std::vector<int32_t> tokens = c.depth > 0 ? random_tokens(c.depth) : std::vector<int32_t>{};
    if (c.depth > 0) session.eval(tokens);
    // Prefill (or, with no prompt, one token to have logits to start decoding from), then `generate`
    // tokens each evaluated: the loop's last token needs no evaluation, so it makes one more.
    const auto prompt = random_tokens(std::max(1, c.prompt));
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    GenerateOptions o;
    o.max_tokens = c.generate + 1;
    o.ignore_eog = true;
    o.sampler_sees_prompt = false;
    greedy.reset();
    Generation g(session, tok, greedy, tokens, o, nullptr);
    g.step();  // the prefill (the depth already in the context is reused)
    const auto t1 = Clock::now();
    while (g.step()) {
    }
    const double decode_s = since(t1);
    const GenerateResult res = g.take_result();
    if (timed && c.prompt > 0) {
      r.prefill_tps.push_back(c.prompt / res.prefill_s);
      r.first_token_s.push_back(res.first_token_s);
    }
    if (timed && c.generate > 0) r.decode_tps.push_back(c.generate / decode_s);
  }
  r.prefill = spread(r.prefill_tps);
  r.decode = spread(r.decode_tps);
  r.first_token = spread(r.first_token_s);
  return r;
}

ParallelDecodeResult run_parallel_decode(const std::shared_ptr<backend::Weights>& weights, const backend::ExecOptions& opts,
                                         int32_t sequences, const BenchCase& c, int runs, int warmup, uint32_t seed) {
  if (sequences < 1 || c.generate < 1 || c.depth < 0) throw Error("a parallel decode needs sequences and tokens to generate");
  backend::ExecOptions o = opts;
  o.n_seq = sequences;
  o.n_ctx = c.depth + c.generate + 2;
  o.max_tokens = std::max(o.max_tokens, sequences);
  auto exe = weights->instantiate(o);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(exe->n_vocab() - 1));
  ParallelDecodeResult r;
  for (int i = 0; i < warmup + runs; ++i) {
    std::vector<int32_t> next(static_cast<size_t>(sequences));
    for (int32_t s = 0; s < sequences; ++s) {
      exe->seq_clear(s);
      std::vector<int32_t> text(static_cast<size_t>(c.depth) + 1);
      for (auto& t : text) t = any(rng);
      for (int32_t at = 0; at < static_cast<int32_t>(text.size()); at += o.max_tokens) {
        const int32_t n = std::min<int32_t>(o.max_tokens, static_cast<int32_t>(text.size()) - at);
        graph::StepParams step;
        step.add(s, at, std::vector<int32_t>(text.begin() + at, text.begin() + at + n));
        exe->run(step);
      }
      next[static_cast<size_t>(s)] = exe->argmax();
    }
    const auto t0 = Clock::now();
    for (int32_t k = 0; k < c.generate; ++k) {
      graph::StepParams step;
      for (int32_t s = 0; s < sequences; ++s) step.add(s, c.depth + 1 + k, {next[static_cast<size_t>(s)]});
      exe->run(step);
      for (int32_t s = 0; s < sequences; ++s) next[static_cast<size_t>(s)] = exe->argmax(s);
    }
    const double secs = since(t0);
    if (i >= warmup) r.tps.push_back(static_cast<double>(sequences) * c.generate / secs);
  }
  r.spread = spread(r.tps);
  return r;
}

PromptLaneResult run_prompt_lane(const std::shared_ptr<backend::Weights>& weights, const backend::ExecOptions& opts, int32_t sequences,
                                 int32_t prompt, int32_t chunk, bool background, int runs, uint32_t seed, double max_during_s) {
  if (sequences < 1 || prompt < 1 || chunk < 1 || runs < 1) throw Error("a prompt beside decoding sequences needs both and a chunk size");
  constexpr int32_t kStart = 64, kWarm = 10, kAlone = 50, kMaxSteps = 4096;
  backend::ExecOptions d = opts;
  d.n_seq = sequences;
  d.max_tokens = std::max(d.max_tokens, sequences);
  d.n_ctx = kStart + kMaxSteps + 2;
  d.background = false;
  d.cache_blocks = 0;
  backend::ExecOptions p = opts;
  p.n_seq = 1;
  p.max_tokens = chunk;
  p.n_ctx = prompt + 2;
  p.background = background;
  p.cache_blocks = 0;
  auto dec = weights->instantiate(d);
  auto pre = weights->instantiate(p);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(dec->n_vocab() - 1));
  const auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = any(rng);
    return t;
  };
  // The decoding sequences: their starts, then steps of one token each (restarted past kMaxSteps).
  std::vector<int32_t> next(static_cast<size_t>(sequences));
  int32_t pos = 0;
  const auto start = [&] {
    for (int32_t s = 0; s < sequences; ++s) {
      dec->seq_clear(s);
      const auto t = random_tokens(kStart);
      for (int32_t at = 0; at < kStart; at += d.max_tokens) {
        const int32_t n = std::min(d.max_tokens, kStart - at);
        graph::StepParams step;
        step.add(s, at, std::vector<int32_t>(t.begin() + at, t.begin() + at + n));
        dec->run(step);
      }
      next[static_cast<size_t>(s)] = dec->argmax();
    }
    pos = kStart;
  };
  const auto decode_step = [&] {
    if (pos >= kStart + kMaxSteps) start();
    graph::StepParams step;
    for (int32_t s = 0; s < sequences; ++s) step.add(s, pos, {next[static_cast<size_t>(s)]});
    const auto t0 = Clock::now();
    dec->run(step);
    for (int32_t s = 0; s < sequences; ++s) next[static_cast<size_t>(s)] = dec->argmax(s);
    ++pos;
    return since(t0);
  };
  const std::vector<int32_t> text = random_tokens(prompt);
  // (Its sequence cleared first, on this thread: a clear waits on the step lock, which the decode
  // steps below would hold nearly all the time.)
  const auto read_prompt = [&] {
    const auto t0 = Clock::now();
    for (int32_t at = 0; at < prompt; at += chunk) {
      const int32_t n = std::min(chunk, prompt - at);
      pre->run(graph::StepParams::one(std::vector<int32_t>(text.begin() + at, text.begin() + at + n), at));
    }
    (void)pre->argmax();
    return since(t0);
  };
  PromptLaneResult r;
  start();
  for (int i = 0; i < kWarm; ++i) decode_step();
  std::vector<double> alone;
  for (int i = 0; i < kAlone; ++i) alone.push_back(decode_step());
  r.step_p50_alone = percentile(alone, 0.5);
  pre->seq_clear(0);
  (void)read_prompt();  // (its chunks' shapes made first, as the decode steps' were)
  pre->seq_clear(0);
  r.prompt_alone = read_prompt();
  std::vector<double> during, prompts;
  for (int round = 0; round < runs; ++round) {
    std::atomic<bool> done{false};
    double took = 0;
    std::exception_ptr failed;
    pre->seq_clear(0);
    std::thread reader([&] {
      try {
        took = read_prompt();
      } catch (...) {
        failed = std::current_exception();
      }
      done = true;
    });
    const auto started = Clock::now();
    while (!done) {
      if (since(started) > max_during_s) {
        ++r.rounds_cut;
        break;
      }
      during.push_back(decode_step());
    }
    reader.join();
    if (failed) std::rethrow_exception(failed);
    prompts.push_back(took);
  }
  r.steps_during = static_cast<int>(during.size());
  r.step_p50_during = percentile(during, 0.5);
  r.step_p99_during = percentile(during, 0.99);
  r.prompt_during = percentile(prompts, 0.5);
  return r;
}

std::vector<ChatTurnResult> run_chat_bench(Session& session, const ChatBenchCase& c, uint32_t seed) {
  const int64_t need = static_cast<int64_t>(c.system) + static_cast<int64_t>(c.turns) * (c.user + c.answer) + 1;
  if (c.system < 1 || c.turns < 1 || c.user < 1 || c.answer < 1 || c.reasoning < 0 || c.reasoning >= c.answer ||
      need > session.n_ctx()) {
    throw Error(fmt::format("the chat case needs a context of {} tokens and positive sizes; the session has {}", need,
                            session.n_ctx()));
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(session.n_vocab() - 1));
  std::vector<int32_t> conversation(static_cast<size_t>(c.system));
  for (auto& t : conversation) t = any(rng);
  session.reset();
  std::vector<ChatTurnResult> out;
  for (int32_t turn = 0; turn < c.turns; ++turn) {
    for (int32_t i = 0; i < c.user; ++i) conversation.push_back(any(rng));
    ChatTurnResult r;
    r.prompt_tokens = static_cast<int64_t>(conversation.size());
    const int64_t before = session.tokens_evaluated();
    const auto t0 = Clock::now();
    session.eval_reusing_prefix(conversation);
    session.remember();  // as a generation does after its prompt (and at its end, below)
    int32_t next = session.last_argmax();
    r.first_token_s = since(t0);
    r.evaluated_tokens = session.tokens_evaluated() - before;
    const auto t1 = Clock::now();
    for (int32_t k = 0; k < c.answer; ++k) {
      conversation.push_back(next);
      if (k + 1 < c.answer) {
        session.eval(std::span<const int32_t>(&next, 1));
        next = session.last_argmax();
      }
    }
    r.decode_tps = c.answer / since(t1);
    session.remember();
    // A template that drops the reasoning: the next prompt has the answer's final part only.
    const auto r0 = static_cast<std::ptrdiff_t>(conversation.size()) - c.answer;
    conversation.erase(conversation.begin() + r0, conversation.begin() + r0 + std::min(c.reasoning, c.answer));
    out.push_back(r);
  }
  return out;
}

uint64_t decode_bytes_per_step(const graph::Graph& g, const gguf::File& file, backend::KvType kv, int64_t context,
                               int32_t sequences) {
  const auto p = static_cast<uint64_t>(sequences);
  std::vector<bool> matmul_input(g.tensors.size(), false);
  for (const auto& n : g.nodes) {
    if (n.op != graph::Op::Embed) {
      for (auto id : n.in) matmul_input[static_cast<size_t>(id)] = true;
    }
  }
  // A token reads only its selected experts: n_expert_used of each stacked expert tensor's n_expert;
  // p tokens routed independently and uniformly read 1 - (1 - used/n)^p of them.
  std::vector<double> share(g.tensors.size(), 1.0);
  for (const auto& n : g.nodes) {
    if (n.op != graph::Op::MoE || n.moe().n_expert <= 0) continue;
    for (size_t k = 2; k < n.in.size() && k <= 4; ++k) {
      share[static_cast<size_t>(n.in[k])] =
          1.0 - std::pow(1.0 - static_cast<double>(n.moe().n_expert_used) / n.moe().n_expert, static_cast<double>(sequences));
    }
  }
  uint64_t bytes = 0;
  std::set<std::string> seen;  // a weight used by several nodes is read once per step
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const auto& t = g.tensors[i];
    if (t.kind != graph::TensorKind::Weight || !seen.insert(t.name).second) continue;
    const auto& info = file.tensor(t.name);
    // A lookup-only embedding costs one row per token.
    bytes += matmul_input[i] ? static_cast<uint64_t>(static_cast<double>(info.n_bytes) * share[i])
                             : p * quant::row_size(info.type, static_cast<int64_t>(info.ne[0]));
  }
  // Recurrent state (linear-attention layers) is read and written once per token.
  for (const auto& n : g.nodes) bytes += p * 2 * sizeof(float) * static_cast<uint64_t>(graph::state_size(g, n));
  const auto kv_type = kv == backend::KvType::F32 ? gguf::TensorType::F32
                       : kv == backend::KvType::F16 ? gguf::TensorType::F16
                                                    : gguf::TensorType::Q8_0;
  for (const auto& n : g.nodes) {
    if (n.op != graph::Op::Attention) continue;
    const uint64_t kv_row = quant::row_size(kv_type, g.kv_width_of(n.layer));
    const int64_t rows = n.attention().sliding_window > 0 ? std::min<int64_t>(context, n.attention().sliding_window) : context;
    bytes += p * 2 * kv_row * static_cast<uint64_t>(rows);
  }
  return bytes;
}

uint64_t decode_bytes_per_token(const graph::Graph& g, const gguf::File& file, backend::KvType kv, int64_t context) {
  return decode_bytes_per_step(g, file, kv, context, 1);
}

double SpecCost::speedup(double a, int32_t k) const {
  if (k < 1 || static_cast<size_t>(k) > verify_s.size() || step_s <= 0) return 1.0;
  return expected_tokens_per_step(a, k) * step_s / (verify_s[static_cast<size_t>(k - 1)] + k * draft_s);
}

double SpecCost::break_even(int32_t k) const {
  if (speedup(1.0, k) <= 1.0) return 1.0;
  double lo = 0, hi = 1;
  for (int i = 0; i < 40; ++i) {
    const double mid = (lo + hi) / 2;
    (speedup(mid, k) < 1.0 ? lo : hi) = mid;
  }
  return hi;
}

SpecCost measure_spec_cost(const std::shared_ptr<backend::Weights>& target, const std::shared_ptr<backend::Weights>& draft,
                           const backend::ExecOptions& opts, int32_t max_draft, int32_t depth, int runs, uint32_t seed) {
  if (max_draft < 1) throw Error("--spec-cost needs at least one drafted token");
  backend::ExecOptions o = opts;
  o.n_seq = 1;
  o.kept_states = max_draft + 1;
  const int32_t reps = std::max(3, runs);
  // Each timed step leaves one token behind (the context grows by reps * (max_draft + 2) tokens).
  o.n_ctx = std::max(o.n_ctx, depth + 8 + reps * (max_draft + 3));
  std::mt19937 rng(seed);
  const auto n_vocab = static_cast<int32_t>(target->graph().n_vocab);
  std::uniform_int_distribution<int32_t> any(0, n_vocab - 1);
  const auto random = [&](int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = any(rng);
    return t;
  };
  const auto timed = [](const auto& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  SpecCost out;
  Session t(target, o);
  t.eval(random(std::max(1, depth)));
  t.eval(random(1));  // untimed: the first decode step
  std::vector<double> steps;
  for (int i = 0; i < reps; ++i) steps.push_back(timed([&] { t.eval(random(1)); }));
  out.step_s = median(steps);
  for (int32_t k = 1; k <= max_draft; ++k) {
    std::vector<double> v;
    t.eval_speculative(random(k + 1));  // untimed: the first of its shape
    for (int i = 0; i < reps; ++i) {
      // The drafts refused but the first (the context goes back, as after a wrong guess).
      v.push_back(timed([&] {
        t.eval_speculative(random(k + 1));
        t.speculative_end();
      }));
    }
    out.verify_s.push_back(median(v));
  }
  if (draft) {
    Session d(draft, o);
    d.eval(random(std::max(1, depth)));
    d.eval(random(1));
    std::vector<double> ds;
    for (int i = 0; i < reps; ++i) ds.push_back(timed([&] { d.eval(random(1)); }));
    out.draft_s = median(ds);
  } else if (const graph::Graph& g = target->graph(); g.mtp) {
    // The model's own head: a drafting round feeds it the accepted positions (one step) and guesses
    // on from its own rows (a step each), k steps for k drafted tokens; its cache at the same depth.
    const auto head = target->instantiate(o, *g.mtp);
    const auto width = static_cast<size_t>(g.tensor(g.hidden).ne[0]);
    const auto step = [&](int32_t n_past, int32_t n) {
      graph::StepParams s = graph::StepParams::one(random(n), n_past);
      s.inputs.assign(static_cast<size_t>(n) * width, 0.01f);
      head->run(s);
      (void)head->argmax();
    };
    int32_t at = 0;
    for (int32_t left = std::max(1, depth); left > 0;) {
      const int32_t n = std::min(left, o.max_tokens);
      step(at, n);
      at += n;
      left -= n;
    }
    step(at, 1);
    std::vector<double> hs;
    for (int i = 0; i < reps; ++i) hs.push_back(timed([&] { step(at + 1, 1); }));
    out.draft_s = median(hs);
    out.head = true;
  }
  return out;
}

}  // namespace zinc::runtime
