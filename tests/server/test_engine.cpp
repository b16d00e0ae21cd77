// The scheduler's budget for prompt tokens beside decoding slots (server::prompt_room), and the
// prompt lane's default for the backend.
#include <gtest/gtest.h>

#include <array>

#include "gguf/reader.h"
#include "raw_gguf.h"
#include "server/engine.h"
#include "tokenizer/tokenizer.h"

namespace {

using zinc::server::prompt_room;

TEST(PromptRoom, WholeBudgetUntilBothTimesAreKnown) {
  EXPECT_EQ(prompt_room(0, 0.002, 3, 8, 256), 256);
  EXPECT_EQ(prompt_room(0.013, 0, 3, 8, 256), 256);
  EXPECT_EQ(prompt_room(0.013, 0.002, 1, 8, 256), 256);  // a factor of 1 or less: no limit
}

TEST(PromptRoom, KeepsTheStepWithinTheFactor) {
  // A 13 ms decode step and 2.4 ms per prompt token: a step of 3 x 13 ms has room for 2 x 13 / 2.4
  // = 10.8 tokens, so 10.
  EXPECT_EQ(prompt_room(0.013, 0.0024, 3, 8, 256), 10);
  EXPECT_EQ(prompt_room(0.013, 0.0024, 9, 8, 256), 43);
  // Cheap prompt tokens (a GPU): the whole budget.
  EXPECT_EQ(prompt_room(0.012, 0.0001, 3, 8, 256), 240);
  EXPECT_EQ(prompt_room(0.012, 0.00001, 3, 8, 256), 256);
}

TEST(PromptRoom, StaysWithinTheBackendsFewRows) {
  // A GPU whose decode products take up to 64 rows, 8 of them decoding: 56 prompt tokens at most,
  // however cheap they look, and fewer where the factor says so.
  EXPECT_EQ(prompt_room(0.0048, 0.00015, 3, 8, 256, 56), 56);
  EXPECT_EQ(prompt_room(0.0048, 0.00030, 3, 8, 256, 56), 32);
  EXPECT_EQ(prompt_room(0, 0, 3, 8, 256, 56), 56);     // before the times are known too
  EXPECT_EQ(prompt_room(0.0048, 0.0001, 3, 8, 256, 2), 8);  // prompts still move
  EXPECT_EQ(prompt_room(0.0048, 0.0001, 3, 8, 5, 2), 5);    // never past the step's budget
  EXPECT_EQ(prompt_room(0.0048, 0.0001, 1, 8, 256, 56), 256);  // no factor: no bound
}

TEST(PromptRoom, FillsTheStepToAPowerOfTwoRows) {
  using zinc::server::fitted_prompt_room;
  // Times measured by rows rounded up: 8 rows 4 ms, 32 rows 9 ms, 64 rows 12.5 ms; the limit 12 ms.
  std::array<double, 8> t{};
  t[3] = 0.004, t[5] = 0.009, t[6] = 0.0125;
  // 8 decoding: 16 rows unmeasured but within the linear 25 tokens, 32 measured within, 64 past it.
  EXPECT_EQ(fitted_prompt_room(8, 25, 56, t, 0.012, 8), 24);
  t[6] = 0.0115;  // 64 rows within the limit: filled, though the linear estimate said 25
  EXPECT_EQ(fitted_prompt_room(8, 25, 56, t, 0.012, 8), 56);
  EXPECT_EQ(fitted_prompt_room(8, 25, 20, t, 0.012, 8), 20);  // never past cap
  // Nothing measured: the size the linear room reaches into, filled (33 rows cost what 64 do; the
  // step measures it).
  const std::array<double, 8> none{};
  EXPECT_EQ(fitted_prompt_room(8, 25, 56, none, 0.012, 8), 56);
  EXPECT_EQ(fitted_prompt_room(8, 20, 56, none, 0.012, 8), 24);
  EXPECT_EQ(fitted_prompt_room(3, 60, 61, none, 0.012, 8), 61);
  EXPECT_EQ(fitted_prompt_room(8, 5, 3, none, 0.012, 8), 3);  // never past cap
  // Nothing fits: prompts still move (min_tokens, within cap).
  t[4] = 0.02;  // 16 rows measured past the limit
  EXPECT_EQ(fitted_prompt_room(8, 56, 56, t, 0.012, 8), 8);
  // No limit known: the linear room.
  EXPECT_EQ(fitted_prompt_room(8, 25, 56, t, 0, 8), 25);
}

TEST(PromptRoom, ForgetsAgedTimesWithinTheLimitOnly) {
  using zinc::server::forget_stale_step_times;
  // 32 rows measured at step 10 (7 ms, within the 9.5 ms limit), 64 rows at step 10 (11 ms, past it),
  // 16 rows at step 300 (4 ms); now step 400, estimates older than 256 steps aged.
  std::array<double, 8> t{};
  std::array<int64_t, 8> at{};
  t[4] = 0.004, at[4] = 300;
  t[5] = 0.007, at[5] = 10;
  t[6] = 0.011, at[6] = 10;
  forget_stale_step_times(t, at, 400, 256, 0.0095);
  EXPECT_EQ(t[4], 0.004) << "renewed lately: kept";
  EXPECT_EQ(t[5], 0.0) << "aged and within the limit: tried afresh";
  EXPECT_EQ(t[6], 0.011) << "aged but past the limit: kept, not tried blindly";
  // So the fitted room beside 8 decoding rows stays out of 64 rows where the aged estimate said too
  // slow, though the linear room (40 tokens) reaches past 32.
  EXPECT_EQ(zinc::server::fitted_prompt_room(8, 40, 56, t, 0.0095, 8), 24);
  // Forgotten, the same 64 rows would have been tried.
  t[6] = 0;
  EXPECT_EQ(zinc::server::fitted_prompt_room(8, 40, 56, t, 0.0095, 8), 56);
  // A limit grown past the old time (more streams, longer decode steps): the aged size is tried again.
  t[6] = 0.011;
  forget_stale_step_times(t, at, 400, 256, 0.012);
  EXPECT_EQ(t[6], 0.0);
}

TEST(PromptRoom, OneStepPastTheLimitKeepsItsSizeOut) {
  using zinc::server::record_step_time;
  // 64-row steps averaging 9.5 ms against a 10.4 ms limit; then one of 11 ms (the prompt deeper).
  double e = 0;
  record_step_time(e, 0.0095, 0.0104);
  EXPECT_DOUBLE_EQ(e, 0.0095);
  record_step_time(e, 0.0095, 0.0104);
  EXPECT_DOUBLE_EQ(e, 0.0095);
  record_step_time(e, 0.011, 0.0104);
  EXPECT_DOUBLE_EQ(e, 0.011) << "the average (9.8 ms) would have let the next steps take 64 rows again";
  std::array<double, 8> t{};
  t[5] = 0.006, t[6] = e;
  EXPECT_EQ(zinc::server::fitted_prompt_room(8, 40, 56, t, 0.0104, 8), 24);
  // Within the limit: the moving average as before (steps near it on both sides settle it).
  record_step_time(e, 0.009, 0.0104);
  EXPECT_NEAR(e, 0.8 * 0.011 + 0.2 * 0.009, 1e-12);
  // No limit (no decoding streams measured yet): the average alone.
  double f = 0.01;
  record_step_time(f, 0.02, 0);
  EXPECT_NEAR(f, 0.012, 1e-12);
}

TEST(PromptRoom, PromptsAlwaysMove) {
  EXPECT_EQ(prompt_room(0.013, 0.1, 3, 8, 256), 8);
  EXPECT_EQ(prompt_room(0.013, 0.1, 3, 8, 5), 5);  // never past the step's budget
}

// --prompt-lane left to its default: a context of its own for long prompts only where the backend
// runs two contexts' steps side by side (CUDA) and there are slots to decode beside it, so none on the
// CPU, with one slot or several; set, it stands.
TEST(PromptLaneDefault, NoneWhereContextsTakeTurns) {
  ZINC_REQUIRE_TESTDATA();
  const zinc::gguf::File f = zinc::gguf::File::open(zinc::test::testdata_dir() / "models/stories260K.gguf");
  const zinc::tokenizer::Tokenizer tok = zinc::tokenizer::Tokenizer::from_gguf(f);
  zinc::server::EngineOptions o;
  o.exec.n_ctx = 256;
  o.threads = 1;
  ASSERT_EQ(o.prompt_lane, -1);
  for (const int slots : {1, 4}) {
    o.n_slots = slots;
    const zinc::server::Engine e(f, tok, o);
    EXPECT_EQ(e.prompt_lane(), 0) << slots << " slots";
  }
  o.prompt_lane = 100;
  const zinc::server::Engine e(f, tok, o);
  EXPECT_EQ(e.prompt_lane(), 100);
}

}  // namespace
