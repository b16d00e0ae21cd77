// End to end on real weights: stories260K on the CPU backend reproduces the model's published greedy
// text from BOS. Tokens are turned into text with the vocabulary's own pieces (SentencePiece '▁' is a
// space, <0xNN> a byte), independently of the tokenizer library.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "load_progress.h"
#include "raw_gguf.h"
#include "runtime/session.h"

namespace zinc::runtime {
namespace {

std::string piece_text(const std::string& piece) {
  if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece.back() == '>') {
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += piece[i++];
    }
  }
  return out;
}

std::string published_text() {
  std::ifstream in(test::testdata_dir() / "models/stories260K.greedy200.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Stories260K, LoadReportsItsProgress) {
  // With a progress callback the CPU reads the mapped weights in while loading, telling how far.
  ZINC_REQUIRE_TESTDATA();
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  auto backend = backend::make_cpu_backend(2);
  const model::Model m = model::load(f);
  test::LoadProgressLog log;
  auto weights = backend->load(m.graph, f, log.callback());
  log.expect_complete(m.graph, f, "cpu");
  EXPECT_GE(log.calls.size(), 10u) << "one report per weight tensor";
}

TEST(Stories260K, SessionsShareOneLoadOfTheWeights) {
  // Three contexts over one load: each follows its own conversation, with the logits (bit for bit) of
  // a session that loaded the weights for itself, whatever the others did in between.
  ZINC_REQUIRE_TESTDATA();
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  auto backend = backend::make_cpu_backend(2);
  backend::ExecOptions opts;
  opts.n_ctx = 64;
  opts.max_tokens = 16;
  const std::vector<std::vector<int32_t>> prompts = {{1, 403, 407, 261}, {1, 378, 432}, {1, 383, 286, 403, 407, 261, 378}};
  auto weights = backend->load(model::load(f).graph, f);
  std::vector<std::unique_ptr<Session>> shared;
  for (size_t i = 0; i < prompts.size(); ++i) shared.push_back(std::make_unique<Session>(weights, opts));
  EXPECT_EQ(shared[0]->weights().get(), shared[2]->weights().get());
  std::vector<std::vector<float>> got(prompts.size());
  for (size_t round = 0; round < 3; ++round) {  // interleaved: prompt, then two tokens each
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<int32_t> toks = round == 0 ? prompts[i] : std::vector<int32_t>{static_cast<int32_t>(300 + round + i)};
      const auto l = shared[i]->eval(toks);
      got[i].insert(got[i].end(), l.begin(), l.end());
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    Session alone(f, *backend, opts);
    std::vector<float> want;
    for (size_t round = 0; round < 3; ++round) {
      const std::vector<int32_t> toks = round == 0 ? prompts[i] : std::vector<int32_t>{static_cast<int32_t>(300 + round + i)};
      const auto l = alone.eval(toks);
      want.insert(want.end(), l.begin(), l.end());
    }
    EXPECT_EQ(got[i], want) << "conversation " << i;
  }
}

TEST(Stories260K, GreedyFromBosReproducesThePublishedText) {
  ZINC_REQUIRE_TESTDATA();
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  const auto pieces = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
  const std::string expected = published_text();
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = 256;
  opts.max_tokens = 32;
  Session s(f, *backend, opts);

  std::string text;
  int32_t tok = 1;  // BOS
  int forced = 0;
  for (int step = 0; step < 200; ++step) {
    const auto logits = s.eval(std::span<const int32_t>(&tok, 1));
    int32_t next = argmax(logits);
    std::string piece = piece_text(pieces[static_cast<size_t>(next)]);
    if (step == 0 && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);  // no leading space after BOS
    if (expected.compare(text.size(), piece.size(), piece) != 0) {
      // The published run and this one may part at a near-tie late in the text (the model description
      // notes two tokens within 0.004 in logit near step 185). Only there, and only for a near-tie, follow
      // the published token: the best-scoring token that continues the published text.
      ASSERT_GE(step, 180) << "diverged at step " << step << " after: " << text;
      int32_t alt = -1;
      for (size_t id = 0; id < pieces.size(); ++id) {
        const std::string p = piece_text(pieces[id]);
        if (!p.empty() && expected.compare(text.size(), p.size(), p) == 0 &&
            (alt < 0 || logits[id] > logits[static_cast<size_t>(alt)])) {
          alt = static_cast<int32_t>(id);
        }
      }
      ASSERT_GE(alt, 0) << "no token continues the published text at step " << step;
      // A near-tie in float32: two float32 evaluations of this model differ by at most 2e-4 of the
      // largest logit (about 18), 3.6e-3 (the bound compare_probs.mjs derives); two candidates can swap
      // only within twice that.
      EXPECT_LT(logits[static_cast<size_t>(next)] - logits[static_cast<size_t>(alt)], 0.01f) << "step " << step;
      next = alt;
      piece = piece_text(pieces[static_cast<size_t>(next)]);
      ++forced;
    }
    text += piece;
    tok = next;
  }
  EXPECT_LE(forced, 2);
  EXPECT_EQ(text, expected.substr(0, text.size()));
  EXPECT_GE(text.size() + 8, expected.size());
}

TEST(Stories260K, PrefillInChunksMatchesTokenByToken) {
  ZINC_REQUIRE_TESTDATA();
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = 64;
  opts.max_tokens = 7;  // the 16-token prompt runs as three chunks
  opts.kv_type = backend::KvType::F32;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 275, 300, 350, 302, 267, 412, 290, 305, 311, 376, 339};
  Session chunked(f, *backend, opts);
  const auto chunked_logits = chunked.eval(prompt, true);
  const std::vector<float> all(chunked_logits.begin(), chunked_logits.end());
  const auto nv = static_cast<size_t>(chunked.n_vocab());
  ASSERT_EQ(all.size(), prompt.size() * nv);
  EXPECT_EQ(chunked.n_past(), 16);
  // Exact: stories260K is F32 and attends only, so a token's arithmetic does not depend on the step it
  // is in (F32 products are one dot product per row and token, attention is per token and head, norms
  // per row).
  Session single(f, *backend, opts);
  for (size_t i = 0; i < prompt.size(); ++i) {
    const auto l = single.eval(std::span<const int32_t>(&prompt[i], 1));
    ASSERT_EQ(l.size(), nv);
    EXPECT_EQ(std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(i * nv), all.begin() + static_cast<std::ptrdiff_t>((i + 1) * nv)),
              std::vector<float>(l.begin(), l.end()))
        << "token " << i;
  }
  // A prompt that overflows the context is refused whole.
  const std::vector<int32_t> too_many(60, 5);
  EXPECT_THROW(chunked.eval(too_many), Error);
  EXPECT_EQ(chunked.n_past(), 16);
  const std::vector<int32_t> bad_id = {100000};
  EXPECT_THROW(chunked.eval(bad_id), Error);
}

TEST(Stories260K, SecondTurnPrefillsOnlyNewTokens) {
  ZINC_REQUIRE_TESTDATA();
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = 64;
  opts.max_tokens = 8;
  opts.kv_type = backend::KvType::F32;
  const std::vector<int32_t> turn1 = {1, 403, 407, 261, 378, 275, 300};
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), {350, 302, 267});
  Session s(f, *backend, opts);
  s.eval_reusing_prefix(turn1);
  EXPECT_EQ(s.tokens_evaluated(), 7);
  const auto reused = s.eval_reusing_prefix(turn2);
  const std::vector<float> second(reused.begin(), reused.end());
  EXPECT_EQ(s.tokens_evaluated(), 10);  // only the three new tokens
  Session fresh(f, *backend, opts);
  const auto all = fresh.eval(turn2);
  // Exact, for the reason given in PrefillInChunksMatchesTokenByToken.
  EXPECT_EQ(std::vector<float>(all.begin(), all.end()), second);
  // An edited earlier turn reuses only the part before the edit.
  std::vector<int32_t> edited = turn2;
  edited[5] = 290;
  s.eval_reusing_prefix(edited);
  EXPECT_EQ(s.tokens_evaluated(), 15);  // positions 5..9
  EXPECT_EQ(s.history(), edited);
  // The same tokens again: one token is re-evaluated to produce logits.
  s.eval_reusing_prefix(edited);
  EXPECT_EQ(s.tokens_evaluated(), 16);
}

TEST(Stories260K, KvCacheTypesAgree) {
  ZINC_REQUIRE_TESTDATA();
  // The cache stores K and V rows; F16 rounds them (relative error ~5e-4), which must barely move the
  // logits of a 40-token context compared with an exact F32 cache. (Q8_0 is checked on the fixtures:
  // this model's 8-wide heads do not fill Q8_0 blocks, which must be a clear error.)
  const gguf::File f = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  auto backend = backend::make_cpu_backend();
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 39; ++i) prompt.push_back(static_cast<int32_t>(260 + (i * 37) % 240));
  std::vector<std::vector<float>> out;
  for (auto kv : {backend::KvType::F32, backend::KvType::F16}) {
    backend::ExecOptions opts;
    opts.n_ctx = 64;
    opts.max_tokens = 16;
    opts.kv_type = kv;
    Session s(f, *backend, opts);
    const auto l = s.eval(prompt, true);
    out.emplace_back(l.begin(), l.end());
  }
  auto rel = [&](const std::vector<float>& a) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      d += (a[i] - out[0][i]) * (a[i] - out[0][i]);
      n += out[0][i] * out[0][i];
    }
    return std::sqrt(d / n);
  };
  // Rounding to f16 moves each cached element by at most 2^-11 (4.9e-4) of itself; a layer's attention
  // output is a weighted mean of V rows under weights whose scores move by as little, so each of the
  // five layers adds at most about that much: 5 × 4.9e-4 ≈ 2.4e-3 in the worst case, about 2e-3 for
  // errors that do not all line up. A cache written wrongly moves the logits by their own size.
  EXPECT_GT(rel(out[1]), 0.0);  // the cache really is rounded
  EXPECT_LT(rel(out[1]), 2e-3);
  backend::ExecOptions q8;
  q8.kv_type = backend::KvType::Q8_0;
  try {
    Session s(f, *backend, q8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zinc::runtime
