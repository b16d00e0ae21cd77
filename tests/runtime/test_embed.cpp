// Embeddings (runtime::Embedder) on real weights (stories260K), each pooling against what it must equal
// by the model's own arithmetic: the last token's state times the output matrix is the generation
// graph's logits; a causal model's state at position i is the last state of the first i + 1 tokens, so
// mean pooling is the mean of those prefixes' last states and cls the first token's alone; the step
// size does not change a vector; normalising scales to unit length.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "quant/quant.h"
#include "raw_gguf.h"
#include "runtime/embed.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace zinc::runtime {
namespace {

struct Stories {
  gguf::File file = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_gguf(file);
  std::unique_ptr<backend::Backend> backend = backend::make_cpu_backend(1);
};

double max_gap(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double g = 0, m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    g = std::max(g, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return g / m;
}

TEST(Embed, TheLastStateTimesTheOutputMatrixIsTheLogits) {
  ZINC_REQUIRE_TESTDATA();
  Stories s;
  const auto ids = s.tok.encode("Once upon a time, there was a cat", true, false);
  Embedder e(s.file, *s.backend, 128, 64);
  const std::vector<float> h = e.embed(ids, Pooling::Last, false);
  ASSERT_EQ(e.dim(), static_cast<int64_t>(h.size()));
  backend::ExecOptions opts;
  opts.n_ctx = 128;
  opts.max_tokens = 64;
  Session session(s.file, *s.backend, opts);
  const auto logits = session.eval(ids);
  // The output projection (its own matrix, or the token embeddings when tied), in double: the float
  // product sums dim terms, within (dim + 2)·u of the sum of their magnitudes.
  const auto* t = s.file.find_tensor("output.weight") ? s.file.find_tensor("output.weight") : s.file.find_tensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  const auto bytes = s.file.tensor_data(*t);
  const int64_t dim = e.dim(), vocab = static_cast<int64_t>(logits.size());
  std::vector<float> row(static_cast<size_t>(dim));
  int outside = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    quant::dequantize_row(t->type, bytes.data() + static_cast<size_t>(v) * quant::row_size(t->type, dim), row.data(), dim);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < dim; ++i) {
      want += static_cast<double>(row[static_cast<size_t>(i)]) * h[static_cast<size_t>(i)];
      mag += std::fabs(static_cast<double>(row[static_cast<size_t>(i)]) * h[static_cast<size_t>(i)]);
    }
    outside += std::fabs(logits[static_cast<size_t>(v)] - want) > (dim + 2) * std::ldexp(1.0, -24) * mag;
  }
  EXPECT_EQ(outside, 0);
}

TEST(Embed, MeanIsTheMeanOfThePrefixesLastStatesAndClsTheFirst) {
  ZINC_REQUIRE_TESTDATA();
  Stories s;
  const auto ids = s.tok.encode("The little dog ran to the park", true, false);
  Embedder e(s.file, *s.backend, 64, 64);
  std::vector<double> mean(static_cast<size_t>(e.dim()), 0.0);
  for (size_t n = 1; n <= ids.size(); ++n) {
    const auto h = e.embed(std::span(ids).first(n), Pooling::Last, false);
    for (size_t i = 0; i < h.size(); ++i) mean[i] += h[i] / static_cast<double>(ids.size());
  }
  const std::vector<float> want(mean.begin(), mean.end());
  EXPECT_LT(max_gap(e.embed(ids, Pooling::Mean, false), want), 1e-5);
  EXPECT_LT(max_gap(e.embed(ids, Pooling::Cls, false), e.embed(std::span(ids).first(1), Pooling::Last, false)), 1e-6);
  // The poolings are not the same vector (else the checks above could not tell them apart).
  EXPECT_GT(max_gap(e.embed(ids, Pooling::Mean, false), e.embed(ids, Pooling::Last, false)), 0.1);
}

TEST(Embed, StepSizeDoesNotChangeAVectorAndNormalisingScalesIt) {
  ZINC_REQUIRE_TESTDATA();
  Stories s;
  const auto ids = s.tok.encode("Lily wanted to play with her ball in the garden", true, false);
  Embedder whole(s.file, *s.backend, 64, 64), steps(s.file, *s.backend, 64, 3);
  for (Pooling p : {Pooling::Mean, Pooling::Cls, Pooling::Last}) {
    const auto a = whole.embed(ids, p, false), b = steps.embed(ids, p, false);
    EXPECT_LT(max_gap(b, a), 1e-5) << pooling_name(p);
    const auto u = whole.embed(ids, p, true);
    double norm = 0, unit_norm = 0;
    for (float x : a) norm += static_cast<double>(x) * x;
    for (float x : u) unit_norm += static_cast<double>(x) * x;
    EXPECT_NEAR(unit_norm, 1.0, 1e-5) << pooling_name(p);
    std::vector<float> scaled(u.size());
    for (size_t i = 0; i < u.size(); ++i) scaled[i] = static_cast<float>(u[i] * std::sqrt(norm));
    EXPECT_LT(max_gap(scaled, a), 1e-5) << pooling_name(p);
  }
}

TEST(Embed, SharedWeightsGiveTheSameVectorsAndBadInputsAreErrors) {
  ZINC_REQUIRE_TESTDATA();
  Stories s;
  const auto ids = s.tok.encode("A big red ball", true, false);
  const graph::Graph g = model::load(s.file).graph;
  auto weights = s.backend->load(g, s.file);
  Embedder own(s.file, *s.backend, 16, 16), shared(weights, 16, 16);
  EXPECT_EQ(own.embed(ids, Pooling::Mean, true), shared.embed(ids, Pooling::Mean, true));
  EXPECT_THROW(own.embed({}, Pooling::Mean, true), Error);
  EXPECT_THROW(own.embed(std::vector<int32_t>(17, 1), Pooling::Mean, true), Error);
  EXPECT_EQ(pooling_name(pooling_from_name("last")), std::string("last"));
  EXPECT_THROW(pooling_from_name("max"), Error);
  EXPECT_FALSE(declared_pooling(s.file).has_value());
  // A context over weights runs their graph or one cut from it, nothing else.
  graph::Graph other = g;
  other.tensors.pop_back();
  EXPECT_THROW(weights->instantiate(backend::ExecOptions{}, other), Error);
}

}  // namespace
}  // namespace zinc::runtime
