// Decode's residual add and whole-row RMSNorm done by the K-quant product before them (mul_mv_k_norm,
// mul_mv_k_id_combine_norm), the norm's scale left to the kernels that read it (NormScale: mul_mv_k and
// its variants, moe_router), against the dispatches they replace (the product, rms_norm_row with the
// add, the readers on the norm's rows and codes): the residual sum bit for bit, the codes the CPU's
// quantizer makes of the unscaled weighted row, and the readers' results within the few code roundings
// the two forms may differ by. And the router split from the norm it reads (its experts chosen beside
// the product before the norm).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/vulkan/vk_misc.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "backend/vulkan/vk_router_split.h"
#include "graph/graph.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

using graph::TensorId;

class VulkanNormTail : public VulkanTest {
 protected:
  std::vector<float> randoms(size_t n, float sd) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng_);
    return v;
  }
  // nrows x ncols of `type` (per expert, n_expert of them), quantized from random rows.
  std::vector<uint8_t> weight(gguf::TensorType type, uint32_t ncols, uint32_t nrows, uint32_t n_expert = 1) {
    const size_t rs = quant::row_size(type, ncols);
    std::vector<uint8_t> w(rs * nrows * n_expert + 16);
    for (uint32_t r = 0; r < nrows * n_expert; ++r) {
      const std::vector<float> row = randoms(ncols, 0.5f + static_cast<float>(r % 3));
      quant::quantize_row(type, row.data(), w.data() + r * rs, ncols);
    }
    return w;
  }
  Buffer upload(const void* data, size_t bytes) {
    Buffer b = ctx_->device_buffer(bytes);
    ctx_->upload(b, 0, data, bytes);
    return b;
  }
  Buffer zeros(size_t bytes) {
    Buffer b = ctx_->device_buffer(bytes);
    ctx_->fill_zero(b, 0, bytes);
    return b;
  }
  template <typename T>
  std::vector<T> download(const Buffer& b, size_t n) {
    std::vector<T> v(n);
    ctx_->download(b, 0, v.data(), n * sizeof(T));
    return v;
  }
  // The producer's outputs against the norm's own dispatch's: the residual sum h (bh) bit for bit
  // theirs (h_a), its codes (bq) the CPU quantizer's of the unscaled weighted row, the partial sums
  // (past the counters in tail) those of h^2 per 256 values to float rounding, the counters zero.
  void expect_norm_outputs(const Buffer& bh, const std::vector<float>& h_a, const Buffer& bq, const Buffer& tail,
                           const std::vector<float>& nw, float offset) {
    const auto width = static_cast<uint32_t>(h_a.size()), blocks = width / 256;
    const std::vector<float> h = download<float>(bh, width);
    EXPECT_EQ(h, h_a) << "the residual sum";
    expect_codes_of(weighted(h, nw, offset), download<uint8_t>(bq, q8k_row_bytes(width)), width, 1);
    const std::vector<float> part = download<float>(tail, 2 * blocks);
    for (uint32_t b = 0; b < blocks; ++b) {
      double exact = 0;
      for (uint32_t i = 0; i < 256; ++i) exact += static_cast<double>(h[b * 256 + i]) * h[b * 256 + i];
      EXPECT_NEAR(part[blocks + b], exact, 1e-5 * exact) << "block " << b;
      EXPECT_EQ(part[b], 0.0f) << "counter " << b;
    }
  }
  // The norm's weighted row as the producer codes it: h * (w + offset) in float.
  static std::vector<float> weighted(const std::vector<float>& h, const std::vector<float>& nw, float offset) {
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = h[i] * (nw[i] + offset);
    return v;
  }
  static double worst_gap(const std::vector<float>& a, const std::vector<float>& b) {
    double gap = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      gap = std::max(gap, std::fabs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    }
    return gap / scale;
  }

  void expect_row_norm_product(gguf::TensorType type, uint32_t width, int codes);
  void expect_folded_router(gguf::TensorType type);

  std::mt19937 rng_{21};
};

TEST_F(VulkanNormTail, ProductTakesTheAddAndNormAndItsReadersTheScale) {
  // o = W x, h = o + r, the norm of h read by a K-quant product, a float product (F32 and F16 weights,
  // on h itself) and an F32 router with routing:
  // the product's form against mul_mv_k, rms_norm_row (with the add), and the readers on its output.
  // The residual is large, so the norm's scale (about 0.1) is far from 1: a reader that left it out
  // would be ten times off.
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q6_K}) {
    if (!has_mul_mv_k(*ctx_, type)) GTEST_SKIP() << "the device has no packed integer dot product or subgroups under 8";
    for (const uint32_t width : {512u, 1024u}) {
      SCOPED_TRACE(testing::Message() << gguf::tensor_type_name(type) << ", rows of " << width);
      const uint32_t ncols = 512, nout = 256, blocks = width / 256, n_expert = 16, n_used = 4;
      ASSERT_TRUE(mul_mv_k_norm_fits(*ctx_, type, ncols, width));
      const float eps = 1e-6f, offset = 0.5f;
      const std::vector<uint8_t> wo = weight(type, ncols, width), wc = weight(type, width, nout);
      const std::vector<float> x = randoms(ncols, 1.0f), r = randoms(width, 10.0f), nw = randoms(width, 1.0f),
                               router = randoms(static_cast<size_t>(n_expert) * width, 0.2f);
      const uint32_t nf = 3;  // a float weight's rows (a shared expert's gate: one)
      const std::vector<float> wf = randoms(static_cast<size_t>(nf) * width, 0.3f);
      std::vector<uint16_t> wh(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wh[i] = quant::f32_to_fp16(wf[i]);
      Buffer bwo = upload(wo.data(), wo.size()), bwc = upload(wc.data(), wc.size()), bx = upload(x.data(), x.size() * 4),
             bnw = upload(nw.data(), nw.size() * 4), brt = upload(router.data(), router.size() * 4);
      Buffer bxq = zeros(q8k_row_bytes(ncols)), bo = zeros(width * 4), bres = upload(r.data(), r.size() * 4),
             bh_a = zeros(width * 4), by = zeros(width * 4), bq_a = zeros(q8k_row_bytes(width)), bout_a = zeros(nout * 4);
      Buffer bh_b = upload(r.data(), r.size() * 4), bq_b = zeros(q8k_row_bytes(width)), bout_b = zeros(nout * 4),
             tail = zeros(8 * blocks), count = zeros(4);
      Buffer logits = zeros(n_expert * 4 * 2), ids = zeros(n_used * 4 * 2), wts = zeros(n_used * 4 * 2);
      Buffer bwf = upload(wf.data(), wf.size() * 4), bwh = upload(wh.data(), wh.size() * 2 + 4), fout = zeros(4 * nf * 4);
      quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bxq}, ncols, 1);
      // The dispatches the product replaces.
      mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq}, View{&bo}, ncols, width, 1);
      rms_norm_row(*ctx_, ctx_->immediate(), View{&bo}, View{&bres}, View{&bh_a}, View{&bnw}, View{&by}, View{&bq_a}, width, 1,
                   eps, offset);
      mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwc}, View{&bq_a}, View{&bout_a}, width, nout, 1);
      mul_mv(*ctx_, ctx_->immediate(), gguf::TensorType::F32, View{&bwf}, View{&by}, View{&fout, 0, 4 * nf}, View{}, width, nf, 1);
      mul_mv(*ctx_, ctx_->immediate(), gguf::TensorType::F16, View{&bwh}, View{&by}, View{&fout, 4 * nf, 4 * nf}, View{}, width, nf, 1);
      ASSERT_TRUE(moe_router(*ctx_, ctx_->immediate(), View{&brt}, View{&by}, View{&logits, 0, n_expert * 4}, View{}, View{},
                             View{&ids, 0, n_used * 4}, View{&wts, 0, n_used * 4}, View{&count}, width, n_expert, n_used, 1,
                             true, true, 1.0f));
      // The product's form, in place over the residual (h = o + h), twice: its counters back at zero.
      NormScale ns;
      ns.partials = View{&tail, 4 * blocks, 4 * blocks};
      ns.weights = View{&bnw};
      ns.blocks = blocks;
      ns.eps = eps;
      ns.offset = offset;
      for (int run = 0; run < 2; ++run) {
        if (run == 1) ctx_->upload(bh_b, 0, r.data(), r.size() * 4);
        mul_mv_k_norm(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq}, View{&bh_b}, ncols, width,
                      MulMvKNorm{View{&bh_b}, View{&bnw}, View{&bq_b}, View{&tail, 0, 4 * blocks}, ns.partials, offset});
      }
      mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwc}, View{&bq_b}, View{&bout_b}, width, nout, 1, ns);
      ASSERT_TRUE(mul_mv_norm_fits(gguf::TensorType::F32, width));
      mul_mv(*ctx_, ctx_->immediate(), gguf::TensorType::F32, View{&bwf}, View{&bh_b}, View{&fout, 8 * nf, 4 * nf}, View{}, width,
             nf, 1, ns);
      mul_mv(*ctx_, ctx_->immediate(), gguf::TensorType::F16, View{&bwh}, View{&bh_b}, View{&fout, 12 * nf, 4 * nf}, View{}, width,
             nf, 1, ns);
      ASSERT_TRUE(moe_router(*ctx_, ctx_->immediate(), View{&brt}, View{&bh_b}, View{&logits, n_expert * 4, n_expert * 4},
                             View{}, View{}, View{&ids, n_used * 4, n_used * 4}, View{&wts, n_used * 4, n_used * 4},
                             View{&count}, width, n_expert, n_used, 1, true, true, 1.0f, ns));

      expect_norm_outputs(bh_b, download<float>(bh_a, width), bq_b, tail, nw, offset);
      // The readers: within a few code roundings (a code of the unscaled row may round the other way
      // than the scaled row's); without the scale they would be about ten times off.
      const std::vector<float> out_a = download<float>(bout_a, nout), out_b = download<float>(bout_b, nout);
      EXPECT_LT(worst_gap(out_b, out_a), 5e-3) << "the reading product";
      const std::vector<float> lg = download<float>(logits, 2 * n_expert);
      const std::vector<float> la(lg.begin(), lg.begin() + n_expert), lb(lg.begin() + n_expert, lg.end());
      EXPECT_LT(worst_gap(lb, la), 1e-5) << "the router's logits (float activations: no codes)";
      const std::vector<float> fo = download<float>(fout, 4 * nf);
      for (uint32_t k = 0; k < 2; ++k) {
        const std::vector<float> a(fo.begin() + k * nf, fo.begin() + (k + 1) * nf);
        const std::vector<float> b(fo.begin() + (k + 2) * nf, fo.begin() + (k + 3) * nf);
        EXPECT_LT(worst_gap(b, a), 1e-5) << (k == 0 ? "the F32" : "the F16") << " product on the residual sum";
      }
      const std::vector<uint32_t> id = download<uint32_t>(ids, 2 * n_used);
      EXPECT_TRUE(std::equal(id.begin(), id.begin() + n_used, id.begin() + n_used)) << "the chosen experts";
      for (Buffer* b : {&bwo, &bwc, &bx, &bnw, &brt, &bxq, &bo, &bres, &bh_a, &by, &bq_a, &bout_a, &bh_b, &bq_b, &bout_b, &tail,
                        &count, &logits, &ids, &wts, &bwf, &bwh, &fout}) {
        ctx_->release(*b);
      }
    }
  }
}

// o = W x + bias, then h = o + r and the norm of h with its 32-element codes (codes -1: none, else
// their format), done by the product's last workgroup (mul_mv_k_row_norm for the K-quants,
// mul_mv_q8_row_norm for the 32-element formats): bit for bit the product then rms_norm_row with the
// add, twice, the counter back at zero. The residual is large, so the scale is far from 1.
void VulkanNormTail::expect_row_norm_product(gguf::TensorType type, uint32_t width, int codes) {
  const uint32_t ncols = 512;
  const bool has_w = codes != 0, k_quant = has_mul_mv_k(*ctx_, type);
  SCOPED_TRACE(testing::Message() << gguf::tensor_type_name(type) << ", rows of " << width << ", codes " << codes
                                  << (has_w ? ", weighted" : ""));
  const float eps = 1e-5f, offset = has_w ? 0.25f : 0.0f;
  const std::vector<uint8_t> wo = weight(type, ncols, width);
  const std::vector<float> x = randoms(ncols, 1.0f), r = randoms(width, 10.0f), nw = randoms(width, 1.0f),
                           bias = randoms(width, 1.0f);
  const size_t qbytes = mul_mv_q8_bytes(width);
  Buffer bwo = upload(wo.data(), wo.size()), bx = upload(x.data(), x.size() * 4), bnw = upload(nw.data(), nw.size() * 4),
         bb = upload(bias.data(), bias.size() * 4), bres = upload(r.data(), r.size() * 4),
         bxq = zeros(k_quant ? q8k_row_bytes(ncols) : mul_mv_q8_bytes(ncols));
  std::vector<Buffer> out;  // per path: o, h, y, codes
  for (int i = 0; i < 8; ++i) out.push_back(zeros(i % 4 == 3 ? qbytes : width * 4));
  Buffer count = zeros(8);
  const View w = has_w ? View{&bnw} : View{};
  const auto format = static_cast<uint32_t>(std::max(codes, 0));
  if (k_quant) {
    quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bxq}, ncols, 1);
    mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq}, View{&out[0]}, ncols, width, 1, {}, View{&bb});
  } else {
    quantize_q8_act(*ctx_, ctx_->immediate(), type, View{&bx}, View{&bxq}, ncols, 1);
    mul_mv_q8_codes(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq}, View{&out[0]}, View{&bb}, ncols, width, 1);
  }
  rms_norm_row(*ctx_, ctx_->immediate(), View{&out[0]}, View{&bres}, View{&out[1]}, w, View{&out[2]}, View{}, width, 1, eps, offset,
               codes >= 0 ? View{&out[3]} : View{}, format);
  const MulMvKRowNorm n{View{&bres}, View{&out[5]}, View{&out[6]}, w, codes >= 0 ? View{&out[7]} : View{}, View{&count, 4, 4},
                        eps, offset, format};
  for (int run = 0; run < 2; ++run) {
    if (k_quant) {
      mul_mv_k_row_norm(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq}, View{&out[4]}, View{&bb}, ncols, width, 1, n);
    } else {
      mul_mv_q8_row_norm(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq}, View{&out[4]}, View{&bb}, ncols, width, 1, n);
    }
  }
  EXPECT_EQ(download<float>(out[4], width), download<float>(out[0], width)) << "the product";
  EXPECT_EQ(download<float>(out[5], width), download<float>(out[1], width)) << "the residual sum";
  EXPECT_EQ(download<float>(out[6], width), download<float>(out[2], width)) << "the norm's output";
  EXPECT_EQ(download<uint8_t>(out[7], qbytes), download<uint8_t>(out[3], qbytes)) << "the codes";
  EXPECT_NE(download<float>(out[6], width), download<float>(out[5], width)) << "(the norm changed the row)";
  EXPECT_EQ(download<uint32_t>(count, 2), (std::vector<uint32_t>{0, 0})) << "the counter, and the word before it";
  for (Buffer* b : {&bwo, &bx, &bnw, &bb, &bres, &bxq, &count}) ctx_->release(*b);
  for (Buffer& b : out) ctx_->release(b);
}

TEST_F(VulkanNormTail, RowNormInTheProductsLastWorkgroupIsTheNormsDispatch) {
  // The K-quants (gpt-oss's Q4_K o in Q4_K_M files), for widths no multiple of 256 (its 2,880), with
  // and without norm weights, both code formats and none.
  for (const auto type : {gguf::TensorType::Q4_K, gguf::TensorType::Q6_K}) {
    if (!has_mul_mv_k(*ctx_, type)) GTEST_SKIP() << "the device has no packed integer dot product or subgroups under 8";
    for (const uint32_t width : {2880u, 96u}) {
      if (!mul_mv_k_row_norm_fits(*ctx_, type, 512, width)) GTEST_SKIP() << "no shaderFloat64 or too few bindings";
      for (const int codes : {-1, 0, 1}) expect_row_norm_product(type, width, codes);
    }
  }
}

TEST_F(VulkanNormTail, RowNormInTheQ8ProductsLastWorkgroupIsTheNormsDispatch) {
  // The 32-element formats (mul_mv_q8_row_norm: gpt-oss's Q8_0 o beside MXFP4 experts), Q8_0 (Q8_0
  // codes) and Q4_1 (Q8_1), likewise.
  for (const auto type : {gguf::TensorType::Q8_0, gguf::TensorType::Q4_1}) {
    for (const uint32_t width : {2880u, 96u}) {
      if (!mul_mv_q8_row_norm_fits(*ctx_, type, 512, width)) GTEST_SKIP() << "no packed dot product, shaderFloat64 or bindings";
      for (const int codes : {-1, 0, 1}) expect_row_norm_product(type, width, codes);
    }
  }
}

TEST_F(VulkanNormTail, RouterFoldedIntoTheProductRoutesItsNorm) {
  // gpt-oss's o (Q8_0 beside MXFP4 experts, Q4_K in Q4_K_M files; a bias) with the residual add, the
  // norm and the mixture's router (F32, a bias) in one dispatch (mul_mv_q8_row_norm or
  // mul_mv_k_row_norm with a RowRoute, router_fold_matrices): the sum and the norm's output bit for bit
  // those of the product then rms_norm_row; the logits within float rounding of moe_router's on that
  // output, the same experts and their weights; both routings (top-k then softmax, softmax then top-k
  // with renormalised weights). A step of 3 tokens: each row, logits, experts and weights bit for bit
  // a one-token dispatch's; the counters back at zero.
  for (const auto type : {gguf::TensorType::Q8_0, gguf::TensorType::Q4_K}) {
    SCOPED_TRACE(gguf::tensor_type_name(type));
    expect_folded_router(type);
  }
}

void VulkanNormTail::expect_folded_router(gguf::TensorType type) {
  const uint32_t ncols = 512, width = 2880, ne = 32, k = 4, nt = 3;
  const bool k_quant = has_mul_mv_k(*ctx_, type);
  if (!(k_quant ? mul_mv_k_row_route_fits(*ctx_, type, ncols, width, ne, k) : mul_mv_q8_row_route_fits(*ctx_, type, ncols, width, ne, k))) {
    GTEST_SKIP() << "no packed dot product, shaderFloat64 or bindings";
  }
  const size_t xbytes = k_quant ? q8k_row_bytes(ncols) : mul_mv_q8_bytes(ncols);
  const float eps = 1e-5f, offset = 0.0f;
  const std::vector<uint8_t> wo = weight(type, ncols, width);
  std::vector<float> wo_f(size_t{ncols} * width);
  for (uint32_t r = 0; r < width; ++r) {
    quant::dequantize_row(type, wo.data() + r * quant::row_size(type, ncols), wo_f.data() + size_t{r} * ncols, ncols);
  }
  const std::vector<float> x = randoms(size_t{ncols} * nt, 1.0f), r = randoms(size_t{width} * nt, 10.0f), nw = randoms(width, 1.0f),
                           bias = randoms(width, 1.0f), router = randoms(size_t{ne} * width, 0.05f), rbias = randoms(ne, 0.5f);
  std::vector<float> fold(size_t{ne} * (ncols + width + 1));
  router_fold_matrices(router.data(), nw.data(), offset, wo_f.data(), bias.data(), ne, width, ncols, fold.data());
  const size_t qbytes = mul_mv_q8_bytes(width);
  Buffer bwo = upload(wo.data(), wo.size()), bx = upload(x.data(), x.size() * 4), bnw = upload(nw.data(), nw.size() * 4),
         bb = upload(bias.data(), bias.size() * 4), bxq = zeros(xbytes * nt), brt = upload(router.data(), router.size() * 4),
         brb = upload(rbias.data(), rbias.size() * 4), bfold = upload(fold.data(), fold.size() * 4), rcount = zeros(4 * (nt + 1)),
         mcount = zeros(4);
  if (k_quant) {
    quantize_q8k(*ctx_, ctx_->immediate(), View{&bx}, View{&bxq}, ncols, nt);
  } else {
    quantize_q8_act(*ctx_, ctx_->immediate(), type, View{&bx}, View{&bxq}, ncols, nt);
  }
  for (const bool topk_softmax : {true, false}) {
    SCOPED_TRACE(topk_softmax ? "top-k then softmax" : "softmax then top-k, renormalised");
    // The reference: the product, rms_norm_row with the add, moe_router on its output (token 0).
    Buffer o = zeros(width * 4), h = upload(r.data(), width * 4), y = zeros(width * 4), lg = zeros(ne * 4), ids = zeros(k * 4),
           wts = zeros(k * 4);
    if (k_quant) {
      mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq, 0, xbytes}, View{&o}, ncols, width, 1, {}, View{&bb});
    } else {
      mul_mv_q8_codes(*ctx_, ctx_->immediate(), type, View{&bwo}, View{&bxq, 0, xbytes}, View{&o}, View{&bb}, ncols, width, 1);
    }
    rms_norm_row(*ctx_, ctx_->immediate(), View{&o}, View{&h}, View{&h}, View{&bnw}, View{&y}, View{}, width, 1, eps, offset);
    ASSERT_TRUE(moe_router(*ctx_, ctx_->immediate(), View{&brt}, View{&y}, View{&lg}, View{&brb}, View{}, View{&ids}, View{&wts},
                           View{&mcount}, width, ne, k, 1, topk_softmax, !topk_softmax, 1.0f));
    // The fold: 3 tokens at once, then each alone.
    std::vector<Buffer> got;  // per run: o, h, y, codes, logits, ids, weights
    for (const uint32_t n : {nt, 1u, 1u, 1u}) {
      const size_t at = got.size() / 7 == 0 ? 0 : got.size() / 7 - 1;  // the alone runs: tokens 0, 1, 2
      for (const size_t bytes : {size_t{width} * 4 * n, size_t{width} * 4 * n, size_t{width} * 4 * n, qbytes * n,
                                 size_t{ne} * 4 * n, size_t{k} * 4 * n, size_t{k} * 4 * n}) {
        got.push_back(zeros(bytes));
      }
      Buffer* g = &got[got.size() - 7];
      ctx_->upload(g[1], 0, r.data() + at * width, size_t{width} * 4 * n);  // h over the residual, in place
      const View xq{&bxq, xbytes * at, xbytes * n};
      const MulMvKRowNorm rn{View{&g[1]}, View{&g[1]}, View{&g[2]}, View{&bnw}, n == 1 ? View{&g[3]} : View{},
                             View{&rcount, 4, 4 * n}, eps, offset, 0};
      RowRoute route;
      route.fold = View{&bfold};
      route.logits = View{&g[4]};
      route.bias = View{&brb};
      route.ids = View{&g[5]};
      route.weights = View{&g[6]};
      route.n_expert = ne;
      route.n_used = k;
      route.topk_softmax = topk_softmax;
      route.norm_topk = !topk_softmax;
      if (k_quant) {
        mul_mv_k_row_norm(*ctx_, ctx_->immediate(), type, View{&bwo}, xq, View{&g[0]}, View{&bb}, ncols, width, n, rn, &route);
      } else {
        mul_mv_q8_row_norm(*ctx_, ctx_->immediate(), type, View{&bwo}, xq, View{&g[0]}, View{&bb}, ncols, width, n, rn, &route);
      }
    }
    EXPECT_EQ(download<float>(got[8], width), download<float>(h, width)) << "the residual sum";
    EXPECT_EQ(download<float>(got[9], width), download<float>(y, width)) << "the norm's output";
    const std::vector<float> want_l = download<float>(lg, ne), got_l = download<float>(got[11], ne);
    EXPECT_LT(worst_gap(got_l, want_l), 2e-5) << "the logits";
    EXPECT_EQ(download<uint32_t>(got[12], k), download<uint32_t>(ids, k)) << "the experts";
    EXPECT_LT(worst_gap(download<float>(got[13], k), download<float>(wts, k)), 1e-5) << "their weights";
    for (uint32_t t = 0; t < nt; ++t) {
      Buffer* alone = &got[7 * (t + 1)];
      const auto row = [&](int i, size_t words) {
        const std::vector<uint32_t> all = download<uint32_t>(got[static_cast<size_t>(i)], words * nt);
        return std::vector<uint32_t>(all.begin() + static_cast<std::ptrdiff_t>(words * t),
                                     all.begin() + static_cast<std::ptrdiff_t>(words * (t + 1)));
      };
      EXPECT_EQ(row(1, width), download<uint32_t>(alone[1], width)) << "token " << t << ": the residual sum";
      EXPECT_EQ(row(2, width), download<uint32_t>(alone[2], width)) << "token " << t << ": the norm's output";
      EXPECT_EQ(row(4, ne), download<uint32_t>(alone[4], ne)) << "token " << t << ": the logits";
      EXPECT_EQ(row(5, k), download<uint32_t>(alone[5], k)) << "token " << t << ": the experts";
      EXPECT_EQ(row(6, k), download<uint32_t>(alone[6], k)) << "token " << t << ": their weights";
    }
    const std::vector<uint32_t> counts = download<uint32_t>(rcount, nt + 1);
    EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [](uint32_t c) { return c == 0; })) << "the counters";
    for (Buffer* b : {&o, &h, &y, &lg, &ids, &wts}) ctx_->release(*b);
    for (Buffer& b : got) ctx_->release(b);
  }
  for (Buffer* b : {&bwo, &bx, &bnw, &bb, &bxq, &brt, &brb, &bfold, &rcount, &mcount}) ctx_->release(*b);
}

TEST_F(VulkanNormTail, RowNormAfterTheCombinedQ8DownProductIsTheNormsDispatch) {
  // The 32-element formats' down product adding its slots (mul_mv_q8_id_combine) with the residual add
  // and whole-row norm after it done by its last workgroup: bit for bit the combine without them then
  // rms_norm_row with the add (sum, output, codes), for Q5_0 (Q8_0 codes) and Q4_1 (Q8_1), expert
  // biases, rows of 2,880 and 96, twice (the counters back at zero).
  const uint32_t ncols = 256, n_expert = 8, n_used = 4;
  for (const auto type : {gguf::TensorType::Q5_0, gguf::TensorType::Q4_1}) {
    for (const uint32_t width : {2880u, 96u}) {
      if (!mul_mv_q8_combine_row_norm_fits(*ctx_, width)) GTEST_SKIP() << "no packed dot product, shaderFloat64 or bindings";
      for (const int codes : {-1, 0, 1}) {
        SCOPED_TRACE(testing::Message() << gguf::tensor_type_name(type) << ", rows of " << width << ", codes " << codes);
        const float eps = 1e-5f, offset = 0.0f;
        const std::vector<uint8_t> wd = weight(type, ncols, width, n_expert);
        const std::vector<float> x = randoms(size_t{ncols} * n_used, 1.0f), r = randoms(width, 10.0f), nw = randoms(width, 1.0f),
                                 bias = randoms(size_t{width} * n_expert, 1.0f), wts = {0.4f, 0.3f, 0.2f, 0.1f};
        const std::vector<uint32_t> ids = {5, 1, 6, 2};
        const size_t qbytes = mul_mv_q8_bytes(width);
        Buffer bw = upload(wd.data(), wd.size()), bx = upload(x.data(), x.size() * 4), bnw = upload(nw.data(), nw.size() * 4),
               bb = upload(bias.data(), bias.size() * 4), bres = upload(r.data(), r.size() * 4),
               bids = upload(ids.data(), ids.size() * 4), bwts = upload(wts.data(), wts.size() * 4),
               bxq = zeros(mul_mv_q8_bytes(ncols) * n_used), by = zeros(size_t{4} * width * n_used),
               count = zeros(4 * mul_mv_q8_combine_counts(width, 1)), rcount = zeros(4);
        std::vector<Buffer> out;  // per path: the combined rows, h, the norm's output, codes
        for (int i = 0; i < 8; ++i) out.push_back(zeros(i % 4 == 3 ? qbytes : width * 4));
        const View q8a = codes >= 0 ? View{&out[3]} : View{}, q8b = codes >= 0 ? View{&out[7]} : View{};
        const auto format = static_cast<uint32_t>(std::max(codes, 0));
        quantize_q8_act(*ctx_, ctx_->immediate(), type, View{&bx}, View{&bxq}, ncols, n_used);
        ASSERT_TRUE(mul_mv_q8_id_combine(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bids}, View{&bwts}, View{&bxq}, View{&by},
                                         View{&out[0]}, View{&count}, View{&bb}, ncols, width, n_expert, n_used, 1));
        rms_norm_row(*ctx_, ctx_->immediate(), View{&out[0]}, View{&bres}, View{&out[1]}, View{&bnw}, View{&out[2]}, View{}, width, 1,
                     eps, offset, q8a, format);
        const MulMvKRowNorm rn{View{&bres}, View{&out[5]}, View{&out[6]}, View{&bnw}, q8b, View{&rcount}, eps, offset, format};
        for (int run = 0; run < 2; ++run) {
          ASSERT_TRUE(mul_mv_q8_id_combine(*ctx_, ctx_->immediate(), type, View{&bw}, View{&bids}, View{&bwts}, View{&bxq},
                                           View{&by}, View{&out[4]}, View{&count}, View{&bb}, ncols, width, n_expert, n_used, 1, &rn));
        }
        EXPECT_EQ(download<float>(out[4], width), download<float>(out[0], width)) << "the combined rows";
        EXPECT_EQ(download<float>(out[5], width), download<float>(out[1], width)) << "the residual sum";
        EXPECT_EQ(download<float>(out[6], width), download<float>(out[2], width)) << "the norm's output";
        EXPECT_EQ(download<uint8_t>(out[7], qbytes), download<uint8_t>(out[3], qbytes)) << "the codes";
        EXPECT_EQ(download<uint32_t>(rcount, 1)[0], 0u) << "the row norm's counter";
        const std::vector<uint32_t> counts = download<uint32_t>(count, mul_mv_q8_combine_counts(width, 1));
        EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [](uint32_t c) { return c == 0; })) << "the combine's counters";
        for (Buffer* b : {&bw, &bx, &bnw, &bb, &bres, &bids, &bwts, &bxq, &by, &count, &rcount}) ctx_->release(*b);
        for (Buffer& b : out) ctx_->release(b);
      }
    }
  }
}

TEST_F(VulkanNormTail, CombinedDownProductTakesTheAddAndNorm) {
  // The experts' down products and their weighted sum (mul_mv_k_id_combine), the residual add and the
  // norm: mul_mv_k_id_combine_norm's residual sum bit for bit theirs, its codes the CPU's of the
  // unscaled weighted row, its partial sums those of h^2, and a reading product as with the norm's rows.
  const auto type = gguf::TensorType::Q4_K;
  if (!has_mul_mv_k(*ctx_, type)) GTEST_SKIP() << "the device has no packed integer dot product or subgroups under 8";
  const uint32_t ff = 512, width = 512, blocks = width / 256, n_expert = 8, n_used = 4, nout = 256;
  ASSERT_TRUE(mul_mv_k_id_combine_norm_fits(*ctx_, type, ff, width, n_used));
  const float eps = 1e-5f, offset = 0.0f;
  const std::vector<uint8_t> wd = weight(type, ff, width, n_expert), wc = weight(type, width, nout);
  const std::vector<float> act = randoms(static_cast<size_t>(n_used) * ff, 1.0f), r = randoms(width, 4.0f),
                           nw = randoms(width, 1.0f), slot_w = {0.4f, 0.3f, 0.2f, 0.1f};
  const std::vector<uint32_t> chosen = {5, 0, 7, 2};
  Buffer bwd = upload(wd.data(), wd.size()), bwc = upload(wc.data(), wc.size()), bact = upload(act.data(), act.size() * 4),
         bnw = upload(nw.data(), nw.size() * 4), bids = upload(chosen.data(), chosen.size() * 4),
         bsw = upload(slot_w.data(), slot_w.size() * 4), bres = upload(r.data(), r.size() * 4);
  Buffer bxq = zeros(q8k_row_bytes(ff) * n_used), bo = zeros(width * 4), bh_a = zeros(width * 4), by = zeros(width * 4),
         bq_a = zeros(q8k_row_bytes(width)), bout_a = zeros(nout * 4), bh_b = zeros(width * 4), bq_b = zeros(q8k_row_bytes(width)),
         bout_b = zeros(nout * 4), tail = zeros(8 * blocks);
  quantize_q8k(*ctx_, ctx_->immediate(), View{&bact}, View{&bxq}, ff, n_used);
  ASSERT_TRUE(mul_mv_k_id_combine(*ctx_, ctx_->immediate(), type, View{&bwd}, View{&bids}, View{&bsw}, View{&bxq}, View{&bo},
                                  View{}, ff, width, n_expert, n_used, 1));
  rms_norm_row(*ctx_, ctx_->immediate(), View{&bo}, View{&bres}, View{&bh_a}, View{&bnw}, View{&by}, View{&bq_a}, width, 1, eps,
               offset);
  mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwc}, View{&bq_a}, View{&bout_a}, width, nout, 1);
  NormScale ns;
  ns.partials = View{&tail, 4 * blocks, 4 * blocks};
  ns.weights = View{&bnw};
  ns.blocks = blocks;
  ns.eps = eps;
  for (int run = 0; run < 2; ++run) {
    mul_mv_k_id_combine_norm(*ctx_, ctx_->immediate(), type, View{&bwd}, View{&bids}, View{&bsw}, View{&bxq}, View{&bh_b}, ff,
                             width, n_expert, n_used,
                             MulMvKNorm{View{&bres}, View{&bnw}, View{&bq_b}, View{&tail, 0, 4 * blocks}, ns.partials, offset});
  }
  mul_mv_k(*ctx_, ctx_->immediate(), type, View{&bwc}, View{&bq_b}, View{&bout_b}, width, nout, 1, ns);
  expect_norm_outputs(bh_b, download<float>(bh_a, width), bq_b, tail, nw, offset);
  EXPECT_LT(worst_gap(download<float>(bout_b, nout), download<float>(bout_a, nout)), 5e-3) << "the reading product";
  for (Buffer* b : {&bwd, &bwc, &bact, &bnw, &bids, &bsw, &bres, &bxq, &bo, &bh_a, &by, &bq_a, &bout_a, &bh_b, &bq_b, &bout_b, &tail}) {
    ctx_->release(*b);
  }
}

// The mixture-of-experts router split from the norm it reads (vk_router_split.h): R_w r beside the
// attention (moe_router_product), M a beside o's product with the experts chosen from z alone
// (moe_router_split), their weights once the norm's scale is known (moe_route's `given` form),
// against a double-precision oracle of the router as the graph defines it: h = W_o a + r (a the Q8_K
// codes o reads), x = RMSNorm(h) * (w + offset), logits = R x * logit_scale, then the routing. And each
// token's experts and weights in a step of several bit for bit its one-token step's.
struct Case {
  bool topk_first, norm_topk, escale;
  float logit_scale, offset;
};

// The routing of one token's logits (already times logit_scale), in double: the slots' experts in
// selection order and their weights.
void route(const std::vector<double>& l, uint32_t k, const Case& c, const std::vector<float>& escale,
           std::vector<uint32_t>& ids, std::vector<double>& w) {
  const size_t ne = l.size();
  std::vector<uint32_t> order(ne);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return l[a] > l[b]; });
  ids.assign(order.begin(), order.begin() + k);
  const double mx = l[order[0]];
  double all = 0;
  for (double v : l) all += std::exp(v - mx);
  w.assign(k, 0.0);
  double sel = 0;
  for (uint32_t i = 0; i < k; ++i) sel += std::exp(l[ids[i]] - mx);
  for (uint32_t i = 0; i < k; ++i) {
    const double e = std::exp(l[ids[i]] - mx);
    w[i] = c.topk_first || c.norm_topk ? e / sel : e / all;
    if (c.escale) w[i] *= escale[ids[i]];
  }
}

TEST_F(VulkanNormTail, RouterSplitFromItsNormChoosesAndWeighsItsExperts) {
  const auto type = gguf::TensorType::Q4_K;
  if (!has_mul_mv_k(*ctx_, type)) GTEST_SKIP() << "the device has no packed integer dot product or subgroups under 8";
  const uint32_t d = 512, d_in = 768, ne = 64, k = 8, n = 5, blocks = d / 256;
  if (!rms_norm_row_factored_fits(*ctx_, d)) GTEST_SKIP() << "the device has no factored norm for rows of " << d;
  const float eps = 1e-6f;
  for (const Case& c : {Case{false, true, false, 1.0f, 0.0f}, Case{true, false, true, 0.7f, 1.0f},
                        Case{false, false, false, 1.3f, 1.0f}}) {
    SCOPED_TRACE(testing::Message() << "top-k first " << c.topk_first << ", norm " << c.norm_topk << ", logit scale "
                                    << c.logit_scale << ", offset " << c.offset);
    // W_o [d][d_in] quantized; a, r, the norm's weights, the router.
    const size_t rs = quant::row_size(type, d_in);
    std::vector<uint8_t> wo(rs * d + 16);
    for (uint32_t j = 0; j < d; ++j) {
      const std::vector<float> row = randoms(d_in, 0.05f);
      quant::quantize_row(type, row.data(), wo.data() + j * rs, d_in);
    }
    std::vector<float> wof(static_cast<size_t>(d) * d_in);
    quant::dequantize_row(type, wo.data(), wof.data(), static_cast<int64_t>(wof.size()));
    const std::vector<float> a = randoms(static_cast<size_t>(n) * d_in, 1.0f), r = randoms(static_cast<size_t>(n) * d, 2.0f),
                             nw = randoms(d, 0.5f), router = randoms(static_cast<size_t>(ne) * d, 0.3f),
                             escale = randoms(ne, 1.0f);
    std::vector<float> rw(static_cast<size_t>(ne) * d), m(static_cast<size_t>(ne) * d_in);
    router_split_matrices(router.data(), nw.data(), c.offset, wof.data(), ne, d, d_in, rw.data(), m.data());

    Buffer bwo = upload(wo.data(), wo.size()), ba = upload(a.data(), a.size() * 4), br = upload(r.data(), r.size() * 4),
           bnw = upload(nw.data(), nw.size() * 4), brw = upload(rw.data(), rw.size() * 4), bm = upload(m.data(), m.size() * 4),
           bes = upload(escale.data(), escale.size() * 4);
    Buffer bxq = zeros(q8k_row_bytes(d_in) * n), bo = zeros(size_t{4} * d * n), bh = zeros(size_t{4} * d * n),
           by = zeros(size_t{4} * d * n), bnq = zeros(q8k_row_bytes(d) * n), parts = zeros(size_t{4} * blocks * n),
           logits = zeros(size_t{4} * ne * n), ids = zeros(size_t{4} * k * n), wts = zeros(size_t{4} * k * n), count = zeros(4 * n);
    Dispatcher& im = ctx_->immediate();
    quantize_q8k(*ctx_, im, View{&ba}, View{&bxq}, d_in, n);
    mul_mv_k(*ctx_, im, type, View{&bwo}, View{&bxq}, View{&bo}, d_in, d, n);
    rms_norm_row(*ctx_, im, View{&bo}, View{&br}, View{&bh}, View{&bnw}, View{&by}, View{&bnq}, d, n, eps, c.offset, View{}, 0,
                 View{&parts});
    NormScale ns;
    ns.partials = View{&parts};
    ns.blocks = blocks;
    ns.eps = eps;
    // A token's rows: all n at once, then each alone (its own views of the same buffers).
    const auto run = [&](uint32_t t0, uint32_t nt) {
      const auto at = [&](const Buffer& b, size_t row_bytes) { return View{&b, row_bytes * t0, row_bytes * nt}; };
      moe_router_product(*ctx_, im, View{&brw}, at(br, size_t{4} * d), at(logits, size_t{4} * ne), d, ne, nt);
      ASSERT_TRUE(moe_router_split(*ctx_, im, View{&bm}, at(bxq, q8k_row_bytes(d_in)), at(logits, size_t{4} * ne),
                                   at(ids, size_t{4} * k), View{&count}, d_in, ne, k, nt, c.topk_first, c.logit_scale));
      NormScale given = ns;
      given.partials = at(parts, size_t{4} * blocks);
      moe_route(*ctx_, im, at(logits, size_t{4} * ne), View{}, c.escale ? View{&bes} : View{}, at(ids, size_t{4} * k),
                at(wts, size_t{4} * k), ne, k, nt, c.topk_first, c.norm_topk, c.logit_scale, given);
    };
    run(0, n);
    const std::vector<uint32_t> got_ids = download<uint32_t>(ids, size_t{k} * n);
    const std::vector<float> got_w = download<float>(wts, size_t{k} * n);
    EXPECT_EQ(download<uint32_t>(count, n), std::vector<uint32_t>(n, 0u)) << "the counters back at zero";

    // The oracle from o's own codes: h = W_o a + r, the norm, the router, the routing.
    const std::vector<uint8_t> codes = download<uint8_t>(bxq, q8k_row_bytes(d_in) * n);
    int checked = 0;
    for (uint32_t t = 0; t < n; ++t) {
      const uint8_t* row = codes.data() + q8k_row_bytes(d_in) * t;
      std::vector<double> av(d_in);
      for (uint32_t c2 = 0; c2 < d_in; ++c2) {
        float db;
        std::memcpy(&db, row + d_in + d_in / 4 + 4 * (c2 / 256), 4);
        av[c2] = static_cast<double>(static_cast<int8_t>(row[c2])) * db;
      }
      std::vector<double> h(d);
      double ss = 0;
      for (uint32_t j = 0; j < d; ++j) {
        double s = r[static_cast<size_t>(t) * d + j];
        for (uint32_t c2 = 0; c2 < d_in; ++c2) s += static_cast<double>(wof[static_cast<size_t>(j) * d_in + c2]) * av[c2];
        h[j] = s;
        ss += s * s;
      }
      const double scale = 1.0 / std::sqrt(ss / d + eps);
      std::vector<double> l(ne);
      for (uint32_t e = 0; e < ne; ++e) {
        double s = 0;
        for (uint32_t j = 0; j < d; ++j) s += static_cast<double>(router[static_cast<size_t>(e) * d + j]) * h[j] * scale * (nw[j] + c.offset);
        l[e] = s * c.logit_scale;
      }
      std::vector<uint32_t> want_ids;
      std::vector<double> want_w;
      route(l, k, c, escale, want_ids, want_w);
      std::vector<double> sorted = l;
      std::sort(sorted.rbegin(), sorted.rend());
      if (sorted[k - 1] - sorted[k] < 1e-3) continue;  // a near tie at the last slot: either is right
      ++checked;
      std::vector<uint32_t> got(got_ids.begin() + k * t, got_ids.begin() + k * (t + 1));
      std::vector<uint32_t> a_set = got, b_set = want_ids;
      std::sort(a_set.begin(), a_set.end());
      std::sort(b_set.begin(), b_set.end());
      ASSERT_EQ(a_set, b_set) << "token " << t << ": the chosen experts";
      for (uint32_t i = 0; i < k; ++i) {
        const size_t j = static_cast<size_t>(std::find(want_ids.begin(), want_ids.end(), got[i]) - want_ids.begin());
        EXPECT_NEAR(got_w[k * t + i], want_w[j], 2e-5 + 1e-4 * std::abs(want_w[j])) << "token " << t << ", slot " << i;
      }
    }
    EXPECT_GE(checked, 3) << "too few tokens without a near tie to check";

    // Each token alone: the same experts and weights, bit for bit.
    for (uint32_t t = 0; t < n; ++t) run(t, 1);
    EXPECT_EQ(download<uint32_t>(ids, size_t{k} * n), got_ids) << "a token's experts alone";
    const std::vector<float> alone = download<float>(wts, size_t{k} * n);
    EXPECT_EQ(0, std::memcmp(alone.data(), got_w.data(), alone.size() * 4)) << "a token's weights alone";
    for (Buffer* b : {&bwo, &ba, &br, &bnw, &brw, &bm, &bes, &bxq, &bo, &bh, &by, &bnq, &parts, &logits, &ids, &wts, &count}) {
      ctx_->release(*b);
    }
  }
}

TEST(RouterSites, AreTheBiasFreeFloatRoutersOfAProductsNorm) {
  // Three MoE layers after o, its residual add and the norm: an F32 router (a site), one with a bias,
  // one stored as Q8_0; and a fourth whose router reads the residual itself, not the norm.
  graph::Graph g;
  graph::Builder b(g);
  const int64_t d = 256, d_in = 512, ff = 256, ne = 8;
  using gguf::TensorType;
  TensorId h = b.input(d, "h");
  for (int layer = 0; layer < 4; ++layer) {
    const auto name = [&](const char* s) { return fmt::format("blk.{}.{}", layer, s); };
    const TensorId a = b.input(d_in, name("a"));
    const TensorId o = b.matmul(b.weight(name("o"), TensorType::Q4_K, {d_in, d, 1, 1}, layer), a, name("o_out"), layer);
    const TensorId sum = b.add(o, h, name("sum"), layer);
    const TensorId x = b.rms_norm(sum, b.weight(name("norm"), TensorType::F32, {d, 1, 1, 1}, layer), 1e-6f, 0.0f, name("x"), layer);
    graph::Builder::MoeVariant v;
    v.norm_topk = true;
    if (layer == 1) {  // (expert biases come all four or none)
      v.router_b = b.weight(name("router_b"), TensorType::F32, {ne, 1, 1, 1}, layer);
      v.gate_b = b.weight(name("gate_b"), TensorType::F32, {ff, ne, 1, 1}, layer);
      v.up_b = b.weight(name("up_b"), TensorType::F32, {ff, ne, 1, 1}, layer);
      v.down_b = b.weight(name("down_b"), TensorType::F32, {d, ne, 1, 1}, layer);
    }
    if (layer == 3) v.router_in = sum;
    const TensorId router = b.weight(name("router"), layer == 2 ? TensorType::Q8_0 : TensorType::F32, {d, ne, 1, 1}, layer);
    const TensorId y = b.moe(x, router, b.weight(name("gate"), TensorType::Q4_K, {d, ff, ne, 1}, layer),
                             b.weight(name("up"), TensorType::Q4_K, {d, ff, ne, 1}, layer),
                             b.weight(name("down"), TensorType::Q4_K, {ff, d, ne, 1}, layer), 2, v, name("moe"), layer);
    h = b.add(y, sum, name("out"), layer);
  }
  const std::vector<RouterSite> sites = router_sites(g);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(g.nodes[sites[0].o].op, graph::Op::MatMul);
  EXPECT_EQ(g.tensor(g.nodes[sites[0].o].in[0]).name, "blk.0.o");
  EXPECT_EQ(g.nodes[sites[0].norm].op, graph::Op::RmsNorm);
  EXPECT_EQ(g.nodes[sites[0].moe].op, graph::Op::MoE);
  EXPECT_EQ(g.tensor(sites[0].r).name, "h");
  EXPECT_FALSE(sites[0].router_bias);
  // With biases (the router folded into o's dispatch): the biased router's layer too, flagged.
  const std::vector<RouterSite> biased = router_sites(g, true);
  ASSERT_EQ(biased.size(), 2u);
  EXPECT_EQ(biased[0].o, sites[0].o);
  EXPECT_EQ(g.tensor(g.nodes[biased[1].o].in[0]).name, "blk.1.o");
  EXPECT_TRUE(biased[1].router_bias);
  EXPECT_EQ(biased[1].o_bias, -1);
}

}  // namespace
}  // namespace zinc::backend::vk
