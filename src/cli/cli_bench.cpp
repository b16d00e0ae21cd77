// `zinc bench -m MODEL`: prefill and decode throughput (median, min, max over runs), time to first
// token, and for decode the bytes read per token, achieved GB/s and % of this machine's measured read
// bandwidth. A table, or --json; --compare prints ratios against an earlier --json result;
// --vs-llama-cpp runs the user's llama-bench on the same file and shows its figures beside ours.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <random>
#include <thread>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli.h"
#include "cli/generation_options.h"
#include "cli/json_util.h"
#include "core/bandwidth.h"
#include "backend/exec_common.h"
#include "core/error.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "core/format.h"
#include "core/system_info.h"
#include "hub/store.h"
#include "runtime/bench.h"
#include "sample/sampler.h"
#include "server/engine.h"

namespace zinc::cli {

namespace {

using nlohmann::json;

struct BenchArgs {
  std::string model;
  std::vector<int> prompts{512};
  std::vector<int> gens{128};
  int depth = 0, runs = 3, warmup = 1;
  unsigned threads = 0;
  std::string kv_type = "f16";
  std::string compare, llama_bench;
  uint32_t seed = 1;
  bool remeasure = false;
  std::string suite;
  std::string backend = "auto";
  int device = -1;
  std::vector<int> parallel{1};
  std::vector<int> concurrency;
  int batch_tokens = 1024;  // (zinc serve's default)
  double decode_latency = 3;  // --concurrency: the server's limit on a step beside decoding streams
  int shared_prefix = 0;       // --concurrency: tokens every request's prompt starts with (a system prompt)
  double cache_mem_gb = 1.0;   // --concurrency: the server's prefix cache
  double cache_ram_gb = 0;     // and its host tier
  int long_prompt = 0;         // --concurrency: a prompt of this many tokens arriving while the streams decode
  int prompt_lane = -1;        // --concurrency: the server's --prompt-lane (and, set, a measurement of its two contexts)
  int spec_cost = 0;           // speculative decoding's costs for 1..spec_cost drafted tokens (0: not measured)
  std::string draft;           // and the draft model's step
};

// --concurrency C: 2·C requests of -p random prompt tokens and -n generated tokens through the
// server's scheduler in-process (continuous batching over C sequences), all submitted at once.
struct ConcurrencyResult {
  int concurrency = 0, requests = 0;
  double aggregate_tps = 0;            // generated tokens of all requests / wall time
  double request_tps_p50 = 0;          // one request's decode tok/s (its tokens / first to last token)
  double ttft_p50 = 0, ttft_p99 = 0;   // submission to the first token, seconds
  double itl_p50 = 0, itl_p99 = 0;     // gaps between a request's tokens, seconds
  // With a shared prefix: the first request's time to its first token alone (nothing cached yet), and
  // what the prefix cache held and gave back afterwards.
  double cold_ttft = 0;
  runtime::PrefixCacheStats cache;
};

using runtime::percentile;

// The benchmark's in-process server: `slots` sequences of n_ctx tokens.
server::EngineOptions bench_engine(const BenchArgs& a, int slots, int n_ctx) {
  server::EngineOptions eo;
  eo.n_slots = slots;
  eo.queue_limit = 4 * slots;
  eo.exec.n_ctx = n_ctx;
  eo.cache_bytes = static_cast<uint64_t>(a.cache_mem_gb * 1e9);
  eo.cache_host_bytes = static_cast<uint64_t>(a.cache_ram_gb * 1e9);
  eo.exec.max_tokens = a.batch_tokens;
  eo.decode_latency = a.decode_latency;
  eo.prompt_lane = a.prompt_lane;
  eo.exec.kv_type = kv_type_from_name(a.kv_type);
  eo.backend = a.backend;
  eo.device = a.device;
  eo.threads = a.threads;
  return eo;
}

// n random token ids of the vocabulary (the benchmark's prompts), from the given seed.
class RandomTokens {
 public:
  RandomTokens(const tokenizer::Tokenizer& tok, uint32_t seed)
      : rng_(seed), any_(0, static_cast<int32_t>(tok.vocab().size() - 1)) {}
  std::vector<int32_t> operator()(int n) {
    std::vector<int32_t> p(static_cast<size_t>(std::max(0, n)));
    for (auto& t : p) t = any_(rng_);
    return p;
  }

 private:
  std::mt19937 rng_;
  std::uniform_int_distribution<int32_t> any_;
};

// A job of prompt tokens answered greedily with `generate` tokens (end of generation ignored), the
// time of each token kept.
std::shared_ptr<server::Job> bench_job(std::vector<int32_t> prompt, int generate) {
  runtime::GenerateOptions go;
  go.max_tokens = generate;
  go.ignore_eog = true;
  go.sampler_sees_prompt = false;
  go.token_times = true;
  return std::make_shared<server::Job>(std::move(prompt), sample::SamplerParams::greedy(), go);
}

// --long-prompt N with --concurrency C: C streams decode; once each has a quarter of its tokens, a
// prompt of N tokens arrives (chunked in as the scheduler's --batch-tokens and --decode-latency allow). The streams' gaps
// between tokens before it and while it is read (until its first token), and its time to the first
// token, against the same prompt served alone.
struct LongPromptResult {
  int tokens = 0;
  double itl_p50_before = 0, itl_p99_during = 0;  // seconds
  int gaps_during = 0;                             // the streams' gaps that ended while it was read
  double ttft_loaded = 0, ttft_alone = 0;          // seconds
};

LongPromptResult run_long_prompt(const gguf::File& file, const tokenizer::Tokenizer& tok, const BenchArgs& a, int concurrency,
                                 int prompt, int generate) {
  server::Engine engine(file, tok, bench_engine(a, concurrency + 1, std::max(prompt + generate, a.long_prompt + 2) + 8));
  RandomTokens random_tokens(tok, a.seed + 7);
  const auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  // Each job read to its end on a thread of its own.
  struct Reader {
    std::shared_ptr<server::Job> job;
    std::thread thread;
  };
  const auto start = [&](Reader& r, std::shared_ptr<server::Job> job) {
    r.job = std::move(job);
    if (!engine.submit(r.job)) throw Error("the benchmark's requests did not fit the queue");
    r.thread = std::thread([&r] {
      std::string piece;
      while (r.job->next(piece, 1000)) {
      }
    });
  };
  const auto first_token = [](const Reader& r) {
    if (!r.job->error().empty()) throw Error("a benchmark request failed: " + r.job->error());
    if (r.job->result().token_times.empty()) throw Error("the benchmark's long prompt produced no token");
    return r.job->result().token_times.front();
  };
  LongPromptResult out;
  out.tokens = a.long_prompt;
  // Rounds: a warm-up (the step shapes recorded), the long prompt alone, then measured.
  for (int round = 0; round < 3; ++round) {
    if (round == 1) {
      Reader alone;
      const double t = now();
      start(alone, bench_job(random_tokens(a.long_prompt), 2));
      alone.thread.join();
      out.ttft_alone = first_token(alone) - t;
      continue;
    }
    std::vector<Reader> streams(static_cast<size_t>(concurrency));
    for (Reader& r : streams) start(r, bench_job(random_tokens(prompt), generate));
    // Until every stream has a quarter of its tokens (or ended).
    for (bool ready = false; !ready;) {
      ready = true;
      for (const Reader& r : streams) ready &= r.job->generated() >= std::max(1, generate / 4) || r.job->finished();
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    Reader long_job;
    const double arrival = now();
    start(long_job, bench_job(random_tokens(a.long_prompt), 2));
    long_job.thread.join();
    for (Reader& r : streams) r.thread.join();
    if (round == 0) continue;
    const double first = first_token(long_job);
    out.ttft_loaded = first - arrival;
    std::vector<double> before, during;
    for (const Reader& r : streams) {
      if (!r.job->error().empty()) throw Error("a benchmark request failed: " + r.job->error());
      const std::vector<double>& at = r.job->result().token_times;
      for (size_t k = 1; k < at.size(); ++k) {
        if (at[k] <= arrival) before.push_back(at[k] - at[k - 1]);
        else if (at[k] <= first) during.push_back(at[k] - at[k - 1]);
      }
    }
    out.itl_p50_before = percentile(before, 0.5);
    out.itl_p99_during = percentile(during, 0.99);
    out.gaps_during = static_cast<int>(during.size());
  }
  return out;
}

ConcurrencyResult run_concurrency(const gguf::File& file, const tokenizer::Tokenizer& tok, const BenchArgs& a,
                                  int concurrency, int prompt, int generate) {
  using Clock = std::chrono::steady_clock;
  server::Engine engine(file, tok, bench_engine(a, concurrency, a.shared_prefix + prompt + generate + 8));
  RandomTokens random_tokens(tok, a.seed);
  ConcurrencyResult r;
  r.concurrency = concurrency;
  const std::vector<int32_t> shared = random_tokens(a.shared_prefix);
  // Rounds: a warm-up (recordings of the step shapes; its own prefix), with a shared prefix the first
  // request that carries it alone, then the measured round.
  for (int round = 0; round < 3; ++round) {
    if (round == 1 && shared.empty()) continue;
    // Two requests per slot; with a shared prefix, clients sharing a system prompt: one each.
    const int n_req = round == 1 ? 1 : shared.empty() ? 2 * concurrency : concurrency;
    const std::vector<int32_t> prefix = round == 0 ? random_tokens(a.shared_prefix) : shared;
    std::vector<std::shared_ptr<server::Job>> jobs;
    for (int i = 0; i < n_req; ++i) {
      std::vector<int32_t> p = prefix;
      const auto own = random_tokens(std::max(1, prompt));
      p.insert(p.end(), own.begin(), own.end());
      jobs.push_back(bench_job(std::move(p), generate));
    }
    std::vector<std::thread> readers;
    const auto t0 = Clock::now();
    const double t0s = std::chrono::duration<double>(t0.time_since_epoch()).count();
    for (auto& j : jobs) {
      if (!engine.submit(j)) throw Error("the benchmark's requests did not fit the queue");
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
      readers.emplace_back([&, i] {
        std::string piece;
        while (jobs[i]->next(piece, 1000)) {
        }
      });
    }
    for (auto& t : readers) t.join();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    if (round == 0) continue;
    if (round == 1) {
      if (jobs[0]->result().token_times.empty()) throw Error("the benchmark's first request produced no token");
      r.cold_ttft = jobs[0]->result().token_times.front() - t0s;
      continue;
    }
    int64_t tokens = 0;
    std::vector<double> ttft, itl, tps;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!jobs[i]->error().empty()) throw Error("a benchmark request failed: " + jobs[i]->error());
      const auto& res = jobs[i]->result();
      tokens += static_cast<int64_t>(res.tokens.size());
      std::vector<double> at = res.token_times;  // when each token was chosen, since the submission
      for (double& x : at) x -= t0s;
      if (at.empty()) continue;
      ttft.push_back(at.front());
      for (size_t k = 1; k < at.size(); ++k) itl.push_back(at[k] - at[k - 1]);
      if (at.back() > at.front()) tps.push_back(static_cast<double>(res.tokens.size() - 1) / (at.back() - at.front()));
    }
    r.requests = n_req;
    r.aggregate_tps = static_cast<double>(tokens) / wall;
    r.request_tps_p50 = percentile(tps, 0.5);
    r.ttft_p50 = percentile(ttft, 0.5);
    r.ttft_p99 = percentile(ttft, 0.99);
    r.itl_p50 = percentile(itl, 0.5);
    r.itl_p99 = percentile(itl, 0.99);
  }
  r.cache = engine.stats().cache;
  return r;
}

// --suite FILE: {"tests": [{"prompt": 512}, {"generate": 128, "depth": 4096},
//                          {"chat": {"system": 1024, "turns": 4, "user": 64, "answer": 64, "reasoning": 0}}]}
struct Suite {
  std::vector<runtime::BenchCase> cases;
  std::vector<runtime::ChatBenchCase> chats;
};

Suite read_suite(const std::string& path) {
  std::ifstream in(path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!j.is_object() || !j.contains("tests") || !j["tests"].is_array() || j["tests"].empty()) {
    throw Error(fmt::format("{}: expected {{\"tests\": [...]}} with at least one test", path));
  }
  Suite s;
  for (size_t i = 0; i < j["tests"].size(); ++i) {
    const json& t = j["tests"][i];
    try {
      if (t.contains("chat")) {
        const json& c = t["chat"];
        s.chats.push_back({c.value("system", 1024), c.value("turns", 4), c.value("user", 64), c.value("answer", 64),
                           c.value("reasoning", 0)});
      } else {
        s.cases.push_back({t.value("prompt", 0), t.value("generate", 0), t.value("depth", 0)});
        if (s.cases.back().prompt > 0 && s.cases.back().generate > 0) {
          throw Error("a test measures a prompt or a generation, not both (make two tests)");
        }
      }
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: test {}: {}", path, i + 1, e.what()));
    } catch (const Error& e) {
      throw Error(fmt::format("{}: test {}: {}", path, i + 1, e.what()));
    }
  }
  return s;
}

// llama-bench's JSON lines for the same tests: {"n_prompt", "n_gen", "avg_ts"} per test. The same
// cache type; on a GPU every layer offloaded and flash attention on (as zinc's GPU attention is), on
// the CPU none offloaded.
std::vector<json> run_llama_bench(const BenchArgs& a, unsigned threads, bool gpu) {
  std::string cmd = fmt::format("'{}' -m '{}' -t {} -r {} -o json -ctk {} -ctv {} -ngl {} -fa {}", a.llama_bench,
                                hub::resolve_model_path(a.model), threads, a.runs, a.kv_type, a.kv_type, gpu ? 99 : 0,
                                gpu ? 1 : 0);
  std::string p, n;
  for (int x : a.prompts) p += (p.empty() ? "" : ",") + std::to_string(x);
  for (int x : a.gens) n += (n.empty() ? "" : ",") + std::to_string(x);
  cmd += fmt::format(" -p {} -n {}", p.empty() ? "0" : p, n.empty() ? "0" : n);
  if (a.depth > 0) cmd += fmt::format(" -d {}", a.depth);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((cmd + " 2>/dev/null").c_str(), "r"), pclose);
  if (!pipe) throw Error(fmt::format("cannot run {}", a.llama_bench));
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t got = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), got);
  try {
    const json j = json::parse(out);
    return j.is_array() ? j.get<std::vector<json>>() : std::vector<json>{};
  } catch (const json::exception&) {
    throw Error(fmt::format("{} did not print llama-bench JSON (-o json)", a.llama_bench));
  }
}

int run_bench(const BenchArgs& a, const GlobalOptions& global) {
  const auto file = gguf::File::open(hub::resolve_model_path(a.model));
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  auto backend = backend::make_backend_for(a.backend, model::load(file).graph, a.device, a.threads);
  // A GPU's copy bandwidth, measured before the weights fill its memory. Measured after them, an H200
  // read 1,550-1,610 GB/s in about one process of two that had loaded a 17-20 GB file, even with
  // 0.25 s of copying, and 3,930-3,960 in the others; measured before, six such processes in a row
  // read 3,938-3,946.
  const bool gpu = backend->name() != "cpu";
  const double gpu_bandwidth = gpu ? backend->measured_bandwidth_gbs() : 0.0;
  backend::ExecOptions opts;
  Suite suite;
  if (!a.suite.empty()) {
    suite = read_suite(a.suite);
  } else {
    for (int p : a.prompts) {
      if (p > 0) suite.cases.push_back({p, 0, a.depth});
    }
    for (int n : a.gens) {
      if (n > 0) suite.cases.push_back({0, n, a.depth});
    }
  }
  int64_t need = 8;
  for (const auto& c : suite.cases) need = std::max<int64_t>(need, int64_t{c.depth} + c.prompt + c.generate + 8);
  for (const auto& c : suite.chats) need = std::max<int64_t>(need, int64_t{c.system} + int64_t{c.turns} * (c.user + c.answer) + 8);
  opts.n_ctx = static_cast<int32_t>(need);
  opts.max_tokens = 512;
  opts.kv_type = kv_type_from_name(a.kv_type);
  // Chats as zinc chat holds them: a prefix cache (the checkpoints a recurrent model resumes from when
  // the next prompt drops what the session holds).
  const bool chat_cache = !suite.chats.empty() && a.cache_mem_gb > 0;
  if (chat_cache) opts.cache_blocks = backend::kv_blocks(opts.n_ctx);
  runtime::Session session(file, *backend, opts);
  const unsigned threads = a.threads ? a.threads : std::max(1u, cpu_info().physical_cores);
  ThreadPool pool(threads);
  // The roofline: the GPU's measured copy bandwidth, or the CPU's measured read bandwidth.
  const double bandwidth = gpu ? gpu_bandwidth
                           : a.remeasure ? refresh_read_bandwidth(pool) : cached_read_bandwidth(pool);
  const std::string where = gpu ? fmt::format("{} on {}", backend->name(), backend->device_name())
                                : fmt::format("cpu, {} threads", threads);

  const std::string name = file.get_or<std::string>("general.name", a.model);
  const bool cmp = !a.compare.empty(), llama = !a.llama_bench.empty();
  // A table prints its header first and each row as its test finishes, unless its ratio columns need
  // every result first (--compare, --vs-llama-cpp: then at the end).
  const bool streaming = !global.json && !cmp && !llama;
  const auto print_header = [&] {
    fmt::print("zinc bench · {} · {} · measured {} bandwidth {:.1f} GB/s · {} runs\n\n", terminal_safe(name), where,
               gpu ? "copy" : "read", bandwidth, a.runs);
    fmt::print("| test | tok/s | min | max | first token ms | GB/s | % of BW roofline |{}{}\n", cmp ? " vs baseline |" : "",
               llama ? " llama.cpp tok/s | ratio |" : "");
    fmt::print("|---|---|---|---|---|---|---|{}{}\n", cmp ? "---|" : "", llama ? "---|---|" : "");
    std::fflush(stdout);
  };
  const auto print_row = [&](const json& r) {
    auto num = [&](const char* k, const char* f) {
      return r.contains(k) ? fmt::format(fmt::runtime(f), r[k].get<double>()) : std::string("–");
    };
    fmt::print("| {} | {} | {} | {} | {} | {} | {} |", r["test"].get<std::string>(), num("tokens_per_s", "{:.1f}"),
               num("min", "{:.1f}"), num("max", "{:.1f}"), num("first_token_ms", "{:.0f}"), num("gb_per_s", "{:.1f}"),
               num("percent_of_bandwidth", "{:.0f}%"));
    if (cmp) fmt::print(" {} |", num("ratio_to_baseline", "{:.2f}x"));
    if (llama) fmt::print(" {} | {} |", num("llama_cpp_tokens_per_s", "{:.1f}"), num("ratio_to_llama_cpp", "{:.2f}x"));
    fmt::print("\n");
    std::fflush(stdout);
  };
  if (streaming) print_header();
  json results = json::array();
  auto add = [&](const std::string& test, const runtime::BenchSpread& s, const std::vector<double>& samples,
                 const runtime::BenchSpread* ttft, uint64_t bytes) {
    json r = {{"test", test}, {"tokens_per_s", s.median}, {"min", s.min}, {"max", s.max}, {"samples", samples}};
    if (ttft) r["first_token_ms"] = ttft->median * 1e3;
    if (bytes) {
      const double gbs = static_cast<double>(bytes) * s.median / 1e9;
      r["bytes_per_token"] = bytes;
      r["gb_per_s"] = gbs;
      r["percent_of_bandwidth"] = 100.0 * gbs / bandwidth;
    }
    if (streaming) print_row(r);
    results.push_back(r);
  };
  for (const auto& c : suite.cases) {
    const auto r = runtime::run_bench_case(session, tok, c, a.runs, a.warmup, a.seed);
    const std::string at = c.depth ? fmt::format("@d{}", c.depth) : "";
    if (c.prompt > 0) {
      add(fmt::format("pp{}{}", c.prompt, at), r.prefill, r.prefill_tps, &r.first_token, 0);
    } else {
      // Bytes at the middle of the generated span: the cache grows by one row per token.
      const auto bytes = runtime::decode_bytes_per_token(session.graph(), file, opts.kv_type, c.depth + c.generate / 2 + 1);
      add(fmt::format("tg{}{}", c.generate, at), r.decode, r.decode_tps, nullptr, bytes);
    }
  }
  // Several sequences decoded together: a step reads the weights once and each sequence's cache.
  for (int p : a.parallel) {
    if (p <= 1) continue;
    for (const auto& c : suite.cases) {
      if (c.generate == 0) continue;
      const auto r = runtime::run_parallel_decode(session.weights(), opts, p, c, a.runs, a.warmup, a.seed);
      const uint64_t step = runtime::decode_bytes_per_step(session.graph(), file, opts.kv_type, c.depth + c.generate / 2 + 1, p);
      add(fmt::format("tg{}{} x{}", c.generate, c.depth ? fmt::format("@d{}", c.depth) : "", p), r.spread, r.tps, nullptr,
          step / static_cast<uint64_t>(p));
    }
  }
  json chats = json::array();
  for (const auto& c : suite.chats) {
    // Each chat starts with an empty cache (nothing left by the other tests).
    if (chat_cache) session.use_prefix_cache(static_cast<uint64_t>(a.cache_mem_gb * 1e9), static_cast<uint64_t>(a.cache_ram_gb * 1e9));
    json turns = json::array();
    for (const auto& t : runtime::run_chat_bench(session, c, a.seed)) {
      turns.push_back({{"prompt_tokens", t.prompt_tokens},
                       {"evaluated_tokens", t.evaluated_tokens},
                       {"first_token_ms", t.first_token_s * 1e3},
                       {"decode_tokens_per_s", t.decode_tps}});
    }
    chats.push_back({{"test", fmt::format("chat s{} x{} u{} a{}{}", c.system, c.turns, c.user, c.answer,
                                          c.reasoning ? fmt::format(" (r{} dropped)", c.reasoning) : "")},
                     {"turns", turns}});
  }

  if (!a.compare.empty()) {
    std::ifstream in(a.compare);
    json base;
    try {
      base = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: not a zinc bench --json result: {}", a.compare, e.what()));
    }
    for (auto& r : results) {
      for (const auto& b : base.value("results", json::array())) {
        if (b.value("test", "") == r["test"] && b.value("tokens_per_s", 0.0) > 0) {
          r["ratio_to_baseline"] = r["tokens_per_s"].get<double>() / b["tokens_per_s"].get<double>();
        }
      }
    }
  }
  if (!a.llama_bench.empty()) {
    for (const auto& l : run_llama_bench(a, threads, gpu)) {
      const int np = l.value("n_prompt", 0), ng = l.value("n_gen", 0);
      const std::string test = np > 0 ? fmt::format("pp{}", np) : fmt::format("tg{}", ng);
      for (auto& r : results) {
        const std::string t = r["test"].get<std::string>();
        if (t.substr(0, t.find('@')) == test && l.value("avg_ts", 0.0) > 0) {
          r["llama_cpp_tokens_per_s"] = l["avg_ts"];
          r["ratio_to_llama_cpp"] = r["tokens_per_s"].get<double>() / l["avg_ts"].get<double>();
        }
      }
    }
  }

  // Speculative decoding: what verifying drafted tokens costs, and what it would gain.
  json spec = json::object();
  if (a.spec_cost > 0) {
    std::optional<gguf::File> dfile;
    std::shared_ptr<backend::Weights> dw;
    if (!a.draft.empty()) {
      dfile.emplace(gguf::File::open(hub::resolve_model_path(a.draft)));
      dw = backend->load(model::load(*dfile).graph, *dfile);
    }
    const auto c = runtime::measure_spec_cost(session.weights(), dw, opts, a.spec_cost, a.depth, a.runs, a.seed);
    json rows = json::array();
    for (int32_t k = 1; k <= a.spec_cost; ++k) {
      rows.push_back({{"drafted", k},
                      {"verify_ms", c.verify_s[static_cast<size_t>(k - 1)] * 1e3},
                      {"extra_per_drafted_token", (c.verify_s[static_cast<size_t>(k - 1)] - c.step_s) / k / c.step_s},
                      {"break_even_acceptance", c.break_even(k)},
                      {"speedup_at_0_6", c.speedup(0.6, k)},
                      {"speedup_at_0_7", c.speedup(0.7, k)},
                      {"speedup_at_0_8", c.speedup(0.8, k)}});
    }
    spec = {{"depth", a.depth},          {"step_ms", c.step_s * 1e3}, {"draft", c.head ? "mtp" : a.draft},
            {"draft_step_ms", c.draft_s * 1e3}, {"rows", rows}};
  }

  // Requests through the server's scheduler, several at once.
  json concurrency = json::array();
  for (int c : a.concurrency) {
    const int prompt = a.prompts.empty() ? 128 : std::max(1, a.prompts.front());
    const int generate = a.gens.empty() ? 128 : std::max(1, a.gens.front());
    const auto r = run_concurrency(file, tok, a, c, prompt, generate);
    json long_prompt = nullptr;
    if (a.long_prompt > 0) {
      const LongPromptResult l = run_long_prompt(file, tok, a, c, prompt, generate);
      long_prompt = {{"tokens", l.tokens},
                     {"streams_inter_token_ms_p50_before", l.itl_p50_before * 1e3},
                     {"streams_inter_token_ms_p99_during", l.itl_p99_during * 1e3},
                     {"streams_gaps_during", l.gaps_during},
                     {"first_token_ms", l.ttft_loaded * 1e3},
                     {"first_token_ms_alone", l.ttft_alone * 1e3}};
      if (a.prompt_lane > 0) {
        const auto lane = runtime::run_prompt_lane(session.weights(), opts, c, a.long_prompt, a.batch_tokens, true, a.runs, a.seed);
        long_prompt["background_context"] = {{"chunk_tokens", a.batch_tokens},
                                             {"decode_step_ms_p50_alone", lane.step_p50_alone * 1e3},
                                             {"decode_step_ms_p50_during", lane.step_p50_during * 1e3},
                                             {"decode_step_ms_p99_during", lane.step_p99_during * 1e3},
                                             {"decode_steps_during", lane.steps_during},
                                             {"prompt_ms", lane.prompt_during * 1e3},
                                             {"prompt_ms_alone", lane.prompt_alone * 1e3},
                                             {"rounds", a.runs},
                                             {"rounds_cut", lane.rounds_cut}};
      }
    }
    concurrency.push_back({{"concurrency", r.concurrency},
                           {"long_prompt", long_prompt},
                           {"requests", r.requests},
                           {"prompt_tokens", prompt},
                           {"generated_tokens", generate},
                           {"aggregate_tokens_per_s", r.aggregate_tps},
                           {"request_tokens_per_s_p50", r.request_tps_p50},
                           {"first_token_ms_p50", r.ttft_p50 * 1e3},
                           {"first_token_ms_p99", r.ttft_p99 * 1e3},
                           {"inter_token_ms_p50", r.itl_p50 * 1e3},
                           {"inter_token_ms_p99", r.itl_p99 * 1e3},
                           {"shared_prefix_tokens", a.shared_prefix},
                           {"first_request_first_token_ms", r.cold_ttft * 1e3},
                           {"prefix_cache", {{"budget_bytes", r.cache.budget_bytes},
                                             {"kv_bytes", r.cache.kv_bytes},
                                             {"checkpoint_bytes", r.cache.checkpoint_bytes},
                                             {"hits", r.cache.hits},
                                             {"lookups", r.cache.lookups},
                                             {"tokens_reused", r.cache.tokens_reused},
                                             {"host_budget_bytes", r.cache.host_budget_bytes},
                                             {"host_bytes", r.cache.host_bytes},
                                             {"spills", r.cache.spills},
                                             {"restores", r.cache.restores}}}});
  }

  if (global.json) {
    fmt::print("{}\n", dump_json(json{{"model", a.model},
                                      {"name", name},
                                      {"backend", backend->name()},
                                      {"device", backend->device_name()},
                                      {"threads", threads},
                                      {"kv_type", a.kv_type},
                                      {"runs", a.runs},
                                      {gpu ? "copy_bandwidth_gb_per_s" : "read_bandwidth_gb_per_s", bandwidth},
                                      {"results", results},
                                      {"chats", chats},
                                      {"concurrency", concurrency},
                                      {"speculative", spec}}));
    return 0;
  }
  if (!streaming) {
    print_header();
    for (const auto& r : results) print_row(r);
  }
  if (!concurrency.empty()) {
    fmt::print("\nrequests through the server's scheduler (2 per slot, or 1 with a shared prefix; all at once, continuous "
               "batching):\n\n"
               "| concurrency | requests | aggregate tok/s | per request tok/s | first token ms p50 / p99 | inter-token ms "
               "p50 / p99 |\n|---|---|---|---|---|---|\n");
    for (const auto& c : concurrency) {
      fmt::print("| {} | {} × pp{} + tg{} | {:.1f} | {:.1f} | {:.0f} / {:.0f} | {:.1f} / {:.1f} |\n", c["concurrency"].get<int>(),
                 c["requests"].get<int>(), c["prompt_tokens"].get<int>(), c["generated_tokens"].get<int>(),
                 c["aggregate_tokens_per_s"].get<double>(), c["request_tokens_per_s_p50"].get<double>(),
                 c["first_token_ms_p50"].get<double>(), c["first_token_ms_p99"].get<double>(),
                 c["inter_token_ms_p50"].get<double>(), c["inter_token_ms_p99"].get<double>());
    }
    for (const auto& c : concurrency) {
      if (c["long_prompt"].is_null()) continue;
      const auto& l = c["long_prompt"];
      const double before = l["streams_inter_token_ms_p50_before"].get<double>(), during = l["streams_inter_token_ms_p99_during"].get<double>();
      const double loaded = l["first_token_ms"].get<double>(), alone = l["first_token_ms_alone"].get<double>();
      fmt::print("\nconcurrency {}: a prompt of {} tokens arriving while the streams decode: their inter-token ms p50 before "
                 "{:.1f}, p99 while it is read {:.1f} ({:.2f}×, {} gaps); its first token in {:.0f} ms, {:.0f} ms alone "
                 "({:.2f}×)\n",
                 c["concurrency"].get<int>(), l["tokens"].get<int>(), before, during, before > 0 ? during / before : 0.0,
                 l["streams_gaps_during"].get<int>(), loaded, alone, alone > 0 ? loaded / alone : 0.0);
      if (!l.contains("background_context")) continue;
      const auto& b = l["background_context"];
      const double step = b["decode_step_ms_p50_alone"].get<double>(), p99 = b["decode_step_ms_p99_during"].get<double>();
      const double read = b["prompt_ms"].get<double>(), read_alone = b["prompt_ms_alone"].get<double>();
      fmt::print("read on a background context beside theirs (chunks of {}): their decode step p50 {:.1f} ms alone, p50 {:.1f} and "
                 "p99 {:.1f} while it is read ({:.2f}×, {} steps); the prompt in {:.0f} ms, {:.0f} ms alone ({:.2f}×)\n",
                 b["chunk_tokens"].get<int>(), step, b["decode_step_ms_p50_during"].get<double>(), p99, step > 0 ? p99 / step : 0.0,
                 b["decode_steps_during"].get<int>(), read, read_alone, read_alone > 0 ? read / read_alone : 0.0);
      if (const int cut = b["rounds_cut"].get<int>(); cut > 0) {
        fmt::print("(in {} of {} rounds the prompt was still waiting after {:.0f} s of their steps: those stopped, and it "
                   "finished alone)\n",
                   cut, b["rounds"].get<int>(), runtime::kPromptLaneMaxDuringS);
      }
    }
    for (const auto& c : concurrency) {
      if (c["shared_prefix_tokens"].get<int>() == 0) continue;
      const auto& pc = c["prefix_cache"];
      fmt::print("\nconcurrency {}: every prompt starts with the same {} tokens; the first request alone: first token in "
                 "{:.0f} ms; prefix cache: {} of {} prompts found a cached prefix, {} tokens reused, {} of KV blocks "
                 "held ({} of checkpoints; budget {})\n",
                 c["concurrency"].get<int>(), c["shared_prefix_tokens"].get<int>(),
                 c["first_request_first_token_ms"].get<double>(), pc["hits"].get<int64_t>(), pc["lookups"].get<int64_t>(),
                 pc["tokens_reused"].get<int64_t>(), format_bytes(pc["kv_bytes"].get<uint64_t>()),
                 format_bytes(pc["checkpoint_bytes"].get<uint64_t>()), format_bytes(pc["budget_bytes"].get<uint64_t>()));
      if (pc["host_budget_bytes"].get<uint64_t>() > 0) {
        fmt::print("host tier: {} blocks read out of the device, {} written back, {} held (budget {})\n",
                   pc["spills"].get<int64_t>(), pc["restores"].get<int64_t>(), format_bytes(pc["host_bytes"].get<uint64_t>()),
                   format_bytes(pc["host_budget_bytes"].get<uint64_t>()));
      }
    }
  }
  if (!spec.empty()) {
    fmt::print("\nspeculative decoding at depth {}: a decode step {:.2f} ms{}; a step verifying k drafted tokens, and the "
               "expected speed-up at an acceptance per drafted token of 0.6 / 0.7 / 0.8{}:\n\n"
               "| drafted k | verify ms | extra per drafted token (× a step) | break-even acceptance | speed-up at 0.6 / "
               "0.7 / 0.8 |\n|---|---|---|---|---|\n",
               spec["depth"].get<int>(), spec["step_ms"].get<double>(),
               spec["draft"] == "" ? std::string()
                                   : fmt::format("; a {} step {:.2f} ms", spec["draft"] == "mtp" ? "prediction head" : "draft model",
                                                 spec["draft_step_ms"].get<double>()),
               spec["draft"] == "" ? " (drafting itself counted free)" : "");
    for (const auto& r : spec["rows"]) {
      fmt::print("| {} | {:.2f} | {:.3f} | {:.2f} | {:.2f}× / {:.2f}× / {:.2f}× |\n", r["drafted"].get<int>(),
                 r["verify_ms"].get<double>(), r["extra_per_drafted_token"].get<double>(),
                 r["break_even_acceptance"].get<double>(), r["speedup_at_0_6"].get<double>(),
                 r["speedup_at_0_7"].get<double>(), r["speedup_at_0_8"].get<double>());
    }
  }
  for (const auto& c : chats) {
    fmt::print("\n{}: each turn evaluates only what is new\n\n| turn | conversation tokens | evaluated | first token ms | "
               "decode tok/s |\n|---|---|---|---|---|\n",
               c["test"].get<std::string>());
    int n = 0;
    for (const auto& t : c["turns"]) {
      fmt::print("| {} | {} | {} | {:.0f} | {:.1f} |\n", ++n, t["prompt_tokens"].get<int64_t>(),
                 t["evaluated_tokens"].get<int64_t>(), t["first_token_ms"].get<double>(),
                 t["decode_tokens_per_s"].get<double>());
    }
  }
  return 0;
}

void add_bench_command(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed of a model");
  cmd->add_option("model,-m,--model", a->model, "GGUF model file, or an installed model id")->required();
  cmd->add_option("-p,--prompt-tokens", a->prompts, "Prefill sizes (comma-separated; 0 = none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--gen-tokens", a->gens, "Decode lengths (comma-separated; 0 = none)")->delimiter(',')->capture_default_str();
  cmd->add_option("--depth", a->depth, "Tokens already in the context before each test")->capture_default_str()->check(
      CLI::NonNegativeNumber);
  cmd->add_option("--runs", a->runs, "Timed repetitions")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", a->warmup, "Untimed repetitions first")->capture_default_str()->check(CLI::Range(0, 100));
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: physical cores)")->check(threads_range());
  cmd->add_option("--kv-type", a->kv_type, "KV cache storage: f16, f32 or q8_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  cmd->add_option("--compare", a->compare, "An earlier `zinc bench --json` result: print ratios to it")->check(
      CLI::ExistingFile);
  cmd->add_option("--vs-llama-cpp", a->llama_bench, "Path to a llama-bench binary to run on the same file")
      ->check(CLI::ExistingFile);
  cmd->add_option("--seed", a->seed, "Seed of the random token ids")->capture_default_str();
  cmd->add_flag("--remeasure-bandwidth", a->remeasure, "Measure the memory read bandwidth again (it is cached)");
  cmd->add_option("--backend", a->backend, "Backend to measure: auto, cpu, vulkan, cuda or zinc_rt")->capture_default_str();
  cmd->add_option("--device", a->device, "GPU index for the Vulkan backend (zinc check lists them)");
  cmd->add_option("--parallel", a->parallel,
                  "Also decode this many sequences together (comma-separated, e.g. 4,8): aggregate tok/s of a step "
                  "that reads the weights once for all of them")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  cmd->add_option("--concurrency", a->concurrency,
                  "Also serve 2 requests per slot at once through the server's scheduler, for each of these slot counts "
                  "(comma-separated, e.g. 1,4,8,16): aggregate and per-request tok/s, first-token and inter-token "
                  "latency (prompt and length: the first -p and -n)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  cmd->add_option("--batch-tokens", a->batch_tokens, "With --concurrency: tokens one step evaluates at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 8192));
  cmd->add_option("--shared-prefix", a->shared_prefix,
                  "With --concurrency: every request's prompt starts with the same this many tokens (a system prompt); "
                  "the first such request runs alone first, then one request per slot, all at once, finds it in the "
                  "prefix cache")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--decode-latency", a->decode_latency,
                  "With --concurrency: the server's --decode-latency (prompts beside decoding streams keep a step within "
                  "this many times a decode-only step; 0: they take all of --batch-tokens)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--long-prompt", a->long_prompt,
                  "With --concurrency: once the streams decode, a prompt of this many tokens arrives; its time to the "
                  "first token (against the same prompt alone) and the streams' inter-token latency while it is read "
                  "(chunked by --batch-tokens and --decode-latency)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prompt-lane", a->prompt_lane,
                  "With --concurrency: the server's --prompt-lane (longer prompts arriving while others decode are read "
                  "on a context of their own beside their steps); with --long-prompt also the two contexts measured "
                  "directly: the streams' decode steps and the prompt read in --batch-tokens chunks beside them, "
                  "against each alone; -1: the server's default (512 where the backend runs both at once and there "
                  "is more than one slot, else never)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option("--cache-mem", a->cache_mem_gb,
                  "GB for the prefix cache of --concurrency's server and of --suite's chats (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--cache-ram", a->cache_ram_gb, "GB of host memory for blocks that prefix cache evicts (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--spec-cost", a->spec_cost,
                  "Speculative decoding: time steps verifying 1..K drafted tokens against a decode step, and print "
                  "the break-even acceptance and expected speed-ups")
      ->check(CLI::Range(0, 32));
  cmd->add_option("--draft", a->draft, "With --spec-cost: a draft model whose decode step is counted too");
  cmd->add_option("--suite", a->suite, "A JSON list of tests (prompt, generate, depth, or a multi-turn chat)")
      ->check(CLI::ExistingFile);
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_bench(*a, global); }; });
}

}  // namespace

ZINC_COMMAND(50, add_bench_command);

}  // namespace zinc::cli
