// ZINC_RT's code objects (built for every listed target at build time, embedded) read by its parser,
// against LLVM's own reading of the same bytes (llvm-readelf: the ELF header's target, the symbols,
// the AMDGPU metadata note): the target, each kernel's descriptor address and entry point, its
// kernel-argument, local and private memory sizes, wave size, and a vector-register allocation that
// holds the registers the compiler counted. Then bytes that are not a code object, each refused with
// what is wrong; the image the GPU runs against llvm-readelf's program headers, and where the rungs' kernels'
// arguments lie against their metadata notes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/dispatch.h"
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
  ASSERT_EQ(names.size(), 48u) << "12 kernels x 4 targets";
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

// The image the GPU runs, against llvm-readelf's program headers of the same bytes ("LOAD OFFSET VADDR
// PADDR FILESZ MEMSZ FLAGS ALIGN"): each loadable segment's file bytes at its address, zeros past them
// to its memory size and between segments, in whole pages to the highest segment's end; the kernel's
// entry point inside an executable segment.
TEST(CodeObject, ImageHoldsEachLoadableSegmentAtItsAddress) {
  const auto names = code_object_bytes_names();
  if (names.empty()) GTEST_SKIP() << "this build had no AMDGPU compiler (clang-19 or later with ld.lld): no code objects";
  const std::string readelf = ZINC_LLVM_READELF;
  ASSERT_FALSE(readelf.empty()) << "code objects were built but llvm-readelf was not found (install llvm-19)";
  const auto dir = std::filesystem::temp_directory_path() / ("zinc_img_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string_view name : names) {
    const std::string n(name);
    const std::span<const uint8_t> bytes = code_object_bytes(name);
    const auto file = dir / (n + ".hsaco");
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const std::string out = run(readelf + " -l " + file.string());
    struct Load {
      uint64_t offset, vaddr, filesz, memsz;
      bool exec;
    };
    std::vector<Load> loads;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream f(line);
      std::string type, off, va, pa, fs, ms, flags;
      if (!(f >> type >> off >> va >> pa >> fs >> ms) || type != "LOAD") continue;
      std::getline(f, flags);
      loads.push_back({std::stoull(off, nullptr, 16), std::stoull(va, nullptr, 16), std::stoull(fs, nullptr, 16), std::stoull(ms, nullptr, 16),
                       flags.find(" E ") != std::string::npos});
    }
    ASSERT_FALSE(loads.empty()) << out;
    const std::vector<uint8_t> image = load_image(bytes);
    uint64_t end = 0;
    for (const Load& l : loads) end = std::max(end, l.vaddr + l.memsz);
    EXPECT_EQ(image.size(), (end + 4095) / 4096 * 4096) << n;
    ASSERT_GE(image.size(), end) << n;
    std::vector<bool> covered(image.size(), false);
    for (const Load& l : loads) {
      for (uint64_t i = 0; i < l.memsz; ++i) {
        const uint8_t want = i < l.filesz ? bytes[static_cast<size_t>(l.offset + i)] : 0;
        ASSERT_EQ(image[static_cast<size_t>(l.vaddr + i)], want) << n << ": byte " << i << " of the segment at " << l.vaddr;
        covered[static_cast<size_t>(l.vaddr + i)] = true;
      }
    }
    for (size_t i = 0; i < image.size(); ++i) {
      if (!covered[i]) {
        ASSERT_EQ(image[i], 0) << n << ": byte " << i << " is in no segment";
      }
    }
    const CodeObject co = parse_code_object(bytes);
    const KernelInfo& k = co.kernels.at(0);
    bool in_exec = false;
    for (const Load& l : loads) in_exec |= l.exec && k.entry_address >= l.vaddr && k.entry_address < l.vaddr + l.filesz;
    EXPECT_TRUE(in_exec) << n << ": the entry point " << k.entry_address << " in no executable segment";
  }
  std::filesystem::remove_all(dir);
}

// The host writes its kernels' arguments as dispatch.h's FillIdsArgs, RmsNormArgs, QuantizeQ8KArgs,
// MulMvKArgs, GetRowsArgs, RopeArgs, SwigluArgs, AddArgs, KvStoreArgs and AttentionDecodeArgs (the first two in the dispatch and kernel rungs): where the metadata note of every such object
// (llvm-readelf --notes) places them (offset, size, kind of each).
TEST(CodeObject, RungArgumentsLieWhereTheRungsWriteThem) {
  const auto names = code_object_bytes_names();
  if (names.empty()) GTEST_SKIP() << "this build had no AMDGPU compiler (clang-19 or later with ld.lld): no code objects";
  const std::string readelf = ZINC_LLVM_READELF;
  ASSERT_FALSE(readelf.empty());
  using Arg = std::array<std::string, 3>;
  const auto at = [](size_t offset, int size, const char* kind) { return Arg{std::to_string(offset), std::to_string(size), kind}; };
  // three buffers, then two 4-byte values (rms_norm's, the products', the row readers')
  const auto three_two = [&](size_t a, size_t b, size_t c, size_t d, size_t e) {
    return std::vector<Arg>{at(a, 8, "global_buffer"), at(b, 8, "global_buffer"), at(c, 8, "global_buffer"), at(d, 4, "by_value"),
                            at(e, 4, "by_value")};
  };
  const std::vector<Arg> mul_mv = three_two(offsetof(MulMvKArgs, w), offsetof(MulMvKArgs, xq), offsetof(MulMvKArgs, y),
                                             offsetof(MulMvKArgs, ncols), offsetof(MulMvKArgs, row_bytes));
  const std::vector<Arg> get_rows = three_two(offsetof(GetRowsArgs, w), offsetof(GetRowsArgs, ids), offsetof(GetRowsArgs, out),
                                               offsetof(GetRowsArgs, ncols), offsetof(GetRowsArgs, row_bytes));
  const std::map<std::string, std::pair<std::vector<Arg>, size_t>> want = {
      {"fill_ids", {{at(offsetof(FillIdsArgs, out), 8, "global_buffer"), at(offsetof(FillIdsArgs, n), 4, "by_value")}, sizeof(FillIdsArgs)}},
      {"rms_norm",
       {three_two(offsetof(RmsNormArgs, x), offsetof(RmsNormArgs, w), offsetof(RmsNormArgs, out), offsetof(RmsNormArgs, width),
                  offsetof(RmsNormArgs, eps)),
        sizeof(RmsNormArgs)}},
      {"quantize_q8_k", {{at(offsetof(QuantizeQ8KArgs, x), 8, "global_buffer"), at(offsetof(QuantizeQ8KArgs, out), 8, "global_buffer")}, sizeof(QuantizeQ8KArgs)}},
      {"mul_mv_q4_k", {mul_mv, sizeof(MulMvKArgs)}},
      {"mul_mv_q6_k", {mul_mv, sizeof(MulMvKArgs)}},
      {"get_rows_q4_k", {get_rows, sizeof(GetRowsArgs)}},
      {"get_rows_q6_k", {get_rows, sizeof(GetRowsArgs)}},
      {"rope",
       {{at(offsetof(RopeArgs, x), 8, "global_buffer"), at(offsetof(RopeArgs, cs), 8, "global_buffer"),
         at(offsetof(RopeArgs, out), 8, "global_buffer"), at(offsetof(RopeArgs, n_head), 4, "by_value"),
         at(offsetof(RopeArgs, head_dim), 4, "by_value"), at(offsetof(RopeArgs, n_rot), 4, "by_value"),
         at(offsetof(RopeArgs, neox), 4, "by_value")},
        sizeof(RopeArgs)}},
      {"swiglu",
       {{at(offsetof(SwigluArgs, gate), 8, "global_buffer"), at(offsetof(SwigluArgs, up), 8, "global_buffer"),
         at(offsetof(SwigluArgs, out), 8, "global_buffer"), at(offsetof(SwigluArgs, n), 4, "by_value")},
        sizeof(SwigluArgs)}},
      {"add",
       {{at(offsetof(AddArgs, a), 8, "global_buffer"), at(offsetof(AddArgs, b), 8, "global_buffer"), at(offsetof(AddArgs, out), 8, "global_buffer"),
         at(offsetof(AddArgs, n), 4, "by_value")},
        sizeof(AddArgs)}},
      {"kv_store",
       {{at(offsetof(KvStoreArgs, k), 8, "global_buffer"), at(offsetof(KvStoreArgs, v), 8, "global_buffer"),
         at(offsetof(KvStoreArgs, kc), 8, "global_buffer"), at(offsetof(KvStoreArgs, vc), 8, "global_buffer"),
         at(offsetof(KvStoreArgs, pos), 8, "global_buffer"), at(offsetof(KvStoreArgs, width), 4, "by_value")},
        sizeof(KvStoreArgs)}},
      {"attention_decode",
       {{at(offsetof(AttentionDecodeArgs, q), 8, "global_buffer"), at(offsetof(AttentionDecodeArgs, kc), 8, "global_buffer"),
         at(offsetof(AttentionDecodeArgs, vc), 8, "global_buffer"), at(offsetof(AttentionDecodeArgs, out), 8, "global_buffer"),
         at(offsetof(AttentionDecodeArgs, n_kv), 8, "global_buffer"), at(offsetof(AttentionDecodeArgs, n_head), 4, "by_value"),
         at(offsetof(AttentionDecodeArgs, n_head_kv), 4, "by_value"), at(offsetof(AttentionDecodeArgs, head_dim), 4, "by_value"),
         at(offsetof(AttentionDecodeArgs, kv_width), 4, "by_value"), at(offsetof(AttentionDecodeArgs, scale), 4, "by_value")},
        sizeof(AttentionDecodeArgs)}}};
  const auto dir = std::filesystem::temp_directory_path() / ("zinc_args_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::map<std::string, int> seen;
  for (const std::string_view name : names) {
    const std::string n(name), kernel = n.substr(0, n.find('-'));
    ASSERT_TRUE(want.count(kernel)) << n << ": a kernel no arguments structure describes";
    ++seen[kernel];
    const std::span<const uint8_t> bytes = code_object_bytes(name);
    const auto file = dir / (n + ".hsaco");
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const std::string out = run(readelf + " --notes " + file.string());
    // The kernel's .args list: each argument starts "      - .KEY: VALUE" (six spaces), its other keys
    // "        .KEY: VALUE" (eight); kept: .offset, .size, .value_kind.
    std::vector<Arg> args;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      if (line.rfind("      - .", 0) == 0) args.push_back({"", "", ""});
      else if (line.rfind("        .", 0) != 0) continue;
      if (args.empty()) continue;
      std::string key = trim(line.substr(0, colon));
      if (key.rfind("- ", 0) == 0) key = key.substr(2);
      const std::string value = trim(line.substr(colon + 1));
      if (key == ".offset") args.back()[0] = value;
      if (key == ".size") args.back()[1] = value;
      if (key == ".value_kind") args.back()[2] = value;
    }
    const auto& [expected, bytes_written] = want.at(kernel);
    EXPECT_EQ(args, expected) << n << "\n" << out;
    const CodeObject co = parse_code_object(bytes);
    const KernelInfo& k = *co.kernel(kernel);
    const Arg& last = expected.back();
    EXPECT_GE(k.kernarg_bytes, std::stoul(last[0]) + std::stoul(last[1])) << n;
    EXPECT_LE(k.kernarg_bytes, bytes_written) << n << ": the rung writes the whole argument segment";
  }
  EXPECT_EQ(seen, (std::map<std::string, int>{{"add", 4}, {"attention_decode", 4}, {"fill_ids", 4}, {"kv_store", 4}, {"get_rows_q4_k", 4}, {"get_rows_q6_k", 4}, {"mul_mv_q4_k", 4}, {"mul_mv_q6_k", 4}, {"quantize_q8_k", 4}, {"rms_norm", 4}, {"rope", 4}, {"swiglu", 4}})) << "each kernel for every listed target";
  std::filesystem::remove_all(dir);
}

TEST(CodeObject, ImageRefusesRelocationsAndSegmentsOutsideTheBytes) {
  const auto names = code_object_bytes_names();
  if (names.empty()) GTEST_SKIP() << "this build had no AMDGPU compiler (clang-19 or later with ld.lld): no code objects";
  const std::span<const uint8_t> good = code_object_bytes(names[0]);
  const auto refused = [](const std::vector<uint8_t>& b, const std::string& why) {
    try {
      (void)load_image(b);
      ADD_FAILURE() << "accepted; expected: " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  const auto u16 = [](const std::vector<uint8_t>& b, size_t at) { return static_cast<uint16_t>(b[at] | b[at + 1] << 8); };
  const auto u64 = [](const std::vector<uint8_t>& b, size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  const auto put64 = [](std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); };
  const std::vector<uint8_t> base(good.begin(), good.end());
  // A loadable segment whose file bytes run past the end (its file size grown by the whole file).
  {
    std::vector<uint8_t> b = base;
    const size_t phoff = u64(b, 32);
    bool grown = false;
    for (uint16_t i = 0; i < u16(b, 56) && !grown; ++i) {
      const size_t h = phoff + 56u * i;
      if (b[h] != 1) continue;  // PT_LOAD
      put64(b, h + 32, u64(b, h + 32) + b.size());
      put64(b, h + 40, u64(b, h + 40) + b.size());
      grown = true;
    }
    ASSERT_TRUE(grown);
    refused(b, "lies outside");
  }
  // A loaded section of dynamic relocations (.dynamic's section made SHT_RELA).
  {
    std::vector<uint8_t> b = base;
    const size_t shoff = u64(b, 40);
    bool made = false;
    for (uint16_t i = 0; i < u16(b, 60) && !made; ++i) {
      const size_t h = shoff + 64u * i;
      if (b[h + 4] != 6) continue;  // SHT_DYNAMIC (allocated, not empty)
      b[h + 4] = 4;
      made = true;
    }
    ASSERT_TRUE(made);
    refused(b, "dynamic relocations");
  }
  EXPECT_NO_THROW((void)load_image(base));
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
