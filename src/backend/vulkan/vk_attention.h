// Launchers of graph Op::Attention on Vulkan: the KV-cache append (kv_store) and causal attention over
// the cache (attention: one kernel for decode and prefill, flash-decoding splits merged by a second
// dispatch). Both read n_past and the sequence's block table on the device from the executor's step
// buffer, so a recorded step stays valid as the sequence grows; everything else is fixed at record time.
//
// Per layer the cache is two buffers, K and V, of rows of kv_width = n_head_kv * head_dim elements in
// one KvCacheType, laid out as the GGUF type of the same name (kv_row_bytes per row), in blocks of 32
// rows that sequences hold through block tables (backend/exec_common.h's KvBlocks): position i of the
// part's sequence is row table[i / 32] * 32 + i % 32, the table being words 4.. of `step` (after
// n_past and n_tokens; shaders/vulkan/kv_rows.glsl). The kernels address the caches in 32-bit words,
// so a cache view's size must be a multiple of 4 bytes (Q8_0 rows of an odd number of blocks are
// not: round the view up).
//
// Device requirements: subgroup basic, arithmetic and shuffle operations in compute shaders, and
// 128-invocation workgroups made of full subgroups (any subgroup size); up to ~39 KB of shared memory
// where the device has 48 KB (the plan shrinks its tiles to fit less).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/vulkan/vk_context.h"

namespace zinc::backend::vk {

enum class KvCacheType { F32, F16, Q8_0 };

// Bytes of one cache row of kv_width elements (Q8_0: kv_width % 32 == 0).
size_t kv_row_bytes(KvCacheType type, uint32_t kv_width);

// Writes the step's k and v rows (floats [n_tokens][kv_width]) as positions n_past + t, n_past being
// word 0 of `step` (the rows its block table names). F16 needs an even kv_width, Q8_0 a multiple of 32 (quantized as quant::q_q8_0).
void kv_store(Context& ctx, Dispatcher& d, KvCacheType type, View k, View v, View k_cache, View v_cache, View step,
              uint32_t kv_width, uint32_t n_tokens);

// Rotary embedding of whole heads (rope_heads.comp; the rotation of vk::rope) with what precedes and
// follows it in decode fused in: the per-head RMSNorm of Qwen3's and Gemma's q and k (norm; norm_w may
// be empty: no weight), and for k the cache append of the rotated rows and the step's v, as kv_store
// writes them (store; F16 and F32 caches). x, y [n_tokens][n_head * head_dim]; v [n_tokens][same].
struct RopeHeadsArgs {
  View x, cs, y;  // cs: the host's [n_tokens][n_rot] cos/sin table
  uint32_t n_head = 0, head_dim = 0, n_rot = 0, n_tokens = 0;
  bool neox = false;
  bool norm = false;
  View norm_w;
  float eps = 0, offset = 0;
  bool store = false;
  KvCacheType type = KvCacheType::F16;
  View v, k_cache, v_cache, step;
};
// Whether rope_heads takes heads of head_dim (even, at most 512) and, storing, this cache type.
bool rope_heads_fit(uint32_t head_dim, bool store, KvCacheType type);
void rope_heads(Context& ctx, Dispatcher& d, const RopeHeadsArgs& a);

struct AttentionArgs {
  KvCacheType type = KvCacheType::F16;
  View q;                 // (n_tokens, n_head * head_dim) floats
  View k_cache, v_cache;  // rows of kv_width in `type`, positions [0, n_past + n_tokens) written
  View sinks;             // (n_head) float logits, or buffer == nullptr: none
  View step;              // uint n_past at word 0, the block table from word 4
  View out;               // (n_tokens, n_head * head_dim) floats
  View scratch;           // attention_scratch_bytes(...) bytes; unused (may be empty) when that is 0
  View xq;                // out's rows as Q8_K codes too (vk::quantize_q8k's layout), or empty: not
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;  // head_dim: a multiple of 4, at most 512
  uint32_t n_tokens = 0;
  uint32_t n_ctx = 0;            // the sequence's context (n_past + n_tokens <= n_ctx at run time)
  uint32_t sliding_window = 0;   // 0: full causal
  float scale = 1, softcap = 0;  // softcap 0: none
  uint32_t n_split = 0;          // key-range splits; 0: chosen from the sizes (what the scratch size assumes)
  // A bound the caller knows on every row's keys at run time (from its first key's cache block to its
  // own), or 0: none. With automatic splits, a bound within attention_one_keys() records one split.
  uint32_t max_keys = 0;
  // 0: the whole op. Several attentions recorded side by side (one per sequence of a step, each with
  // its own scratch) share one barrier: 1 records each one's key-range pass, then after a barrier 2
  // records each one's merge of its splits (nothing where it has one split). No Q8_K output then.
  uint32_t phase = 0;
  // out's rows as the 32-element formats' activation codes too (quantize_q8_act's bytes in q8_format,
  // q8_act_format's), where attention_q8_fits; else empty.
  View q8;
  uint32_t q8_format = 0;
};

// Whether attention() writes q8 for these arguments (q8 and q8_format aside): heads of a multiple of
// 32, no Q8_K output, the whole op, not the tensor-core kernel; the merge of the key range's splits
// writes them, or one split itself (unless ZINC_VULKAN_FA_CODES=0).
bool attention_q8_fits(const Context& ctx, const AttentionArgs& a);

// Splits attention() uses for these sizes (n_split = 0: its own choice) and the scratch they need:
// n_split * n_tokens * n_head * (head_dim + 2) floats when n_split > 1, else nothing.
uint32_t attention_splits(const Context& ctx, const AttentionArgs& a);
// Whether attention() takes the tensor-core prompt kernel for these arguments (attention_coopmat.comp:
// an F16 cache, heads of 64 or 128, more than 8 tokens, automatic splits, a cooperative-matrix device):
// it rounds q and the softmax weights to f16.
bool attention_uses_coopmat(const Context& ctx, const AttentionArgs& a);
size_t attention_scratch_bytes(uint32_t n_split, uint32_t n_head, uint32_t head_dim, uint32_t n_tokens);
// The most scratch any attention() call with n_tokens <= max_tokens (and automatic splits) needs: the
// executor allocates this once per model.
size_t attention_scratch_bytes(const Context& ctx, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                               uint32_t max_tokens, uint32_t n_ctx);

// With automatic splits, decode-sized steps (up to 8 tokens) compute each row whose keys (from its
// first key's cache block) are at most this many as one split computes it, whatever the split count
// recorded (ZINC_VULKAN_FA_ONE_KEYS; 0: never): where AttentionArgs::max_keys is within it, the step
// records one split and no merge.
uint32_t attention_one_keys();
// The bound to give AttentionArgs::max_keys for a step of n_tokens from n_past that every replay of
// its recording shares (its rows within attention_one_keys()), or 0: none.
uint32_t attention_keys_bound(uint32_t n_past, uint32_t n_tokens);

// Whether attention() can write Q8_K codes of its output (rows of n_head * head_dim, a multiple of 256).
bool attention_q8k_fits(const Context& ctx, uint32_t n_head, uint32_t head_dim);

// Causal attention of q over the cache (graph Op::Attention after kv_store): out rows as q's, each head
// the softmax-weighted sum of its kv head's V rows. Records one dispatch, or two (with a barrier
// between) when the key range is split; with xq the merge of the splits writes the codes, and one
// split writes them itself where its rows make whole blocks (else one more dispatch does).
void attention(Context& ctx, Dispatcher& d, const AttentionArgs& a);

}  // namespace zinc::backend::vk
