// The KV cache's block tables (backend/exec_common.h): positions map to fixed-size blocks, a prefix is
// shared by reference, a shared block is copied before a sequence writes into it, and blocks come back
// when no sequence holds them.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "backend/exec_common.h"

namespace zinc::backend {
namespace {

using Copies = std::vector<std::tuple<int32_t, int32_t, int32_t>>;  // (from, to, rows)

TEST(KvBlocks, PositionsFillBlocksAndRewindDropsWhatFollows) {
  KvBlocks b(8, 4, 2);
  Copies copies;
  auto copy = [&](int32_t f, int32_t t, int32_t r) { copies.emplace_back(f, t, r); };
  b.prepare(0, 0, 10, copy);  // positions 0..9: three blocks
  EXPECT_EQ(b.length(0), 10);
  EXPECT_EQ(b.table(0).size(), 3u);
  EXPECT_EQ(b.free_blocks(), 5);
  EXPECT_EQ(b.block(0, 5), b.table(0)[1]);
  b.prepare(0, 10, 1, copy);  // one more position, same block
  EXPECT_EQ(b.table(0).size(), 3u);
  b.prepare(0, 3, 1, copy);  // rewind: positions 4.. dropped
  EXPECT_EQ(b.length(0), 4);
  EXPECT_EQ(b.table(0).size(), 1u);
  EXPECT_EQ(b.free_blocks(), 7);
  EXPECT_TRUE(copies.empty());  // nothing shared, nothing copied
  EXPECT_THROW(b.prepare(0, 5, 1, copy), Error);  // past what it holds
}

TEST(KvBlocks, ASharedPrefixIsCopiedOnlyWhereWritten) {
  KvBlocks b(8, 4, 3);
  Copies copies;
  auto copy = [&](int32_t f, int32_t t, int32_t r) { copies.emplace_back(f, t, r); };
  b.prepare(0, 0, 10, copy);
  b.share(0, 1, 10);  // sequence 1 = the first 10 positions of 0, no rows copied
  EXPECT_EQ(b.table(1), b.table(0));
  EXPECT_EQ(b.free_blocks(), 5);
  for (int32_t blk : b.table(0)) EXPECT_EQ(b.refs(blk), 2);
  // Sequence 1 writes position 10, inside the shared third block: it gets a copy of that block's first
  // two rows; the first two blocks stay shared.
  b.prepare(1, 10, 1, copy);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(std::get<0>(copies[0]), b.table(0)[2]);
  EXPECT_EQ(std::get<1>(copies[0]), b.table(1)[2]);
  EXPECT_EQ(std::get<2>(copies[0]), 2);
  EXPECT_NE(b.table(1)[2], b.table(0)[2]);
  EXPECT_EQ(b.table(1)[0], b.table(0)[0]);
  EXPECT_EQ(b.refs(b.table(0)[2]), 1);
  // A fork at a block boundary copies nothing: the next block is new.
  copies.clear();
  b.share(0, 2, 8);
  b.prepare(2, 8, 1, copy);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(b.table(2)[1], b.table(0)[1]);
  EXPECT_NE(b.table(2)[2], b.table(0)[2]);
  // Clearing returns what only that sequence held.
  const int32_t before = b.free_blocks();
  b.clear(2);
  EXPECT_EQ(b.free_blocks(), before + 1);
  b.clear(0);
  b.clear(1);
  EXPECT_EQ(b.free_blocks(), 8);
}

TEST(KvBlocks, CuttingASequenceInsideASharedBlockCopiesNothing) {
  // Keeping the first 6 of 10 positions, the rest given back: the block holding positions 4..7 stays
  // shared until the sequence writes into it (even with no block free).
  KvBlocks b(6, 4, 2);
  Copies copies;
  auto copy = [&](int32_t f, int32_t t, int32_t r) { copies.emplace_back(f, t, r); };
  b.prepare(0, 0, 10, copy);
  b.share(0, 1, 10);
  b.prepare(0, 10, 8, copy);  // sequence 0 grows to 18 positions: its third block copied, two more
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(b.free_blocks(), 0);
  copies.clear();
  b.share(1, 1, 6);  // sequence 1 keeps 6 positions
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(b.length(1), 6);
  EXPECT_EQ(b.table(1).size(), 2u);
  EXPECT_EQ(b.table(1)[1], b.table(0)[1]);
  EXPECT_EQ(b.free_blocks(), 1);  // its third block, which sequence 0 no longer shared
}

TEST(KvBlocks, RunningOutIsAClearErrorThatChangesNothing) {
  KvBlocks b(3, 4, 2);
  auto none = [](int32_t, int32_t, int32_t) {};
  b.prepare(0, 0, 8, none);
  EXPECT_THROW(b.prepare(1, 0, 8, none), Error);
  EXPECT_EQ(b.length(1), 0);
  EXPECT_EQ(b.free_blocks(), 1);
  b.prepare(1, 0, 4, none);
  // Rewinding frees its own blocks first, so a sequence can always reach its old length again.
  b.prepare(0, 2, 6, none);
  EXPECT_EQ(b.length(0), 8);
}

TEST(KvBlocks, HeldBlocksOutliveTheirSequenceAndAreAdoptedShared) {
  // A holder outside the tables (a prefix cache) keeps blocks a cleared sequence held; another sequence
  // adopts them without copying, and copies only the block it writes into.
  KvBlocks b(6, 4, 2);
  Copies copies;
  auto copy = [&](int32_t f, int32_t t, int32_t r) { copies.emplace_back(f, t, r); };
  b.prepare(0, 0, 6, copy);  // two blocks
  const std::vector<int32_t> held = b.table(0);
  for (int32_t blk : held) b.hold(blk);
  b.clear(0);
  EXPECT_EQ(b.free_blocks(), 4);  // still held
  b.adopt(1, held, 5);             // positions 0..4: both blocks, the second in part
  EXPECT_EQ(b.length(1), 5);
  EXPECT_EQ(b.refs(held[1]), 2);
  b.prepare(1, 5, 1, copy);  // writes position 5, inside the shared second block: copied first
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(std::get<0>(copies[0]), held[1]);
  EXPECT_EQ(std::get<2>(copies[0]), 1);
  EXPECT_EQ(b.table(1)[0], held[0]);
  // Given back: the blocks no table holds return.
  for (int32_t blk : held) b.unhold(blk);
  EXPECT_EQ(b.refs(held[1]), 0);
  EXPECT_EQ(b.free_blocks(), 4);
  // Bad input changes nothing.
  EXPECT_THROW(b.hold(held[1]), Error);        // a free block
  EXPECT_THROW(b.unhold(held[1]), Error);
  EXPECT_THROW(b.hold(99), Error);
  EXPECT_THROW(b.adopt(0, held, 9), Error);    // 9 positions need 3 blocks
  EXPECT_THROW(b.adopt(0, {&held[1], 1}, 3), Error);  // a free block
  EXPECT_EQ(b.length(0), 0);
}

}  // namespace
}  // namespace zinc::backend
