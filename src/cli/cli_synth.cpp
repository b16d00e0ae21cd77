// `zinc synth PRESET OUT.gguf`: a model file with a real model's shapes and metadata and random
// weights, for benchmarks without downloads.
#include <fmt/format.h>

#include "cli/cli.h"
#include "cli/terminal.h"
#include "convert/synth.h"

namespace zinc::cli {

namespace {

void add_synth_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto o = std::make_shared<convert::SynthOptions>();
  auto out = std::make_shared<std::string>();
  std::string presets;
  for (const auto& p : convert::synth_presets()) presets += (presets.empty() ? "" : ", ") + p;
  CLI::App* cmd = app.add_subcommand("synth", "Write a model with a real model's shapes and random weights (for benchmarks)");
  cmd->add_option("preset", o->preset, "One of: " + presets)->required();
  cmd->add_option("output", *out, "GGUF file to write")->required();
  cmd->add_option("--type", o->mixture, "Quantization mixture (as zinc quantize names them)")->capture_default_str();
  cmd->add_option("--layers", o->layers, "Blocks to write instead of the real count (shapes unchanged)")
      ->check(CLI::Range(1, 1 << 16).description("")
                  .name("a count of blocks, at least 1 (leave the option out for the preset's count)"));
  cmd->add_option("--seed", o->seed, "Seed of the random weights")->capture_default_str();
  cmd->add_flag("--quantize", o->quantize,
                 "Quantize every row of random values instead of drawing blocks from a pool quantized once "
                 "(slower; the pool gives the same value distribution)");
  cmd->add_flag("!--no-mtp", o->mtp, "Leave out the multi-token-prediction head of the models that have one");
  cmd->add_option("--tokenizer", o->tokenizer_dir, "Directory with the real tokenizer.json (default: a built-in one)");
  cmd->callback([o, out, &global, &run] {
    run = [o, out, &global] {
      Progress bar("synth");
      convert::SynthOptions opts = *o;
      if (!global.json) opts.progress = [&](uint64_t done, uint64_t total) { bar.update(done, total); };
      const auto r = convert::synthesize(opts, *out);
      bar.finish();
      fmt::print("{}: synthetic {} ({} layers, {}, {:.2f} B parameters) {:.1f} MiB\n", *out, o->preset, r.layers,
                 o->mixture, static_cast<double>(r.parameters) / 1e9, static_cast<double>(r.file_size) / (1 << 20));
      return 0;
    };
  });
}

}  // namespace

ZINC_COMMAND(47, add_synth_command);

}  // namespace zinc::cli
