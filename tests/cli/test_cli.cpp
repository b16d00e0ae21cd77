// The zinc binary as a user runs it: exit status, stdout (the result) and stderr (diagnostics) kept
// apart. Facts about stories260K come from its published description, not from zinc's output.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../models/mtp_checkpoint.h"
#include "raw_gguf.h"

namespace {

using nlohmann::json;

struct RunResult {
  int status = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult zinc(const std::vector<std::string>& args, const std::string& stdin_file = "/dev/null") {
  zinc::test::TempDir tmp;
  std::string cmd = quote(ZINC_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(tmp.file("out").string()) + " 2>" + quote(tmp.file("err").string()) + " <" + quote(stdin_file);
  const int rc = std::system(cmd.c_str());
  RunResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(tmp.file("out"));
  r.err = slurp(tmp.file("err"));
  return r;
}

std::string stories() { return (zinc::test::testdata_dir() / "models/stories260K.gguf").string(); }

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

TEST(Cli, InspectSummarisesStories260K) {
  ZINC_REQUIRE_TESTDATA();
  const RunResult r = zinc({"inspect", stories()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string first_line = r.out.substr(0, r.out.find('\n'));
  for (const char* fact : {"llama", "5 blocks", "dim 64", "8 heads / 4 KV", "vocab 512", "48 tensors", "F32"}) {
    EXPECT_TRUE(contains(first_line, fact)) << "missing '" << fact << "' in: " << first_line;
  }
  EXPECT_TRUE(contains(r.out, "chat template none")) << r.out;
}

TEST(Cli, InspectJsonHasEverything) {
  ZINC_REQUIRE_TESTDATA();
  const RunResult r = zinc({"inspect", "--json", stories()});
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["hyperparameters"]["block_count"], 5);
  EXPECT_EQ(j["hyperparameters"]["embedding_length"], 64);
  EXPECT_EQ(j["hyperparameters"]["attention.head_count"], 8);
  EXPECT_EQ(j["hyperparameters"]["attention.head_count_kv"], 4);
  EXPECT_EQ(j["tokenizer"]["model"], "llama");
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 512);
  EXPECT_EQ(j["tokenizer"]["special"]["bos"]["text"], "<s>");
  EXPECT_EQ(j["tensor_count"], 48);
  ASSERT_EQ(j["tensor_types"].size(), 1u);
  EXPECT_EQ(j["tensor_types"][0]["type"], "F32");
  EXPECT_EQ(j["tensor_types"][0]["count"], 48);
  ASSERT_EQ(j["tensors"].size(), 48u);
  uint64_t params = 0, bytes = 0;
  for (const auto& t : j["tensors"]) {
    params += t["elements"].get<uint64_t>();
    bytes += t["bytes"].get<uint64_t>();
    EXPECT_EQ(t["bytes"].get<uint64_t>(), 4 * t["elements"].get<uint64_t>());  // F32
  }
  EXPECT_EQ(j["parameters"], params);
  EXPECT_EQ(j["size"], std::filesystem::file_size(stories()));
  EXPECT_LE(j["data_offset"].get<uint64_t>() + bytes, j["size"].get<uint64_t>());
  // The token array is cut to its first elements unless asked for in full.
  bool found = false;
  for (const auto& m : j["metadata"]) {
    if (m["key"] == "tokenizer.ggml.tokens") {
      found = true;
      EXPECT_EQ(m["count"], 512);
      EXPECT_EQ(m["truncated"], true);
      EXPECT_EQ(m["value"].size(), 16u);
    }
  }
  EXPECT_TRUE(found);
  const json full = json::parse(zinc({"inspect", "--json", "--full-arrays", stories()}).out);
  for (const auto& m : full["metadata"]) {
    if (m["key"] == "tokenizer.ggml.tokens") {
      EXPECT_EQ(m["value"].size(), 512u);
    }
  }
}

TEST(Cli, InspectListsTensors) {
  ZINC_REQUIRE_TESTDATA();
  const RunResult r = zinc({"inspect", "--tensors", stories()});
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  int listed = 0;
  for (std::string line; std::getline(lines, line);) {
    if (contains(line, ".weight")) ++listed;
    if (contains(line, "token_embd.weight")) {
      EXPECT_TRUE(contains(line, "[64, 512]")) << line;
    }
  }
  EXPECT_EQ(listed, 48);
}

TEST(Cli, InspectMetadataListsEveryKey) {
  ZINC_REQUIRE_TESTDATA();
  const RunResult r = zinc({"inspect", "--metadata", stories()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "general.architecture"));
  EXPECT_TRUE(contains(r.out, "[512 × string]"));
}

TEST(Cli, MissingFileIsOneClearError) {
  const RunResult r = zinc({"inspect", "/no/such/model.gguf"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: cannot open '/no/such/model.gguf': No such file or directory\n");
}

TEST(Cli, MalformedFileNamesTheOffset) {
  zinc::test::TempDir tmp;
  zinc::test::RawGguf g;
  g.header(0, 1).key("general.alignment", zinc::test::U32).u32(3);
  const auto path = tmp.file("bad.gguf");
  zinc::test::write_bytes(path, g.b);
  const RunResult r = zinc({"inspect", path.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: " + path.string() + ": byte 24: general.alignment is 3, which is not a power of two\n");
  const RunResult dir = zinc({"inspect", tmp.path().string()});
  EXPECT_EQ(dir.status, 1);
  EXPECT_TRUE(contains(dir.err, "is not a regular file")) << dir.err;
}

// No byte that a terminal obeys (ESC, BEL, the C1 range, stray bytes of broken UTF-8) in a text.
bool inert(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
      ++i;
      continue;
    }
    const size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (len == 0 || i + len > text.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return false;
    }
    if (c == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f) return false;  // U+0080..U+009F
    i += len;
  }
  return true;
}

TEST(Cli, InspectPrintsAFilesStringsInert) {
  // A model file whose name, keys and tensor names carry terminal controls: an OSC that retitles the
  // window, cursor movement, a C1 CSI and a lone 0x9b byte. inspect shows them as escapes.
  zinc::test::TempDir tmp;
  zinc::test::RawGguf g;
  const std::string osc = "\x1b]0;owned\x07", csi = "\x1b[2J\x1b[H", c1 = "\xc2\x9b" "31m", lone = "\x9b";
  g.header(1, 3);
  g.key("general.architecture", zinc::test::STR).str("llama" + csi);
  g.key("general.name", zinc::test::STR).str("model" + osc + c1);
  g.key("x." + lone + "key" + osc, zinc::test::U32).u32(1);
  g.tensor("tok" + csi + ".weight", {4}, 0, 0);
  g.pad(32).fill(16, 0);
  const auto path = tmp.file("hostile.gguf");
  zinc::test::write_bytes(path, g.b);
  const RunResult r = zinc({"inspect", "--metadata", "--tensors", path.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(inert(r.out)) << r.out;
  for (const char* shown : {"model\\x1b]0;owned\\x07\\u009b31m", "x.\\x9bkey\\x1b]0;owned\\x07", "tok\\x1b[2J\\x1b[H.weight",
                            "llama\\x1b[2J"}) {
    EXPECT_TRUE(contains(r.out, shown)) << shown << " in " << r.out;
  }
  // Errors quote names too.
  const RunResult missing = zinc({"inspect", tmp.file("no" + osc + ".gguf").string()});
  EXPECT_EQ(missing.status, 1);
  EXPECT_TRUE(inert(missing.err)) << missing.err;
  EXPECT_TRUE(contains(missing.err, "no\\x1b]0;owned\\x07.gguf")) << missing.err;
}

TEST(Cli, AFifoIsRefusedNotWaitedOn) {
  // Opening a FIFO for reading waits for a writer: run and inspect hung on one.
  zinc::test::TempDir tmp;
  const auto fifo = tmp.file("model.gguf");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"inspect", fifo.string()},
                                               std::vector<std::string>{"run", "-m", fifo.string(), "-p", "hi"}}) {
    const RunResult r = zinc(args);
    EXPECT_EQ(r.status, 1) << args[0];
    EXPECT_TRUE(contains(r.err, "is not a regular file")) << r.err;
  }
}

TEST(Cli, ThreadCountsBeyondTheMachineAreRefused) {
  ZINC_REQUIRE_TESTDATA();
  const RunResult r = zinc({"run", "-m", stories(), "-p", "Once", "-n", "1", "-t", "1000"});
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.err, "1000 threads: this machine has")) << r.err;
  EXPECT_EQ(zinc({"run", "-m", stories(), "-p", "Once", "-n", "1", "-t", "1"}).status, 0);
}

TEST(Cli, CheckReportsCpuAndBackends) {
  const RunResult r = zinc({"check", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_FALSE(j["cpu"]["name"].get<std::string>().empty());
  EXPECT_GT(j["memory"]["total_bytes"].get<uint64_t>(), 0u);
  ASSERT_GE(j["backends"].size(), 2u);
  EXPECT_EQ(j["backends"][0]["name"], "cpu");
  EXPECT_EQ(j["backends"][0]["ready"], true);
  for (const auto& b : j["backends"]) {
    EXPECT_FALSE(b["status"].get<std::string>().empty()) << b.dump();
    EXPECT_EQ(b["ready"].get<bool>(), !b["devices"].empty()) << b.dump();
    if (!b["compiled"].get<bool>()) {
      EXPECT_TRUE(contains(b["status"], "not compiled in")) << b.dump();
    }
  }
  const RunResult text = zinc({"check"});
  ASSERT_EQ(text.status, 0);
  EXPECT_TRUE(contains(text.out, "cpu     READY")) << text.out;
  for (const auto& b : j["backends"]) {
    std::string line_start = "\n";
    line_start += b["name"].get<std::string>();
    EXPECT_TRUE(contains(text.out, line_start)) << text.out;
  }
}

// ZINC_RT where it is built: `zinc check` lists its tiers, each with a reason where it is not ready,
// and `zinc rt-selftest` climbs its ladder, stopping at the first rung that fails (no KFD device at
// the path given) with status 1, the rungs above it not run.
TEST(Cli, ZincRtSaysWhichTierAndRungIsMissing) {
  const json j = json::parse(zinc({"check", "--json"}).out);
  const auto it = std::find_if(j["backends"].begin(), j["backends"].end(), [](const json& b) { return b["name"] == "zinc_rt"; });
  ASSERT_NE(it, j["backends"].end()) << "zinc_rt is missing from zinc check";
  if (!(*it)["compiled"].get<bool>()) GTEST_SKIP() << "zinc_rt not compiled in: " << (*it)["status"].get<std::string>();
  const std::string status = (*it)["status"];
  EXPECT_TRUE(contains(status, "tier T1 (KFD queues, PM4): ")) << status;
  EXPECT_TRUE(contains(status, "T2 (user-mode queues): NOT READY (")) << status;
  EXPECT_FALSE(contains(status, "not built yet")) << status;  // (the render nodes were asked, or there were none to ask)
  EXPECT_TRUE(contains(status, "T-CPU: READY")) << status;
  EXPECT_FALSE((*it)["ready"].get<bool>());
  const RunResult model = zinc({"run", "-m", "x.gguf", "-p", "x", "--backend", "zinc_rt"});
  EXPECT_EQ(model.status, 1);
  const RunResult r = zinc({"rt-selftest", "--kfd", "/nonexistent/kfd"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  const json rungs = json::parse(zinc({"--json", "rt-selftest", "--kfd", "/nonexistent/kfd"}).out);
  EXPECT_EQ(rungs["passed"], false);
  ASSERT_GE(rungs["rungs"].size(), 8u);
  if (contains(status, "no kernels (built without clang-19")) {
    // No AMDGPU compiler at build time: the ladder stops at its first rung, saying so.
    EXPECT_TRUE(contains(r.out, "rung 1 FAIL    the kernels are built")) << r.out;
    EXPECT_TRUE(contains(r.out, "built without an AMDGPU compiler")) << r.out;
    EXPECT_EQ(rungs["rungs"][1]["state"], "not run");
    return;
  }
  // Rung 1 (the kernels) passes where the build had clang-19 (deps.sh --test installs it).
  EXPECT_TRUE(contains(r.out, "rung 1 pass    the kernels are built for gfx1100, gfx1101, gfx1200, gfx1201")) << r.out;
  EXPECT_TRUE(contains(r.out, "rung 2 FAIL    the KFD device opens")) << r.out;
  EXPECT_TRUE(contains(r.out, "no /nonexistent/kfd")) << r.out;
  EXPECT_TRUE(contains(r.out, "rung 3 not run")) << r.out;
  EXPECT_EQ(rungs["rungs"][0]["state"], "pass");
  EXPECT_EQ(rungs["rungs"][1]["state"], "FAIL");
  EXPECT_EQ(rungs["rungs"][2]["state"], "not run");
}

TEST(Cli, CheckNamesTheKernelPathsAndZincCpuIsaCapsThem) {
  // The kernel table in use and those the CPU runs (best first, scalar last); ZINC_CPU_ISA picks a
  // lower one (scripts/test.sh runs the numeric tests on each), and a name it does not know is an error.
  const char* saved = std::getenv("ZINC_CPU_ISA");
  const std::string before = saved ? saved : "";
  unsetenv("ZINC_CPU_ISA");
  const json j = json::parse(zinc({"check", "--json"}).out);
  const auto available = j["cpu"]["kernels_available"].get<std::vector<std::string>>();
  ASSERT_FALSE(available.empty());
  EXPECT_EQ(available.back(), "scalar");
  EXPECT_EQ(j["cpu"]["kernels"], available.front());
  for (const auto& isa : available) {
    setenv("ZINC_CPU_ISA", isa.c_str(), 1);
    const RunResult r = zinc({"check", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["cpu"]["kernels"], isa);
    const RunResult text = zinc({"check"});
    EXPECT_TRUE(contains(text.out, "cpu kernels: " + isa + " ")) << text.out;
  }
  setenv("ZINC_CPU_ISA", "avx1024", 1);
  const RunResult bad = zinc({"check"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "ZINC_CPU_ISA=avx1024: expected scalar, avx2, avx512 or neon")) << bad.err;
  if (saved) {
    setenv("ZINC_CPU_ISA", before.c_str(), 1);
  } else {
    unsetenv("ZINC_CPU_ISA");
  }
}

TEST(Cli, CheckListsEveryKnobWithWhatIsSet) {
  // `zinc check -v` (and --json) list the environment variables zinc reads, with the values set now.
  setenv("ZINC_VULKAN_MV_ROWS", "3", 1);
  const RunResult text = zinc({"check", "-v"});
  const json j = json::parse(zinc({"check", "--json"}).out);
  unsetenv("ZINC_VULKAN_MV_ROWS");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "| ZINC_VULKAN_MV_ROWS | 3 | 1..8 |")) << text.out;
  EXPECT_TRUE(contains(text.out, "| ZINC_HOME | ")) << text.out;
  bool found = false;
  for (const auto& k : j["knobs"]) {
    if (k["name"] == "ZINC_VULKAN_MV_ROWS") {
      found = k["set"] == "3";
    } else if (k["name"] == "ZINC_CPU_ISA" && !std::getenv("ZINC_CPU_ISA")) {
      EXPECT_TRUE(k["set"].is_null());
    }
  }
  EXPECT_TRUE(found) << j["knobs"].dump();
  EXPECT_FALSE(contains(zinc({"check"}).out, "| ZINC_HOME")) << "the table is for -v";
}

TEST(Cli, CheckRequireFailsForAnUnavailableBackend) {
  const json j = json::parse(zinc({"check", "--json"}).out);
  for (const auto& b : j["backends"]) {
    const RunResult r = zinc({"check", "--require", b["name"]});
    EXPECT_EQ(r.status, b["ready"].get<bool>() ? 0 : 1) << b.dump();
  }
  const RunResult bad = zinc({"check", "--require", "abacus"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "unknown backend 'abacus'")) << bad.err;
}

TEST(Cli, VulkanSeesLavapipeWhenInstalled) {
  // CI installs mesa-vulkan-drivers, whose lavapipe is a real Vulkan device on the CPU.
  const json j = json::parse(zinc({"check", "--json"}).out);
  for (const auto& b : j["backends"]) {
    if (b["name"] != "vulkan") continue;
    if (!b["compiled"].get<bool>()) GTEST_SKIP() << "Vulkan backend not compiled in: " << b["status"];
    if (!std::filesystem::exists("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"))
      GTEST_SKIP() << "lavapipe (mesa-vulkan-drivers) is not installed";
    ASSERT_TRUE(b["ready"].get<bool>()) << b.dump();
    bool lavapipe = false;
    for (const auto& d : b["devices"]) lavapipe |= contains(d["name"], "llvmpipe") && d["kind"] == "CPU";
    EXPECT_TRUE(lavapipe) << b.dump();
    return;
  }
  GTEST_SKIP() << "no vulkan entry";
}

TEST(Cli, VersionMatchesTheBuild) {
  const RunResult r = zinc({"version"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind(std::string("zinc ") + ZINC_EXPECTED_VERSION + " (", 0), 0u) << r.out;
  const json j = json::parse(zinc({"--json", "version"}).out);
  EXPECT_EQ(j["version"], ZINC_EXPECTED_VERSION);
}

TEST(Cli, LoggingStaysOffStdout) {
  ZINC_REQUIRE_TESTDATA();
  const RunResult r = zinc({"-v", "inspect", "--json", stories()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(json::accept(r.out)) << r.out;
  EXPECT_TRUE(contains(r.err, "debug: parsed")) << r.err;
  const RunResult bad = zinc({"--log-level", "loud", "version"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "unknown log level 'loud'")) << bad.err;
}

TEST(Cli, RunContinuesAPromptGreedily) {
  ZINC_REQUIRE_TESTDATA();
  // stories260K's published greedy text from BOS starts with "Once upon a time": continuing that prompt
  // greedily must follow the published text.
  std::ifstream in(zinc::test::testdata_dir() / "models/stories260K.greedy200.txt");
  std::stringstream published;
  published << in.rdbuf();
  const RunResult r = zinc({"run", "-m", stories(), "-p", "Once upon a time", "-n", "40"});
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_GT(r.out.size(), 100u);
  const std::string text = r.out.substr(0, r.out.size() - 1);  // the final newline
  EXPECT_EQ(text, published.str().substr(0, text.size()));
  EXPECT_TRUE(contains(r.err, "tok/s")) << r.err;
  const json j = json::parse(zinc({"run", "--json", "-m", stories(), "-p", "Once upon a time", "-n", "8"}).out);
  EXPECT_EQ(j["tokens"].size(), 8u);
  EXPECT_EQ(j["prompt_tokens"], 5);  // BOS + 4
  EXPECT_GT(j["timings"]["decode_tokens_per_s"].get<double>(), 0.0);
  EXPECT_EQ(published.str().rfind("Once upon a time" + j["text"].get<std::string>(), 0), 0u) << j["text"];
  const RunResult full = zinc({"run", "-m", stories(), "-p", "Once upon a time", "-n", "5000", "-c", "256"});
  EXPECT_EQ(full.status, 1);
  EXPECT_TRUE(contains(full.err, "do not fit the context of 256")) << full.err;
}

// ZINC_CPU_PROFILE=1: the same text, and at exit a table per kind of step of the ops that ran, with the
// threads' idle share of each.
TEST(Cli, CpuProfilePrintsEachOpsTimeAndIdleShare) {
  ZINC_REQUIRE_TESTDATA();
  const std::vector<std::string> args = {"run", "-m", stories(), "-p", "Once upon a time", "-n", "6", "--backend", "cpu", "-t", "2"};
  const RunResult plain = zinc(args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_FALSE(contains(plain.err, "CPU profile")) << plain.err;
  ::setenv("ZINC_CPU_PROFILE", "1", 1);
  const RunResult r = zinc(args);
  ::unsetenv("ZINC_CPU_PROFILE");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  EXPECT_TRUE(contains(r.err, "CPU profile: 2 threads")) << r.err;
  const size_t prompt = r.err.find("prompt steps: 1 ("), decode = r.err.find("decode steps: ");
  ASSERT_NE(prompt, std::string::npos) << r.err;
  ASSERT_NE(decode, std::string::npos) << r.err;
  // Each table lists the products and the attention, with a time and an idle share in [0, 100]%.
  for (size_t at : {prompt, decode}) {
    const size_t end = r.err.find(" steps: ", at + 14);
    const std::string table = r.err.substr(at, end == std::string::npos ? std::string::npos : end - at);
    for (const char* op : {"matmul", "attention", "rms_norm"}) {
      const size_t line = table.find(std::string("\n  ") + op + " ");
      ASSERT_NE(line, std::string::npos) << op << " in\n" << table;
      std::istringstream row(table.substr(line + 1));
      std::string name, share, idle;
      double nodes = -1, ms = -1;
      row >> name >> nodes >> ms >> share >> idle;
      EXPECT_GT(nodes, 0) << table;
      EXPECT_GE(ms, 0.0) << table;
      ASSERT_FALSE(idle.empty()) << table;
      EXPECT_EQ(idle.back(), '%') << table;
      const double idle_pct = std::stod(idle);
      EXPECT_GE(idle_pct, 0.0) << table;
      EXPECT_LE(idle_pct, 100.0) << table;
    }
  }
}

TEST(Cli, AModelsOwnPredictionHeadDraftsAndChangesNothing) {
  // A checkpoint with Qwen3.5's multi-token-prediction head: converted with it, drafting with it by
  // default (--spec auto tries it, then judges it by its acceptance), always with --spec on, never with
  // off; the text is the same every way.
  zinc::test::TempDir tmp;
  const std::string model = tmp.file("m.gguf").string();
  const auto ckpt = zinc::test::mtp_checkpoint(ZINC_MTP_FIXTURES_DIR, "qwen3_5", tmp.path());
  ASSERT_EQ(zinc({"convert", ckpt.string(), model, "--outtype", "f32"}).status, 0);
  const auto run = [&](const std::string& spec) {
    return json::parse(zinc({"run", "--json", "-m", model, "-p", "The cat sat on the", "-n", "48", "-c", "256", "--spec", spec}).out);
  };
  const json off = run("off"), on = run("on"), automatic = run("auto");
  EXPECT_EQ(on["tokens"], off["tokens"]);
  EXPECT_EQ(automatic["tokens"], off["tokens"]);
  EXPECT_EQ(off["draft_tokens"].get<int>(), 0) << off.dump();
  EXPECT_GE(on["draft_tokens"].get<int>(), 3 * 40) << on.dump();  // 3 a step (the default for a head)
  EXPECT_GT(automatic["draft_tokens"].get<int>(), 0) << automatic.dump();
  EXPECT_LT(automatic["draft_tokens"].get<int>(), on["draft_tokens"].get<int>()) << automatic.dump();  // random weights: dropped
  // The bench measures the head's step as the drafting cost.
  const json b = json::parse(zinc({"bench", "--json", "-m", model, "-p", "8", "-n", "4", "--runs", "2", "--warmup", "0",
                                   "--spec-cost", "2"}).out);
  const json& spec = b["speculative"];
  EXPECT_EQ(spec["draft"], "mtp") << spec.dump();
  EXPECT_GT(spec["draft_step_ms"].get<double>(), 0.0) << spec.dump();
  EXPECT_EQ(spec["rows"].size(), 2u) << spec.dump();
}

TEST(Cli, RunSamplesReproduciblyAndStops) {
  ZINC_REQUIRE_TESTDATA();
  const std::vector<std::string> base = {"run", "--json", "-m", stories(), "-p", "Once upon a time", "-n", "40"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return json::parse(zinc(args).out);
  };
  const json a = with({"--temp", "1.0", "--seed", "42"});
  const json b = with({"--temp", "1.0", "--seed", "42"});
  const json c = with({"--temp", "1.0", "--seed", "43", "--top-k", "0", "--top-p", "1", "--min-p", "0"});
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(a["seed"], 42);
  EXPECT_NE(a["tokens"], c["tokens"]);  // a different seed over the full distribution
  // Greedy text is ", there was a little girl named Lily. ...": stopping at "Lily" ends right before it.
  const json s = with({"--stop", "Lily"});
  EXPECT_EQ(s["text"], ", there was a little girl named ");
  EXPECT_EQ(s["stopped_by"], "Lily");
  const RunResult bad = zinc({"run", "-m", stories(), "-p", "x", "--temp", "-1"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "temperature")) << bad.err;
}

TEST(Cli, RunChatAppliesATemplateAndSamplerOptions) {
  ZINC_REQUIRE_TESTDATA();
  // --chat: the prompt becomes a user message in ChatML (stories260K has no template of its own).
  const json c = json::parse(zinc({"run", "--json", "--chat", "-m", stories(), "-p", "Once upon a time", "-n", "12",
                                   "--system", "Tell a story."}).out);
  EXPECT_EQ(c["prompt_tokens"].get<int>() > 20, true) << c;
  EXPECT_EQ(c["content"], c["text"]);
  EXPECT_EQ(c["reasoning"], "");
  EXPECT_GT(c["timings"]["first_token_s"].get<double>(), 0.0);
  // Banning the greedy continuation's first token (",", id 432: llama.cpp's top token in the stories
  // oracle test) changes the text.
  const json plain = json::parse(zinc({"run", "--json", "-m", stories(), "-p", "Once upon a time", "-n", "4"}).out);
  ASSERT_EQ(plain["tokens"][0], 432);
  const json banned = json::parse(
      zinc({"run", "--json", "-m", stories(), "-p", "Once upon a time", "-n", "4", "--logit-bias", "432-inf"}).out);
  EXPECT_NE(banned["tokens"][0], 432);
  const RunResult bad_bias = zinc({"run", "-m", stories(), "-p", "x", "--logit-bias", "comma"});
  EXPECT_EQ(bad_bias.status, 1);
  EXPECT_TRUE(contains(bad_bias.err, "--logit-bias 'comma'")) << bad_bias.err;
  const RunResult bad_order = zinc({"run", "-m", stories(), "-p", "x", "--samplers", "top_k;nope"});
  EXPECT_EQ(bad_order.status, 1);
  EXPECT_TRUE(contains(bad_order.err, "unknown stage \"nope\"")) << bad_order.err;
  const RunResult both = zinc({"run", "-m", stories(), "-p", "x", "--chat", "--think", "--no-think"});
  EXPECT_NE(both.status, 0);
}

TEST(Cli, ReasoningBudgetConcludesTheThinkingAndAnswers) {
  ZINC_REQUIRE_TESTDATA();
  // Qwen3.5's template opens the reasoning block; stories260K never closes it, so without a budget the
  // whole answer is reasoning. With --reasoning-budget 5 the closing sentence follows 5 tokens of it,
  // and the rest is the answer.
  const std::string tmpl = (zinc::test::testdata_dir() / "templates/Qwen3.5-4B.jinja").string();
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "--json", "--chat", "-m", stories(), "-p", "Once upon a time", "-n", "100",
                                     "--chat-template", tmpl};
    args.insert(args.end(), extra.begin(), extra.end());
    return json::parse(zinc(args).out);
  };
  const json free = run({});
  const json limited = run({"--reasoning-budget", "5"});
  EXPECT_EQ(free["content"], "");
  const std::string sentence =
      "Considering the limited time by the user, I have to give the solution based on the thinking directly now.";
  const std::string r = limited["reasoning"];
  ASSERT_TRUE(r.ends_with(sentence)) << limited;
  EXPECT_TRUE(free["reasoning"].get<std::string>().starts_with(r.substr(0, r.size() - sentence.size() - 2))) << limited;
  EXPECT_NE(limited["content"], "");
  EXPECT_EQ(limited["tokens"].size(), 100u) << limited;
  EXPECT_EQ(limited["reasoning_concluded"], true);
  EXPECT_EQ(free["reasoning_concluded"], false);
  EXPECT_EQ(free["reasoning_tokens"], 100);
  EXPECT_GT(limited["reasoning_tokens"].get<int>(), 5);
  EXPECT_LT(limited["reasoning_tokens"].get<int>(), 100);
  const RunResult bad = zinc({"run", "-m", stories(), "-p", "x", "--chat", "--reasoning-budget", "-3"});
  EXPECT_NE(bad.status, 0);
}

TEST(Cli, ValidateComparesABackendWithTheCpu) {
  ZINC_REQUIRE_TESTDATA();
  // The CPU against itself: every tensor identical, exit 0, one entry per graph node.
  const RunResult same = zinc({"validate", "--json", "-m", stories(), "--backend", "cpu", "-p", "Once upon a time"});
  ASSERT_EQ(same.status, 0) << same.err;
  const json j = json::parse(same.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_TRUE(j["first_divergence"].is_null());
  ASSERT_GT(j["tensors"].size(), 20u);
  for (const auto& t : j["tensors"]) EXPECT_EQ(t["max_abs_err"].get<double>(), 0.0) << t.dump();
  EXPECT_EQ(j["tensors"][0]["tensor"], "inp_embd");
  // Float weights (stories260K is F32): the tight tolerance; quantized (the same model in Q8_0): 2%.
  EXPECT_EQ(j["tolerance"].get<double>(), 1e-4);
  EXPECT_EQ(j["tolerance_basis"], "float weights");
  {
    zinc::test::TempDir tmp;
    const std::string q8 = tmp.file("stories-q8_0.gguf").string();
    const RunResult made = zinc({"quantize", stories(), q8, "Q8_0"});
    ASSERT_EQ(made.status, 0) << made.err;
    const RunResult quantized = zinc({"validate", "--json", "-m", q8, "--backend", "cpu", "-p", "Once upon a time"});
    ASSERT_EQ(quantized.status, 0) << quantized.err;
    const json jq = json::parse(quantized.out);
    EXPECT_EQ(jq["tolerance"].get<double>(), 0.02);
    EXPECT_EQ(jq["tolerance_basis"], "quantized weights");
    const RunResult given = zinc({"validate", "--json", "-m", q8, "--backend", "cpu", "--tolerance", "0.5"});
    ASSERT_EQ(given.status, 0) << given.err;
    EXPECT_EQ(json::parse(given.out)["tolerance_basis"], "given");
  }
  // A tolerance below zero flags the first tensor, and the exit status says so.
  const RunResult strict = zinc({"validate", "-m", stories(), "--backend", "cpu", "--tolerance", "-1"});
  EXPECT_EQ(strict.status, 1);
  EXPECT_TRUE(contains(strict.out, "first divergence: inp_embd")) << strict.out;
  const RunResult bad = zinc({"validate", "-m", stories(), "--backend", "abacus"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "unknown backend 'abacus'")) << bad.err;
  // A prompt step (the reference) against single steps: the last token's rows of every tensor, which
  // the CPU's prompt and decode kernels make identical.
  const RunResult split = zinc({"validate", "--json", "-m", stories(), "--backend", "cpu", "-p", "Once upon a time there was a girl",
                                "--batch", "1", "--reference-batch", "0"});
  ASSERT_EQ(split.status, 0) << split.err;
  const json js = json::parse(split.out);
  EXPECT_EQ(js["batch"], 1);
  EXPECT_EQ(js["reference_batch"], js["tokens"]);
  EXPECT_GT(js["tokens"].get<int>(), 5);
  EXPECT_EQ(js["tensors"].size(), j["tensors"].size());
  for (const auto& t : js["tensors"]) EXPECT_EQ(t["max_abs_err"].get<double>(), 0.0) << t.dump();
  // Steps of 3 against steps of 5 over the same tokens: still the rows both last steps hold.
  const RunResult ragged = zinc({"validate", "--json", "-m", stories(), "--backend", "cpu", "-p", "Once upon a time there was a girl",
                                 "--batch", "3", "--reference-batch", "5"});
  ASSERT_EQ(ragged.status, 0) << ragged.err;
  for (const auto& t : json::parse(ragged.out)["tensors"]) EXPECT_EQ(t["max_abs_err"].get<double>(), 0.0) << t.dump();
  // Vulkan where there is a device (lavapipe in CI): with the decode kernels (float products of the
  // F32 weights) the real model's tensors agree to float rounding. Each element of a tensor is a chain
  // of a few reductions of at most n = 512 terms (stories260K's widest is 172), each within n·u of its
  // terms' magnitudes on either side (Higham §4.2, u = 2^-24; 1.0e-5 at n = 172), and Vulkan's exp within
  // 3 + 2|x| ulps adds less than 1e-6: 1e-4 of a tensor's scale allows about five such worst cases on each
  // side, as the fixtures' float32 comparison does. The prompt kernels take float weights in float too,
  // so the default for float weights (the same 1e-4) holds for a whole-prompt step.
  if (!std::filesystem::exists("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json") && std::getenv("ZINC_VULKAN_DEVICE") == nullptr) {
    GTEST_SKIP() << "no Vulkan device to compare (install mesa-vulkan-drivers)";
  }
  const RunResult vk = zinc({"validate", "--json", "-m", stories(), "--backend", "vulkan", "--tolerance", "1e-4", "--batch", "4"});
  ASSERT_EQ(vk.status, 0) << vk.out << vk.err;
  EXPECT_TRUE(json::parse(vk.out)["same_next_token"].get<bool>());
  const RunResult gemm = zinc({"validate", "-m", stories(), "--backend", "vulkan"});
  EXPECT_EQ(gemm.status, 0) << gemm.out << gemm.err;
  EXPECT_TRUE(contains(gemm.out, "tolerance 0.0001, float weights")) << gemm.out;
}

// Runs a bash script; returns its stdout.
std::string bash(const std::string& script) {
  zinc::test::TempDir tmp;
  const auto file = tmp.file("script.sh");
  std::ofstream(file) << script;
  const std::string cmd = "bash " + quote(file.string()) + " >" + quote(tmp.file("out").string()) + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(tmp.file("out"));
  return slurp(tmp.file("out"));
}

TEST(Cli, CompletionsAndManualPageFollowTheCommandLine) {
  // Every command the binary has (from its own help) must appear in each script and in the manual.
  const RunResult help = zinc({"--help"});
  std::vector<std::string> commands;
  std::istringstream lines(help.out);
  bool in_commands = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("Subcommands:")) in_commands = true;
    else if (in_commands && line.size() > 2 && line[0] == ' ') commands.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  ASSERT_GE(commands.size(), 15u) << help.out;

  // bash: drive the completion function as bash's completion would.
  zinc::test::TempDir tmp;
  const RunResult b = zinc({"completion", "bash"});
  ASSERT_EQ(b.status, 0) << b.err;
  std::ofstream(tmp.file("zinc.bash")) << b.out;
  std::filesystem::create_directories(tmp.file("models"));
  std::ofstream(tmp.file("models/tiny.gguf")) << "x";
  const std::string got = bash("source " + quote(tmp.file("zinc.bash").string()) + "\ncd " + quote(tmp.file("models").string()) +
                               "\nt() { COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _zinc; "
                               "echo \"$*|${COMPREPLY[*]}\"; }\n"
                               "t zinc ch\nt zinc chat --hide\nt zinc --log-level warn ser\nt zinc serve --por\n"
                               "t zinc run -m ti\nt zinc quantize --thr\nt zinc ''\n");
  EXPECT_TRUE(contains(got, "zinc ch|chat check\n")) << got;
  EXPECT_TRUE(contains(got, "zinc chat --hide|--hide-thinking\n")) << got;
  EXPECT_TRUE(contains(got, "zinc --log-level warn ser|serve\n")) << got;  // a global option's value skipped
  EXPECT_TRUE(contains(got, "zinc serve --por|--port\n")) << got;
  EXPECT_TRUE(contains(got, "zinc run -m ti|tiny.gguf\n")) << got;  // an option's value: a file name
  EXPECT_TRUE(contains(got, "zinc quantize --thr|--threads\n")) << got;
  for (const auto& c : commands) EXPECT_TRUE(contains(got.substr(got.rfind("zinc |")), " " + c) || contains(got, "zinc |" + c)) << c;

  // zsh and fish: each command with its description.
  const RunResult z = zinc({"completion", "zsh"}), f = zinc({"completion", "fish"});
  ASSERT_EQ(z.status, 0);
  ASSERT_EQ(f.status, 0);
  EXPECT_TRUE(z.out.starts_with("#compdef zinc\n")) << z.out.substr(0, 100);
  for (const auto& c : commands) {
    EXPECT_TRUE(contains(z.out, "    '" + c + ":")) << c;
    EXPECT_TRUE(contains(f.out, " -a " + c + " -d ")) << c;
  }
  EXPECT_TRUE(contains(f.out, "complete -c zinc -n '__fish_seen_subcommand_from chat' -l hide-thinking -d ")) << f.out;
  const RunResult bad = zinc({"completion", "tcsh"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "tcsh")) << bad.err;

  // The manual page: every command, and valid roff (groff reports no warnings).
  const RunResult man = zinc({"manpage"});
  ASSERT_EQ(man.status, 0);
  EXPECT_TRUE(man.out.starts_with(".TH ZINC 1 ")) << man.out.substr(0, 80);
  for (const auto& c : commands) {
    std::string roff_name;  // a hyphen in roff text is written \-
    for (const char ch : c) roff_name += ch == '-' ? std::string("\\-") : std::string(1, ch);
    EXPECT_TRUE(contains(man.out, ".SS " + roff_name)) << c;
  }
  std::ofstream(tmp.file("zinc.1")) << man.out;
  EXPECT_EQ(bash("groff -ww -man -z " + quote(tmp.file("zinc.1").string())), "");
  EXPECT_FALSE(contains(help.out, "manpage")) << "the build's helper command is listed";
}

TEST(Cli, LongWritesShowTheirProgress) {
  // Not a terminal here: one line per tenth on stderr (a terminal gets one line redrawn in place), and
  // nothing with --json.
  ZINC_REQUIRE_TESTDATA();
  zinc::test::TempDir tmp;
  const RunResult r = zinc({"quantize", stories(), tmp.file("q.gguf").string(), "Q8_0"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "quantize: 50% (")) << r.err;
  EXPECT_TRUE(contains(r.err, "quantize: 100% (1.12 MiB of 1.12 MiB)\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "\r")) << r.err;
  const RunResult j = zinc({"--json", "quantize", stories(), tmp.file("j.gguf").string(), "Q8_0"});
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_FALSE(contains(j.err, "%")) << j.err;
}

// The user's types over a mixture's: the written file holds them (its header, as zinc inspect reads it, not
// the quantizer's report), it loads and runs; a spec that cannot be taken is a clear error before anything is
// written.
TEST(Cli, QuantizeTakesTheUsersTensorTypes) {
  ZINC_REQUIRE_TESTDATA();
  zinc::test::TempDir tmp;
  const std::string out = tmp.file("q.gguf").string();
  const RunResult r = zinc({"quantize", "--tensor-type", "attn_v=q8_0", stories(), out, "Q4_0", "--tensor-type",
                            R"(blk\.[0-1]\.attn_q=q5_1)", "--output-tensor-type", "F16", "--token-embedding-type", "q8_0",
                            "--tensor-type", "atn_k=q8_0"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "--tensor-type 'atn_k' matched no matrix")) << r.err;  // misspelt: said, not fatal
  EXPECT_FALSE(contains(r.err, "'attn_v' matched no")) << r.err;
  const RunResult inspect = zinc({"--json", "inspect", out});
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  const json header = json::parse(inspect.out);
  int attn_v = 0;
  for (const json& t : header["tensors"]) {
    const std::string n = t["name"], type = t["type"];
    if (contains(n, "attn_v.weight")) {
      EXPECT_EQ(type, std::string("Q8_0")) << n;
      ++attn_v;
    }
    std::string want;
    if (contains(n, "attn_q.weight")) want = n.starts_with("blk.0.") || n.starts_with("blk.1.") ? "Q5_1" : "Q4_0";
    if (contains(n, "attn_k.weight")) want = "Q4_0";  // the mixture's
    if (n == "output.weight") want = "F16";
    if (n == "token_embd.weight") want = "Q8_0";
    if (!want.empty()) {
      EXPECT_EQ(type, want) << n;
    }
  }
  EXPECT_EQ(attn_v, 5);
  const RunResult run = zinc({"run", "-m", out, "-p", "Once upon a time", "-n", "8", "--temp", "0"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "Once upon a time,")) << run.out;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--tensor-type", "attn_v"}, {"--tensor-type", "attn_v=q3_q"}, {"--tensor-type", "(=f16"},
        {"--output-tensor-type", "int4"}, {"--leave-output-tensor", "--output-tensor-type", "f16"}}) {
    std::vector<std::string> args{"quantize", stories(), tmp.file("bad.gguf").string(), "Q4_0"};
    args.insert(args.end(), bad.begin(), bad.end());
    const RunResult b = zinc(args);
    EXPECT_NE(b.status, 0) << bad[1];
    EXPECT_TRUE(contains(b.err, "error: ")) << b.err;
    EXPECT_FALSE(std::filesystem::exists(tmp.file("bad.gguf"))) << bad[1];
  }
}

TEST(Cli, BenchReportsSpeedBandwidthAndRatios) {
  ZINC_REQUIRE_TESTDATA();
  zinc::test::TempDir home;
  setenv("ZINC_HOME", home.file("zinc").c_str(), 1);  // the bandwidth cache goes there
  const RunResult r = zinc({"bench", "--json", "-m", stories(), "-p", "16", "-n", "8", "--runs", "2", "--warmup", "0"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_GT(j["read_bandwidth_gb_per_s"].get<double>(), 0.1);
  ASSERT_EQ(j["results"].size(), 2u);
  const json& pp = j["results"][0];
  const json& tg = j["results"][1];
  EXPECT_EQ(pp["test"], "pp16");
  EXPECT_EQ(tg["test"], "tg8");
  for (const json& t : {pp, tg}) {
    EXPECT_EQ(t["samples"].size(), 2u);
    EXPECT_GT(t["min"].get<double>(), 0.0);
    EXPECT_LE(t["min"].get<double>(), t["tokens_per_s"].get<double>());
    EXPECT_LE(t["tokens_per_s"].get<double>(), t["max"].get<double>());
  }
  EXPECT_GT(pp["first_token_ms"].get<double>(), 0.0);
  // Bytes per decoded token, from the file's tensor table: every weight except the (untied) embedding,
  // one embedding row, and F16 K and V rows of every layer for the 5 tokens attended mid-run.
  const json info = json::parse(zinc({"inspect", "--json", "--tensors", stories()}).out);
  uint64_t weights = 0;
  for (const auto& t : info["tensors"]) {
    const uint64_t bytes = t["bytes"].get<uint64_t>();
    weights += t["name"] == "token_embd.weight" ? bytes / t["shape"][1].get<uint64_t>() : bytes;
  }
  const auto& hp = info["hyperparameters"];
  const uint64_t kv_width = hp["attention.head_count_kv"].get<uint64_t>() * hp["embedding_length"].get<uint64_t>() /
                            hp["attention.head_count"].get<uint64_t>();
  const uint64_t kv = hp["block_count"].get<uint64_t>() * 2 * kv_width * 2 * 5;
  EXPECT_EQ(tg["bytes_per_token"].get<uint64_t>(), weights + kv);
  EXPECT_NEAR(tg["gb_per_s"].get<double>(), tg["bytes_per_token"].get<double>() * tg["tokens_per_s"].get<double>() / 1e9, 1e-6);

  // --parallel 4: four sequences decoded together. A step reads the weights once and each sequence's
  // embedding row and cache rows; tok/s counts every sequence's tokens.
  const json par = json::parse(
      zinc({"bench", "--json", "-m", stories(), "-p", "0", "-n", "8", "--parallel", "4", "--runs", "1", "--warmup", "0"}).out);
  ASSERT_EQ(par["results"].size(), 2u);
  const json& x4 = par["results"][1];
  EXPECT_EQ(x4["test"], "tg8 x4");
  EXPECT_GT(x4["tokens_per_s"].get<double>(), 0.0);
  uint64_t embd_row = 0;
  for (const auto& t : info["tensors"]) {
    if (t["name"] == "token_embd.weight") embd_row = t["bytes"].get<uint64_t>() / t["shape"][1].get<uint64_t>();
  }
  EXPECT_EQ(x4["bytes_per_token"].get<uint64_t>(), (weights - embd_row + 4 * (embd_row + kv)) / 4);

  // --concurrency 2: four requests at once through the server's scheduler.
  const json con = json::parse(zinc({"bench", "--json", "-m", stories(), "-p", "8", "-n", "16", "--concurrency", "2",
                                     "--runs", "1", "--warmup", "0"}).out);
  ASSERT_EQ(con["concurrency"].size(), 1u) << con.dump();
  const json& c2 = con["concurrency"][0];
  EXPECT_EQ(c2["concurrency"], 2);
  EXPECT_EQ(c2["requests"], 4);
  EXPECT_EQ(c2["generated_tokens"], 16);
  EXPECT_GT(c2["aggregate_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(c2["request_tokens_per_s_p50"].get<double>(), 0.0);
  EXPECT_LE(c2["first_token_ms_p50"].get<double>(), c2["first_token_ms_p99"].get<double>());
  EXPECT_LE(c2["inter_token_ms_p50"].get<double>(), c2["inter_token_ms_p99"].get<double>());
  EXPECT_TRUE(c2["long_prompt"].is_null());
  // --long-prompt: 64 tokens arriving while two streams decode, read at most 16 tokens a step (two of
  // them the streams'): at least five steps, each a gap of both streams, before its first token. The
  // streams are long (it arrives after a quarter of their 400 tokens) so that on a loaded machine they
  // cannot end before it is read.
  const json lp = json::parse(zinc({"bench", "--json", "-m", stories(), "-p", "8", "-n", "400", "--concurrency", "2",
                                    "--long-prompt", "64", "--batch-tokens", "16", "--runs", "1", "--warmup", "0"}).out);
  const json& l = lp["concurrency"][0]["long_prompt"];
  ASSERT_TRUE(l.is_object()) << lp.dump();
  EXPECT_EQ(l["tokens"], 64);
  EXPECT_GE(l["streams_gaps_during"].get<int>(), 8) << l;
  EXPECT_GT(l["streams_inter_token_ms_p50_before"].get<double>(), 0.0) << l;
  EXPECT_GT(l["streams_inter_token_ms_p99_during"].get<double>(), 0.0) << l;
  EXPECT_GT(l["first_token_ms"].get<double>(), 0.0) << l;
  EXPECT_GT(l["first_token_ms_alone"].get<double>(), 0.0) << l;

  // --compare against the run above; --vs-llama-cpp with a stand-in that prints llama-bench's JSON.
  std::ofstream(home.file("base.json")) << r.out;
  std::ofstream(home.file("llama-bench")) << "#!/bin/sh\necho \"$*\" > \"$(dirname \"$0\")/llama-args\"\n"
                                             "echo '[{\"n_prompt\": 16, \"n_gen\": 0, \"avg_ts\": 1000.0},"
                                             " {\"n_prompt\": 0, \"n_gen\": 8, \"avg_ts\": 50.0}]'\n";
  std::filesystem::permissions(home.file("llama-bench"), std::filesystem::perms::owner_all);
  const json c = json::parse(zinc({"bench", "--json", "-m", stories(), "-p", "16", "-n", "8", "--runs", "1", "--warmup",
                                   "0", "--compare", home.file("base.json").string(), "--vs-llama-cpp",
                                   home.file("llama-bench").string()}).out);
  for (const auto& t : c["results"]) {
    EXPECT_GT(t["ratio_to_baseline"].get<double>(), 0.0) << t;
    const double theirs = t["test"] == "pp16" ? 1000.0 : 50.0;
    EXPECT_EQ(t["llama_cpp_tokens_per_s"].get<double>(), theirs);
    EXPECT_NEAR(t["ratio_to_llama_cpp"].get<double>(), t["tokens_per_s"].get<double>() / theirs, 1e-9);
  }
  // The same tests, cache type and (on the CPU) no offload.
  std::string args;
  std::getline(std::ifstream(home.file("llama-args")), args);
  for (const char* want : {"-p 16", "-n 8", "-r 1", "-ctk f16", "-ctv f16", "-ngl 0", "-fa 0", "-o json"}) {
    EXPECT_NE(args.find(want), std::string::npos) << want << " in: " << args;
  }
  // A suite with a multi-turn chat: after the first turn, only the new user tokens (and the last answer
  // token, sampled but never evaluated) are evaluated.
  std::ofstream(home.file("suite.json"))
      << R"({"tests": [{"generate": 4, "depth": 8}, {"chat": {"system": 100, "turns": 3, "user": 10, "answer": 5}}]})";
  const json s = json::parse(
      zinc({"bench", "--json", "-m", stories(), "--suite", home.file("suite.json").string(), "--runs", "1"}).out);
  EXPECT_EQ(s["results"][0]["test"], "tg4@d8");
  const auto& turns = s["chats"][0]["turns"];
  ASSERT_EQ(turns.size(), 3u);
  EXPECT_EQ(turns[0]["evaluated_tokens"], 110);
  EXPECT_EQ(turns[1]["prompt_tokens"], 125);
  EXPECT_EQ(turns[1]["evaluated_tokens"], 11);
  EXPECT_EQ(turns[2]["evaluated_tokens"], 11);
  std::ofstream(home.file("bad.json")) << R"({"tests": [{"prompt": 8, "generate": 8}]})";
  const RunResult bad = zinc({"bench", "-m", stories(), "--suite", home.file("bad.json").string()});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "test 1: a test measures a prompt or a generation")) << bad.err;
  const RunResult table = zinc({"bench", "-m", stories(), "-p", "16", "-n", "8", "--runs", "1", "--warmup", "0"});
  EXPECT_TRUE(contains(table.out, "| tg8 |")) << table.out;
  EXPECT_TRUE(contains(table.out, "% of BW roofline")) << table.out;
  unsetenv("ZINC_HOME");
}

TEST(Cli, TakesLlamaCppFlags) {
  // -ngl (0: the CPU; more: the GPU, the model whole), --temperature, -p - (standard input), -f FILE;
  // a backend zinc does not have yet is named as such, not as unknown.
  ZINC_REQUIRE_TESTDATA();
  zinc::test::TempDir tmp;
  std::ofstream(tmp.file("prompt.txt")) << "Once upon a time";
  const auto run = [&](std::vector<std::string> extra, const std::string& in = "/dev/null") {
    std::vector<std::string> args{"run", "--json", "-m", stories(), "-n", "6"};
    args.insert(args.end(), extra.begin(), extra.end());
    return zinc(args, in);
  };
  const RunResult direct = run({"-p", "Once upon a time"});
  ASSERT_EQ(direct.status, 0) << direct.err;
  const std::string text = json::parse(direct.out)["text"];
  for (const auto& [what, r] : std::vector<std::pair<std::string, RunResult>>{
           {"-p -", run({"-p", "-"}, tmp.file("prompt.txt").string())},
           {"-f", run({"-f", tmp.file("prompt.txt").string()})},
           {"-ngl 0 --temperature 0", run({"-p", "Once upon a time", "-ngl", "0", "--temperature", "0"})}}) {
    ASSERT_EQ(r.status, 0) << what << ": " << r.err;
    EXPECT_EQ(json::parse(r.out)["text"], text) << what;
  }
  EXPECT_EQ(json::parse(run({"-p", "x", "-ngl", "0"}).out)["backend"], "cpu");
  EXPECT_EQ(run({"-p", "x", "-ngl", "99"}).status, 0);
  const RunResult none = run({});
  EXPECT_EQ(none.status, 1);
  EXPECT_TRUE(contains(none.err, "no prompt: give -p TEXT, -p - (standard input) or -f FILE")) << none.err;
  const RunResult metal = run({"-p", "x", "--backend", "metal"});
  EXPECT_EQ(metal.status, 1);
  EXPECT_TRUE(contains(metal.err, "the metal backend is not in this zinc yet")) << metal.err;
  // CUDA runs where an NVIDIA GPU is visible; elsewhere it says why it cannot.
  const RunResult cuda = run({"-p", "x", "--backend", "cuda"});
  if (cuda.status != 0) {
    EXPECT_EQ(cuda.status, 1);
    EXPECT_TRUE(contains(cuda.err, "no CUDA device") || contains(cuda.err, "built without CUDA")) << cuda.err;
  }
}

TEST(Cli, TakesTheModelWithOrWithoutDashM) {
  ZINC_REQUIRE_TESTDATA();
  const RunResult a = zinc({"run", stories(), "-p", "Once upon a time", "-n", "5", "--json"});
  const RunResult b = zinc({"run", "-m", stories(), "-p", "Once upon a time", "-n", "5", "--json"});
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(json::parse(a.out)["text"], json::parse(b.out)["text"]);
  const RunResult i1 = zinc({"inspect", "--json", stories()}), i2 = zinc({"inspect", "--json", "-m", stories()});
  ASSERT_EQ(i2.status, 0) << i2.err;
  EXPECT_EQ(i1.out, i2.out);
  // Not in a terminal, `zinc run MODEL` without a prompt says what is missing (in one, it opens a
  // chat: tests/cli/chat_tmux.sh).
  const RunResult none = zinc({"run", stories()});
  EXPECT_EQ(none.status, 1);
  EXPECT_TRUE(contains(none.err, "no prompt")) << none.err;
}

TEST(Cli, WarnsOfAContextPastTrainingAndAMissingTemplate) {
  ZINC_REQUIRE_TESTDATA();  // stories260K: trained on 2048 tokens, no chat template
  const RunResult wide = zinc({"run", stories(), "-p", "Once", "-n", "2", "-c", "4096"});
  EXPECT_EQ(wide.status, 0) << wide.err;
  EXPECT_TRUE(contains(wide.err, "-c 4096 is beyond the 2048 tokens this model was trained on")) << wide.err;
  const RunResult fits = zinc({"run", stories(), "-p", "Once", "-n", "2", "-c", "2048"});
  EXPECT_FALSE(contains(fits.err, "beyond")) << fits.err;
  const RunResult chat = zinc({"run", stories(), "-p", "Once", "-n", "2", "--chat"});
  EXPECT_TRUE(contains(chat.err, "the model has no chat template: ChatML is assumed")) << chat.err;
}

TEST(Cli, UsageErrors) {
  const RunResult none = zinc({});  // no subcommand: the usage, listing the subcommands
  EXPECT_EQ(none.status, 0);
  for (const char* sub : {"inspect", "check", "version"}) EXPECT_TRUE(contains(none.out, sub)) << none.out;
  // Every usage error is one "error:" line and status 1, as the README promises for any failure; a
  // misspelt command or option gets the nearest one.
  const auto one_error = [](const RunResult& r, const std::string& says) {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(r.err.rfind("error: ", 0) == 0 && std::count(r.err.begin(), r.err.end(), '\n') == 1) << r.err;
    EXPECT_TRUE(contains(r.err, says)) << r.err;
  };
  one_error(zinc({"frobnicate"}), "unknown command 'frobnicate'");
  one_error(zinc({"runn", "-p", "x"}), "unknown command 'runn'; did you mean 'run'?");
  one_error(zinc({"inspect"}), "--model is required");
  one_error(zinc({"run", "--promt", "x"}), "unknown option --promt; did you mean --prompt?");
  one_error(zinc({"serve", "-m", "x.gguf", "--paralel", "4"}), "unknown option --paralel; did you mean --parallel?");
  one_error(zinc({"run", "-m"}), "--model");
  const RunResult help = zinc({"run", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_TRUE(contains(help.out, "--prompt")) << help.out;
}

}  // namespace
