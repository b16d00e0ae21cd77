// Quantization mixtures on a model described by its facts (a 32-layer Llama-shaped model with 4096-wide
// rows), with the expected types taken from the published recipe definitions.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "quant/recipe.h"

namespace zinc::quant {
namespace {

using gguf::TensorType;

gguf::TensorInfo info(const std::string& storage, uint64_t ne0, uint64_t ne1, TensorType t = TensorType::F16) {
  gguf::TensorInfo ti;
  ti.name = storage;
  ti.type = t;
  ti.n_dims = ne1 ? 2 : 1;
  ti.ne = {ne0, ne1 ? ne1 : 1, 1, 1};
  ti.n_elements = ne0 * (ne1 ? ne1 : 1);
  return ti;
}

ModelFacts llama32(int gqa = 4) {
  ModelFacts f;
  f.arch = "llama";
  f.n_layer = 32;
  f.n_gqa = gqa;
  f.n_attn_v = 32;
  f.n_ffn_down = 32;
  return f;
}

// Types chosen for every attn_v (or ffn_down) tensor of the 32 layers, in order.
std::vector<TensorType> per_layer(TypeSelector& s, const char* which) {
  std::vector<TensorType> out;
  std::vector<std::string> names;
  for (int i = 0; i < 32; ++i) names.push_back("blk." + std::to_string(i) + "." + which + ".weight");
  for (const auto& n : names) out.push_back(s.choose(info(n, 4096, 1024)).type);
  return out;
}

TEST(Recipe, MXFP4_MOE) {
  // Experts (3-D, more than one) in MXFP4; every other matrix, the output and embeddings included, Q8_0.
  ModelFacts f;
  f.arch = "gpt-oss";
  f.n_layer = 24;
  f.n_expert = 32;
  TypeSelector s(*mixture_by_name("mxfp4_moe"), f);
  const std::string gate_exps = "blk.0.ffn_gate_exps.weight", down_exps = "blk.0.ffn_down_exps.weight";
  auto exps = info(gate_exps, 2880, 2880);
  exps.n_dims = 3;
  exps.ne[2] = 32;
  EXPECT_EQ(s.choose(exps).type, TensorType::MXFP4);
  exps.name = down_exps;
  EXPECT_EQ(s.choose(exps).type, TensorType::MXFP4);
  EXPECT_EQ(s.choose(info("output.weight", 2880, 201088)).type, TensorType::Q8_0);
  EXPECT_EQ(s.choose(info("token_embd.weight", 2880, 201088)).type, TensorType::Q8_0);
  EXPECT_EQ(s.choose(info("blk.0.attn_v.weight", 2880, 512)).type, TensorType::Q8_0);
  EXPECT_EQ(s.choose(info("blk.0.attn_output.weight", 4096, 2880)).type, TensorType::Q8_0);
  EXPECT_FALSE(s.choose(info("blk.0.ffn_gate_inp.weight", 2880, 32, TensorType::F32)).convert);
  EXPECT_EQ(mixture_by_name("MXFP4_MOE")->file_type, 38u);
}

TEST(Recipe, Q4_K_M) {
  TypeSelector s(*mixture_by_name("q4_k_m"), llama32());
  EXPECT_EQ(s.choose(info("output.weight", 4096, 128256)).type, TensorType::Q6_K);
  EXPECT_EQ(s.choose(info("token_embd.weight", 4096, 128256)).type, TensorType::Q4_K);
  EXPECT_EQ(s.choose(info("blk.0.attn_q.weight", 4096, 4096)).type, TensorType::Q4_K);
  EXPECT_EQ(s.choose(info("blk.0.attn_output.weight", 4096, 4096)).type, TensorType::Q4_K);
  EXPECT_EQ(s.choose(info("blk.0.ffn_up.weight", 4096, 14336)).type, TensorType::Q4_K);
  EXPECT_FALSE(s.choose(info("blk.0.attn_norm.weight", 4096, 0, TensorType::F32)).convert);
  // "More bits" layers for n = 32: the first and last eighth (0-3, 28-31) and every third layer
  // between them starting at 6 (6, 9, ..., 27) get Q6_K; the rest Q4_K. Same for attn_v and ffn_down.
  const std::set<int> more = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  for (const char* which : {"attn_v", "ffn_down"}) {
    const auto types = per_layer(s, which);
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(types[i], more.count(i) ? TensorType::Q6_K : TensorType::Q4_K) << which << " layer " << i;
    }
  }
}

TEST(Recipe, Q4_K_S) {
  TypeSelector s(*mixture_by_name("Q4_K_S"), llama32());
  const auto v = per_layer(s, "attn_v");
  const auto d = per_layer(s, "ffn_down");
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(v[i], i < 4 ? TensorType::Q5_K : TensorType::Q4_K) << i;
    EXPECT_EQ(d[i], i < 4 ? TensorType::Q5_K : TensorType::Q4_K) << i;  // first eighth
  }
}

TEST(Recipe, Q5_K_MAndQ6_K) {
  TypeSelector s5(*mixture_by_name("Q5_K_M"), llama32());
  EXPECT_EQ(s5.choose(info("blk.0.attn_q.weight", 4096, 4096)).type, TensorType::Q5_K);
  EXPECT_EQ(per_layer(s5, "attn_v")[5], TensorType::Q5_K);
  TypeSelector s5b(*mixture_by_name("Q5_K_M"), llama32());
  EXPECT_EQ(per_layer(s5b, "attn_v")[6], TensorType::Q6_K);
  TypeSelector s6(*mixture_by_name("Q6_K"), llama32());
  EXPECT_EQ(s6.choose(info("output.weight", 4096, 32000)).type, TensorType::Q6_K);
  EXPECT_EQ(s6.choose(info("blk.3.ffn_gate.weight", 4096, 14336)).type, TensorType::Q6_K);
}

TEST(Recipe, SimpleTypesKeepOutputAtLeastQ6K) {
  TypeSelector q8(*mixture_by_name("Q8_0"), llama32());
  EXPECT_EQ(q8.choose(info("output.weight", 4096, 32000)).type, TensorType::Q8_0);
  EXPECT_EQ(q8.choose(info("blk.0.attn_v.weight", 4096, 1024)).type, TensorType::Q8_0);
  TypeSelector q4(*mixture_by_name("Q4_0"), llama32());
  EXPECT_EQ(q4.choose(info("output.weight", 4096, 32000)).type, TensorType::Q6_K);
  EXPECT_EQ(q4.choose(info("token_embd.weight", 4096, 32000)).type, TensorType::Q4_0);
}

TEST(Recipe, TiedEmbeddingsTakeTheOutputType) {
  ModelFacts f = llama32();
  f.tied_embeddings = true;
  TypeSelector s(*mixture_by_name("Q4_K_M"), f);
  EXPECT_EQ(s.choose(info("token_embd.weight", 4096, 151936)).type, TensorType::Q6_K);
}

TEST(Recipe, FloatMixturesConvertEveryMatrix) {
  TypeSelector s(*mixture_by_name("BF16"), llama32());
  const auto c = s.choose(info("output.weight", 4096, 32000, TensorType::F32));
  EXPECT_TRUE(c.convert);
  EXPECT_EQ(c.type, TensorType::BF16);
  EXPECT_FALSE(s.choose(info("output_norm.weight", 4096, 0, TensorType::F32)).convert);
  TypeSelector f16(*mixture_by_name("F16"), llama32());
  EXPECT_FALSE(f16.choose(info("blk.0.attn_q.weight", 4096, 4096, TensorType::F16)).convert);  // already F16
}

TEST(Recipe, RowsThatDoNotFillBlocksFallBack) {
  TypeSelector s(*mixture_by_name("Q4_K_M"), llama32());
  auto c = s.choose(info("blk.0.attn_q.weight", 4160, 4096));  // 4160 = 130 * 32, not a multiple of 256
  EXPECT_EQ(c.type, TensorType::Q5_0);
  EXPECT_NE(c.fallback.find("4160 columns"), std::string::npos) << c.fallback;
  TypeSelector q8(*mixture_by_name("Q8_0"), llama32());
  c = q8.choose(info("blk.0.ffn_down.weight", 172, 64));  // not a multiple of 32 either
  EXPECT_EQ(c.type, TensorType::F16);
  TypeSelector q6(*mixture_by_name("Q6_K"), llama32());
  EXPECT_EQ(q6.choose(info("blk.0.ffn_up.weight", 96, 64)).type, TensorType::Q8_0);
  TypeSelector iq(*mixture_by_name("IQ4_XS"), llama32());
  EXPECT_EQ(iq.choose(info("blk.0.ffn_up.weight", 96, 64)).type, TensorType::IQ4_NL);
}

// The user's types (zinc quantize's --tensor-type, --output-tensor-type, --token-embedding-type, --pure,
// --leave-output-tensor), as the GGUF ecosystem's quantizer documents them: a regex searched for in the
// name, the first matching pattern winning; output and embedding types by name; routers and norms never
// converted; rows that do not fill the user's type's blocks still fall back.
TEST(Recipe, UserTypesOverTheMixture) {
  TypeOverrides o;
  o.tensors = {parse_tensor_type("attn_v=q8_0"), parse_tensor_type(R"(blk\.(1|3)\.ffn_down=Q5_K)"),
               parse_tensor_type("ffn_down=q4_k"), parse_tensor_type("ffn_gate_inp=q8_0"), parse_tensor_type("norm=q8_0")};
  o.output = parse_type_name("f16", "--output-tensor-type");
  o.token_embd = parse_type_name("Q8_0", "--token-embedding-type");
  TypeSelector s(*mixture_by_name("Q4_K_M"), llama32(), o);
  EXPECT_EQ(s.choose(info("blk.0.attn_v.weight", 4096, 1024)).type, TensorType::Q8_0);  // the recipe: Q6_K
  EXPECT_EQ(s.choose(info("blk.0.ffn_down.weight", 14336, 4096)).type, TensorType::Q4_K);  // the recipe: Q6_K
  EXPECT_EQ(s.choose(info("blk.1.ffn_down.weight", 14336, 4096)).type, TensorType::Q5_K);  // first match
  EXPECT_EQ(s.choose(info("blk.13.ffn_down.weight", 14336, 4096)).type, TensorType::Q4_K);  // not blk.1.
  EXPECT_EQ(s.choose(info("blk.0.attn_q.weight", 4096, 4096)).type, TensorType::Q4_K);     // the recipe's
  EXPECT_EQ(s.choose(info("output.weight", 4096, 32000)).type, TensorType::F16);
  EXPECT_EQ(s.choose(info("token_embd.weight", 4096, 32000)).type, TensorType::Q8_0);
  EXPECT_FALSE(s.choose(info("blk.0.ffn_gate_inp.weight", 4096, 8, TensorType::F32)).convert);
  EXPECT_FALSE(s.choose(info("blk.0.attn_norm.weight", 4096, 0, TensorType::F32)).convert);
  EXPECT_EQ(s.unmatched_patterns(), (std::vector<std::string>{"ffn_gate_inp", "norm"}));  // never converted
  const auto fb = s.choose(info("blk.1.ffn_down.weight", 4160, 64));  // 4160 does not fill Q5_K's blocks
  EXPECT_EQ(fb.type, TensorType::Q5_1);
  EXPECT_FALSE(fb.fallback.empty());
  // The recipe still counts the layers an override took: blk.1's attn_v is the second of 32.
  TypeOverrides v0;
  v0.tensors = {parse_tensor_type(R"(blk\.0\.attn_v=q8_0)")};
  TypeSelector counted(*mixture_by_name("Q4_K_M"), llama32(), v0);
  const auto types = per_layer(counted, "attn_v");
  TypeSelector plain(*mixture_by_name("Q4_K_M"), llama32());
  auto want = per_layer(plain, "attn_v");
  want[0] = TensorType::Q8_0;
  EXPECT_EQ(types, want);
}

TEST(Recipe, PureAndLeftOutput) {
  TypeOverrides o;
  o.pure = true;
  TypeSelector s(*mixture_by_name("Q4_K_M"), llama32(), o);
  for (const char* n : {"output.weight", "token_embd.weight", "blk.0.attn_v.weight", "blk.0.ffn_down.weight"}) {
    EXPECT_EQ(s.choose(info(n, 4096, 4096)).type, TensorType::Q4_K) << n;
  }
  TypeOverrides left;
  left.leave_output = true;
  TypeSelector l(*mixture_by_name("Q4_K_M"), llama32(), left);
  EXPECT_FALSE(l.choose(info("output.weight", 4096, 32000)).convert);
  EXPECT_EQ(l.choose(info("blk.0.attn_q.weight", 4096, 4096)).type, TensorType::Q4_K);
}

TEST(Recipe, UserTypesThatCannotBeTakenAreClearErrors) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([] { parse_tensor_type("attn_v"); }).find("expected PATTERN=TYPE"), std::string::npos);
  EXPECT_NE(message([] { parse_tensor_type("=q8_0"); }).find("expected PATTERN=TYPE"), std::string::npos);
  EXPECT_NE(message([] { parse_tensor_type("attn_v="); }).find("expected PATTERN=TYPE"), std::string::npos);
  EXPECT_NE(message([] { parse_tensor_type("blk.(0=q8_0"); }).find("not a valid regular expression"), std::string::npos);
  EXPECT_NE(message([] { parse_tensor_type("attn_v=q9_0"); }).find("'q9_0' is not a type zinc can write"), std::string::npos);
  EXPECT_NE(message([] { parse_tensor_type("attn_v=q8_k"); }).find("not a type zinc can write"), std::string::npos);
  EXPECT_NE(message([] { parse_type_name("int4", "--output-tensor-type"); }).find("--output-tensor-type: 'int4'"), std::string::npos);
  EXPECT_EQ(parse_tensor_type("a=b=bf16").regex, "a=b");  // the type after the last '='
}

TEST(Recipe, UnknownMixture) {
  EXPECT_FALSE(mixture_by_name("Q4_K_Z").has_value());
  EXPECT_EQ(mixture_by_name("q4_k_m")->file_type, 15u);
  EXPECT_EQ(mixture_by_name("Q8_0")->file_type, 7u);
}

}  // namespace
}  // namespace zinc::quant
