// Multi-token prediction (Qwen3.5's MTP head: graph::Graph::mtp, runtime::MtpDrafter) on the dense and
// the mixture-of-experts hybrid fixtures with a head (tests/models/fixtures-mtp beside the models of
// tests/models/fixtures, made by tools/reference/make_fixtures.py --mtp), on the CPU and on a Vulkan
// device where there is one:
//  - the head's logits at every position are transformers' (the head run there as a one-layer model of
//    the same family over the model's final-normed hidden states);
//  - the head's drafts, fed position by position as the target steps (verifying steps accepted in
//    part, plain steps, long prompts), are those a head fed the whole context at once drafts;
//  - greedy output drafting with the head is the output without it, for 256 tokens, and sampled
//    output seed by seed.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "backend/backend.h"
#include "convert/convert.h"
#include "fixture_backend.h"
#include "model/model.h"
#include "mtp_checkpoint.h"
#include "raw_gguf.h"
#include "spec_test_util.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace zinc {
namespace {

using Tokens = std::vector<int32_t>;
const std::filesystem::path kMtpFixtures = test::kFixtures.parent_path() / "fixtures-mtp";
constexpr int32_t kDraft = 3;
// Generation lengths: shorter where the same cases run on a device, halved again on a software device
// (length(): CI's lavapipe, a CPU running Vulkan at a small fraction of a GPU's speed); the CPU's runs
// keep the long ones.
// kEvery: every how many of the head's drafts are checked against a context evaluated from scratch.
#if defined(ZINC_TEST_ON_DEVICE)
constexpr int32_t kGenerate = 96, kShort = 48;
constexpr size_t kEvery = 3;
#else
constexpr int32_t kGenerate = 256, kShort = 96;
constexpr size_t kEvery = 1;
#endif

// ||a - b|| / ||b||.
double relative_gap(std::span<const float> a, std::span<const float> b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// The largest logit's index and its lead over the second.
std::pair<int32_t, double> top(std::span<const float> l) {
  const auto best = static_cast<size_t>(std::max_element(l.begin(), l.end()) - l.begin());
  double second = -1e30;
  for (size_t i = 0; i < l.size(); ++i) {
    if (i != best) second = std::max(second, static_cast<double>(l[i]));
  }
  return {static_cast<int32_t>(best), l[best] - second};
}

class MtpFixture : public test::FixtureOnBackend {
 protected:
  void SetUp() override {
    std::string why;
    backend::Backend* be = shared_backend(why);
    if (!be) GTEST_SKIP() << why;
    convert::ConvertOptions copts;
    copts.outtype = "f32";
    const auto path = tmp_.file("m.gguf");
    convert::convert_hf(test::mtp_checkpoint(kMtpFixtures, fixture(), tmp_.path()), path, copts);
    file_.emplace(gguf::File::open(path));
    weights_ = be->load(model::load(*file_).graph, *file_);
    tok_.emplace(tokenizer::Tokenizer::from_gguf(*file_));
    prompt_ = tok_->encode("The quick brown fox jumps over the lazy dog", true, false);
  }
  const graph::Graph& head_graph() const { return *weights_->graph().mtp; }

  backend::ExecOptions options(int32_t max_tokens) const {
    backend::ExecOptions o;
    o.n_ctx = 320;
    o.max_tokens = max_tokens;
    o.kv_type = backend::KvType::F32;
    o.kept_states = kDraft + 1;
    return o;
  }
  std::unique_ptr<runtime::Session> session() const { return std::make_unique<runtime::Session>(weights_, options(32)); }

  runtime::GenerateResult generate(runtime::Session& s, const sample::SamplerParams& sp, runtime::Drafter* draft,
                                   int32_t n = -1, const Tokens* prompt = nullptr) const {
    sample::Sampler sampler(sp);
    runtime::GenerateOptions o;
    o.max_tokens = n < 0 ? length(kGenerate) : n;
    o.ignore_eog = true;
    o.draft = draft;
    return runtime::generate(s, *tok_, sampler, prompt ? *prompt : prompt_, o, nullptr);
  }

  // The head's guesses after `context` (positions 0..p-1 and the next token at p) computed from
  // nothing: the target evaluates the p tokens in one step, the head reads every position's row at
  // once, then guesses on from its own rows. With each guess, its lead over the second best.
  std::vector<std::pair<int32_t, double>> from_scratch(std::span<const int32_t> context, int32_t n) const {
    const auto p = static_cast<int32_t>(context.size()) - 1;
    const auto target = weights_->instantiate(options(512));
    target->run(graph::StepParams::one(Tokens(context.begin(), context.end() - 1)));
    const auto head = weights_->instantiate(options(512), head_graph());
    graph::StepParams step = graph::StepParams::one(Tokens(context.begin() + 1, context.end()));
    const auto h = target->hidden();
    step.inputs.assign(h.begin(), h.end());
    head->run(step);
    std::vector<std::pair<int32_t, double>> out{top(head->logits())};
    while (static_cast<int32_t>(out.size()) < n) {
      graph::StepParams next = graph::StepParams::one({out.back().first}, p - 1 + static_cast<int32_t>(out.size()));
      const auto hh = head->hidden();
      next.inputs.assign(hh.end() - target->hidden_width(), hh.end());
      head->run(next);
      out.push_back(top(head->logits()));
    }
    return out;
  }

  test::TempDir tmp_;
  std::optional<gguf::File> file_;
  std::shared_ptr<backend::Weights> weights_;
  std::optional<tokenizer::Tokenizer> tok_;
  Tokens prompt_;
};

TEST_P(MtpFixture, HeadLogitsAreTransformers) {
  std::ifstream in(kMtpFixtures / fixture() / "reference.json");
  const auto ref = nlohmann::json::parse(in);
  ASSERT_TRUE(ref.contains("mtp")) << "the fixture has no head reference";
  ASSERT_NE(weights_->graph().mtp, nullptr);
  const auto target = weights_->instantiate(options(64));
  const auto head = weights_->instantiate(options(64), head_graph());
  const int64_t nv = head->n_vocab();
  for (size_t i = 0; i < ref["sequences"].size(); ++i) {
    const auto seq = ref["sequences"][i].get<Tokens>();
    target->seq_clear(0);
    head->seq_clear(0);
    target->run(graph::StepParams::one(seq));
    const auto h = target->hidden();
    ASSERT_EQ(h.size(), seq.size() * static_cast<size_t>(target->hidden_width())) << name();
    // Position j: the row of token j with token j + 1.
    graph::StepParams step = graph::StepParams::one(Tokens(seq.begin() + 1, seq.end()), 0, true);
    step.inputs.assign(h.begin(), h.end() - target->hidden_width());
    head->run(step);
    const auto want_file = kMtpFixtures / fixture() / ref["mtp"]["logits"][i]["file"].get<std::string>();
    std::vector<float> want((seq.size() - 1) * static_cast<size_t>(nv));
    std::ifstream wf(want_file, std::ios::binary);
    wf.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
    ASSERT_TRUE(wf.good()) << want_file;
    const auto got = head->logits();
    ASSERT_EQ(got.size(), want.size()) << name();
    for (size_t r = 0; r + 1 < seq.size(); ++r) {
      const auto g = got.subspan(r * static_cast<size_t>(nv), static_cast<size_t>(nv));
      const auto w = std::span<const float>(want).subspan(r * static_cast<size_t>(nv), static_cast<size_t>(nv));
      // F32 weights: transformers' function up to float32 rounding (the fixtures' bound, test_fixtures).
      EXPECT_LT(relative_gap(g, w), backend_name() == "cpu" ? 1e-4 : 2e-4) << name() << " sequence " << i << " position " << r;
      EXPECT_EQ(top(g).first, top(w).first) << name() << " sequence " << i << " position " << r;
    }
  }
}

// Proposes a reference generation's tokens (wrong at a place that moves round by round, as in
// test_speculative), so verifying steps are accepted in part; and asks the head for its drafts at the
// same time, keeping them with their contexts: the head is fed by the target's steps whatever the
// drafts were.
class WatchingDrafter final : public runtime::Drafter {
 public:
  WatchingDrafter(runtime::MtpDrafter& head, int32_t n_vocab) : Drafter(kDraft, runtime::SpecMode::On), head_(head), n_vocab_(n_vocab) {}
  // The generation to come: its prompt's length and the reference's tokens.
  void expect(size_t prompt, Tokens reference) {
    prompt_ = prompt;
    ref_ = std::move(reference);
  }
  std::vector<std::pair<Tokens, Tokens>> seen;  // context, the head's drafts
  int rounds = 0;

 protected:
  Tokens draft(std::span<const int32_t> context, int32_t n) override {
    seen.emplace_back(Tokens(context.begin(), context.end()), head_.propose(context, n));
    return test::scripted_draft(context, n, prompt_, ref_, n_vocab_, rounds++, n + 2);
  }

 private:
  runtime::MtpDrafter& head_;
  int32_t n_vocab_;
  size_t prompt_ = 0;
  Tokens ref_;
};

TEST_P(MtpFixture, HeadDraftsAsIfFedTheWholeContext) {
  auto s = session();
  runtime::MtpDrafter head(*s, kDraft, runtime::SpecMode::On);
  WatchingDrafter drafts(head, static_cast<int32_t>(s->n_vocab()));
  // Two generations in one session: the second prompt shares the first's opening, so the context goes
  // back (for a hybrid, to its start) and the head forgets what the first one's tokens fed it.
  const Tokens second = tok_->encode("The quick brown cat sat on the mat and then", true, false);
  for (const Tokens* prompt : {static_cast<const Tokens*>(&prompt_), &second}) {
    auto plain = session();
    const auto want = generate(*plain, sample::SamplerParams::greedy(), nullptr, 64, prompt);
    drafts.expect(prompt->size(), want.tokens);
    const auto got = generate(*s, sample::SamplerParams::greedy(), &drafts, 64, prompt);
    EXPECT_EQ(got.tokens, want.tokens) << name();
    EXPECT_GT(got.draft_accepted, 20) << name();  // steps accepted in part moved the head on by several positions
  }
  ASSERT_GT(drafts.seen.size(), 30u) << name();
  int compared = 0, contexts = 0;
  for (size_t i = 0; i < drafts.seen.size(); ++i) {
    const auto& [context, drafted] = drafts.seen[i];
    ASSERT_FALSE(drafted.empty()) << name();
    if (i % kEvery != 0) continue;
    ++contexts;
    const auto ref = from_scratch(context, static_cast<int32_t>(drafted.size()));  // (fewer near the end)
    for (size_t j = 0; j < ref.size(); ++j) {
      // Steps of other sizes round otherwise: only a guess the reference is not sure of may differ.
      if (drafted[j] != ref[j].first) {
        EXPECT_LT(ref[j].second, 1e-3) << name() << ": draft " << j << " after " << context.size() << " tokens";
        break;  // the guesses after it read another token
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, contexts) << name();
}

TEST_P(MtpFixture, GreedyOutputIsTheSameDraftingWithTheHead) {
  auto plain = session();
  const auto want = generate(*plain, sample::SamplerParams::greedy(), nullptr);
  ASSERT_EQ(want.tokens.size(), static_cast<size_t>(length(kGenerate))) << name();
  auto s = session();
  runtime::MtpDrafter head(*s, kDraft, runtime::SpecMode::On);
  const auto got = generate(*s, sample::SamplerParams::greedy(), &head);
  EXPECT_EQ(got.tokens, want.tokens) << name();
  EXPECT_GT(got.draft_tokens, length(kGenerate) / 2) << name();
  EXPECT_EQ(head.stats().drafted, got.draft_tokens) << name();
  std::printf("%s: the head's drafts accepted %lld of %lld (random weights)\n", name().c_str(),
              static_cast<long long>(head.stats().accepted), static_cast<long long>(head.stats().drafted));
}

TEST_P(MtpFixture, SequencesSteppedTogetherDraftWithTheHead) {
  // Two sequences of one context as the server steps them: each generation's tokens are parts of one
  // step, a verifying step's among them; each drafts with the head, fed its own part's rows.
  backend::ExecOptions o = options(16);
  o.n_seq = 2;
  auto exe = std::shared_ptr<backend::Executable>(weights_->instantiate(o));
  runtime::Session a(weights_, exe, 0), b(weights_, exe, 1);
  runtime::MtpDrafter ha(a, kDraft, runtime::SpecMode::On), hb(b, kDraft, runtime::SpecMode::On);
  const Tokens other = tok_->encode("The quick brown cat sat on the mat and then", true, false);
  sample::Sampler sa(sample::SamplerParams::greedy()), sb(sample::SamplerParams::greedy());
  runtime::GenerateOptions go;
  go.max_tokens = length(kShort);
  go.ignore_eog = true;
  go.draft = &ha;
  runtime::Generation ga(a, *tok_, sa, prompt_, go, nullptr);
  go.draft = &hb;
  runtime::Generation gb(b, *tok_, sb, other, go, nullptr);
  test::step_together(*exe, {&ga, &gb}, {&a, &b}, 8);
  auto plain = session();
  EXPECT_EQ(ga.result().tokens, generate(*plain, sample::SamplerParams::greedy(), nullptr, length(kShort)).tokens) << name();
  plain = session();
  EXPECT_EQ(gb.result().tokens, generate(*plain, sample::SamplerParams::greedy(), nullptr, length(kShort), &other).tokens)
      << name();
  EXPECT_GT(ga.result().draft_tokens, length(kShort)) << name();
  EXPECT_GT(gb.result().draft_tokens, length(kShort)) << name();
  // Each head read its own sequence's rows: its next drafts are those of a head fed the whole context.
  for (auto* s : {&a, &b}) {
    Tokens context = s->history();
    context.push_back(s->last_argmax());
    runtime::MtpDrafter& h = s == &a ? ha : hb;
    const Tokens drafted = h.propose(context, kDraft);
    const auto ref = from_scratch(context, kDraft);
    ASSERT_EQ(drafted.size(), ref.size()) << name();
    EXPECT_TRUE(drafted[0] == ref[0].first || ref[0].second < 1e-3) << name();
  }
  // Without the part's place in the step, a session whose head watches it cannot hand the rows on.
  a.eval(std::span<const int32_t>(prompt_.data(), 1));
  EXPECT_THROW(a.committed(1, 0), Error) << name();
}

TEST_P(MtpFixture, SampledOutputIsTheSameSeedBySeed) {
  auto sp = sample::SamplerParams::chat();
  sp.temperature = 0.9f;
  for (uint64_t seed : {1u, 2u}) {
    sp.seed = seed;
    auto plain = session();
    const auto want = generate(*plain, sp, nullptr, length(kShort));
    auto s = session();
    runtime::MtpDrafter head(*s, kDraft, runtime::SpecMode::On);
    const auto got = generate(*s, sp, &head, length(kShort));
    EXPECT_EQ(got.tokens, want.tokens) << name() << " seed " << seed;
    EXPECT_GT(got.draft_tokens, 0) << name();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpFixture,
                         ::testing::Combine(::testing::Values("qwen3_5", "qwen3_5_moe"), ::testing::Values(ZINC_TEST_BACKEND)),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

#if !defined(ZINC_TEST_ON_DEVICE)  // CPU tests: once, in the model tests
TEST(Mtp, AModelWithoutAHeadIsRefused) {
  test::TempDir tmp;
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(test::kFixtures / "qwen3_5", tmp.file("m.gguf"), copts);
  const auto file = gguf::File::open(tmp.file("m.gguf"));
  auto be = backend::make_cpu_backend(1);
  const auto w = be->load(model::load(file).graph, file);
  EXPECT_EQ(w->graph().mtp, nullptr);
  EXPECT_EQ(w->graph().hidden, -1);
  backend::ExecOptions o;
  o.n_ctx = 64;
  runtime::Session s(w, o);
  try {
    runtime::MtpDrafter d(s, kDraft);
    ADD_FAILURE() << "a model without a head was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no multi-token-prediction head"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.executable().hidden(), Error);

  convert::convert_hf(test::mtp_checkpoint(kMtpFixtures, "qwen3_5", tmp.path()), tmp.file("h.gguf"), copts);
  const auto hfile = gguf::File::open(tmp.file("h.gguf"));
  const auto hw = be->load(model::load(hfile).graph, hfile);
  // A head's step carries one input row per token, no more and no fewer.
  const auto head = hw->instantiate(o, *hw->graph().mtp);
  graph::StepParams step = graph::StepParams::one({3, 4});
  step.inputs.assign(static_cast<size_t>(hw->graph().tensor(hw->graph().hidden).ne[0]), 0.0f);
  EXPECT_THROW(head->run(step), Error);
}

TEST(Mtp, ConvertKeepsTheHeadAsTheLastBlock) {
  test::TempDir tmp;
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(test::mtp_checkpoint(kMtpFixtures, "qwen3_5_moe", tmp.path()), tmp.file("m.gguf"), copts);
  const auto file = gguf::File::open(tmp.file("m.gguf"));
  EXPECT_EQ(file.get<uint32_t>("qwen35moe.block_count"), 3u);
  EXPECT_EQ(file.get<uint32_t>("qwen35moe.nextn_predict_layers"), 1u);
  for (const char* t : {"blk.2.nextn.eh_proj.weight", "blk.2.nextn.enorm.weight", "blk.2.nextn.hnorm.weight",
                        "blk.2.nextn.shared_head_norm.weight", "blk.2.attn_q.weight", "blk.2.ffn_gate_exps.weight"}) {
    EXPECT_NE(file.find_tensor(t), nullptr) << t;
  }
  const auto m = model::load(file);
  EXPECT_EQ(m.hp.n_layer, 2);
  ASSERT_NE(m.graph.mtp, nullptr);
  EXPECT_EQ(m.graph.mtp->n_layer, 3);
}
#endif

}  // namespace
}  // namespace zinc
