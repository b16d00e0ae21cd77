// Decode products on the CUDA backend: each shape's time per launch and bytes per second against the
// device's copy bandwidth (launches replayed from a CUDA graph, weights cycled through copies larger
// than L2 so every launch reads them from memory); with more than ck::kCodesTokens tokens, the prompt
// products' paths.
// Usage: zinc_cuda_matvec_bench [tokens] [iterations] [codes staged in shared memory: 1 (default) or 0]
//        [weights staged in shared memory: 1 (default: where faster), 2 (wherever they fit) or 0]
//        [gate and up at 16 tokens a warp held to fewer registers: 1 (default: where faster), 2 (always) or 0]
//        [prompt tiles from this many rows on (0: as built)] [only the shapes whose names contain this;
//        moe[:experts:used:between]: a mixture's products instead]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "cuda_bench_check.h"
#include "gguf/types.h"
#include "quant/quant.h"

namespace ck = zinc::backend::cuda;
using zinc::gguf::TensorType;

namespace {

struct Weights {
  TensorType type;
  int64_t rows, cols;
  size_t bytes;
  std::vector<void*> copies;
};

Weights make(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weights w{type, rows, cols, zinc::quant::row_size(type, cols) * static_cast<size_t>(rows), {}};
  // Quantized random rows (valid scales), copied until the copies outgrow L2 four times over.
  std::vector<uint8_t> host(w.bytes);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t rb = zinc::quant::row_size(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    if (r < 64) {
      for (float& v : row) v = dist(rng);
      zinc::quant::quantize_row(type, row.data(), host.data() + static_cast<size_t>(r) * rb, cols);
    } else {
      std::copy_n(host.data() + static_cast<size_t>(r % 64) * rb, rb, host.data() + static_cast<size_t>(r) * rb);
    }
  }
  const size_t n = std::max<size_t>(2, (256u << 20) / w.bytes + 1);
  for (size_t i = 0; i < n; ++i) {
    void* p = nullptr;
    check(cudaMalloc(&p, w.bytes), "cudaMalloc");
    check(cudaMemcpy(p, host.data(), w.bytes, cudaMemcpyHostToDevice), "upload");
    w.copies.push_back(p);
  }
  return w;
}

// Mean microseconds per launch of `launch(copy)` over `iters` launches replayed from one graph.
template <class F>
double time_graph(cudaStream_t s, int iters, F launch) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < iters; ++i) launch(i);
  check(cudaStreamEndCapture(s, &g), "capture end");
  check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
  check(cudaGraphLaunch(exec, s), "warm-up");
  check(cudaStreamSynchronize(s), "sync");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  check(cudaGraphLaunch(exec, s), "launch");
  cudaEventRecord(b, s);
  check(cudaStreamSynchronize(s), "sync");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  return 1000.0 * ms / iters;
}


// A mixture's products at n rows (by default qwen3-30b-a3b's shape: 128 experts, 8 a row, 2048 wide,
// 768 between; gate and up Q4_K, down Q6_K), each row's experts drawn at random as an untrained router
// sends them: each slot its own (gate and up with the activation, then down) and grouped by expert;
// GB/s of the distinct experts' bytes.
void moe_bench(cudaStream_t s, int n, int iters, double copy_gbs, std::mt19937& rng, int ne, int k, int64_t ff) {
  constexpr int64_t d = 2048;
  const Weights g = make(TensorType::Q4_K, ne * ff, d, rng), u = make(TensorType::Q4_K, ne * ff, d, rng),
                dn = make(TensorType::Q6_K, ne * d, ff, rng);
  const size_t g_row = zinc::quant::row_size(g.type, d), d_row = zinc::quant::row_size(dn.type, ff);
  const int slots = n * k;
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  std::vector<int> all(ne);
  for (int e = 0; e < ne; ++e) all[static_cast<size_t>(e)] = e;
  std::vector<bool> used(ne);
  for (int t = 0; t < n; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + k);
    for (int i = 0; i < k; ++i) ids[static_cast<size_t>(t * k + i)] = all[static_cast<size_t>(i)], used[static_cast<size_t>(all[static_cast<size_t>(i)])] = true;
  }
  const auto distinct = std::count(used.begin(), used.end(), true);
  const double bytes = static_cast<double>(distinct) * static_cast<double>(2 * ff * g_row + d * d_row);
  float *x, *gate, *up, *y;
  int32_t *dids, *order, *offsets;
  void* q8;
  check(cudaMalloc(reinterpret_cast<void**>(&x), static_cast<size_t>(n * d) * 4), "cudaMalloc");
  check(cudaMemset(x, 0, static_cast<size_t>(n * d) * 4), "memset");
  check(cudaMalloc(reinterpret_cast<void**>(&gate), static_cast<size_t>(slots * ff) * 4), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&up), static_cast<size_t>(slots * ff) * 4), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&y), static_cast<size_t>(slots * d) * 4), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dids), static_cast<size_t>(slots) * 4), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&order), static_cast<size_t>(slots) * 4), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&offsets), static_cast<size_t>(ne + 1) * 4), "cudaMalloc");
  check(cudaMalloc(&q8, ck::q8_bytes(slots, d)), "cudaMalloc");
  check(cudaMemcpy(dids, ids.data(), static_cast<size_t>(slots) * 4, cudaMemcpyHostToDevice), "upload");
  std::printf("mixture of %d rows, %d of %d experts a row, %lld between: %lld distinct experts, %.1f MB a layer\n| path | us per layer | GB/s | %% of copy |\n|---|---|---|---|\n", n, k, ne,
              static_cast<long long>(ff), static_cast<long long>(distinct), bytes / 1e6);
  const auto prods = [&](int i, ck::Product (&p)[2], ck::Product& down) {
    p[0] = {static_cast<int>(g.type), g.copies[static_cast<size_t>(i) % g.copies.size()], g_row, g_row * ff, 0, ff, gate, ff, nullptr, 0};
    p[1] = {static_cast<int>(u.type), u.copies[static_cast<size_t>(i) % u.copies.size()], g_row, g_row * ff, 0, ff, up, ff, nullptr, 0};
    down = {static_cast<int>(dn.type), dn.copies[static_cast<size_t>(i) % dn.copies.size()], d_row, d_row * d, 0, d, y, d, nullptr, 0};
  };
  ck::moe_group(s, dids, slots, ne, order, offsets);
  for (const int path : {0, 1})
  for (const int part : {0, 1, 2}) {  // (both products; gate and up alone; down alone)
    if (path == 1 && n < 2) continue;
    const double us = time_graph(s, iters, [&](int i) {
      ck::Product p[2], down;
      prods(i, p, down);
      if (path == 0) {
        if (part != 2) ck::mul_mat_codes(s, p, 2, d, x, d, k, dids, slots, q8, false, ck::Glu::SwiGLU, 0, 0, part == 0 ? ck::Chain::First : ck::Chain::None);
        if (part != 1) ck::mul_mat_id(s, static_cast<int>(dn.type), down.w, d_row, d_row * d, 0, d, ff, gate, ff, 1, dids, slots, y, d, nullptr, 0, q8, false,
                       part == 0 ? ck::Chain::Second : ck::Chain::None);
      } else {
        if (part == 0) ck::moe_group(s, dids, slots, ne, order, offsets);
        if (part != 2) ck::grouped_mul_mat_codes(s, p, 2, d, x, d, k, order, offsets, ne, n, slots, q8, false, ck::Glu::SwiGLU);
        if (part != 1) ck::grouped_mul_mat_codes(s, &down, 1, ff, gate, ff, 1, order, offsets, ne, n, slots, q8, false);
      }
    });
    const double b = part == 0 ? bytes : part == 1 ? bytes * 2 * ff * g_row / (2 * ff * g_row + d * d_row) : bytes * d * d_row / (2 * ff * g_row + d * d_row);
    std::printf("| %s%s | %.2f | %.0f | %.0f%% |\n", path == 0 ? "each slot its own" : "grouped by expert",
                part == 0 ? "" : part == 1 ? ": gate and up" : ": down", us, b / (us * 1e3), 100.0 * b / (us * 1e3) / copy_gbs);
  }
  check(cudaGetLastError(), "kernels");
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  if (argc > 3) ck::set_codes_mma_stage(std::atoi(argv[3]) != 0);  // (0: the tensor cores read the codes from memory)
  if (argc > 4) ck::set_codes_mma_weights_stage(std::atoi(argv[4]));  // (0: they read the weights as they use them)
  if (argc > 5) ck::set_codes_mma_glu_capped(std::atoi(argv[5]));  // (0: gate and up at 16 tokens a warp in all their registers)
  // (6: the prompt tiles from this many rows on, measured against split ways 1 and by the shape.)
  const int tiles_min = argc > 6 ? std::atoi(argv[6]) : 0;
  if (argc > 8) ck::set_codes_wide(std::atoi(argv[8]));  // (33 to 112 tokens: 0 each warp its own tokens' codes; 2, 3 shared tiles)
  if (tiles_min > 0) ck::set_prompt_tiles_min(tiles_min);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "stream");
  // Copy bandwidth as the backend measures it: a 256 MiB device-to-device copy, best of five, bytes
  // read plus written.
  const size_t cb = size_t{256} << 20;
  void *src, *dst;
  check(cudaMalloc(&src, cb), "cudaMalloc");
  check(cudaMalloc(&dst, cb), "cudaMalloc");
  check(cudaMemset(src, 1, cb), "memset");
  check(cudaMemset(dst, 0, cb), "memset");
  double copy_us = time_graph(s, 1, [&](int) { check(cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice, s), "copy"); });
  for (int i = 0; i < 4; ++i)
    copy_us = std::min(copy_us, time_graph(s, 1, [&](int) { check(cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice, s), "copy"); }));
  const double copy_gbs = 2.0 * static_cast<double>(cb) / (copy_us * 1e3);
  cudaFree(src);
  cudaFree(dst);
  std::printf("%s, %d SMs; copy bandwidth %.0f GB/s; %d token(s)\n\n", prop.name, prop.multiProcessorCount, copy_gbs, n);

  std::mt19937 rng(1);
  if (argc > 7 && std::string(argv[7]).starts_with("moe")) {  // (moe[:experts:used:between])
    int ne = 128, k = 8, ff = 768;
    std::sscanf(argv[7], "moe:%d:%d:%d", &ne, &k, &ff);
    moe_bench(s, n, iters, copy_gbs, rng, ne, k, ff);
    return 0;
  }
  struct Shape {
    std::string name;
    std::vector<Weights> parts;
    ck::Glu glu;
  };
  std::vector<Shape> shapes;
  const auto one = [&](const std::string& name, TensorType t, int64_t rows, int64_t cols) {
    shapes.push_back({name, {make(t, rows, cols, rng)}, ck::Glu::None});
  };
  one("q/o 4096x4096 Q4_K", TensorType::Q4_K, 4096, 4096);
  one("k 1024x4096 Q4_K", TensorType::Q4_K, 1024, 4096);
  one("v 1024x4096 Q6_K", TensorType::Q6_K, 1024, 4096);
  one("gate 12288x4096 Q4_K", TensorType::Q4_K, 12288, 4096);
  one("down 4096x12288 Q6_K", TensorType::Q6_K, 4096, 12288);
  one("down 4096x12288 Q4_K", TensorType::Q4_K, 4096, 12288);
  one("expert 768x2048 Q4_K", TensorType::Q4_K, 768, 2048);
  one("output 151936x4096 Q6_K", TensorType::Q6_K, 151936, 4096);  // (qwen3's vocabulary: the logits' product)
  shapes.push_back({"qkv 4096+1024+1024 (Q4_K,Q4_K,Q6_K)",
                    {make(TensorType::Q4_K, 4096, 4096, rng), make(TensorType::Q4_K, 1024, 4096, rng), make(TensorType::Q6_K, 1024, 4096, rng)},
                    ck::Glu::None});
  shapes.push_back({"gate+up+SwiGLU 2x12288x4096 Q4_K", {make(TensorType::Q4_K, 12288, 4096, rng), make(TensorType::Q4_K, 12288, 4096, rng)},
                    ck::Glu::SwiGLU});

  if (argc > 7) {
    const std::string only = argv[7];
    std::erase_if(shapes, [&](const Shape& sh) { return sh.name.find(only) == std::string::npos; });
  }
  int64_t max_cols = 0, max_rows = 0;
  for (const Shape& sh : shapes)
    for (const Weights& w : sh.parts) max_cols = std::max(max_cols, w.cols), max_rows = std::max(max_rows, w.rows);
  float *x, *out;
  void* q8;
  check(cudaMalloc(reinterpret_cast<void**>(&x), static_cast<size_t>(n * max_cols) * 4), "cudaMalloc");
  check(cudaMemset(x, 0, static_cast<size_t>(n * max_cols) * 4), "memset");
  check(cudaMalloc(reinterpret_cast<void**>(&out), static_cast<size_t>(3 * n * max_rows) * 4), "cudaMalloc");
  check(cudaMalloc(&q8, ck::q8_bytes(n, max_cols)), "cudaMalloc");

  // A shape's products for launch i: copy i of each weight (cycling through at most `copies` of them),
  // each product's output apart.
  const auto products = [&](const Shape& sh, int i, size_t copies, ck::Product (&p)[3]) {
    for (size_t k = 0; k < sh.parts.size(); ++k) {
      const Weights& w = sh.parts[k];
      p[k].type = static_cast<int>(w.type);
      p[k].w = w.copies[static_cast<size_t>(i) % std::min(copies, w.copies.size())];
      p[k].row_bytes = zinc::quant::row_size(w.type, w.cols);
      p[k].rows = w.rows;
      p[k].out = out + k * static_cast<size_t>(n * max_rows);
      p[k].out_stride = w.rows;
    }
  };

  // The prompt tiles' split scratch, as a context holds it.
  void *split_part, *split_count;
  check(cudaMalloc(&split_part, ck::kSplitBytes), "cudaMalloc");
  check(cudaMalloc(&split_count, static_cast<size_t>(ck::kSplitCounters) * sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(split_count, 0, static_cast<size_t>(ck::kSplitCounters) * sizeof(unsigned)), "memset");
  ck::set_split_scratch({split_part, ck::kSplitBytes, static_cast<unsigned*>(split_count), ck::kSplitCounters});

  if (ck::prompt_tiles(static_cast<int>(TensorType::Q4_K), n)) {
    // Prompt products: integer tensor cores against codes (with the quantization, once per product)
    // and f16 tensor cores against f16-rounded activations.
    std::printf("| product | path | us per launch | TFLOP/s |\n|---|---|---|---|\n");
    for (const Shape& sh : shapes) {
      if (sh.parts.size() != 1) continue;
      const Weights& w = sh.parts[0];
      for (const int path : {0, 1, 2}) {  // (int8 codes split by the shape, int8 codes unsplit, f16)
        ck::set_int8_prompts(path < 2);
        ck::set_split_ways(path == 1 ? 1 : 0);
        if (path == 2 && tiles_min > 0) continue;  // (f16 tiles: only past kCodesTokens)
        const double us = time_graph(s, std::max(1, iters / 10), [&](int i) {
          ck::mul_mat(s, static_cast<int>(w.type), w.copies[static_cast<size_t>(i) % w.copies.size()], zinc::quant::row_size(w.type, w.cols), w.rows,
                      w.cols, x, w.cols, n, out, w.rows, nullptr, q8, false);
        });
        std::printf("| %s | %s | %.1f | %.1f |\n", sh.name.c_str(), path == 0 ? "int8 codes" : path == 1 ? "int8 codes, unsplit" : "f16", us,
                    2.0 * static_cast<double>(w.rows * w.cols) * n / (us * 1e6));
      }
      ck::set_split_ways(0);
      ck::set_int8_prompts(true);
      {  // (the codes formed once before: the tiles alone; and the codes alone)
        ck::quantize_codes(s, x, w.cols, 1, w.cols, n, q8);
        const double us = time_graph(s, std::max(1, iters / 10), [&](int i) {
          ck::mul_mat(s, static_cast<int>(w.type), w.copies[static_cast<size_t>(i) % w.copies.size()], zinc::quant::row_size(w.type, w.cols), w.rows,
                      w.cols, x, w.cols, n, out, w.rows, nullptr, q8, true);
        });
        const double qus = time_graph(s, std::max(1, iters / 10), [&](int) { ck::quantize_codes(s, x, w.cols, 1, w.cols, n, q8); });
        std::printf("| %s | int8 codes, codes ready / the codes alone | %.1f / %.1f | – |\n", sh.name.c_str(), us, qus);
      }
    }
    ck::set_int8_prompts(true);  // (the products of one input below take the integer tiles)
    // Products of one input in one launch (q, k and v).
    for (const Shape& sh : shapes) {
      if (sh.parts.size() == 1 || sh.glu != ck::Glu::None) continue;
      for (const int ways : {0, 1}) {
        ck::set_split_ways(ways);
        const double us = time_graph(s, std::max(1, iters / 10), [&](int i) {
          ck::Product p[3];
          products(sh, i, SIZE_MAX, p);
          if (n > ck::kCodesTokens) {
            ck::mul_mat_codes(s, p, static_cast<int>(sh.parts.size()), sh.parts[0].cols, x, sh.parts[0].cols, 1, nullptr, n, q8, false);
          } else {
            ck::quantize_codes(s, x, sh.parts[0].cols, 1, sh.parts[0].cols, n, q8);
            ck::mul_mm_codes_tiles(s, p, static_cast<int>(sh.parts.size()), sh.parts[0].cols, q8, n);
          }
        });
        std::printf("| %s | int8 codes, one launch%s | %.1f | – |\n", sh.name.c_str(), ways == 1 ? ", unsplit" : "", us);
      }
      ck::set_split_ways(0);
    }
    check(cudaGetLastError(), "kernels");
    return 0;
  }
  // Products against codes: packed dot products (rows per warp as given), and from 2 tokens on integer
  // tensor cores (16-row tiles; "mma").
  std::printf("| product | path: warps per row x rows per warp | us per launch | GB/s | %% of copy |\n|---|---|---|---|---|\n");
  for (const Shape& sh : shapes) {
    size_t bytes = 0;
    for (const Weights& w : sh.parts) bytes += w.bytes;
    const size_t copies = sh.parts[0].copies.size();
    for (const auto& [split, rpw] : {std::pair{0, 0}, {1, 1}, {2, 1}, {4, 1}, {8, 1}, {1, 2}, {2, 2}, {4, 2}, {1, 4}, {2, 4}, {4, 4}, {0, -1},
                                     {1, -1}, {2, -1}, {4, -1}, {8, -1}})
    for (const int groups : {0, 1, 2, 4})
    for (const int tiles : {0, 1, 2}) {
      const bool mma = rpw < 0;
      if (mma && n < 2) continue;
      // The tensor cores' groups of 8 tokens a warp: by the rows (0), and from 16 tokens each choice;
      // and the tiles of rows a warp (by the tokens, or one or two where gate and up are apart).
      if (groups > 0 && (!mma || n < 16 || 8 * groups > 2 * n)) continue;
      if (tiles > 0 && (!mma || split != 0 || sh.glu != ck::Glu::None)) continue;
      ck::set_codes_mma_groups(groups);
      ck::set_codes_mma_tiles(tiles);
      if (!mma && n > 1 && (rpw > 2 || (rpw == 2 && split == 4))) continue;
      if (!mma && n > 8 && rpw != 0) continue;
      ck::set_codes_mma_min(mma ? 2 : ck::kCodesTokens + 1);
      const double us = time_graph(s, iters, [&](int i) {
        ck::Product p[3];
        products(sh, i, copies, p);
        ck::mul_mat_codes(s, p, static_cast<int>(sh.parts.size()), sh.parts[0].cols, x, sh.parts[0].cols, 1, nullptr, n, q8, i > 0, sh.glu,
                          split, mma ? 0 : rpw);
      });
      const std::string path = std::string(mma ? "mma " : "packed ") +
                               (split == 0 ? "auto" : mma ? std::to_string(split) + " x 16 rows" : std::to_string(split) + " x " + std::to_string(rpw) + " rows") +
                               (groups > 0 ? ", " + std::to_string(8 * groups) + " tokens a warp" : "") +
                               (tiles > 0 ? ", " + std::to_string(16 * tiles) + " rows a warp" : "");
      std::printf("| %s | %s | %.2f | %.0f | %.0f%% |\n", sh.name.c_str(), path.c_str(), us,
                  static_cast<double>(bytes) / (us * 1e3), 100.0 * static_cast<double>(bytes) / (us * 1e3) / copy_gbs);
    }
  }
  ck::set_codes_mma_groups(0);
  ck::set_codes_mma_tiles(0);
  ck::set_codes_mma_min(0);
  // The norm with its codes, and quantization alone.
  const double norm_us = time_graph(s, iters, [&](int) { ck::add_rms_norm(s, x, x, out, nullptr, out + 8192, 4096, n, 1e-6f, 0, q8); });
  std::printf("\nadd + rms_norm + codes, 4096 wide: %.2f us per launch\n", norm_us);
  check(cudaGetLastError(), "kernels");
  return 0;
}
