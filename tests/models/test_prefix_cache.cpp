// The prefix cache shared by a context's sequences (runtime/prefix_cache.h), through batched sessions
// as the server drives them, on a dense, a mixture-of-experts and two hybrid (gated DeltaNet)
// fixtures, on the CPU and on a Vulkan device where there is one: a later request in another sequence
// evaluates only what no earlier one left in the cache, a hybrid resumes from the checkpoint at or
// before the divergence, and the logits after reuse are those of a session that took the same steps
// itself (on the CPU bit for bit; on a GPU within float32 rounding of the same function).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <random>

#include "backend/backend.h"
#include "convert/convert.h"
#include "fixture_backend.h"
#include "model/model.h"
#include "raw_gguf.h"
#include "runtime/prefix_cache.h"
#include "runtime/session.h"

namespace zinc {
namespace {

using test::kFixtures;
constexpr int32_t kStep = 32;  // tokens per step (a prompt is taken in chunks of this many)

using Tokens = std::vector<int32_t>;

Tokens cat(std::initializer_list<const Tokens*> parts) {
  Tokens out;
  for (const Tokens* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// GPU arithmetic is float32 like the CPU's but not bit for bit (another summation order): the same
// function computed twice stays within a few units of float32 rounding of the logit scale (measured
// on these fixtures: below 1e-5 of it); a wrong state or KV row moves logits by far more.
constexpr double kGpuGap = 2e-4;

class PrefixCacheFixture : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = test::fixture_backend(backend_name(), why);
    if (!backend_) GTEST_SKIP() << why;
    convert::ConvertOptions copts;
    copts.outtype = "f32";
    convert::convert_hf(kFixtures / fixture(), tmp_.file("m.gguf"), copts);
    file_.emplace(gguf::File::open(tmp_.file("m.gguf")));
    weights_ = backend_->load(model::load(*file_).graph, *file_);
    std::ifstream in(kFixtures / fixture() / "reference.json");
    n_real_ = nlohmann::json::parse(in)["n_tokens"].get<int32_t>();
  }
  const std::string& fixture() const { return std::get<0>(GetParam()); }
  const std::string& backend_name() const { return std::get<1>(GetParam()); }
  std::string name() const { return fixture() + " on " + backend_name(); }

  // The logits after reuse against those of the same steps taken alone.
  void expect_same(const std::vector<float>& got, const std::vector<float>& want) const {
    ASSERT_EQ(got.size(), want.size()) << name();
    if (backend_name() == "cpu") {
      EXPECT_EQ(got, want) << name();
      return;
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    EXPECT_LE(worst, kGpuGap * scale) << name();
  }

  backend::ExecOptions options(int32_t cache_blocks) const {
    backend::ExecOptions o;
    o.n_ctx = 128;
    o.n_seq = 2;
    o.max_tokens = kStep;
    o.kv_type = backend::KvType::F32;
    o.cache_blocks = cache_blocks;
    return o;
  }

  Tokens random(size_t n) {
    std::uniform_int_distribution<int32_t> any(0, n_real_ - 1);
    Tokens t(n);
    for (auto& x : t) x = any(rng_);
    return t;
  }

  // One context of two sequences with a prefix cache over it, and a session on each: two slots of a
  // server.
  struct Slots {
    std::shared_ptr<backend::Executable> exe;
    std::shared_ptr<runtime::PrefixCache> cache;
    runtime::Session a, b;
  };
  Slots slots(int32_t cache_blocks, uint64_t host_bytes = 0) {
    auto exe = std::shared_ptr<backend::Executable>(weights_->instantiate(options(cache_blocks)));
    auto cache = std::make_shared<runtime::PrefixCache>(exe, uint64_t{1} << 30, host_bytes);
    Slots out{exe, cache, runtime::Session(weights_, exe, 0), runtime::Session(weights_, exe, 1)};
    out.a.set_prefix_cache(cache);
    out.b.set_prefix_cache(cache);
    return out;
  }

  // A batched session's queued tokens run as the server runs them: chunks of at most kStep (ending on
  // cache block boundaries where the session says so).
  static std::vector<float> run_pending(backend::Executable& exe, runtime::Session& s) {
    while (!s.pending().empty()) {
      const int32_t n = s.chunk(static_cast<int64_t>(s.pending().size()), kStep);
      graph::StepParams step;
      step.add(s.seq(), s.n_past(), Tokens(s.pending().begin(), s.pending().begin() + n));
      exe.run(step);
      s.committed(n, 0);
    }
    const auto l = s.last_logits();
    return {l.begin(), l.end()};
  }
  // A request as a generation runs it: its prompt (reusing what the session or the cache holds), left
  // in the cache, then `answer` decoded token by token (given, not sampled: the test chooses them),
  // and the whole exchange left in the cache.
  static std::vector<float> request(backend::Executable& exe, runtime::Session& s, const Tokens& prompt,
                                    const Tokens& answer = {}) {
    s.eval_reusing_prefix(prompt);
    auto logits = run_pending(exe, s);
    s.remember();
    for (int32_t t : answer) {
      s.eval(std::span<const int32_t>(&t, 1));
      logits = run_pending(exe, s);
    }
    s.remember();
    return logits;
  }
  // The same tokens through a session of a context of its own, in the given pieces (each evaluated as
  // one eval(): the steps the shared run took), the last piece's logits.
  std::vector<float> alone(const std::vector<Tokens>& pieces) {
    auto exe = std::shared_ptr<backend::Executable>(weights_->instantiate(options(8)));
    auto cache = std::make_shared<runtime::PrefixCache>(exe, uint64_t{1} << 30);  // the same chunk boundaries
    runtime::Session s(weights_, exe, 0);
    s.set_prefix_cache(cache);
    std::vector<float> last;
    for (const Tokens& p : pieces) {
      s.eval(p);
      last = run_pending(*exe, s);
    }
    return last;
  }

  std::unique_ptr<backend::Backend> backend_;
  test::TempDir tmp_;
  std::optional<gguf::File> file_;
  std::shared_ptr<backend::Weights> weights_;
  int32_t n_real_ = 0;
  std::mt19937 rng_{7};
};

// Pieces of `t`: [0, a), [a, b), ... (the ends given, the last being t.size()).
std::vector<Tokens> pieces(const Tokens& t, std::initializer_list<size_t> ends) {
  std::vector<Tokens> out;
  size_t at = 0;
  for (size_t e : ends) {
    out.emplace_back(t.begin() + static_cast<std::ptrdiff_t>(at), t.begin() + static_cast<std::ptrdiff_t>(e));
    at = e;
  }
  return out;
}

TEST_P(PrefixCacheFixture, ASecondTurnInAnotherSequenceEvaluatesOnlyItsNewTokens) {
  Slots s = slots(8);
  auto& [exe, cache, a, b] = s;
  const Tokens system = random(40), user1 = random(10), answer = random(6), user2 = random(8);
  const Tokens turn1 = cat({&system, &user1});
  request(*exe, a, turn1, answer);
  // The conversation goes on in the other sequence (the first slot is busy, say).
  const Tokens turn2 = cat({&turn1, &answer, &user2});
  const int64_t before = b.tokens_evaluated();
  const auto got = request(*exe, b, turn2);
  EXPECT_EQ(b.reused_tokens(), static_cast<int32_t>(turn1.size() + answer.size())) << name();
  EXPECT_EQ(b.tokens_evaluated() - before, static_cast<int64_t>(user2.size())) << name();
  // The same steps in a context of its own: the prompt, each answer token, the new message.
  std::vector<Tokens> steps = {turn1};
  for (int32_t t : answer) steps.push_back({t});
  steps.push_back(user2);
  expect_same(got, alone(steps));
  if (!exe->can_rewind()) return;
  // Without recurrent state the steps do not matter: one prefill of the whole conversation agrees.
  expect_same(got, alone({turn2}));
}

TEST_P(PrefixCacheFixture, AnEditedMessageIsEvaluatedFromWhereItDiffers) {
  Slots s = slots(8);
  auto& [exe, cache, a, b] = s;
  const Tokens system = random(40), user = random(30);
  const Tokens first = cat({&system, &user});  // steps [0, 32), [32, 64), [64, 70)
  request(*exe, a, first);
  Tokens edited = first;
  edited[45] = (edited[45] + 1) % n_real_;  // the user changes a word of the message
  const auto got = request(*exe, b, edited);
  // KV rows resume anywhere (the block holding position 45 is shared and copied where written); a
  // recurrent state only at a checkpoint, the last block boundary before the change.
  const int32_t resume = exe->can_rewind() ? 45 : 32;
  EXPECT_EQ(b.reused_tokens(), resume) << name();
  expect_same(got, alone(pieces(edited, {static_cast<size_t>(resume), edited.size()})));
  // The first sequence's own rows were not touched by the other's write into the shared block.
  Tokens more = random(3);
  const Tokens longer = cat({&first, &more});
  const auto again = request(*exe, a, longer);
  EXPECT_EQ(a.reused_tokens(), static_cast<int32_t>(first.size())) << name();
  expect_same(again, alone(pieces(longer, {32, 64, 70, 73})));
}

TEST_P(PrefixCacheFixture, ATemplateThatDropsReasoningStillReusesTheEarlierTurns) {
  // Turn 1 answers with reasoning and a final text; the next prompt renders the history with the final
  // text only: it differs from what the sequence holds right after the first prompt.
  Slots s = slots(8);
  auto& [exe, cache, a, b] = s;
  const Tokens system = random(40), user1 = random(12), reasoning = random(9), final_text = random(4), user2 = random(5);
  Tokens answer = cat({&reasoning, &final_text});
  const Tokens turn1 = cat({&system, &user1});
  request(*exe, a, turn1, answer);
  Tokens shown = final_text;
  if (shown[0] == reasoning[0]) shown[0] = (shown[0] + 1) % n_real_;
  const Tokens turn2 = cat({&turn1, &shown, &user2});
  const int64_t before = a.tokens_evaluated();
  const auto got = request(*exe, a, turn2);
  // The whole first prompt is reused (a hybrid: from its checkpoint at the end of that prompt).
  EXPECT_EQ(a.reused_tokens(), static_cast<int32_t>(turn1.size())) << name();
  EXPECT_EQ(a.tokens_evaluated() - before, static_cast<int64_t>(shown.size() + user2.size())) << name();
  expect_same(got, alone(pieces(turn2, {32, turn1.size(), turn2.size()})));
}

TEST_P(PrefixCacheFixture, TheCacheStaysWithinItsBlocksAndNeverStarvesASequence) {
  // Room for 3 cached blocks: the oldest prompts go, the newest stays findable, and both sequences
  // can still fill their whole contexts.
  Slots s = slots(3);
  auto& [exe, cache, a, b] = s;
  std::vector<Tokens> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(random(40));
    request(*exe, a, prompts.back());
    EXPECT_LE(cache->stats().nodes, 3) << name();
  }
  EXPECT_GT(cache->stats().evictions, 0) << name();
  Tokens newest = prompts.back();
  newest.push_back(1);
  request(*exe, b, newest);
  EXPECT_EQ(b.reused_tokens(), 40) << name();
  Tokens oldest = prompts.front();
  oldest.push_back(1);
  request(*exe, b, oldest);
  EXPECT_EQ(b.reused_tokens(), 0) << name();
  // Both sequences fill their contexts while the cache holds its blocks.
  request(*exe, a, random(127));
  request(*exe, b, random(127));
  EXPECT_LE(cache->stats().nodes, 3) << name();
  // A budget of a few bytes keeps nothing (and the sessions work as without a cache).
  auto none = std::make_shared<runtime::PrefixCache>(exe, 1);
  a.set_prefix_cache(none);
  request(*exe, a, prompts[1]);
  EXPECT_EQ(none->stats().nodes, 0) << name();
}

TEST_P(PrefixCacheFixture, BlocksEvictedToHostMemoryComeBackWhenAPromptMatchesThem) {
  // Room for 3 blocks on the device and plenty in host memory: the oldest prompts move to the host
  // tier instead of going, and the oldest is reused whole again (its rows written back, a hybrid's
  // checkpoint with them), with the logits of the same steps taken alone.
  Slots s = slots(3, uint64_t{1} << 30);
  auto& [exe, cache, a, b] = s;
  std::vector<Tokens> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(random(40));  // steps [0, 32), [32, 40): a whole block and a partial one
    request(*exe, a, prompts.back());
    EXPECT_LE(cache->stats().nodes - cache->stats().host_nodes, 3) << name();
  }
  auto st = cache->stats();
  EXPECT_EQ(st.nodes, 8) << name();  // nothing dropped
  EXPECT_EQ(st.host_nodes, 5) << name();
  EXPECT_EQ(st.spills, 5) << name();
  EXPECT_GE(st.host_bytes, 5 * exe->kv_block_bytes()) << name();
  Tokens oldest = prompts.front();
  oldest.push_back(1);
  const int64_t before = b.tokens_evaluated();
  const auto got = request(*exe, b, oldest);
  EXPECT_EQ(b.reused_tokens(), 40) << name();
  EXPECT_EQ(b.tokens_evaluated() - before, 1) << name();
  expect_same(got, alone(pieces(oldest, {32, 40, 41})));
  st = cache->stats();
  EXPECT_EQ(st.restores, 2) << name();
  EXPECT_LE(st.nodes - st.host_nodes, 3) << name();
  // Both sequences still fill their contexts beside the cache's blocks.
  request(*exe, a, random(127));
  request(*exe, b, random(127));
  EXPECT_LE(cache->stats().nodes - cache->stats().host_nodes, 3) << name();
}

TEST_P(PrefixCacheFixture, APrefixLongerThanTheDeviceTierComesBackFromHostMemory) {
  // Room for one block on the device: a 100-token prompt's other three blocks are in host memory, and
  // come back for the next request into blocks the sequence alone holds (none leaked: both sequences
  // still fill their contexts afterwards). That sequence's earlier conversation filled most of its
  // context: its blocks go back first (without them no block would be free).
  Slots s = slots(1, uint64_t{1} << 30);
  auto& [exe, cache, a, b] = s;
  request(*exe, b, random(120));
  const Tokens prompt = random(100);  // steps [0, 32), [32, 64), [64, 96), [96, 100)
  request(*exe, a, prompt);
  EXPECT_EQ(cache->stats().nodes - cache->stats().host_nodes, 1) << name();
  Tokens more = prompt;
  more.push_back(1);
  const int64_t before = b.tokens_evaluated();
  const auto got = request(*exe, b, more);
  EXPECT_EQ(b.reused_tokens(), 100) << name();
  EXPECT_EQ(b.tokens_evaluated() - before, 1) << name();
  expect_same(got, alone(pieces(more, {32, 64, 96, 100, 101})));
  EXPECT_LE(cache->stats().nodes - cache->stats().host_nodes, 1) << name();
  request(*exe, a, random(127));
  request(*exe, b, random(127));
  EXPECT_LE(cache->stats().nodes - cache->stats().host_nodes, 1) << name();
}

TEST_P(PrefixCacheFixture, TheHostTierStaysWithinItsBudget) {
  // A host tier of 3 blocks (and their checkpoints' bytes): the least recently used go from there.
  auto probe = std::shared_ptr<backend::Executable>(weights_->instantiate(options(2)));
  uint64_t state_bytes = 0;
  if (!probe->can_rewind()) {
    runtime::Session one(weights_, probe, 0);
    one.eval(random(8));
    run_pending(*probe, one);
    state_bytes = probe->recurrent_state(0, 8).size() * sizeof(float);
  }
  const uint64_t host_budget = 3 * (probe->kv_block_bytes() + state_bytes);
  Slots s = slots(2, host_budget);
  auto& [exe, cache, a, b] = s;
  std::vector<Tokens> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(random(40));
    request(*exe, a, prompts.back());
    const auto st = cache->stats();
    EXPECT_LE(st.host_bytes, host_budget) << name();
    EXPECT_LE(st.nodes - st.host_nodes, 2) << name();
  }
  EXPECT_GT(cache->stats().spills, 0) << name();
  Tokens recent = prompts[4];
  recent.push_back(1);
  const auto got = request(*exe, b, recent);
  EXPECT_EQ(b.reused_tokens(), 40) << name();  // spilled, and back
  expect_same(got, alone(pieces(recent, {32, 40, 41})));
  Tokens oldest = prompts.front();
  oldest.push_back(1);
  request(*exe, b, oldest);
  EXPECT_EQ(b.reused_tokens(), 0) << name();  // gone from both tiers
  EXPECT_LE(cache->stats().host_bytes, host_budget) << name();
}

TEST_P(PrefixCacheFixture, ABlockReadOutIsWrittenBackExactly) {
  auto exe = std::shared_ptr<backend::Executable>(weights_->instantiate(options(4)));
  runtime::Session s(weights_, exe, 0);
  s.eval(random(40));
  run_pending(*exe, s);
  const auto blocks = exe->seq_blocks(0, 40);
  ASSERT_EQ(blocks.size(), 2u) << name();
  const auto bytes = exe->block_read(blocks[0]);
  ASSERT_EQ(bytes.size(), exe->kv_block_bytes()) << name();
  const int32_t copy = exe->block_write(bytes);
  EXPECT_NE(copy, blocks[0]) << name();
  EXPECT_EQ(exe->block_read(copy), bytes) << name();
  exe->blocks_hold(std::span<const int32_t>(&copy, 1), false);
  EXPECT_THROW(exe->block_read(copy), Error) << name();  // given back: holds nothing
  EXPECT_THROW(exe->block_write(std::span<const uint8_t>(bytes.data(), bytes.size() - 1)), Error) << name();
}

TEST_P(PrefixCacheFixture, ASessionOfItsOwnResumesFromItsCheckpoints) {
  // zinc chat's case: one session in a context of its own (not batched), a cache over that context.
  // After an edit, a hybrid resumes from the checkpoint at the block boundary before the change instead
  // of from the start; a model without recurrent state rewinds its own rows to the change.
  runtime::Session s(weights_, options(4));
  s.use_prefix_cache(uint64_t{1} << 30);
  const Tokens first = random(70);  // steps [0, 32), [32, 64), [64, 70)
  s.eval_reusing_prefix(first);
  s.remember();
  Tokens edited = first;
  edited[45] = (edited[45] + 1) % n_real_;
  const auto l = s.eval_reusing_prefix(edited);
  const std::vector<float> got(l.begin(), l.end());
  const int32_t resume = s.executable().can_rewind() ? 45 : 32;
  EXPECT_EQ(s.reused_tokens(), resume) << name();
  expect_same(got, alone(pieces(edited, {static_cast<size_t>(resume), edited.size()})));
}

INSTANTIATE_TEST_SUITE_P(Architectures, PrefixCacheFixture,
                         ::testing::Combine(::testing::Values("qwen3", "qwen3_moe", "qwen3_5", "qwen3_next"),
                                            ::testing::Values(ZINC_TEST_BACKEND)),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

}  // namespace
}  // namespace zinc
