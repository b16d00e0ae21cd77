// Speculative decoding (runtime/speculative.h) on a dense, a mixture-of-experts and two hybrid (gated
// DeltaNet) fixtures, on the CPU and on a Vulkan device where there is one: the output with drafted
// tokens verified in one step is the output without them, token for token, for 256 greedy tokens and
// for sampled ones seed by seed, whether the drafts are right, wrong at the first token or wrong
// further on (so the KV cache and the recurrent state go back to the token the model chose), alone or
// as a part of a step beside another sequence's; a context that went back continues exactly as one
// that never drafted; a draft model of the same
// vocabulary drafts what its target keeps; and a sampled speculated token follows the model's own
// distribution (a chi-square test against the softmax of its logits, computed here).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "backend/backend.h"
#include "convert/convert.h"
#include "fixture_backend.h"
#include "model/model.h"
#include "raw_gguf.h"
#include "spec_test_util.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace zinc {
namespace {

using test::kFixtures;

using Tokens = std::vector<int32_t>;
constexpr int32_t kMaxDraft = 6;
// Generation lengths: shorter where the same cases run on a device (there they check the device's
// kernels in steps that go back; the CPU's runs check the lengths' own effects), and halved again on a
// software device (length(): CI's lavapipe, a CPU running Vulkan at a small fraction of a GPU's speed).
#if defined(ZINC_TEST_ON_DEVICE)
constexpr int32_t kGenerate = 96, kSampled = 48, kStepped = 64;
#else
constexpr int32_t kGenerate = 256, kSampled = 96, kStepped = 128;
#endif

// Proposes what a reference generation chose after the context, wrong now and then: in round r the
// proposal's token r % (n + 1) is replaced (none when that is n), so some rounds are wholly right and
// others go wrong at each place.
class ScriptedDrafter final : public runtime::Drafter {
 public:
  ScriptedDrafter(size_t prompt, Tokens reference, int32_t n_vocab)
      : Drafter(kMaxDraft, runtime::SpecMode::On), prompt_(prompt), ref_(std::move(reference)), n_vocab_(n_vocab) {}
  int rounds = 0;

 protected:
  Tokens draft(std::span<const int32_t> context, int32_t n) override {
    return test::scripted_draft(context, n, prompt_, ref_, n_vocab_, rounds++, n + 1);
  }

 private:
  size_t prompt_;
  Tokens ref_;
  int32_t n_vocab_;
};

class SpeculativeFixture : public test::FixtureOnBackend {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = shared_backend(why);
    if (!backend_) GTEST_SKIP() << why;
    weights_ = load(fixture(), "f32", file_);
    tok_.emplace(tokenizer::Tokenizer::from_gguf(*file_));
    prompt_ = tok_->encode("The quick brown fox jumps over the lazy dog", true, false);
  }
  std::shared_ptr<backend::Weights> load(const std::string& dir, const std::string& type, std::optional<gguf::File>& file) {
    convert::ConvertOptions copts;
    copts.outtype = type;
    const auto path = tmp_.file(dir + "-" + type + ".gguf");
    convert::convert_hf(kFixtures / dir, path, copts);
    file.emplace(gguf::File::open(path));
    return backend_->load(model::load(*file).graph, *file);
  }

  std::unique_ptr<runtime::Session> session(const std::shared_ptr<backend::Weights>& w) const {
    backend::ExecOptions o;
    o.n_ctx = 320;
    o.max_tokens = 32;
    o.kv_type = backend::KvType::F32;
    o.kept_states = kMaxDraft + 1;
    return std::make_unique<runtime::Session>(w, o);
  }

  runtime::GenerateResult generate(runtime::Session& s, const sample::SamplerParams& sp, runtime::Drafter* draft,
                                   int32_t n = -1) const {
    sample::Sampler sampler(sp);
    runtime::GenerateOptions o;
    o.max_tokens = n < 0 ? length(kGenerate) : n;
    o.ignore_eog = true;
    o.draft = draft;
    return runtime::generate(s, *tok_, sampler, prompt_, o, nullptr);
  }

  backend::Backend* backend_ = nullptr;
  test::TempDir tmp_;
  std::optional<gguf::File> file_;
  std::shared_ptr<backend::Weights> weights_;
  std::optional<tokenizer::Tokenizer> tok_;
  Tokens prompt_;
};

TEST_P(SpeculativeFixture, GreedyOutputIsTheSameWhateverTheDraftsAre) {
  auto plain = session(weights_);
  const auto want = generate(*plain, sample::SamplerParams::greedy(), nullptr);
  ASSERT_EQ(want.tokens.size(), static_cast<size_t>(length(kGenerate))) << name();

  auto spec = session(weights_);
  ScriptedDrafter drafts(prompt_.size(), want.tokens, static_cast<int32_t>(spec->n_vocab()));
  const auto got = generate(*spec, sample::SamplerParams::greedy(), &drafts);
  EXPECT_EQ(got.tokens, want.tokens) << name();
  // Drafts were taken and refused at every place, so the context went back inside verifying steps.
  EXPECT_GT(got.draft_accepted, length(kGenerate) / 2) << name();
  EXPECT_LT(got.draft_accepted, got.draft_tokens) << name();
  EXPECT_EQ(drafts.stats().accepted, got.draft_accepted) << name();
  EXPECT_EQ(drafts.stats().drafted, got.draft_tokens) << name();

  // The context holds exactly the prompt and the generated tokens but the last (never evaluated), and
  // goes on as the one that never drafted: the same next logits.
  Tokens held = prompt_;
  held.insert(held.end(), want.tokens.begin(), want.tokens.end() - 1);
  EXPECT_EQ(spec->history(), held) << name();
  EXPECT_EQ(spec->n_past(), static_cast<int32_t>(held.size())) << name();
  const int32_t last = want.tokens.back();
  const auto a = plain->eval(std::span<const int32_t>(&last, 1));
  const std::vector<float> va(a.begin(), a.end());
  const auto b = spec->eval(std::span<const int32_t>(&last, 1));
  const std::vector<float> vb(b.begin(), b.end());
  ASSERT_EQ(va.size(), vb.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(va[i]) - vb[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(va[i])));
  }
  // A verifying step computes its rows as single steps do, but on a GPU through other kernels
  // (float32 rounding apart); a state or cache row from the wrong token moves logits by far more.
  EXPECT_LE(worst, (backend_name() == "cpu" ? 1e-5 : 2e-4) * scale) << name();
}

TEST_P(SpeculativeFixture, SampledOutputIsTheSameSeedBySeed) {
  // Each token is still drawn by the same sampler from the model's own logits: drafting changes how
  // many steps it takes, not what is drawn.
  auto sp = sample::SamplerParams::chat();
  sp.temperature = 0.9f;
  for (uint64_t seed : {1u, 2u, 3u}) {
    sp.seed = seed;
    auto plain = session(weights_);
    const auto want = generate(*plain, sp, nullptr, length(kSampled));
    auto spec = session(weights_);
    ScriptedDrafter drafts(prompt_.size(), want.tokens, static_cast<int32_t>(spec->n_vocab()));
    const auto got = generate(*spec, sp, &drafts, length(kSampled));
    EXPECT_EQ(got.tokens, want.tokens) << name() << " seed " << seed;
    EXPECT_GT(got.draft_accepted, 0) << name();
  }
}

TEST_P(SpeculativeFixture, ADraftModelDraftsWhatItsTargetKeeps) {
  // The target's weights rounded to 8 bits: a draft that mostly agrees with it (a transformer; a
  // hybrid target gets the dense fixture of the same vocabulary, which mostly does not).
  std::optional<gguf::File> dfile;
  const bool hybrid = !session(weights_)->executable().can_rewind();
  const auto dw = load(hybrid ? "qwen3" : fixture(), "q8_0", dfile);
  auto draft_session = session(dw);
  runtime::ModelDrafter drafter(*draft_session, kMaxDraft, runtime::SpecMode::On);
  auto plain = session(weights_), spec = session(weights_);
  drafter.check_target(*spec);
  // (Fewer tokens: the hybrid's draft disagrees often, and each disagreement costs a round of drafting.)
  const auto want = generate(*plain, sample::SamplerParams::greedy(), nullptr, length(kSampled));
  const auto got = generate(*spec, sample::SamplerParams::greedy(), &drafter, length(kSampled));
  EXPECT_EQ(got.tokens, want.tokens) << name();
  EXPECT_GT(got.draft_tokens, 0) << name();
  if (!hybrid) {
    EXPECT_GT(drafter.stats().acceptance(), 0.5) << name();
  }

  // A draft model with recurrent state cannot go back, and is refused.
  if (hybrid) {
    EXPECT_THROW(runtime::ModelDrafter(*spec, kMaxDraft), Error);
  }
}

TEST_P(SpeculativeFixture, GoingBackOutsideAVerifyingStepIsAClearError) {
  backend::ExecOptions o;
  o.n_ctx = 64;
  o.max_tokens = 16;
  o.kept_states = kMaxDraft + 1;
  const auto exe = weights_->instantiate(o);
  backend::Executable& e = *exe;
  const bool recurrent = !e.can_rewind();
  e.run(graph::StepParams::one({1, 2, 3}));
  graph::StepParams verify;
  verify.add(0, 3, {4, 5, 6}, true, true);
  e.run(verify);
  e.seq_keep(0, 5);  // after the verifying step's second token
  e.seq_keep(0, 4);  // and further back, still inside it
  if (recurrent) {
    EXPECT_THROW(e.seq_keep(0, 2), Error) << name();  // before the step: no state kept there
  } else {
    e.seq_keep(0, 2);  // a cache alone goes back anywhere
  }
  graph::StepParams too_many;
  too_many.add(0, 2, Tokens(static_cast<size_t>(kMaxDraft + 2), 7), true, true);
  if (recurrent) {
    EXPECT_THROW(e.run(too_many), Error) << name();  // more states than the context keeps
  } else {
    e.run(too_many);
  }
}

TEST_P(SpeculativeFixture, SequencesSteppedTogetherDraftAsEachAlone) {
  // Two sequences of one context as the server steps them: each generation's tokens (a verifying
  // step's, or one) are parts of one step, rows handed to each; one sequence drafts, the other not.
  auto plain = session(weights_);
  const auto want = generate(*plain, sample::SamplerParams::greedy(), nullptr, length(kStepped));
  backend::ExecOptions o;
  o.n_ctx = 320;
  o.max_tokens = 32;
  o.n_seq = 2;
  o.kv_type = backend::KvType::F32;
  o.kept_states = kMaxDraft + 1;
  auto exe = std::shared_ptr<backend::Executable>(weights_->instantiate(o));
  runtime::Session a(weights_, exe, 0), b(weights_, exe, 1);
  ScriptedDrafter drafts(prompt_.size(), want.tokens, static_cast<int32_t>(a.n_vocab()));
  sample::Sampler sa(sample::SamplerParams::greedy()), sb(sample::SamplerParams::greedy());
  runtime::GenerateOptions go;
  go.max_tokens = length(kStepped);
  go.ignore_eog = true;
  runtime::Generation gb(b, *tok_, sb, prompt_, go, nullptr);
  go.draft = &drafts;
  runtime::Generation ga(a, *tok_, sa, prompt_, go, nullptr);
  const int steps = test::step_together(*exe, {&ga, &gb}, {&a, &b}, 16);
  EXPECT_EQ(ga.result().tokens, want.tokens) << name();
  EXPECT_EQ(gb.result().tokens, want.tokens) << name();
  EXPECT_GT(ga.result().draft_accepted, length(kStepped) / 4) << name();
  EXPECT_LT(ga.result().draft_accepted, ga.result().draft_tokens) << name();
  // The other sequence's prompt in chunks of 16 and its length(kStepped) - 1 evaluated tokens: a step each.
  EXPECT_EQ(steps, static_cast<int>((prompt_.size() + 15) / 16) + length(kStepped) - 1) << name();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeFixture,
                         ::testing::Combine(::testing::Values("qwen3", "qwen3_moe", "qwen3_5", "qwen3_next"),
                                            ::testing::Values(ZINC_TEST_BACKEND)),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

#if !defined(ZINC_TEST_ON_DEVICE)  // a CPU test: once, in the model tests
// Sampling from the model's distribution: the token after a greedy draft is kept when the sampler
// draws it and replaced by the sampler's own draw otherwise, which is the speculative-sampling rule
// for a draft that is sure of its token. Over many seeds, the second token (the first one a verifying
// step decides) after the most frequent first token follows softmax(logits / T), computed here from a
// plain evaluation: a chi-square test over the tokens expected at least 5 times, the rest pooled.
TEST(Speculative, ASpeculatedTokenFollowsTheModelsDistribution) {
  test::TempDir tmp;
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(kFixtures / "qwen3", tmp.file("m.gguf"), copts);
  const auto file = gguf::File::open(tmp.file("m.gguf"));
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  auto be = backend::make_cpu_backend(1);
  const auto w = be->load(model::load(file).graph, file);
  backend::ExecOptions o;
  o.n_ctx = 64;
  o.max_tokens = 16;
  const Tokens prompt = tok.encode("Once upon a time", true, false);
  auto sp = sample::SamplerParams::greedy();
  sp.temperature = 0.6f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.order = sample::SamplerParams::default_order();

  runtime::Session target(w, o), draft(w, o);
  runtime::ModelDrafter drafter(draft, 1, runtime::SpecMode::On);  // its greedy choice: the mode
  std::map<int32_t, std::map<int32_t, int>> seen;  // first token -> second token -> count
  constexpr int kRuns = 2000;
  for (int i = 0; i < kRuns; ++i) {
    sp.seed = static_cast<uint64_t>(i) + 1;
    sample::Sampler sampler(sp);
    runtime::GenerateOptions go;
    go.max_tokens = 3;  // the second token decided by a verifying step (the last is never evaluated)
    go.ignore_eog = true;
    go.draft = &drafter;
    const auto r = runtime::generate(target, tok, sampler, prompt, go, nullptr);
    ASSERT_EQ(r.tokens.size(), 3u);
    ++seen[r.tokens[0]][r.tokens[1]];
  }
  ASSERT_GT(drafter.stats().accepted, 0);
  ASSERT_LT(drafter.stats().accepted, drafter.stats().drafted);
  // The most frequent first token and what followed it.
  int32_t first = -1;
  int most = 0;
  for (const auto& [t, next] : seen) {
    int n = 0;
    for (const auto& [u, c] : next) n += c;
    if (n > most) {
      most = n;
      first = t;
    }
  }
  ASSERT_GE(most, 300) << "too few samples after one first token for the test";
  // The model's distribution of the second token, from its logits.
  runtime::Session plain(w, o);
  Tokens ctx = prompt;
  ctx.push_back(first);
  const auto l = plain.eval(ctx);
  std::vector<double> p(l.size());
  const double mx = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp((l[i] - mx) / sp.temperature);
  double chi2 = 0, pooled_e = 0;
  int pooled_o = 0, cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] / z * most;
    const auto it = seen[first].find(static_cast<int32_t>(i));
    const int obs = it == seen[first].end() ? 0 : it->second;
    if (e >= 5) {
      chi2 += (obs - e) * (obs - e) / e;
      ++cells;
    } else {
      pooled_e += e;
      pooled_o += obs;
    }
  }
  if (pooled_e > 0) {
    chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  }
  ASSERT_GE(cells, 3);
  // Wilson-Hilferty: chi2 with df degrees of freedom as a normal variate; 3.09 is p = 0.001.
  const double df = cells - 1;
  const double zscore = (std::cbrt(chi2 / df) - (1 - 2 / (9 * df))) / std::sqrt(2 / (9 * df));
  EXPECT_LT(zscore, 3.09) << "chi2 " << chi2 << " over " << cells << " cells";
  // And the test can fail: the same counts against the distribution at another temperature do.
  double chi2_wrong = 0;
  {
    std::vector<double> q(l.size());
    double zq = 0;
    for (size_t i = 0; i < l.size(); ++i) zq += q[i] = std::exp((l[i] - mx) / 1.2);
    double pe = 0;
    int po = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      const double e = q[i] / zq * most;
      const auto it = seen[first].find(static_cast<int32_t>(i));
      const int obs = it == seen[first].end() ? 0 : it->second;
      if (e >= 5) chi2_wrong += (obs - e) * (obs - e) / e;
      else {
        pe += e;
        po += obs;
      }
    }
    if (pe > 0) chi2_wrong += (po - pe) * (po - pe) / pe;
  }
  EXPECT_GT(chi2_wrong, 3 * chi2);
}
#endif

}  // namespace
}  // namespace zinc
