// The scheduler's budget for prompt tokens beside decoding slots (server::prompt_room).
#include <gtest/gtest.h>

#include "server/engine.h"

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

TEST(PromptRoom, PromptsAlwaysMove) {
  EXPECT_EQ(prompt_room(0.013, 0.1, 3, 8, 256), 8);
  EXPECT_EQ(prompt_room(0.013, 0.1, 3, 8, 5), 5);  // never past the step's budget
}

}  // namespace
