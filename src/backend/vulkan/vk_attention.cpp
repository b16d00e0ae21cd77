#include "backend/vulkan/vk_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "backend/vulkan/vk_gemm.h"
#include "backend/vulkan/vk_plan.h"
#include "backend/vulkan/vk_quant.h"
#include "core/error.h"
#include "core/knobs.h"

namespace zinc::backend::vk {

namespace {

uint32_t pow2_at_least(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p *= 2;
  return p;
}

uint32_t pow2_at_most(uint32_t n) {
  uint32_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// The shape of attention.comp for one call (its specialization constants, in their order, then the
// grid). 128 invocations per workgroup throughout.
struct AttentionPlan {
  uint32_t hd, nr, tk, dc, nkt, cv, nvr, vb;  // spec constants 0..7
  uint32_t n_blk, n_split;
};

// Shared memory of attention.comp for a plan, in bytes (its `shared` declarations, q8k.glsl's 64
// maxima among them).
size_t shared_bytes(const AttentionPlan& p) {
  const size_t rs = p.nr / (128 / p.nkt);
  return 4 * (static_cast<size_t>(p.nr) * p.hd + static_cast<size_t>(p.tk) * (p.dc + 4) + p.nr * (p.tk + 4) + 3 * p.nr +
              rs * 128 + 64);
}

// Query rows per workgroup: the GQA group of every token in the block, up to 64 rows and 4096 floats
// of q; keys per tile and the invocations sharing a score row follow from it so that 128 invocations
// cover NR x TK scores; K is staged DC dims at a time within the device's shared memory.
// Steps of a few tokens (speculative decoding's verifying steps): each token's query rows make a block
// of their own, tiled and split as in a one-token step, so that each row is computed as a decode step
// computes it; one block of all their rows, with the tiles that suit prompts, is several times slower
// at depth (measured: 137 us more per layer for 3 tokens than for 2 at 4,096 positions, H200).
constexpr uint32_t kFewTokens = 8;

// The threshold of attention.comp's one_keys for a plan of automatic splits: decode-sized steps whose
// workgroups' rows are one token's (a GQA group divided into whole blocks), else 0. A row's result
// then depends on its own key count alone, not on the split count a context size or a step's
// recording chose: one-token, speculative and several sequences' steps agree bit for bit.
uint32_t one_keys(const AttentionPlan& p, const AttentionArgs& a) {
  const uint32_t group = a.n_head / a.n_head_kv;
  return a.n_split == 0 && a.n_tokens <= kFewTokens && group % p.nr == 0 ? attention_one_keys() : 0;
}

// The caller's bound on a row's keys (AttentionArgs::max_keys), within a sliding window's: a row at
// position pos attends from the block of pos + 1 - window, at most window + KV_BLOCK - 1 keys.
uint32_t max_keys(const AttentionArgs& a) {
  uint32_t most = a.max_keys != 0 ? a.max_keys : UINT32_MAX;
  if (a.sliding_window > 0) most = std::min(most, a.sliding_window + static_cast<uint32_t>(kKvBlockRows) - 1);
  return most;
}

AttentionPlan make_plan(const Features& f, const AttentionArgs& a) {
  if (a.n_tokens > 1 && a.n_tokens <= kFewTokens && a.n_split == 0) {
    AttentionArgs one = a;
    one.n_tokens = 1;
    AttentionPlan p = make_plan(f, one);
    if (p.nr == a.n_head / a.n_head_kv) {  // a block holds one token's rows
      p.n_blk = a.n_tokens;
      return p;
    }
  }
  const uint32_t hd = a.head_dim, rows = a.n_tokens * (a.n_head / a.n_head_kv);
  AttentionPlan p{};
  p.hd = hd;
  p.nr = std::min({pow2_at_least(rows), 64u, pow2_at_most(std::max(1u, 4096 / hd))});
  // Keys per tile: 32 (ZINC_VULKAN_FA_TK, a power of two up to 256, for measurements: on an H200
  // qwen3-30b-a3b's tg64 at depth 4,096 fell from 252 to 208 and 119 tok/s with 64 and 128).
  const uint32_t tk_most = knob_u32("ZINC_VULKAN_FA_TK", 32, 32, 256);
  uint32_t tk = 32;
  while (tk * 2 <= tk_most) tk *= 2;
  for (;;) {
    p.nkt = 128 / std::min(p.nr, 16u);
    p.tk = std::max(tk, p.nkt);
    // The widest K chunk (a divisor of head_dim, a multiple of 4, at most 8192 floats) that fits:
    // each chunk costs two barriers per tile.
    p.dc = 0;
    for (uint32_t dc = std::min(hd, 8192 / p.tk) / 4 * 4; dc >= 4 && p.dc == 0; dc -= 4) {
      AttentionPlan t = p;
      t.dc = dc;
      if (hd % dc == 0 && shared_bytes(t) <= f.shared_memory) p.dc = dc;
    }
    if (p.dc != 0) break;
    if (p.nr == 1) {
      throw Error(
          fmt::format("Vulkan attention: head_dim {} does not fit {} bytes of shared memory", hd, f.shared_memory));
    }
    p.nr /= 2;
  }
  // Output dims per invocation: 4 (wide loads) unless that leaves invocations idle.
  p.cv = 4;
  while (p.cv > 1 && (hd / p.cv) * p.nr < 128 && hd / (p.cv / 2) <= 128) p.cv /= 2;
  p.nvr = std::min(p.nr, pow2_at_most(128 / (hd / p.cv)));
  // V rows loaded at once: a whole tile of up to 32 keys for few rows (decode; qwen3-8b on an H200,
  // tok/s with 8, 16 and 32: 268.0 / 268.4 / 272.8 at 4,096 positions, 198.8 / 200.2 / 209.2 at
  // 16,384; 64, a whole tile of ZINC_VULKAN_FA_TK=64, spilled), 8 beside the accumulators of many.
  p.vb = p.nr <= 8 ? std::min(p.tk, 32u) : 8;
  p.n_blk = (rows + p.nr - 1) / p.nr;
  p.n_split = a.n_split;
  if (p.n_split == 0) {
    // About 256 workgroups (two for each multiprocessor of a large GPU), but no split shorter than
    // two tiles of the whole cache (short sequences leave the later splits empty; they cost one store
    // each). qwen3-8b on an H200 (8 kv heads), tok/s of 16, 32 and 64 splits: 255.9 / 267.8 / 255.3
    // at 4,096 positions, 170.3 / 198.3 / 190.2 at 16,384 (512 workgroups before). With the merge in
    // one pass (attention_reduce.comp), twice the splits (512 workgroups, splits of one tile) measured
    // slower or the same: qwen3-8b 275.5 -> 263.2 at 4,096 and 210.8 -> 204.1 at 16,384, qwen3-30b-a3b
    // 261.2 -> 261.1 and 206.8 -> 197.7.
    const uint32_t wgs = p.n_blk * a.n_head_kv;
    const uint32_t most = std::clamp(a.n_ctx / (2 * p.tk), 1u, 128u);
    p.n_split = std::clamp((256 + wgs - 1) / wgs, 1u, most);
    p.n_split = knob_u32("ZINC_VULKAN_FA_SPLITS", p.n_split, 1, 128);
    if (p.n_split > 1 && one_keys(p, a) != 0 && max_keys(a) <= one_keys(p, a)) p.n_split = 1;
  }
  return p;
}

// Prompt steps over an F16 cache with heads of 64 or 128 take attention_coopmat (tensor cores, one
// split) where the device has the cooperative-matrix GEMM: 64 query rows per workgroup, keys in tiles
// of 64. ZINC_VULKAN_FA_COOPMAT=0 keeps attention.comp, for measurements.
constexpr uint32_t kCoopRows = 64;
constexpr size_t kCoopShared = 64 * 17 * 16 + 64 * 68 * 4 + 64 * 9 * 16 + 64 * 4;

bool coop_attention(const Context& ctx, const AttentionArgs& a) {
  return a.type == KvCacheType::F16 && (a.head_dim == 64 || a.head_dim == 128) && a.n_tokens > kFewTokens &&
         a.n_split == 0 && mul_mm_kernel(ctx) == MulMmKernel::CoopMatNV && ctx.features().shared_memory >= kCoopShared &&
         knob_u32("ZINC_VULKAN_FA_COOPMAT", 1, 0, 1) == 1;
}

// Whether one split writes its rows' codes itself (ZINC_VULKAN_FA_CODES=0 leaves them to a quantizing
// dispatch, for measurements).
bool one_split_codes() { return knob_u32("ZINC_VULKAN_FA_CODES", 1, 0, 1) == 1; }

void check_args(const AttentionArgs& a) {
  if (a.n_head_kv == 0 || a.n_head % a.n_head_kv != 0) {
    throw Error(fmt::format("Vulkan attention: {} heads do not group over {} kv heads", a.n_head, a.n_head_kv));
  }
  if (a.head_dim == 0 || a.head_dim % 4 != 0 || a.head_dim > 512) {
    throw Error(fmt::format("Vulkan attention: head_dim {} is not a multiple of 4 up to 512", a.head_dim));
  }
  if (a.type == KvCacheType::Q8_0 && (a.n_head_kv * a.head_dim) % 32 != 0) {
    throw Error(fmt::format("Vulkan attention: a Q8_0 cache needs rows of whole blocks ({} elements)",
                            a.n_head_kv * a.head_dim));
  }
  if (a.n_tokens == 0) throw Error("Vulkan attention: no tokens");
}

const char* type_suffix(KvCacheType type) {
  switch (type) {
    case KvCacheType::F32: return "f32";
    case KvCacheType::F16: return "f16";
    case KvCacheType::Q8_0: return "q8_0";
  }
  return "f32";
}

}  // namespace

size_t kv_row_bytes(KvCacheType type, uint32_t kv_width) {
  switch (type) {
    case KvCacheType::F32: return size_t{4} * kv_width;
    case KvCacheType::F16: return size_t{2} * kv_width;
    case KvCacheType::Q8_0: return size_t{34} * (kv_width / 32);
  }
  return 0;
}

void kv_store(Context& ctx, Dispatcher& d, KvCacheType type, View k, View v, View k_cache, View v_cache, View step,
              uint32_t kv_width, uint32_t n_tokens) {
  uint32_t per = 1;
  if (type == KvCacheType::F16) per = 2;
  if (type == KvCacheType::Q8_0) per = 32;
  if (kv_width % per != 0)
    throw Error(fmt::format("Vulkan kv_store: kv_width {} is not a multiple of {}", kv_width, per));
  const Kernel& kern = ctx.pipeline(std::string("kv_store_") + type_suffix(type), 5, 12);
  const uint32_t n = n_tokens * kv_width / per;
  const uint32_t push[] = {kv_width, n, static_cast<uint32_t>(kv_row_bytes(type, kv_width))};
  const View bindings[] = {k, v, k_cache, v_cache, step};
  uint32_t gx = 0, gy = 0;
  grid(ctx, (n + 255) / 256, &gx, &gy);
  d.dispatch(kern, bindings, push, gx, gy);
}

bool rope_heads_fit(uint32_t head_dim, bool store, KvCacheType type) {
  return head_dim > 0 && head_dim % 2 == 0 && head_dim <= 512 && (!store || type != KvCacheType::Q8_0);
}

void rope_heads(Context& ctx, Dispatcher& d, const RopeHeadsArgs& a) {
  if (!rope_heads_fit(a.head_dim, a.store, a.type) || a.n_rot > a.head_dim) {
    throw Error(fmt::format("Vulkan rope_heads: heads of {} (rotating {}) with this cache are not supported", a.head_dim, a.n_rot));
  }
  if (a.n_head == 0 || a.n_tokens == 0) return;
  std::string name = a.norm ? "rope_heads_norm" : "rope_heads";
  if (a.store) name += a.type == KvCacheType::F16 ? "_store_f16" : "_store_f32";
  if (!a.norm && !a.store) name += "_plain";
  const Kernel& k = ctx.pipeline(name, 8, 24);
  struct {
    uint32_t head_dim, n_rot, neox, has_weight;
    float eps, offset;
  } push{a.head_dim, a.n_rot, a.neox ? 1u : 0u, a.norm_w.buffer ? 1u : 0u, a.eps, a.offset};
  const View unused = a.x;
  const View bindings[] = {a.x,
                           a.cs,
                           a.y,
                           a.norm_w.buffer ? a.norm_w : unused,
                           a.store ? a.v : unused,
                           a.store ? a.k_cache : a.y,
                           a.store ? a.v_cache : a.y,
                           a.store ? a.step : unused};
  d.dispatch(k, bindings, &push, a.n_head, a.n_tokens);
}

bool attention_uses_coopmat(const Context& ctx, const AttentionArgs& a) { return coop_attention(ctx, a); }

// 128 keys (four tiles of 32): H100, qwen3-30b-a3b, see bench/README.
uint32_t attention_one_keys() { return knob_u32("ZINC_VULKAN_FA_ONE_KEYS", 128, 0, 65536); }

uint32_t attention_keys_bound(uint32_t n_past, uint32_t n_tokens) {
  const uint32_t most = attention_one_keys();
  return n_tokens <= kFewTokens && n_past + n_tokens <= most ? most : 0;
}

uint32_t attention_splits(const Context& ctx, const AttentionArgs& a) {
  check_args(a);
  return coop_attention(ctx, a) ? 1 : make_plan(ctx.features(), a).n_split;
}

size_t attention_scratch_bytes(uint32_t n_split, uint32_t n_head, uint32_t head_dim, uint32_t n_tokens) {
  if (n_split <= 1) return 0;
  return size_t{4} * n_split * n_tokens * n_head * (head_dim + 2);
}

size_t attention_scratch_bytes(const Context& ctx, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                               uint32_t max_tokens, uint32_t n_ctx) {
  AttentionArgs a;
  a.n_head = n_head;
  a.n_head_kv = n_head_kv;
  a.head_dim = head_dim;
  a.n_tokens = 1;
  a.n_ctx = n_ctx;
  check_args(a);
  size_t most = 0;
  for (uint32_t n = 1; n <= max_tokens; ++n) {
    a.n_tokens = n;
    most = std::max(most, attention_scratch_bytes(make_plan(ctx.features(), a).n_split, n_head, head_dim, n));
  }
  return most;
}

bool attention_q8_fits(const Context& ctx, const AttentionArgs& a) {
  check_args(a);
  return !a.xq.buffer && a.phase == 0 && a.q8_format <= 1 && a.head_dim % 32 == 0 && ctx.features().subgroup_size >= 8 &&
         !coop_attention(ctx, a) && (make_plan(ctx.features(), a).n_split > 1 || one_split_codes());
}

bool attention_q8k_fits(const Context& ctx, uint32_t n_head, uint32_t head_dim) {
  return (n_head * head_dim) % 256 == 0 && ctx.features().subgroup_size >= 4;
}

void attention(Context& ctx, Dispatcher& d, const AttentionArgs& a) {
  check_args(a);
  if (a.xq.buffer && !attention_q8k_fits(ctx, a.n_head, a.head_dim)) {
    throw Error(fmt::format("Vulkan attention: no Q8_K output for rows of {} on this device", a.n_head * a.head_dim));
  }
  if (a.xq.buffer && a.n_tokens > kMaxGroupsYZ) throw Error("Vulkan attention: too many tokens for a Q8_K output");
  if (a.phase > 2 || (a.phase > 0 && a.xq.buffer)) throw Error("Vulkan attention: a phase is 0, 1 or 2, without Q8_K output");
  if (a.q8.buffer && !attention_q8_fits(ctx, a)) throw Error("Vulkan attention: no activation codes of its output here");
  // Both kernels' push constants (n_split set below). Absent bindings are bound to q (never read or written).
  const uint32_t kv_width = a.n_head_kv * a.head_dim;
  struct {
    uint32_t n_tokens, n_head, n_head_kv, kv_width, row_bytes, window, n_split, has_sinks;
    float scale, softcap;
    uint32_t q8k_stride, one_keys, q8_words, q8_format;
  } push{a.n_tokens, a.n_head, a.n_head_kv, kv_width, static_cast<uint32_t>(kv_row_bytes(a.type, kv_width)),
         a.sliding_window, 1, a.sinks.buffer ? 1u : 0u, a.scale, a.softcap, 0, 0, 0, a.q8_format};
  const View sinks = a.sinks.buffer ? a.sinks : a.q;
  if (coop_attention(ctx, a)) {
    const uint32_t blocks = (a.n_tokens * (a.n_head / a.n_head_kv) + kCoopRows - 1) / kCoopRows;
    if (blocks > kMaxGroupsYZ) throw Error(fmt::format("Vulkan attention: {} tokens need {} row blocks", a.n_tokens, blocks));
    const uint32_t spec[] = {a.head_dim};
    const View bindings[] = {a.q, a.k_cache, a.v_cache, sinks, a.step, a.out, a.q};
    if (a.phase != 2) d.dispatch(ctx.pipeline("attention_coopmat", 7, sizeof(push), spec), bindings, &push, 1, blocks, a.n_head_kv);
    if (!a.xq.buffer) return;
    d.barrier();
    quantize_q8k(ctx, d, a.out, a.xq, a.n_head * a.head_dim, a.n_tokens);
    return;
  }
  const AttentionPlan p = make_plan(ctx.features(), a);
  if (p.n_blk > ctx.features().max_groups_x) {
    throw Error(
        fmt::format("Vulkan attention: {} tokens need {} row blocks, over the device's limit", a.n_tokens, p.n_blk));
  }
  const uint32_t spec[] = {p.hd, p.nr, p.tk, p.dc, p.nkt, p.cv, p.nvr, p.vb};
  const Kernel& k = ctx.pipeline(std::string("attention_") + type_suffix(a.type), 8, sizeof(push), spec);
  const uint32_t width = a.n_head * a.head_dim;
  // One split writes its own Q8_K codes where its workgroups' rows are whole heads of one token making
  // whole blocks (decode's GQA groups of 2 or more heads of 128; ZINC_VULKAN_FA_CODES=0 leaves them to
  // quantize_q8k, for measuring).
  const uint32_t group = a.n_head / a.n_head_kv, sg = ctx.features().subgroup_size;
  const bool codes = a.xq.buffer && p.n_split == 1 && group % p.nr == 0 && p.nr * p.hd % 256 == 0 && sg <= 64 &&
                     one_split_codes();
  if (codes) push.q8k_stride = static_cast<uint32_t>(q8k_row_bytes(width) / 4);
  // Or the 32-element formats' codes (attention_q8_fits promised them): any rows, heads of 32s.
  const bool q8_codes = a.q8.buffer && p.n_split == 1;
  if (q8_codes) push.q8_words = static_cast<uint32_t>(mul_mv_q8_bytes(width) / 4);
  push.n_split = p.n_split;
  if (p.n_split > 1) push.one_keys = one_keys(p, a);
  const View scratch = p.n_split > 1 ? a.scratch : a.q;
  if (p.n_split > 1) {
    const size_t need = attention_scratch_bytes(p.n_split, a.n_head, a.head_dim, a.n_tokens);
    const size_t have = !a.scratch.buffer ? 0
                        : a.scratch.bytes ? a.scratch.bytes
                                          : a.scratch.buffer->size - a.scratch.offset;
    if (have < need) {
      throw Error(fmt::format("Vulkan attention: {} key-range splits need {} bytes of scratch, given {}", p.n_split,
                              need, have));
    }
  }
  const View bindings[] = {a.q, a.k_cache, a.v_cache, sinks, a.step, a.out, scratch, codes ? a.xq : q8_codes ? a.q8 : a.q};
  if (a.phase != 2) d.dispatch(k, bindings, &push, p.n_split, p.n_blk, a.n_head_kv);
  if (p.n_split == 1) {
    if (!a.xq.buffer || codes) return;
    d.barrier();
    quantize_q8k(ctx, d, a.out, a.xq, width, a.n_tokens);
    return;
  }
  if (a.phase == 1) return;
  if (a.phase == 0) d.barrier();
  const uint32_t n_rows = a.n_tokens * a.n_head;
  const uint32_t rpush[] = {p.n_split,
                            n_rows,
                            a.n_head,
                            a.head_dim,
                            a.sinks.buffer ? 1u : 0u,
                            static_cast<uint32_t>(q8k_row_bytes(width) / 4),
                            a.q8.buffer ? static_cast<uint32_t>(mul_mv_q8_bytes(width) / 4) : 0u,
                            a.q8_format,
                            group % p.nr == 0 ? p.tk : 0u,  // blocks of one token's rows: its empty splits skipped
                            a.sliding_window};
  if (a.xq.buffer) {
    const View rbind[] = {a.scratch, sinks, a.out, a.xq, a.step};
    // Eight groups of 64 over the splits where subgroups of 8 or more keep q8k_write_block's maxima
    // within its 64 slots (H200, 30b at depth 4,096 with 128 splits: 16 groups no faster), else four.
    const Features& f = ctx.features();
    const uint32_t wg = f.subgroup_size >= 8 && f.max_invocations >= 512 ? 512 : 256;
    const uint32_t rspec[] = {wg};
    d.dispatch(ctx.pipeline("attention_reduce_q8k", 5, sizeof(rpush), rspec), rbind, rpush, width / 256, a.n_tokens);
    return;
  }
  const View rbind[] = {a.scratch, sinks, a.out, a.q8.buffer ? a.q8 : a.out, a.step};
  uint32_t gx = 0, gy = 0;
  grid(ctx, n_rows, &gx, &gy);
  d.dispatch(ctx.pipeline("attention_reduce_rows", 5, sizeof(rpush)), rbind, rpush, gx, gy);
}

}  // namespace zinc::backend::vk
