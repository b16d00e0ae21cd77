// The benchmarks' measurements that a run must not hang on: a prompt read beside decoding steps
// (run_prompt_lane) whose rounds stop their steps after a bound, on stories260K on the CPU.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/model.h"
#include "raw_gguf.h"
#include "runtime/bench.h"

namespace zinc::runtime {
namespace {

TEST(PromptLane, RoundsStopTheirStepsAfterTheBound) {
  ZINC_REQUIRE_TESTDATA();
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  auto backend = backend::make_cpu_backend(2);
  auto weights = backend->load(model::load(f).graph, f);
  backend::ExecOptions opts;
  opts.max_tokens = 16;
  // No time at all beside the prompt: every round stops its steps before the first, and the prompt
  // still ends (read alone).
  const PromptLaneResult cut = run_prompt_lane(weights, opts, 2, 256, 8, false, 2, 7, 0.0);
  EXPECT_EQ(cut.rounds_cut, 2);
  EXPECT_EQ(cut.steps_during, 0);
  EXPECT_GT(cut.prompt_during, 0);
  EXPECT_GT(cut.prompt_alone, 0);
  EXPECT_GT(cut.step_p50_alone, 0);
  // A bound it never reaches: no round cut.
  const PromptLaneResult whole = run_prompt_lane(weights, opts, 2, 256, 8, false, 2, 7, 600.0);
  EXPECT_EQ(whole.rounds_cut, 0);
  EXPECT_GT(whole.prompt_during, 0);
}

}  // namespace
}  // namespace zinc::runtime
