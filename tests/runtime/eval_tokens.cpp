// Test tool: evaluates token ids with the CPU backend and prints the last position's logits as JSON.
// Usage: zinc_eval_tokens MODEL.gguf ID [ID ...]
// ZINC_TEST_EVAL_KV=f32|f16 picks the KV cache type (default f16, the engine's default).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "runtime/session.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf ID...\n", argv[0]);
    return 2;
  }
  try {
    const auto f = zinc::gguf::File::open(argv[1]);
    std::vector<int32_t> ids;
    for (int i = 2; i < argc; ++i) ids.push_back(std::stoi(argv[i]));
    auto backend = zinc::backend::make_cpu_backend();
    zinc::backend::ExecOptions opts;
    opts.n_ctx = static_cast<int32_t>(ids.size()) + 8;
    opts.max_tokens = static_cast<int32_t>(ids.size());
    const char* kv = std::getenv("ZINC_TEST_EVAL_KV");
    if (kv && std::string(kv) == "f32") opts.kv_type = zinc::backend::KvType::F32;
    zinc::runtime::Session s(f, *backend, opts);
    const auto logits = s.eval(ids);
    std::printf("{\"logits\":[");
    for (size_t i = 0; i < logits.size(); ++i) std::printf("%s%.9g", i ? "," : "", static_cast<double>(logits[i]));
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
