// The CUDA backend's kernels, as host functions that launch them on a stream (cuda_kernels.cu,
// cuda_attention.cu, cuda_products.cu, cuda_codes.cu and cuda_recurrent.cu, built by nvcc).
// Activations are float rows; weights are the GGUF blocks as stored, decoded eight elements at a time
// inside the products (every weight type the CPU reads for products, listed in kWeightTypes).
// Every launcher returns at once; errors surface through check() after the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;

namespace zinc::backend::cuda {

using Stream = CUstream_st*;  // cudaStream_t

// The weight types the kernels decode, by their GGUF numbers (cuda_backend.cpp checks them against
// gguf::TensorType).
enum WeightType : int {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11, kQ4_K = 12,
  kQ5_K = 13, kQ6_K = 14, kIQ4_NL = 20, kIQ4_XS = 23, kBF16 = 30, kMXFP4 = 39,
};
bool weight_type_supported(int type);

// "" when the last launches succeeded, else the CUDA error's text (and the error is cleared).
std::string last_error();
// The decode kernels (products against codes, norms, rotations, the cache append, attention) launched
// so that each may start while the previous kernel of its stream finishes (sm_90 and later; streams
// other than the default one). On unless turned off.
void set_programmatic_launch(bool on);
// Prompt products of the int8_tiles() types against the activations' 8-bit codes on integer tensor
// cores (as decode computes them), rather than against f16-rounded activations on f16 tensor cores.
// On unless turned off.
void set_int8_prompts(bool on);
// Prompt products of float weights: tiles of 64 x 64, or of 32 x 32 where those would be fewer than
// 128 (the same sums); tests choose either (32 or 64; 0: by the shape).
void set_float_tiles(int rows);

// out[t] = row ids[t] of w, times scale. width: a multiple of 32.
void embed(Stream s, int type, const void* w, size_t row_bytes, const int32_t* ids, int64_t width, int n, float scale,
           float* out);

// out[t][r] = w_r · x[t] (+ bias[r]) for rows r < rows, tokens t < n. cols: a multiple of 32.
// With q8 (scratch of q8_bytes(n, cols)), the types uses_codes() names take the activations' 8-bit
// codes, as the CPU computes them (Q8_K: integer dot products per sub-block): up to kCodesTokens rows
// (decode of several sequences, short prompts), and any n for the int8_tiles() types (prompts on
// integer tensor cores); otherwise against the float32 activations.
// q8_ready: q8 already holds these activations' codes (the previous product read the same rows).
void mul_mat(Stream s, int type, const void* w, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
             int64_t x_stride, int n, float* out, int64_t out_stride, const float* bias, void* q8 = nullptr,
             bool q8_ready = false);
bool uses_codes(int type);   // Q4_K, Q5_K, Q6_K
// The most rows mul_mat_codes takes; from set_codes_mma_min's rows on, on integer tensor cores, fewer
// with packed dot products (0, the default: from 3 rows, or 5 when every product is Q6_K; tests and
// measurements choose either). Up to 112 rows they cost less than the prompt tiles, whose block costs
// the same whatever its tokens (qwen3-8b Q4_K_M on an H200, tok/s, tiles -> these: pp72 3791 -> 5305,
// pp96 5715 -> 6624, pp112 6902 -> 7273; qwen3-30b-a3b pp72 11593 -> 15936; pp128 the tiles' 7.9k).
constexpr int kCodesTokens = 112;
// The rows of a step past which its cost per row jumps (few_rows()): the products of few rows take 33
// to 64 tokens in two groups of 32 a warp, more in three or four (qwen3-8b on an H200: a step of 64 rows
// 9.8 ms, of 72 rows 13.6).
constexpr int kFewStepRows = 64;
void set_codes_mma_min(int n);
// Measurements: the groups of 8 tokens each warp of the tensor-core path takes (1, 2 or 4; others: by
// the rows, up to 8 one group of 8, up to 16 two, more four).
void set_codes_mma_groups(int groups);
// And the tiles of 16 rows each warp takes, without an activation (1 or 2; others: two with 32 tokens a
// warp, else one).
void set_codes_mma_tiles(int tiles);
// And whether the tensor cores' activation codes are staged in shared memory (on by default).
void set_codes_mma_stage(bool on);
// And whether its weights are copied into shared memory a super-block ahead of their use: 0 never, 1
// (the default) where measured faster, 2 wherever a block holds them (tests).
void set_codes_mma_weights_stage(int mode);
// And whether gate and up at 16 tokens a warp (at 8, grouped by expert) are held to fewer registers
// (more warps resident): 0 never, 1 (the default) where measured faster, 2 always (tests).
void set_codes_mma_glu_capped(int mode);
// And, for up to kSameRows tokens, each warp's streams of a row's super-blocks (1, 2 or 4; others: by
// the shapes): the rest of the one-token shape's streams taken by more warps a tile.
void set_codes_mma_streams(int streams);
bool int8_tiles(int type);   // Q4_K, Q5_K, Q6_K
// Whether a product of `type` over n rows takes the prompt tiles against codes: an int8_tiles() type,
// more than kCodesTokens and at most 65535 rows, unless set_int8_prompts(false).
bool prompt_tiles(int type, int64_t n);
// Measurements: the fewest rows prompt_tiles() takes (0: kCodesTokens + 1, the default).
void set_prompt_tiles_min(int n);
// Scratch for the prompt tiles of products with too few tiles to fill the GPU (short prompts; rows few
// or many columns): their super-blocks split over several blocks whose sums are added in a fixed order.
// `bytes` (kSplitBytes) of device memory and `counters` (kSplitCounters) zeroed unsigned counters;
// per launching thread (a context sets its own before its launches); none: no split.
struct SplitScratch {
  void* part = nullptr;
  size_t bytes = 0;
  unsigned* count = nullptr;
  int64_t counters = 0;
};
constexpr size_t kSplitBytes = size_t{32} << 20;
constexpr int64_t kSplitCounters = 4096;
void set_split_scratch(const SplitScratch& scratch);
// Measurements and tests: 1 never split, 2/4/8/16 always that many parts (where the scratch holds them),
// other: by the shape (the default).
void set_split_ways(int ways);
// Codes [n][cols], a scale per 256 and a sum per 32 of them.
inline size_t q8_bytes(int64_t n, int64_t cols) { return static_cast<size_t>(n * cols + n * (cols / 256) * 4 + 16 + n * (cols / 32) * 2); }
// The codes of `rows` rows of x (row r from row r / x_div of x, x_stride floats apart) into q8.
void quantize_codes(Stream s, const float* x, int64_t x_stride, int x_div, int64_t cols, int rows, void* q8);
// Products of up to four weights (three for a prompt) of uses_codes() types and cols columns over the same
// n <= kCodesTokens rows of x (or, with ids, n expert slots, row t of x at t / x_div, each slot's rows
// from expert ids[t]), in one launch; each product's rows [first, first + rows) written to out (out_stride apart) with its
// bias. With glu, two products (gate, up) of the same rows combined, act(gate) * up, into the first's
// out. split (warps per row group) and rows_per_warp: 0 chooses (measuring only). More rows (a prompt,
// up to 65535; without ids, glu or first; int8_tiles() types): the prompt tiles, every product's in one
// launch.
enum class Glu : int { None, SwiGLU, GeGLU };
// A mixture's gate and up (First) and its down (Second) launched one after the other: the first lets
// the second start only once each of its blocks has waited on the routing, so the second may read its
// experts' ids and send their rows to L2 before it waits on the first (a second that forms its codes in
// each block, else it waits first as usual).
enum class Chain : int { None, First, Second };
struct Product {
  int type = 0;
  const void* w = nullptr;
  size_t row_bytes = 0, expert_bytes = 0;
  int64_t first = 0, rows = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  const float* bias = nullptr;
  int64_t bias_stride = 0;
};
void mul_mat_codes(Stream s, const Product* p, int count, int64_t cols, const float* x, int64_t x_stride, int x_div,
                   const int32_t* ids, int n, void* q8, bool q8_ready, Glu glu = Glu::None, int split = 0,
                   int rows_per_warp = 0, Chain chain = Chain::None);
// More than kSameRows and at most kCodesTokens rows of one input (x_div 1, no ids, Q4_K, Q5_K and Q6_K;
// up to three products, or gate and up with their activation): mul_mat_codes takes mul_mat_codes_wide
// where it measured faster, blocks of 64 tokens sharing each super-block's codes over 64 weight rows (of
// 32 tokens over 128 rows for up to 32 rows; cuda_codes_wide.cu), unless set_codes_wide(0).
// Measurements: 2 and 3 force one or two groups of warps a block (splitting the super-blocks), 1 (the
// default) chooses by the shape.
void set_codes_wide(int mode);
bool wide_products(const Product* p, int count, int64_t cols, int n, int x_div, Glu glu);
void mul_mat_codes_wide(Stream s, const Product* p, int count, int64_t cols, void* q8, int n, Glu glu);
// Whether mul_mat_id of slots each of its own row (x_div 1, ids, up to kCodesTokens) leaves q8 as it was.
bool slot_products_keep_codes(int type, int64_t cols);
// The prompt tiles of up to three int8_tiles() products against the codes of n > kCodesTokens rows in q8.
void mul_mm_codes_tiles(Stream s, const Product* p, int count, int64_t cols, void* q8, int n);
// Expert slots grouped by expert (order and offsets as moe_group writes them; each expert has at most
// per_expert slots): products of uses_codes() weights against the codes of the slots' rows (row t of x
// at t / x_div), each expert's rows read once per group of 8 of its slots on integer tensor cores;
// otherwise as mul_mat_codes with ids (Product::expert_bytes, bias_stride; with glu, gate and up).
void grouped_mul_mat_codes(Stream s, const Product* p, int count, int64_t cols, const float* x, int64_t x_stride, int x_div,
                           const int32_t* order, const int32_t* offsets, int n_expert, int per_expert, int slots, void* q8,
                           bool q8_ready, Glu glu = Glu::None);
// The same with a weight matrix per row of the output: out[i] = W_{ids[i]} rows [first, first + rows) ·
// x[i / x_div] (+ bias[ids[i] * bias_stride + r]); expert e's rows start at e * expert_bytes. With
// x_div 1 and at most 1024 columns (a mixture's down) the codes are formed in each block and q8 is
// left as it was: no later product may take them as ready.
void mul_mat_id(Stream s, int type, const void* w, size_t row_bytes, size_t expert_bytes, int64_t first, int64_t rows,
                int64_t cols, const float* x, int64_t x_stride, int x_div, const int32_t* ids, int n, float* out,
                int64_t out_stride, const float* bias, int64_t bias_stride, void* q8 = nullptr, bool q8_ready = false,
                Chain chain = Chain::None);

// x / sqrt(mean(x^2) + eps) * (w + offset) over groups of `group` of each row of `width`; w: group floats or null.
void rms_norm(Stream s, const float* x, const float* w, float* out, int64_t width, int64_t group, int n, float eps,
              float offset);
// Rotation of the first n_rot dims of each head by the rows' (cos, sin) tables (n_rot floats per row).
// Rows of width add_rms_norm_fits() takes: h = a + b (b may be null) written to sum (may be null),
// out = rms_norm(h) * (w + offset) (w may be null), and with q8 the activation codes of out (as
// mul_mat reads them for n <= 8 rows). With moe_y, b is instead a mixture's weighted sum of its k slots'
// rows as moe_combine forms it (row t: sum over i < moe_k of moe_w[t k + i] * moe_y[t k + i]), plus
// with sh a shared expert's rows times the sigmoid of their gate as sigmoid_mul forms them (sh_g: sh_gw
// floats a row, 1 or width), added to the mixture's sum before a is.
bool add_rms_norm_fits(int64_t width);
void add_rms_norm(Stream s, const float* a, const float* b, float* sum, const float* w, float* out, int64_t width, int n,
                  float eps, float offset, void* q8, const float* moe_y = nullptr, const float* moe_w = nullptr, int moe_k = 0,
                  const float* sh = nullptr, const float* sh_g = nullptr, int64_t sh_gw = 1);
// Rows of a multiple of 256 columns, normalised over groups of `group` (norm_glu_fits: 8 to 256, a
// power of two) as rms_norm does, then through the gated activation with z: out = act(h) z
// (act_first) or act(z) h, act SiLU or (gelu) GELU as elementwise's SwiGLU and GeGLU; with q8, the
// activation codes of out as add_rms_norm writes them.
bool norm_glu_fits(int64_t width, int64_t group);
void norm_glu(Stream s, const float* x, const float* w, const float* z, float* out, int64_t width, int64_t group, int n, float eps,
              float offset, bool gelu, bool act_first, void* q8);
void rope(Stream s, const float* x, float* out, const float* cs, int n, int n_head, int head_dim, int n_rot, bool neox);
// The heads of one or two activations of n rows (q and k) in one launch, each optionally normalised per
// head (x / rms(head) * (w + offset)) and then rotated by the table cs (as rope takes it). head_dim at
// most 1024.
struct HeadsPart {
  const float* in = nullptr;
  float* out = nullptr;
  int n_head = 0;
  bool norm = false;
  const float* w = nullptr;
  float eps = 0, offset = 0;
};
struct HeadsArgs {
  HeadsPart part[2];
  int nparts = 1;
  int head_dim = 0, n_rot = 0;
  bool neox = false;
  const float* cs = nullptr;
  // With kc (F32 or F16 caches): the second part's results (k) and v's v_heads heads (rows of
  // v_heads * head_dim) also stored at cache row slots[t] of kc and vc, as kv_append stores them.
  uint8_t *kc = nullptr, *vc = nullptr;
  const float* v = nullptr;
  int v_heads = 0;
  const int32_t* slots = nullptr;
  size_t row_bytes = 0;
  int kv_type = 0;
};
void heads_norm_rope(Stream s, const HeadsArgs& a, int n);

enum class Elementwise : int { Add, Mul, SwiGLU, GeGLU, SwiGLUClamped };
// out[i] = f(a[i], b[i]) over n elements (SwiGLUClamped: alpha, limit).
void elementwise(Stream s, Elementwise op, const float* a, const float* b, float* out, int64_t n, float alpha = 0,
                 float limit = 0);
void softcap(Stream s, const float* x, float* out, int64_t n, float cap);
// out = a * sigmoid(b): b as wide as a (bw = width) or one value per row (bw = 1).
void sigmoid_mul(Stream s, const float* a, const float* b, float* out, int64_t width, int64_t bw, int n);
// out = x * w: w of width floats, or one (one = true).
void scale(Stream s, const float* x, const float* w, bool one, float* out, int64_t width, int n);
// Columns [at, at + width) of rows of in_width go to rows of out_width from column out_at, for n rows;
// with groups > 1, `groups` pieces of width each from columns g * stride + at of the input.
void copy_cols(Stream s, const float* x, int64_t in_width, int64_t at, int64_t stride, int groups, float* out,
               int64_t out_width, int64_t out_at, int64_t width, int n);
// out[i] = x[rows[i]] (rows of width floats).
void gather_rows(Stream s, const float* x, const int32_t* rows, int64_t width, int n, float* out);
// out[r] = the index of the largest of row r's width values (the first on ties; NaN never taken, -1
// for a row of NaN only), for n rows. scratch: argmax_scratch_bytes(n) bytes, zero before the first
// launch (each launch leaves them zero).
size_t argmax_scratch_bytes(int n);
void argmax_rows(Stream s, const float* x, int64_t width, int n, int32_t* out, void* scratch);

// Copies n runs of bytes, each where runs[i] (on the device) says (a sequence's cache blocks moved
// between two contexts).
struct CopyRun {
  const void* from;
  void* to;
  uint64_t bytes;
};
void copy_runs(Stream s, const CopyRun* runs, int n);

// The KV cache: rows of kv_width elements of type kv_type (F32, F16, Q8_0) at cache rows slots[t].
void kv_append(Stream s, int kv_type, const float* k, const float* v, int64_t kv_width, int n, const int32_t* slots,
               size_t row_bytes, void* kc, void* vc);
// Causal attention of every row's query heads over its sequence's cache: row t at position pos[t] sees
// positions [max(0, pos - window + 1), pos] (window 0: from 0), found through tables + table_at[t]
// (block of kKvBlock rows per entry).
struct AttentionArgs {
  const float* q = nullptr;
  int64_t q_stride = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  int kv_type = 0;
  size_t row_bytes = 0;
  int n = 0;
  const int32_t* pos = nullptr;
  const int32_t* table_at = nullptr;
  const int32_t* tables = nullptr;
  int n_head = 0, n_head_kv = 0, head_dim = 0, window = 0;
  float scale = 1, softcap = 0;
  const float* sinks = nullptr;
  float* out = nullptr;
  // Heads of 64, 128, 256 or 512: each row's keys in `splits` parts on as many blocks, merged by the
  // last to finish through part (n * n_head * splits * (head_dim + 4) floats) and count (n * n_head,
  // zero before, zero after).
  // A part takes at least part_keys keys (0: the kernel's least, 64; decode_attention_part_keys).
  int splits = 1, part_keys = 0;
  float* part = nullptr;
  unsigned* count = nullptr;
  // With codes (attention_codes_fit): the output rows' 8-bit activation codes too, laid out as
  // quantize_codes lays out n rows of n_head * head_dim columns.
  void* codes = nullptr;
  // With pre.nparts == 2 (attention_forms_heads; heads of 64, 128 or 256): q and k as their products
  // wrote them, before their per-head norms and rotation (pre as heads_norm_rope takes it, with kc):
  // each block forms its query heads itself (q, q_stride: pre.part[0]'s input), and the blocks holding
  // a row's newest key form its key head and store it and its value head at cache row pre.slots[r]
  // before reading the keys; heads_norm_rope's launch then gone.
  HeadsArgs pre;
};
// Whether attention() forms the codes of its output (AttentionArgs::codes) for these heads: each block
// of a decode launch holds whole super-blocks of 256 of a row.
bool attention_codes_fit(int head_dim, int n_head, int n_head_kv);
// Whether the decode attention forms the heads and stores the cache rows itself (AttentionArgs::pre):
// F32 or F16 caches, heads of 64, 128 or 256, and each lane's elements of a head one side of a rotated
// pair's halves.
bool attention_forms_heads(int kv_type, int head_dim, int n_rot, bool neox);
inline constexpr int kMaxAttentionSplits = 32;
// Steps of up to this many rows (a speculative step's next token and drafts, a few sequences'
// decode) give each row the arithmetic of a step of that row alone, bit for bit: attention splits a
// row's keys by one row's rule (decode_attention_splits) and the products sum a row in the same order
// whatever the step's other rows. Otherwise a greedy text would change with where drafting happened
// (which the automatic mode decides by timing) or with the other requests a server is decoding.
inline constexpr int kSameRows = 8;
inline constexpr int kKvBlock = 32;
void attention(Stream s, const AttentionArgs& a);
// The parts that fill the GPU (sms multiprocessors) twice with decode blocks for n rows, rounded down
// (one wave); each part of at least decode_attention_part_keys(n) keys (AttentionArgs::part_keys).
// Steps of up to kSameRows rows take one row's parts: a row's keys are split, and its parts merged,
// as in a step of that row alone.
int decode_attention_splits(int n, int n_head, int n_head_kv, int head_dim, int sms);
int decode_attention_part_keys(int n);
// The same for rows of one sequence (every row's table that of row 0) on tensor cores, f16 products
// with float32 sums and softmax: F16 and Q8_0 caches, heads of 64 or 128 (flash_attention_fits).
// With part given and splits > 1, the keys in `splits` parts on as many blocks, merged by a second
// launch through part (n * n_head * splits * (head_dim + 2) floats; count unused).
bool flash_attention_fits(int kv_type, int head_dim);
void flash_attention(Stream s, const AttentionArgs& a);
// The parts for n rows of n_head heads on sms multiprocessors: one where the row tiles fill the GPU
// once already; else enough blocks to fill it about four times over, at most kMaxFlashSplits and
// n * splits <= kFlashPartRows (the scratch decode's splits use: 32 rows x kMaxAttentionSplits).
inline constexpr int kMaxFlashSplits = 16, kFlashPartRows = 32 * kMaxAttentionSplits;
int flash_splits(int n, int n_head, int sms);

// Mixture of experts: per token, the routing (softmax then top k, or top k then softmax; optional
// renormalisation, router bias, logit scale and per-expert scale) into ids and weights [n][k], the k
// slots in increasing expert order; then the weighted sum of the k slots' rows of y per token.
void moe_route(Stream s, float* logits, int n, int n_expert, int k, bool topk_first, bool norm, float logit_scale,
               const float* router_b, const float* expert_scale, int32_t* ids, float* weights);
void moe_combine(Stream s, const float* y, const float* weights, int n, int k, int64_t d, float* out);
// The router's product (float32 weights [n_expert][d] times x's n rows into logits) and moe_route's
// routing in one launch, for the types and shapes moe_router_fits() takes; count: n counters, zero
// before the launch and left zero. With w2 (d float32 weights, such as a shared expert's gate), the
// same launch also writes its product with each row to out2 (n floats).
bool moe_router_fits(int type, int64_t d, int n_expert);
void moe_router(Stream s, const float* w, const float* x, int64_t d, int n, unsigned* count, float* logits, int n_expert, int k,
                bool topk_first, bool norm, float logit_scale, const float* router_b, const float* expert_scale, int32_t* ids,
                float* weights, const float* w2 = nullptr, float* out2 = nullptr);
// A mixture's prompt grouped by expert: the slots (ids: each slot's expert, slots of them) sorted by
// expert into order, expert e's at order[offsets[e] .. offsets[e + 1]) (n_expert at most 1024).
void moe_group(Stream s, const int32_t* ids, int slots, int n_expert, int32_t* order, int32_t* offsets);
// Then one tiled product per expert over its slots (quantized types, grouped_mul_mat_supported):
// for every slot i of expert e, out row i (out_stride apart) = rows [first, first + rows) of expert e
// (expert_bytes apart) . x row i / x_div, plus that expert's bias row (bias_stride apart). Each
// expert's weights are read once per tile of 64 of its slots. With q8 (q8_bytes(slots, cols)), the
// int8_tiles() types against the slots' 8-bit codes on integer tensor cores (q8_ready as mul_mat's).
bool grouped_mul_mat_supported(int type);
void grouped_mul_mat(Stream s, int type, const void* w, size_t row_bytes, size_t expert_bytes, int64_t first, int64_t rows,
                     int64_t cols, const float* x, int64_t x_stride, int x_div, const int32_t* order, const int32_t* offsets,
                     int n_expert, int slots, float* out, int64_t out_stride, const float* bias, int64_t bias_stride,
                     void* q8 = nullptr, bool q8_ready = false);

// Causal depthwise convolution then SiLU over n tokens of one sequence; state: its kernel - 1 rows
// of earlier inputs (oldest first), updated. With kept, the state after each token t is also written
// to kept + t * kept_stride.
void ssm_conv(Stream s, const float* x, const float* w, float* state, float* out, int64_t width, int kernel, int n,
              float* kept, size_t kept_stride);
// The delta rule over n tokens of one sequence, token by token (state: hv matrices of dk x dv, each
// stored by columns: element (i, j) at j dk + i, the transpose of the CPU's layout), with its gates
// g = A softplus(alpha + dt_bias) and beta = sigmoid(beta_in) ([n][hv] each). Rows of q and k are
// q_stride floats apart, of v v_stride, of out out_stride (q, k and v may be columns of one tensor).
struct DeltaArgs {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const float *alpha = nullptr, *beta_in = nullptr, *A = nullptr, *dt_bias = nullptr;
  float* state = nullptr;
  float* out = nullptr;
  int n = 0;
  int64_t q_stride = 0, v_stride = 0, out_stride = 0;
  int hk = 0, hv = 0, dk = 0, dv = 0;
  bool tiled = false;
  float* kept = nullptr;  // the state after each token t at kept + t * kept_stride
  size_t kept_stride = 0;
};
void delta_rule(Stream s, const DeltaArgs& a);

}  // namespace zinc::backend::cuda
