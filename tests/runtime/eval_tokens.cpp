// Test tool: evaluates token ids with the CPU backend and prints the last position's logits as JSON
// ({"logits": [...]}), or with --all every position's ({"logits": [[...], ...]}).
// Usage: zinc_eval_tokens [--all] MODEL.gguf ID [ID ...]
// ZINC_TEST_EVAL_KV=f32|f16 picks the KV cache type (default f16, the engine's default).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "runtime/session.h"

int main(int argc, char** argv) {
  const bool all = argc > 1 && std::string(argv[1]) == "--all";
  if (all) --argc, ++argv;
  if (argc < 3) {
    std::fprintf(stderr, "usage: zinc_eval_tokens [--all] MODEL.gguf ID...\n");
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
    const auto logits = s.eval(ids, all);
    const size_t nv = static_cast<size_t>(s.n_vocab());
    std::printf("{\"logits\":[");
    for (size_t i = 0; i < logits.size(); ++i) {
      if (all && i % nv == 0) std::printf("%s[", i ? "]," : "");
      std::printf("%s%.9g", i % nv ? "," : "", static_cast<double>(logits[i]));
    }
    std::printf(all ? "]]}\n" : "]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
