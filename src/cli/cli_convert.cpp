// `zinc convert HF_DIR OUT.gguf`: a Hugging Face checkpoint to GGUF.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/terminal.h"
#include "cli/json_util.h"
#include "convert/convert.h"
#include "core/format.h"
#include "core/log.h"

namespace zinc::cli {

namespace {

void add_convert_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  struct Args {
    std::string dir, out;
    convert::ConvertOptions opts;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert a Hugging Face checkpoint (safetensors) to GGUF");
  cmd->add_option("hf_dir", a->dir, "Directory with config.json, tokenizer.json and *.safetensors")->required();
  cmd->add_option("output", a->out, "GGUF file to write")->required();
  cmd->add_option("--outtype", a->opts.outtype, "Weight storage: f32, f16, bf16, q8_0 or auto")->capture_default_str();
  cmd->add_option("--name", a->opts.name, "general.name (default: the directory name)");
  cmd->callback([a, &global, &run] {
    run = [a, &global] {
      Progress bar("convert");
      convert::ConvertOptions opts = a->opts;
      if (!global.json) opts.progress = [&](uint64_t done, uint64_t total) { bar.update(done, total); };
      const auto r = convert::convert_hf(a->dir, a->out, opts);
      bar.finish();
      for (const auto& n : r.notes) spdlog::warn("{}", n);
      if (global.json) {
        nlohmann::json j = {{"output", a->out}, {"architecture", r.architecture}, {"tensors", r.tensor_count},
                            {"file_size", r.file_size}, {"notes", r.notes}};
        fmt::print("{}\n", dump_json(j));
      } else {
        fmt::print("{} → {}: {} ({} tensors, {})\n", a->dir, a->out, r.architecture, r.tensor_count,
                   format_bytes(r.file_size));
      }
      return 0;
    };
  });
}

}  // namespace

ZINC_COMMAND(45, add_convert_command);

}  // namespace zinc::cli
