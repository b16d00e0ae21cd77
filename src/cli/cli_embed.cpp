// `zinc embed`: texts' embedding vectors from a model, one per text. The pooling is the model's own
// (embedding models declare it) or --pooling; vectors are scaled to unit length unless --no-normalize.
// Output: one JSON array of numbers per line, in the order of the texts, or with --json one object
// shaped like the OpenAI embeddings response.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <sstream>

#include "backend/backend.h"
#include "cli/cli.h"
#include "core/error.h"
#include "gguf/reader.h"
#include "hub/store.h"
#include "model/model.h"
#include "runtime/embed.h"
#include "tokenizer/tokenizer.h"

namespace zinc::cli {

namespace {

struct EmbedOptions {
  std::string model;
  std::vector<std::string> texts;
  std::string pooling;
  bool no_normalize = false;
  std::string backend = "auto";
  int device = -1;
  unsigned threads = 0;
  int ctx = 4096;
};

int run_embed(const EmbedOptions& o, const GlobalOptions& global) {
  const gguf::File file = gguf::File::open(hub::resolve_model_path(o.model));
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  const auto declared = runtime::declared_pooling(file);
  if (!declared && o.pooling.empty()) {
    throw Error(fmt::format("{} declares no pooling (it is not an embedding model): choose one with --pooling "
                            "mean|cls|last",
                            o.model));
  }
  const runtime::Pooling pooling = o.pooling.empty() ? *declared : runtime::pooling_from_name(o.pooling);
  std::vector<std::string> texts = o.texts;
  for (auto& t : texts) {
    if (t == "-") {
      std::ostringstream ss;
      ss << std::cin.rdbuf();
      t = ss.str();
    }
  }
  auto backend = backend::make_backend_for(o.backend, model::load(file).graph, o.device, o.threads);
  runtime::Embedder embedder(file, *backend, o.ctx);
  nlohmann::json data = nlohmann::json::array();
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> ids = tok.encode(texts[i], true, false);
    prompt_tokens += static_cast<int64_t>(ids.size());
    const std::vector<float> v = embedder.embed(ids, pooling, !o.no_normalize);
    if (global.json) {
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", v}});
    } else {
      fmt::print("{}\n", nlohmann::json(v).dump());
    }
  }
  if (global.json) {
    const nlohmann::json out = {{"object", "list"},
                                {"model", o.model},
                                {"pooling", runtime::pooling_name(pooling)},
                                {"dimensions", embedder.dim()},
                                {"data", data},
                                {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
    fmt::print("{}\n", out.dump());
  }
  return 0;
}

void add_embed_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto o = std::make_shared<EmbedOptions>();
  CLI::App* cmd = app.add_subcommand("embed", "Embedding vectors of texts: one JSON array per text, one per line");
  cmd->add_option("-m,--model", o->model, "GGUF model file, or an installed model id")->required();
  cmd->add_option("texts", o->texts, "Texts to embed (- reads one from standard input)")->required();
  cmd->add_option("--pooling", o->pooling,
                  "How a text's token states become one vector: mean, cls (the first token's) or last (default: "
                  "the model's own; required for models that declare none)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_flag("--no-normalize", o->no_normalize, "Leave the vectors as pooled (default: unit length)");
  cmd->add_option("-c,--ctx", o->ctx, "Most tokens a text may have")->capture_default_str()->check(CLI::Range(1, 1 << 22));
  cmd->add_option("--backend", o->backend, "auto, cpu, vulkan, cuda or zinc_rt")->capture_default_str();
  cmd->add_option("--device", o->device, "GPU index for the Vulkan backend (zinc check lists them)");
  cmd->add_option("-t,--threads", o->threads, "CPU threads (default: physical cores)")->check(threads_range());
  cmd->callback([o, &global, &run] {
    run = [o, &global] { return run_embed(*o, global); };
  });
}

}  // namespace

ZINC_COMMAND(22, add_embed_command);

}  // namespace zinc::cli
