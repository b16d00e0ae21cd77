#include "core/knobs.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace zinc {

namespace {

constexpr Knob kKnobs[] = {
    {"ZINC_HOME", "a directory", "~/.cache/zinc",
     "where installed models (models/), the measured memory bandwidth and the Vulkan pipeline cache live"},
    {"ZINC_CPU_ISA", "scalar, avx2, avx512, neon", "the best this CPU runs",
     "caps the CPU kernels' instruction set (to compare paths; the test command runs every one)"},
    {"ZINC_CPU_AMX", "0", "AMX where the CPU has it (with the AVX-512 kernels)",
     "0: prompts' Q8_0 products on the AVX-512 VNNI kernels, not AMX tiles (comparing; the results are identical)"},
    {"ZINC_CPU_PROFILE", "1", "unset",
     "time every CPU op and the threads' idle time inside it; the table per op is printed at exit (decode and prompt steps apart)"},
    {"ZINC_VULKAN_DEVICE", "a device index (zinc check lists them)", "the first discrete GPU",
     "the Vulkan device when --device is not given"},
    {"ZINC_VULKAN_NO_COOPMAT", "any value", "unset", "no cooperative-matrix (tensor core) prefill GEMM"},
    {"ZINC_VULKAN_WAIT", "block", "spin on a GPU, block on a CPU device", "how the host waits for a submitted step"},
    {"ZINC_VULKAN_SKIP", "kernel name prefixes, comma-separated", "unset", "dispatches of those kernels left out of the step recordings: what each costs in a real step (measuring only; the results are wrong)"},
    {"ZINC_VULKAN_REPEAT", "kernel name prefixes, comma-separated", "unset", "dispatches of those kernels recorded twice, a barrier between, in the step recordings: what each costs in a real step (measuring only)"},
    {"ZINC_VULKAN_PIPELINE_STATS", "1", "unset", "print each compute pipeline's compiler statistics (registers, spills, as the driver names them) to stderr when it is made, where the device has VK_KHR_pipeline_executable_properties (measuring only)"},
    {"ZINC_VULKAN_PROFILE", "1", "unset", "time every dispatch and print the GPU time per kernel at exit (and the step recordings and pipelines made, with their host time)"},
    {"ZINC_VULKAN_MV_WG", "32..256", "per type", "workgroup size of the float and 32-element-block mat-vec (tuning)"},
    {"ZINC_VULKAN_MV_ROWS", "1..8", "per type", "rows per workgroup of that mat-vec (tuning)"},
    {"ZINC_VULKAN_MVK_WG", "64..256", "64", "workgroup size of the K-quant integer mat-vec (tuning)"},
    {"ZINC_VULKAN_MVK_ROWS", "1..8", "4 or 2 by shape", "rows per workgroup of that mat-vec (tuning)"},
    {"ZINC_VULKAN_MVK_COMBINE_ROWS", "1..8", "2", "rows per workgroup of the experts' combined down product (tuning)"},
    {"ZINC_VULKAN_MVK_GROUPS", "1..32", "by row length", "row groups per workgroup of that mat-vec, for rows shorter than a step (tuning)"},
    {"ZINC_VULKAN_MVK_EXPERT_WG", "64..256", "that mat-vec's", "workgroup size of the experts' gate and up products in decode steps (tuning)"},
    {"ZINC_VULKAN_MVK_EXPERT_ROWS", "1..8", "that mat-vec's", "rows of gate (and of up) per workgroup of those products (tuning)"},
    {"ZINC_VULKAN_MOE_FUSED_DOWN", "0 or 1", "1", "0: the experts' down products and their weighted sum as two dispatches in decode (measuring)"},
    {"ZINC_VULKAN_MOE_NARROW", "0..65536", "24", "prompt steps whose experts get at most this many tokens each on average take the tensor-core kernel's narrow tiles (256 rows x 32 tokens; 0: never)"},
    {"ZINC_VULKAN_MOE_NARROW_BM", "128 or 256", "256", "W rows per narrow expert tile (measuring)"},
    {"ZINC_VULKAN_Q8_COMBINE", "0 or 1", "1", "a mixture's down product of the 32-element formats in decode-sized steps adds its slots itself (mul_mv_q8's didc variants; 0: moe_combine's dispatch)"},
    {"ZINC_VULKAN_Q8_GLU", "0 or 1", "1", "a mixture's gate and up products of the 32-element formats in decode-sized steps take their GLU and the down product's codes (mul_mv_q8's didg variants; 0: the GLU's own dispatch)"},
    {"ZINC_VULKAN_Q8_DOT", "0 or 1", "1", "the 32-element formats' decode products (mul_mv_q8) sum a word's four code products with one packed integer dot product where the device has it (0: one multiply each)"},
    {"ZINC_VULKAN_Q8_ROWS", "1, 2, 4 or 8", "4", "rows per workgroup of the 32-element formats' decode products (mul_mv_q8; tuning)"},
    {"ZINC_VULKAN_MOE_GLU", "0 or 1", "1", "0: the experts' gate and up products, their SwiGLU and its codes as three dispatches in decode (measuring)"},
    {"ZINC_VULKAN_MOE_ROUTER", "0 or 1", "1", "0: the experts' router product and the routing as two dispatches in decode (measuring)"},
    {"ZINC_VULKAN_ROUTER_SPLIT", "0 or 1", "1", "1: decode's bias-free F32 routers that read the norm of a K-quant product's residual sum choose their experts beside that product (logits s (R_w r + M a), R_w and M made at load) and weigh them after it; 0: the router waits for the product and its norm, and nothing is made at load (less memory, a faster load)"},
    {"ZINC_VULKAN_NORM_TAIL", "0 or 1", "1", "1: decode's residual add and whole-row norm after a K-quant product (o, down, a mixture's combined down) done by that product's last workgroup of each 256 rows, the norm's scale left to the kernels that read it; 0: a dispatch of their own (measuring)"},
    {"ZINC_VULKAN_ROPE_TAIL", "0 or 1", "1", "0: decode's q and k rotations (with their per-head norms) and the cache append as dispatches after the q, k and v products (K-quant or 32-element formats), not done by those products' last workgroups (measuring)"},
    {"ZINC_VULKAN_ROW_ROUTE", "0 or 1", "1", "0: a mixture's routing after the norm that a 32-element product's last workgroup does (gpt-oss's router, with its bias) as the router's own dispatch, not in that product's dispatch (measuring; read at load)"},
    {"ZINC_VULKAN_ROW_NORM", "0 or 1", "1", "0: decode's residual add and whole-row norm after a K-quant or 32-element product whose width is no multiple of 256 (gpt-oss's o) as a dispatch of its own, not done by the product's last workgroup (measuring)"},
    {"ZINC_VULKAN_POISON", "1", "unset", "every Vulkan context's device buffers start as NaNs instead of what the allocation held, so a kernel reading memory nothing wrote shows (debugging)"},
    {"ZINC_VULKAN_UNORDERED", "kernel name prefixes, comma-separated", "unset", "the pipeline barrier before each dispatch of those kernels left out in the step recordings, so each runs beside the one before: what that dependency costs (measuring only; the results are wrong)"},
    {"ZINC_VULKAN_BARRIERS", "all, or kernel name prefixes, comma-separated", "unset", "a pipeline barrier before every dispatch, or before the dispatches of those kernels, so a hazard the step recorder missed shows as a change of results (debugging)"},
    {"ZINC_VULKAN_TRACE", "1", "unset", "print each step recording's kernels in order to stderr, | where a barrier stands (which dispatches a step's chain holds)"},
    {"ZINC_VULKAN_CONV_TAIL", "0 or 1", "1", "0: a recurrent layer's short convolution in its own dispatch in one-token steps, not in the q, k and v product's"},
    {"ZINC_VULKAN_DELTA_NORM", "0 or 1", "1", "a recurrent layer's per-head norm and output gate done by the last workgroup of each 256 values of its delta rule's dispatch in one-token steps (0: their own dispatch)"},
    {"ZINC_VULKAN_DENSE_GLU", "0, 1 or 2", "1", "decode's gate and up K-quant products of the same rows and their SwiGLU as one dispatch with the down product's codes, the experts' GLU kernel taking one expert: 1 for GLUs of at most 4,096 rows (a shared expert's), 2 for every width (a dense FFN's too)"},
    {"ZINC_VULKAN_SHARED_EARLY", "0 or 1", "1", "0: the nodes after a mixture that read only its input (a shared expert's products) recorded after the whole mixture in decode, not between the experts' gate and up products and their down product (measuring)"},
    {"ZINC_VULKAN_GATE_TAIL", "0 or 1", "1", "0: a shared expert's gated add, the residual add and the next norm in a dispatch of their own, not by the last workgroups of the shared and the experts' down products side by side in one-token steps (measuring)"},
    {"ZINC_VULKAN_GATE_NORM", "0 or 1", "1", "0: a gate's output added to a row, that sum added to the residual and normalised next (a shared expert's gated output, the experts', the residual, the next norm) as two dispatches, not rms_norm_row's gated add (measuring)"},
    {"ZINC_VULKAN_GATE_ADD", "0 or 1", "1", "0: a gate's output and its add to another row (a shared expert's gated output added to the experts') as two dispatches (measuring)"},
    {"ZINC_VULKAN_NORM_GLU", "0 or 1", "1", "0: a gated DeltaNet's per-head norm and the SwiGLU after it as two dispatches (measuring)"},
    {"ZINC_VULKAN_MVK_TOKENS", "1..16", "8", "tokens that mat-vec takes per pass over a weight (tuning)"},
    {"ZINC_VULKAN_MM_BM", "64, 128", "by tile count", "rows per tile of the prefill GEMM (tuning)"},
    {"ZINC_VULKAN_MM_STEPS", "1, 2", "2 for K-quants", "K-steps a pass of the tensor-core prefill GEMM (tuning)"},
    {"ZINC_VULKAN_FA_COOPMAT", "0, 1", "1", "prompt attention on tensor cores where the device has them (0: the portable kernel, for measurements)"},
    {"ZINC_VULKAN_FA_TK", "32, 64, 128 or 256", "32", "keys per tile of the portable attention kernel (tuning)"},
    {"ZINC_VULKAN_FA_CODES", "0 or 1", "1", "0: a one-split decode attention's output codes (Q8_K, or the 32-element formats') made by a dispatch of their own, not by the attention (measuring)"},
    {"ZINC_VULKAN_FA_ONE_KEYS", "0..65536", "128", "decode attention rows of at most this many keys computed as one split, and steps whose rows all are recorded with one split and no merge (0: never; tuning)"},
    {"ZINC_VULKAN_FA_SPLITS", "1..128", "by workgroups and cache size", "key-range splits of the portable attention kernel (decode; tuning)"},
    {"ZINC_VULKAN_MM_WARPS", "4, 8", "8", "subgroups per tile of the cooperative-matrix GEMM (tuning)"},
    {"ZINC_VULKAN_NORM_Q8", "0 or 1", "1", "0: the activation codes of the 32-element formats' decode products made by a dispatch of their own, not by the norm, activation or attention merge that writes their input (measuring)"},
    {"ZINC_VULKAN_NORM_WG", "64..1024", "by width", "workgroup size of the row norm (tuning)"},
    {"ZINC_CUDA_DEVICE", "a device index (zinc check lists them)", "0", "the CUDA device when --device is not given"},
    {"ZINC_CUDA_GRAPHS", "0", "unset (graphs on)", "0: every step's kernels launched one by one instead of replaying the step's captured CUDA graph (measuring)"},
    {"ZINC_CUDA_ATTENTION_HEADS", "0", "unset (on)", "0: decode attention reads q and k normalised and rotated by their own launch (measuring)"},
    {"ZINC_CUDA_FUSE", "0", "unset (fusions on)", "0: every CUDA node its own launch (no add+norm, shared-input products or gate+up+activation launches; measuring)"},
    {"ZINC_CUDA_FLASH_ATTENTION", "0", "unset (on)", "0: CUDA prompt attention by the one-row-a-block kernel decode uses instead of tensor-core tiles (measuring)"},
    {"ZINC_CUDA_INT8_PROMPTS", "0", "unset (on)", "0: CUDA prompt products of Q4_K/Q6_K weights on f16 tensor cores against f16-rounded activations instead of integer tensor cores against 8-bit codes (measuring)"},
    {"ZINC_CUDA_MMA_GLU_CAPPED", "0, 2", "unset (1: where measured faster)", "CUDA gate and up with their activation at 9 to 16 rows on tensor cores: 0 lets them take as many registers as they use (fewer warps resident), 2 holds them to fewer wherever they run (measuring)"},
    {"ZINC_CUDA_MMA_MIN", "1 to 113", "unset (by the products' types)", "CUDA products of K-quant weights against the activations' codes from this many rows on integer tensor cores, fewer on packed dot products (measuring)"},
    {"ZINC_CUDA_MMA_WEIGHTS_STAGED", "0, 2", "unset (1: where measured faster)", "CUDA products of 3 to 8 rows on tensor cores: 0 loads each super-block's weights from memory as it is used, 2 copies them into shared memory a super-block ahead wherever they fit (measuring)"},
    {"ZINC_CUDA_MMA_STREAMS", "1, 2, 4", "unset (by the shapes)",
     "CUDA products of 3 to 8 rows on tensor cores: each warp's streams of a row's super-blocks, the rest of the one-token shape's streams taken by more warps a tile (measuring)"},
    {"ZINC_CUDA_WIDE", "0, 2, 3", "unset (1: by the shape)",
     "CUDA products of 33 to 112 rows: 0 on the few-token tensor-core path (each warp its own tokens' codes), 2 or 3 on shared 64-token tiles with one or two groups of warps a block (measuring)"},
    {"ZINC_CUDA_LANE_PRIORITY", "1", "unset (0: the least)",
     "1: a background context's CUDA stream (--prompt-lane) at the greatest priority, as the others' (measuring)"},
    {"ZINC_CUDA_LANE_SMS", "N, 0", "unset (8 in 11 of the multiprocessors: 96 of 132)",
     "a background context's CUDA steps (--prompt-lane) on a green context of about N multiprocessors, and while one runs the other contexts' steps on the rest; 0: both share every multiprocessor (measuring)"},
    {"ZINC_CUDA_MOE_APART", "N", "unset (while a step's slots are at most 1.5 times the experts its rows reach, drawn evenly)",
     "CUDA mixtures against codes: each slot its expert's rows for steps of up to N rows (at least 8), grouped by expert past that (measuring)"},
    {"ZINC_CUDA_PDL", "0", "unset (on, sm_90 and later)", "0: CUDA decode kernels wait for the previous kernel to finish before they start (no programmatic dependent launch; measuring)"},
    {"ZINC_CUDA_PROFILE", "1", "unset",
     "time every CUDA op by events between nodes (steps launched directly) and print the time per op when a context ends"},
    {"ZINC_CUDA_SPLIT_TILES", "0", "unset (on)", "0: CUDA prompt tiles never split a product's columns over several blocks where its tiles leave multiprocessors idle (measuring)"},
    {"ZINC_TEST_VULKAN_BENCH", "1", "unset", "zinc_vulkan_tests also prints its kernel throughput tables"},
    {"ZINC_TEST_EVAL_KV", "f32, f16", "f16", "the KV cache type of the test oracles' evaluation helper"},
    {"ZINC_TEST_FUZZ_VOCABS", "GGUF files, colon-separated", "none", "the vocabularies the tokenizer fuzzer encodes with"},
};

const Knob& find(std::string_view name) {
  const auto* it = std::find_if(std::begin(kKnobs), std::end(kKnobs), [&](const Knob& k) { return name == k.name; });
  if (it == std::end(kKnobs)) throw std::logic_error("environment variable not in the knob table: " + std::string(name));
  return *it;
}

}  // namespace

std::span<const Knob> knobs() { return kKnobs; }

const char* knob(std::string_view name) {
  const char* v = std::getenv(find(name).name);
  return v && *v ? v : nullptr;
}

uint32_t knob_u32(std::string_view name, uint32_t fallback, uint32_t lo, uint32_t hi) {
  const char* v = knob(name);
  return v ? std::clamp<uint32_t>(static_cast<uint32_t>(std::strtoul(v, nullptr, 10)), lo, hi) : fallback;
}

std::string zinc_home() {
  if (const char* h = knob("ZINC_HOME")) return h;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/zinc";
  return ".zinc";
}

}  // namespace zinc
