// ZINC_RT's code objects (built for every listed target at build time, embedded) read by its parser,
// against LLVM's own reading of the same bytes (llvm-readelf: the ELF header's target, the symbols,
// the AMDGPU metadata note): the target, each kernel's descriptor address and entry point, its
// kernel-argument, local and private memory sizes, wave size, and a vector-register allocation that
// holds the registers the compiler counted. Then bytes that are not a code object, each refused with
// what is wrong.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "backend/zinc_rt/code_object.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {
namespace {

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  ::pclose(p);
  return out;
}

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" '"), b = s.find_last_not_of(" '");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

TEST(CodeObject, MatchesWhatLlvmReadsInTheSameBytes) {
  const auto names = code_object_bytes_names();
  if (names.empty()) GTEST_SKIP() << "this build had no AMDGPU compiler (clang-19 or later with ld.lld): no code objects";
  const std::string readelf = ZINC_LLVM_READELF;
  ASSERT_FALSE(readelf.empty()) << "code objects were built but llvm-readelf was not found (install llvm-19)";
  ASSERT_EQ(names.size(), 8u) << "2 kernels x 4 targets";
  const auto dir = std::filesystem::temp_directory_path() / ("zinc_co_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string_view name : names) {
    const std::span<const uint8_t> bytes = code_object_bytes(name);
    const CodeObject co = parse_code_object(bytes);
    const std::string n(name), kernel = n.substr(0, n.find('-')), target = n.substr(n.find('-') + 1);
    EXPECT_EQ(co.target, target) << n;
    ASSERT_EQ(co.kernels.size(), 1u) << n;
    const KernelInfo& k = co.kernels[0];
    EXPECT_EQ(k.name, kernel);
    const auto file = dir / (n + ".hsaco");
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const std::string out = run(readelf + " -h -s --notes " + file.string());
    // The header's flags name the target: "Flags: 0x41, gfx1100".
    EXPECT_NE(out.find(", " + target + "\n"), std::string::npos) << out;
    // Symbols: "N: ADDRESS SIZE TYPE ... NAME" for NAME.kd (OBJECT, 64 bytes) and NAME (FUNC).
    std::map<std::string, uint64_t> sym;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream f(line);
      std::string num, value, size, type, bind, vis, ndx, sname;
      if (f >> num >> value >> size >> type >> bind >> vis >> ndx >> sname && num.back() == ':' && (type == "OBJECT" || type == "FUNC"))
        sym[sname] = std::stoull(value, nullptr, 16);
    }
    EXPECT_EQ(sym.at(kernel + ".kd"), k.descriptor_address) << n;
    EXPECT_EQ(sym.at(kernel), k.entry_address) << n;
    // The metadata note's kernel map: "    .key: value" lines.
    std::map<std::string, std::string> meta;
    std::istringstream notes(out);
    for (std::string line; std::getline(notes, line);) {
      if (line.rfind("    .", 0) != 0 || line.size() < 6 || line[5] == ' ') continue;
      const size_t colon = line.find(':');
      if (colon != std::string::npos) meta[trim(line.substr(4, colon - 4))] = trim(line.substr(colon + 1));
    }
    ASSERT_EQ(meta[".name"], kernel) << out;
    EXPECT_EQ(std::to_string(k.kernarg_bytes), meta[".kernarg_segment_size"]) << n;
    EXPECT_EQ(std::to_string(k.group_segment_bytes), meta[".group_segment_fixed_size"]) << n;
    EXPECT_EQ(std::to_string(k.private_segment_bytes), meta[".private_segment_fixed_size"]) << n;
    EXPECT_EQ(k.wave32() ? "32" : "64", meta[".wavefront_size"]) << n;
    const uint32_t counted = static_cast<uint32_t>(std::stoul(meta[".vgpr_count"]));
    EXPECT_GE(k.vgprs(), counted) << n;
    EXPECT_LT(k.vgprs(), counted + (k.wave32() ? 8u : 4u)) << n << ": the allocation is the count rounded up to a granule";
  }
  std::filesystem::remove_all(dir);
}

TEST(CodeObject, RefusesWhatIsNotOne) {
  const auto refused = [](std::vector<uint8_t> b, const std::string& why) {
    try {
      (void)parse_code_object(b);
      ADD_FAILURE() << "accepted; expected: " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused(std::vector<uint8_t>(100, 0), "not an ELF file");
  std::vector<uint8_t> elf(64, 0);
  std::memcpy(elf.data(), "\x7f" "ELF", 4);
  elf[4] = 1;
  elf[5] = 1;
  refused(elf, "not a little-endian ELF64");
  elf[4] = 2;
  elf[18] = 62;  // x86-64
  refused(elf, "not for AMDGPU");
  const auto names = code_object_bytes_names();
  if (names.empty()) return;
  const std::span<const uint8_t> good = code_object_bytes(names[0]);
  refused(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)), "past its end");
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
