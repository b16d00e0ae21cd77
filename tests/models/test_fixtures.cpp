// Every supported architecture against Hugging Face transformers: tiny random-weight checkpoints
// (tests/models/fixtures, made by tools/reference/make_fixtures.py) are converted with zinc convert,
// quantized with zinc quantize and run on the CPU backend; logits at every position and greedy
// continuations are compared with the float64 reference outputs stored beside each checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "convert/convert.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "quant/model_quantize.h"
#include "raw_gguf.h"
#include "seq_schedule.h"
#include "runtime/session.h"

namespace zinc {
namespace {

const std::filesystem::path kFixtures = ZINC_FIXTURES_DIR;

struct Reference {
  std::vector<std::vector<int32_t>> sequences;
  std::vector<std::vector<float>> logits;  // per sequence: [tokens x vocab]
  std::vector<int32_t> greedy_prompt, greedy;
  int64_t vocab = 0;
  int64_t n_tokens = 0;  // real tokens: the reference's greedy choices never go past them
};

Reference load_reference(const std::filesystem::path& dir) {
  std::ifstream in(dir / "reference.json");
  const auto j = nlohmann::json::parse(in);
  Reference r;
  r.sequences = j["sequences"].get<std::vector<std::vector<int32_t>>>();
  r.greedy_prompt = j["greedy_prompt"].get<std::vector<int32_t>>();
  r.greedy = j["greedy"].get<std::vector<int32_t>>();
  r.n_tokens = j["n_tokens"].get<int64_t>();
  for (const auto& l : j["logits"]) {
    const auto shape = l["shape"].get<std::vector<int64_t>>();
    r.vocab = shape[1];
    std::vector<float> v(static_cast<size_t>(shape[0] * shape[1]));
    std::ifstream f(dir / l["file"].get<std::string>(), std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    r.logits.push_back(std::move(v));
  }
  return r;
}

// A fixture converted to F32 GGUF in `tmp` (file `name`) and opened.
gguf::File convert_f32(const std::filesystem::path& dir, const test::TempDir& tmp, const std::string& name = "m.gguf") {
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  convert::convert_hf(dir, tmp.file(name), copts);
  return gguf::File::open(tmp.file(name));
}

// A small context with an exact (F32) cache, for comparing logits between sessions.
backend::ExecOptions exact_options() {
  backend::ExecOptions opts;
  opts.n_ctx = 64;
  opts.kv_type = backend::KvType::F32;
  return opts;
}

std::vector<float> softmax(const float* x, int64_t n) {
  std::vector<float> p(static_cast<size_t>(n));
  const float m = *std::max_element(x, x + n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[static_cast<size_t>(i)] = std::exp(x[i] - m);
  for (auto& v : p) v = static_cast<float>(v / s);
  return p;
}

struct Agreement {
  double max_rel_err = 0;  // max over positions of ||ours - ref|| / ||ref||
  double mean_kl = 0;      // mean over positions of KL(ref || ours)
  double top1 = 0;         // fraction of positions with the same argmax
};

Agreement compare(const gguf::File& f, const Reference& ref) {
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = 128;
  opts.max_tokens = 32;
  opts.kv_type = backend::KvType::F32;
  Agreement a;
  int positions = 0;
  for (size_t s = 0; s < ref.sequences.size(); ++s) {
    runtime::Session session(f, *backend, opts);
    const auto got = session.eval(ref.sequences[s], true);
    // Gemma's converter keeps only the embedding rows of real tokens: compare over those.
    const int64_t nv = session.n_vocab();
    EXPECT_LE(nv, ref.vocab);
    for (size_t t = 0; t < ref.sequences[s].size(); ++t) {
      const float* o = got.data() + t * static_cast<size_t>(nv);
      const float* r = ref.logits[s].data() + t * static_cast<size_t>(ref.vocab);
      double diff = 0, norm = 0;
      for (int64_t v = 0; v < nv; ++v) {
        diff += (o[v] - r[v]) * (o[v] - r[v]);
        norm += r[v] * r[v];
      }
      a.max_rel_err = std::max(a.max_rel_err, std::sqrt(diff / norm));
      const auto p = softmax(r, nv), q = softmax(o, nv);
      double kl = 0;
      for (size_t v = 0; v < p.size(); ++v) {
        if (p[v] > 0) kl += p[v] * std::log(p[v] / std::max(q[v], 1e-30f));
      }
      a.mean_kl += kl;
      a.top1 += (std::max_element(o, o + nv) - o) == (std::max_element(r, r + nv) - r);
      ++positions;
    }
  }
  a.mean_kl /= positions;
  a.top1 /= positions;
  return a;
}

// Greedy choice among the real tokens (the reference suppressed the padding ids), never the fixtures'
// end-of-sequence token 1: the reference generated with min_new_tokens, which suppresses it.
int32_t pick(std::span<const float> logits, int64_t n_tokens) {
  std::vector<float> l(logits.begin(), logits.begin() + std::min<int64_t>(n_tokens, static_cast<int64_t>(logits.size())));
  l[1] = -INFINITY;
  return runtime::argmax(l);
}

std::vector<int32_t> greedy(const gguf::File& f, const std::vector<int32_t>& prompt, size_t n, int64_t n_tokens) {
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = 128;
  opts.max_tokens = 32;
  runtime::Session s(f, *backend, opts);
  std::vector<int32_t> out;
  auto logits = s.eval(prompt);
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = pick(logits, n_tokens);
    out.push_back(t);
    logits = s.eval(std::span<const int32_t>(&out.back(), 1));
  }
  return out;
}

// Fraction of the reference greedy continuation that the model predicts when fed the reference's own
// tokens (teacher forcing): free-running greedy decoding compounds a single near-tie into a different
// text, this measures each step on its own.
double forced_agreement(const gguf::File& f, const Reference& ref) {
  std::vector<int32_t> seq = ref.greedy_prompt;
  seq.insert(seq.end(), ref.greedy.begin(), ref.greedy.end() - 1);
  auto backend = backend::make_cpu_backend();
  backend::ExecOptions opts;
  opts.n_ctx = 128;
  opts.max_tokens = 64;
  runtime::Session s(f, *backend, opts);
  const auto logits = s.eval(seq, true);
  const auto nv = static_cast<size_t>(s.n_vocab());
  int agree = 0;
  for (size_t i = 0; i < ref.greedy.size(); ++i) {
    const size_t row = ref.greedy_prompt.size() - 1 + i;
    agree += pick(logits.subspan(row * nv, nv), ref.n_tokens) == ref.greedy[i];
  }
  return static_cast<double>(agree) / static_cast<double>(ref.greedy.size());
}

// F32 weights: zinc computes the reference's function up to float32 rounding. Summation order is all
// that may differ (transformers' float32 matmuls against zinc's kernels, whichever instruction set): a
// float32 sum of n terms is off by at most n·u of the terms' magnitudes (Higham §4.2, u = 2^-24), 3.1e-5
// for the fixtures' widest reduction (n = 512); kFloat32Gap allows about three such worst cases in a row,
// relative to the logit scale. Measured: 1e-6 to 1e-5 on the AVX-512, AVX2 and scalar kernels.
constexpr double kFloat32Gap = 1e-4;
// Two algorithms for one function (a recurrent layer's chunked prompt form against its token-by-token
// form) are each within kFloat32Gap of the exact function, so within twice that of each other.
constexpr double kTwoAlgorithmsGap = 2 * kFloat32Gap;

class Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Fixture, MatchesTransformers) {
  const auto dir = kFixtures / GetParam();
  const Reference ref = load_reference(dir);
  test::TempDir tmp;
  const gguf::File f32 = convert_f32(dir, tmp, "f32.gguf");

  // F32: the same function as the reference, up to float32 rounding (kFloat32Gap).
  const Agreement exact = compare(f32, ref);
  EXPECT_LT(exact.max_rel_err, kFloat32Gap) << GetParam();
  EXPECT_EQ(exact.top1, 1.0) << GetParam();
  EXPECT_EQ(greedy(f32, ref.greedy_prompt, ref.greedy.size(), ref.n_tokens), ref.greedy) << GetParam();
  EXPECT_EQ(forced_agreement(f32, ref), 1.0) << GetParam();
  std::printf("%s F32     KL %.2e top-1 %.3f max rel err %.2e\n", GetParam().c_str(), exact.mean_kl, exact.top1,
              exact.max_rel_err);

  // F16 weights: the greedy text, every position's top token and every teacher-forced greedy step must
  // be the reference's. How much the quantized mixtures (Q8_0 to Q4_K_M, MXFP4) lose is no rounding
  // bound: it is compared with the reference implementation's loss on the same quantized files
  // (oracle.fixtures_quantized_vs_llamacpp, tests/models/quantized_vs_llamacpp.mjs).
  quant::QuantizeOptions qo;
  qo.mixture = *quant::mixture_by_name("F16");
  qo.threads = 2;
  const auto path = tmp.file("F16.gguf");
  quant::quantize_model(f32, path, qo);
  const gguf::File f16 = gguf::File::open(path);
  const Agreement a = compare(f16, ref);
  EXPECT_EQ(a.top1, 1.0) << GetParam() << " F16";
  EXPECT_EQ(greedy(f16, ref.greedy_prompt, ref.greedy.size(), ref.n_tokens), ref.greedy) << GetParam() << " F16";
  EXPECT_EQ(forced_agreement(f16, ref), 1.0) << GetParam() << " F16";
  std::printf("%s F16     KL %.2e top-1 %.3f max rel err %.2e\n", GetParam().c_str(), a.mean_kl, a.top1, a.max_rel_err);
}

TEST_P(Fixture, PrefillThenDecodeEqualsOnePrefill) {
  // Prefilling 8 tokens then decoding the rest one at a time must give the logits of prefilling the
  // whole sequence at once: the cache (and any other per-session state) carries between steps.
  const Reference ref = load_reference(kFixtures / GetParam());
  test::TempDir tmp;
  const gguf::File f = convert_f32(kFixtures / GetParam(), tmp);
  auto backend = backend::make_cpu_backend();
  const backend::ExecOptions opts = exact_options();
  const auto& seq = ref.sequences[2];
  runtime::Session whole(f, *backend, opts);
  const auto all = whole.eval(seq, true);
  const std::vector<float> expected(all.begin(), all.end());
  runtime::Session steps(f, *backend, opts);
  const auto nv = static_cast<size_t>(steps.n_vocab());
  std::vector<float> got;
  const auto first = steps.eval(std::span<const int32_t>(seq.data(), 8), true);
  got.assign(first.begin(), first.end());
  for (size_t i = 8; i < seq.size(); ++i) {
    const auto l = steps.eval(std::span<const int32_t>(&seq[i], 1));
    got.insert(got.end(), l.begin(), l.end());
  }
  ASSERT_EQ(got.size(), expected.size());
  if (whole.executable().can_rewind()) {
    // Attention only, F32 weights: a token's arithmetic does not depend on the step it is in (one dot
    // product per weight row and token, attention per token and head, norms per row): exact.
    EXPECT_EQ(got, expected) << GetParam();
    return;
  }
  // A recurrent layer takes a prompt in chunks (the delta rule's WY form, a triangular solve) and a
  // decode token by token: two algorithms for one function (kTwoAlgorithmsGap). Measured on these
  // fixtures: 1e-6 to 2e-5 of the logit scale.
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - expected[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(expected[i])));
  }
  EXPECT_LT(worst, kTwoAlgorithmsGap * scale) << GetParam() << " over " << got.size() / nv << " positions";
}

TEST_P(Fixture, SavedContextResumesExactly) {
  // A session's context saved after 8 tokens, then overwritten, then restored (into the same session
  // and into a new one) must continue exactly like a session that never left, bit for bit: KV rows and
  // recurrent state alike (the reference takes the same two steps).
  const Reference ref = load_reference(kFixtures / GetParam());
  test::TempDir tmp;
  const gguf::File f = convert_f32(kFixtures / GetParam(), tmp);
  auto backend = backend::make_cpu_backend();
  const backend::ExecOptions opts = exact_options();
  const auto& seq = ref.sequences[2];
  const std::span<const int32_t> head(seq.data(), 8), tail(seq.data() + 8, seq.size() - 8);
  runtime::Session whole(f, *backend, opts);
  whole.eval(head);
  const auto w = whole.eval(tail);
  const std::vector<float> want(w.begin(), w.end());
  runtime::Session s(f, *backend, opts);
  s.eval(head);
  const auto snap = s.save();
  s.eval(ref.sequences[0]);  // moves on: the cache rows and the state change
  for (int target = 0; target < 2; ++target) {
    runtime::Session fresh(f, *backend, opts);
    runtime::Session& r = target == 0 ? s : fresh;
    r.restore(snap);
    EXPECT_EQ(r.n_past(), 8);
    const auto got = r.eval(tail);
    EXPECT_EQ(std::vector<float>(got.begin(), got.end()), want) << GetParam() << (target == 0 ? " same session" : " new session");
  }
  // Bytes of another shape are refused.
  auto cut = snap;
  cut.state.pop_back();
  EXPECT_THROW(s.restore(cut), Error);
  backend::ExecOptions other = opts;
  other.n_ctx = 32;
  runtime::Session small(f, *backend, other);
  EXPECT_THROW(small.restore(snap), Error);
}

TEST_P(Fixture, SequenceTakenFromAnotherContextContinuesExactly) {
  // A prompt's 8 tokens read by one context, then taken (Executable::seq_take) into sequence 1 of
  // another over the same weights, whose sequence 0 holds other tokens: it continues bit for bit as the
  // first context continuing itself (KV rows and recurrent state alike), and sequence 0 is untouched.
  const Reference ref = load_reference(kFixtures / GetParam());
  test::TempDir tmp;
  const gguf::File f = convert_f32(kFixtures / GetParam(), tmp);
  const model::Model m = model::load(f);
  auto backend = backend::make_cpu_backend();
  auto weights = backend->load(m.graph, f);
  backend::ExecOptions opts = exact_options();
  const auto& seq = ref.sequences[2];
  const std::vector<int32_t> head(seq.begin(), seq.begin() + 8), other(ref.sequences[0].begin(), ref.sequences[0].begin() + 5);
  auto reader = weights->instantiate(opts);
  reader->run(graph::StepParams::one(head));
  opts.n_seq = 2;
  auto both = weights->instantiate(opts);
  both->run(graph::StepParams::one(other));
  const std::vector<float> other_next_want = [&] {
    auto solo = weights->instantiate(exact_options());
    solo->run(graph::StepParams::one(other));
    solo->run(graph::StepParams::one({seq[9]}, 5));
    return std::vector<float>(solo->logits().begin(), solo->logits().end());
  }();
  // More than the sequence holds, or (recurrent state) fewer than its state absorbed: refused.
  EXPECT_THROW(both->seq_take(*reader, 0, 1, 9), Error) << GetParam();
  if (!reader->can_rewind()) {
    EXPECT_THROW(both->seq_take(*reader, 0, 1, 4), Error) << GetParam();
  }
  both->seq_take(*reader, 0, 1, 8);
  for (size_t k = 8; k < 11; ++k) {
    graph::StepParams step;
    step.add(1, static_cast<int32_t>(k), {seq[k]});
    both->run(step);
    reader->run(graph::StepParams::one({seq[k]}, static_cast<int32_t>(k)));
    EXPECT_EQ(std::vector<float>(both->logits().begin(), both->logits().end()),
              std::vector<float>(reader->logits().begin(), reader->logits().end()))
        << GetParam() << " token " << k;
  }
  graph::StepParams step0;
  step0.add(0, 5, {seq[9]});
  both->run(step0);
  EXPECT_EQ(std::vector<float>(both->logits().begin(), both->logits().end()), other_next_want) << GetParam() << ": sequence 0";
}

TEST(RecurrentState, ResetAndDivergingPromptsStartAgain) {
  // A linear-attention state cannot forget tokens: after reset(), or when a new prompt shares only
  // part of what the session holds, the session must start from position 0 and give exactly the
  // logits of a fresh session; a prompt that extends what it holds continues from the state.
  const auto dir = kFixtures / "qwen3_next";
  const Reference ref = load_reference(dir);
  test::TempDir tmp;
  const gguf::File f = convert_f32(dir, tmp);
  auto backend = backend::make_cpu_backend();
  const backend::ExecOptions opts = exact_options();
  const auto& a = ref.sequences[0];
  const auto& other = ref.sequences[1];
  runtime::Session fresh(f, *backend, opts);
  const auto want_span = fresh.eval(a);
  const std::vector<float> want(want_span.begin(), want_span.end());
  // Starting again runs exactly the fresh session's arithmetic: bit for bit.
  const auto same = [&](std::span<const float> got) { EXPECT_EQ(std::vector<float>(got.begin(), got.end()), want); };

  runtime::Session s(f, *backend, opts);
  s.eval(other);
  s.reset();
  same(s.eval(a));

  // Shares the first token with `a` only: starts again.
  runtime::Session d(f, *backend, opts);
  d.eval(other);
  same(d.eval_reusing_prefix(a));
  EXPECT_EQ(d.reused_tokens(), 0);

  // A continuation keeps the state. Its last 6 tokens are a second chunk of the delta rule, so this is
  // the one-prompt-or-two comparison of PrefillThenDecodeEqualsOnePrefill, under its bound.
  runtime::Session c(f, *backend, opts);
  c.eval_reusing_prefix(std::span<const int32_t>(a.data(), 10));
  const auto cont = c.eval_reusing_prefix(a);
  ASSERT_EQ(cont.size(), want.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(cont[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LT(worst, kTwoAlgorithmsGap * scale);
  EXPECT_EQ(c.reused_tokens(), 10);

  // The executable refuses to resume anywhere else.
  const model::Model m = model::load(f);  // the executable reads the graph it was compiled from
  auto exe = backend->compile(m.graph, f, opts);
  exe->run(graph::StepParams::one({a[0], a[1]}));
  EXPECT_THROW(exe->run(graph::StepParams::one({a[0], a[1]}, 1)), Error);
}

TEST(KvCache, Q8_0CacheStaysCloseToF32) {
  // K and V rows stored as Q8_0 (relative rounding ~0.5%) must move the logits of the fixture's
  // 16-token sequences by well under the quantization noise of the weights themselves (~2%).
  const auto dir = kFixtures / "qwen3";
  const Reference ref = load_reference(dir);
  test::TempDir tmp;
  const gguf::File f = convert_f32(dir, tmp);
  auto backend = backend::make_cpu_backend();
  std::vector<std::vector<float>> out;
  for (auto kv : {backend::KvType::F32, backend::KvType::Q8_0}) {
    backend::ExecOptions opts;
    opts.n_ctx = 64;
    opts.kv_type = kv;
    runtime::Session s(f, *backend, opts);
    const auto l = s.eval(ref.sequences[1], true);
    out.emplace_back(l.begin(), l.end());
  }
  double d = 0, n = 0;
  for (size_t i = 0; i < out[0].size(); ++i) {
    d += (out[1][i] - out[0][i]) * (out[1][i] - out[0][i]);
    n += out[0][i] * out[0][i];
  }
  EXPECT_GT(std::sqrt(d / n), 0.0);
  EXPECT_LT(std::sqrt(d / n), 1e-2);
}

TEST(Convert, RejectsRopeScalingItCannotRepresent) {
  // A checkpoint whose config asks for a rotary scheme GGUF has no keys for: a clear error, no file.
  test::TempDir tmp;
  const auto dir = tmp.file("ckpt");
  std::filesystem::create_directories(dir);
  for (const char* name : {"model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(kFixtures / "qwen3_yarn" / name, dir / name);
  }
  std::ifstream in(kFixtures / "qwen3_yarn" / "config.json");
  auto config = nlohmann::json::parse(in);
  config["rope_parameters"]["rope_type"] = "longrope";
  std::ofstream(dir / "config.json") << config.dump();
  convert::ConvertOptions copts;
  copts.outtype = "f32";
  try {
    convert::convert_hf(dir, tmp.file("out.gguf"), copts);
    FAIL() << "converted an unsupported rope type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope scaling type 'longrope' is not supported"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("out.gguf")));
}

TEST(Convert, RoutersStayF32WhateverTheOutputType) {
  // Every mixture's router in F32 (the reference converter's rule), the experts in the asked type.
  for (const char* arch : {"qwen3_moe", "qwen3_next", "qwen3_5_moe", "gemma4_moe", "gpt_oss"}) {
    for (const char* outtype : {"q8_0", "f16", "bf16"}) {
      test::TempDir tmp;
      convert::ConvertOptions copts;
      copts.outtype = outtype;
      convert::convert_hf(kFixtures / arch, tmp.file("m.gguf"), copts);
      const auto file = gguf::File::open(tmp.file("m.gguf"));
      int routers = 0, experts = 0;
      for (const gguf::TensorInfo& t : file.tensors()) {
        if (t.name.ends_with("ffn_gate_inp.weight")) {
          ++routers;
          EXPECT_EQ(t.type, gguf::TensorType::F32) << arch << " " << outtype << ": " << t.name;
        }
        if (t.name.ends_with("ffn_gate_exps.weight") || t.name.ends_with("ffn_gate_up_exps.weight")) {
          ++experts;
          EXPECT_NE(t.type, gguf::TensorType::F32) << arch << " " << outtype << ": " << t.name;
        }
      }
      EXPECT_GT(routers, 0) << arch;
      EXPECT_EQ(routers, experts) << arch << " " << outtype;
    }
  }
}

TEST(ModelLoad, RejectsUnknownRopeScalingType) {
  test::TempDir tmp;
  const gguf::File f = convert_f32(kFixtures / "qwen3", tmp);
  auto w = gguf::Writer::copy_of(f);
  w.metadata().set("qwen3.rope.scaling.type", gguf::Value::str("longrope"));
  w.write_file(tmp.file("bad.gguf"));
  const gguf::File bad = gguf::File::open(tmp.file("bad.gguf"));
  try {
    model::load(bad);
    FAIL() << "loaded an unsupported rope type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope scaling type 'longrope' is not supported"), std::string::npos) << e.what();
  }
}

TEST(GptOss, KeepsTheUnroundedYarnRange) {
  // The fixture's config asks for YaRN's correction range unrounded ("truncate": false, as the released
  // GPT-OSS configs do). GGUF has no key for it but zinc's own: with the range rounded to whole pairs,
  // as llama.cpp always does, the same weights move measurably away from the reference.
  const auto dir = kFixtures / "gpt_oss";
  const Reference ref = load_reference(dir);
  test::TempDir tmp;
  const gguf::File f = convert_f32(dir, tmp);
  EXPECT_EQ(f.get<bool>("gpt-oss.rope.scaling.yarn_truncate"), false);
  auto w = gguf::Writer::copy_of(f);
  w.metadata().set("gpt-oss.rope.scaling.yarn_truncate", gguf::Value::boolean(true));
  w.write_file(tmp.file("rounded.gguf"));
  const gguf::File rounded = gguf::File::open(tmp.file("rounded.gguf"));
  const Agreement exact = compare(f, ref), off = compare(rounded, ref);
  std::printf("gpt_oss YaRN range unrounded: max rel err %.2e; rounded: %.2e, top-1 %.3f\n", exact.max_rel_err,
              off.max_rel_err, off.top1);
  EXPECT_LT(exact.max_rel_err, kFloat32Gap);
  EXPECT_GT(off.max_rel_err, 10 * kFloat32Gap);  // the rounded range is a different function
}

// Several sequences in one step: each sequence's logits must be those it gets alone, bit for bit (the
// step shares the weight reads, not the arithmetic of a sequence: every product of F32 weights is the
// same row-by-row dot product whatever the step's size, attention and recurrent state are per
// sequence). Four sequences of different lengths start at different steps, prefill in chunks beside
// the others' decode tokens, then decode greedily together; one is forked from another mid-way (its
// cache blocks shared until it writes) and one is cleared and reused. 64 greedy tokens each.
TEST_P(Fixture, SequencesSteppedTogetherMatchEachAlone) {
  const auto dir = kFixtures / GetParam();
  const Reference ref = load_reference(dir);
  test::TempDir tmp;
  const gguf::File f = convert_f32(dir, tmp);
  const model::Model m = model::load(f);
  auto backend = backend::make_cpu_backend(2);
  auto weights = backend->load(m.graph, f);
  const auto& s0 = ref.sequences[0];
  const auto& s1 = ref.sequences[1];
  const auto slice = [](const std::vector<int32_t>& v, size_t a, size_t b) { return std::vector<int32_t>(v.begin() + a, v.begin() + b); };
  const std::vector<test::SeqPlan> plan = {
      {0, slice(s0, 0, 5), {5}, 0},
      {1, slice(s1, 0, 11), {4, 7}, 0},
      {2, slice(s0, 3, 16), {13}, 1},
      {3, slice(s1, 2, 5), {1, 2}, 2},
  };
  const int n_decode = 64;
  backend::ExecOptions opts;
  opts.n_ctx = 96;
  opts.max_tokens = 64;
  opts.n_seq = 4;
  const int64_t nv = m.graph.n_vocab;

  // Each sequence alone, in its own context, with the same chunks: its logits after each chunk and
  // each greedy token.
  std::vector<std::vector<std::vector<float>>> alone(plan.size());
  std::vector<std::vector<int32_t>> alone_tokens(plan.size());
  backend::ExecOptions one = opts;
  one.n_seq = 1;
  for (size_t i = 0; i < plan.size(); ++i) {
    test::AloneRun a = test::run_alone(*weights, one, plan[i], n_decode);
    alone[i] = std::move(a.rows);
    alone_tokens[i] = std::move(a.tokens);
  }

  // Together: at each step every started sequence takes its next chunk, or its next greedy token.
  auto exe = weights->instantiate(opts);
  std::vector<size_t> rows;
  for (const auto& a : alone) rows.push_back(a.size());
  test::SeqSchedule together(plan, rows);
  std::vector<int32_t> last(plan.size(), -1);
  int mismatches = 0;
  graph::StepParams step;
  std::vector<size_t> in_step;
  while (together.next(step, in_step, [&](size_t i, size_t) { return last[i]; })) {
    exe->run(step);
    const auto l = exe->logits();
    ASSERT_EQ(static_cast<int64_t>(l.size()), static_cast<int64_t>(in_step.size()) * nv);
    for (size_t k = 0; k < in_step.size(); ++k) {
      const size_t i = in_step[k];
      const std::vector<float> row(l.begin() + static_cast<int64_t>(k) * nv, l.begin() + static_cast<int64_t>(k + 1) * nv);
      mismatches += row != alone[i][together.row(i)];
      last[i] = runtime::argmax(row);
    }
    together.yielded(in_step);
  }
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(together.got(i), alone[i].size()) << GetParam() << " sequence " << i;
  EXPECT_EQ(mismatches, 0) << GetParam() << ": steps whose logits differ from the sequence alone";

  // A fork: sequence 3 continues from all of sequence 0 (shared blocks; a recurrent state copied), each
  // then takes a different token; both equal a context that ran the whole text alone.
  const int32_t n0 = together.pos(0);
  exe->seq_copy(0, 3, n0);
  graph::StepParams fork;
  fork.add(0, n0, {s1[0]});
  fork.add(3, n0, {s1[1]});
  exe->run(fork);
  const auto fl = exe->logits();
  for (int b = 0; b < 2; ++b) {
    // The same steps as sequence 0 took (a recurrent layer rounds a chunk differently from the same
    // tokens one at a time), then the branch's token.
    auto solo = weights->instantiate(one);
    int32_t at = 0;
    for (int32_t c : plan[0].chunks) {
      solo->run(graph::StepParams::one(slice(plan[0].prompt, static_cast<size_t>(at), static_cast<size_t>(at + c)), at));
      at += c;
    }
    for (int32_t t : alone_tokens[0]) solo->run(graph::StepParams::one({t}, at++));
    solo->run(graph::StepParams::one({s1[static_cast<size_t>(b)]}, at));
    const std::vector<float> want(solo->logits().begin(), solo->logits().end());
    EXPECT_EQ(std::vector<float>(fl.begin() + b * nv, fl.begin() + (b + 1) * nv), want) << GetParam() << " fork branch " << b;
  }
  // A cleared sequence starts again from nothing.
  exe->seq_clear(1);
  graph::StepParams again;
  again.add(1, 0, slice(s0, 0, 5));
  exe->run(again);
  EXPECT_EQ(std::vector<float>(exe->logits().begin(), exe->logits().end()), alone[0][0]) << GetParam() << ": a cleared sequence";
}

INSTANTIATE_TEST_SUITE_P(Architectures, Fixture, ::testing::Values("llama", "qwen2", "qwen3", "gemma3", "llama_rope_llama3", "qwen3_yarn", "qwen3_moe",
                                                                  "qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma4", "gemma4_moe", "gemma4_global_kv",
                                                                  "gpt_oss"));

}  // namespace
}  // namespace zinc
