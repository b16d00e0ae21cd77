// Decode's residual add and whole-row RMSNorm done by the K-quant product before them (mul_mv_k_norm,
// mul_mv_k_id_combine_norm), the norm's scale left to the kernels that read it (NormScale: mul_mv_k and
// its variants, moe_router), against the dispatches they replace (the product, rms_norm_row with the
// add, the readers on the norm's rows and codes): the residual sum bit for bit, the codes the CPU's
// quantizer makes of the unscaled weighted row, and the readers' results within the few code roundings
// the two forms may differ by.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/vulkan/vk_misc.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_quant.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "vk_test_util.h"

namespace zinc::backend::vk {
namespace {

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

}  // namespace
}  // namespace zinc::backend::vk
