#include "backend/zinc_rt/code_object.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace zinc::backend::zinc_rt {

namespace {

template <class T>
T read(std::span<const uint8_t> b, uint64_t at, const char* what) {
  if (at > b.size() || sizeof(T) > b.size() - at) throw Error(fmt::format("code object: {} at byte {} is past its end ({} bytes)", what, at, b.size()));
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// The gfx targets of EF_AMDGPU_MACH (the ELF header's flags, low byte) ZINC_RT builds for.
std::string mach_name(uint32_t flags) {
  switch (flags & 0xFFu) {
    case 0x41: return "gfx1100";
    case 0x46: return "gfx1101";
    case 0x48: return "gfx1200";
    case 0x4E: return "gfx1201";
    default: return fmt::format("mach {:#04x}", flags & 0xFFu);
  }
}

struct Section {
  uint32_t type;
  uint64_t addr, offset, size, entsize;
  uint32_t link;
  uint64_t flags;
};

// The ELF header's checks (an AMDGPU little-endian ELF64 file), then its section headers.
std::vector<Section> elf_sections(std::span<const uint8_t> b) {
  if (b.size() < 64 || std::memcmp(b.data(), "\x7f" "ELF", 4) != 0) throw Error("code object: not an ELF file");
  if (b[4] != 2 || b[5] != 1) throw Error("code object: not a little-endian ELF64 file");
  constexpr uint16_t kEmAmdgpu = 224;
  if (read<uint16_t>(b, 18, "e_machine") != kEmAmdgpu) throw Error("code object: not for AMDGPU (e_machine is not EM_AMDGPU)");
  const auto shoff = read<uint64_t>(b, 40, "e_shoff");
  const auto shentsize = read<uint16_t>(b, 58, "e_shentsize"), shnum = read<uint16_t>(b, 60, "e_shnum");
  if (shentsize != 64) throw Error(fmt::format("code object: section headers of {} bytes (64 expected)", shentsize));
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t{i} * 64;
    sections[i] = {read<uint32_t>(b, h + 4, "sh_type"), read<uint64_t>(b, h + 16, "sh_addr"), read<uint64_t>(b, h + 24, "sh_offset"),
                   read<uint64_t>(b, h + 32, "sh_size"), read<uint64_t>(b, h + 56, "sh_entsize"), read<uint32_t>(b, h + 40, "sh_link"),
                   read<uint64_t>(b, h + 8, "sh_flags")};
  }
  return sections;
}

}  // namespace

const KernelInfo* CodeObject::kernel(std::string_view name) const {
  for (const KernelInfo& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

CodeObject parse_code_object(std::span<const uint8_t> b) {
  const std::vector<Section> sections = elf_sections(b);
  CodeObject co;
  co.target = mach_name(read<uint32_t>(b, 48, "e_flags"));
  // The symbol table (SHT_SYMTAB, else SHT_DYNSYM) and its strings.
  const Section* symtab = nullptr;
  for (const uint32_t want : {2u, 11u})
    for (const Section& s : sections)
      if (!symtab && s.type == want) symtab = &s;
  if (!symtab) throw Error("code object: no symbol table");
  if (symtab->link >= sections.size() || symtab->entsize != 24) throw Error("code object: a malformed symbol table");
  const Section& strtab = sections[symtab->link];
  const auto name_at = [&](uint32_t off) {
    std::string n;
    for (uint64_t at = strtab.offset + off;; ++at) {
      if (off >= strtab.size || at >= strtab.offset + strtab.size) throw Error("code object: a symbol name past its string table");
      const char c = static_cast<char>(read<uint8_t>(b, at, "symbol name"));
      if (c == 0) return n;
      n += c;
    }
  };
  // The file offset of an address of an allocated section.
  const auto offset_of = [&](uint64_t addr, uint64_t bytes) {
    for (const Section& s : sections)
      if (s.addr != 0 && addr >= s.addr && addr + bytes <= s.addr + s.size && s.type != 8 /* NOBITS */) return s.offset + (addr - s.addr);
    throw Error(fmt::format("code object: address {:#x} is in no section", addr));
  };
  for (uint64_t at = symtab->offset; at + 24 <= symtab->offset + symtab->size; at += 24) {
    const std::string name = name_at(read<uint32_t>(b, at, "st_name"));
    const auto value = read<uint64_t>(b, at + 8, "st_value"), size = read<uint64_t>(b, at + 16, "st_size");
    if (name.size() <= 3 || name.compare(name.size() - 3, 3, ".kd") != 0) continue;
    if (size != 64) throw Error(fmt::format("code object: descriptor {} of {} bytes (64 expected)", name, size));
    const std::string kernel = name.substr(0, name.size() - 3);
    if (co.kernel(kernel)) continue;  // the same symbol in .symtab and .dynsym
    const uint64_t d = offset_of(value, 64);
    KernelInfo k;
    k.name = kernel;
    k.descriptor_address = value;
    k.group_segment_bytes = read<uint32_t>(b, d + 0, "descriptor");
    k.private_segment_bytes = read<uint32_t>(b, d + 4, "descriptor");
    k.kernarg_bytes = read<uint32_t>(b, d + 8, "descriptor");
    k.entry_address = value + static_cast<uint64_t>(read<int64_t>(b, d + 16, "descriptor"));
    k.rsrc3 = read<uint32_t>(b, d + 44, "descriptor");
    k.rsrc1 = read<uint32_t>(b, d + 48, "descriptor");
    k.rsrc2 = read<uint32_t>(b, d + 52, "descriptor");
    k.properties = read<uint16_t>(b, d + 56, "descriptor");
    co.kernels.push_back(k);
  }
  if (co.kernels.empty()) throw Error("code object: no kernel descriptors (NAME.kd symbols)");
  return co;
}

std::vector<uint8_t> load_image(std::span<const uint8_t> b) {
  // Dynamic relocations (SHT_RELA or SHT_REL sections that are loaded and not empty) would need the
  // image's address applied: refused.
  const std::vector<Section> sections = elf_sections(b);
  for (size_t i = 0; i < sections.size(); ++i) {
    const Section& sec = sections[i];
    if ((sec.type == 4 || sec.type == 9) && (sec.flags & 2) && sec.size > 0)
      throw Error(fmt::format("code object: section {} holds {} bytes of dynamic relocations (not supported)", i, sec.size));
  }
  const auto phoff = read<uint64_t>(b, 32, "e_phoff");
  const auto phentsize = read<uint16_t>(b, 54, "e_phentsize"), phnum = read<uint16_t>(b, 56, "e_phnum");
  if (phentsize != 56) throw Error(fmt::format("code object: program headers of {} bytes (56 expected)", phentsize));
  constexpr uint64_t kMaxImage = uint64_t{64} << 20, kPage = 4096;
  struct Load {
    uint64_t offset, vaddr, filesz, memsz;
  };
  std::vector<Load> loads;
  uint64_t end = 0;
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint64_t h = phoff + uint64_t{i} * 56;
    if (read<uint32_t>(b, h, "p_type") != 1) continue;  // PT_LOAD
    const Load l{read<uint64_t>(b, h + 8, "p_offset"), read<uint64_t>(b, h + 16, "p_vaddr"), read<uint64_t>(b, h + 32, "p_filesz"),
                 read<uint64_t>(b, h + 40, "p_memsz")};
    if (l.filesz > l.memsz || l.offset > b.size() || l.filesz > b.size() - l.offset)
      throw Error(fmt::format("code object: loadable segment {} ({} bytes from byte {}) lies outside its {} bytes", i, l.filesz, l.offset, b.size()));
    if (l.vaddr > kMaxImage || l.memsz > kMaxImage - l.vaddr)
      throw Error(fmt::format("code object: loadable segment {} reaches address {:#x} (at most {} MiB)", i, l.vaddr + l.memsz, kMaxImage >> 20));
    loads.push_back(l);
    end = std::max(end, l.vaddr + l.memsz);
  }
  if (loads.empty()) throw Error("code object: no loadable segments");
  std::vector<uint8_t> image((end + kPage - 1) / kPage * kPage, 0);
  for (const Load& l : loads) std::memcpy(image.data() + l.vaddr, b.data() + l.offset, l.filesz);
  return image;
}

}  // namespace zinc::backend::zinc_rt
