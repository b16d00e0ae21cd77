// The KFD layer without an AMD GPU: the topology reader on made-up topology trees (a CPU node, a
// supported GPU, an unsupported one, a malformed file), and the device layer and the bring-up ladder
// failing cleanly, saying why, where there is no device or it is not the KFD; the T2 probe's query
// encoding against the kernel's header layout and its reasons without a render node.
#include <gtest/gtest.h>
#include <linux/ioctl.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "backend/zinc_rt/code_object.h"
#include "backend/zinc_rt/kfd.h"
#include "backend/zinc_rt/selftest.h"
#include "backend/zinc_rt/userq.h"
#include "core/error.h"

namespace zinc::backend::zinc_rt {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("zinc_kfd_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void node(int n, const std::string& properties) const {
    fs::create_directories(path / "nodes" / std::to_string(n));
    std::ofstream(path / "nodes" / std::to_string(n) / "properties") << properties;
  }
};

TEST(Kfd, TopologyListsTheGpuNodes) {
  TempDir t;
  t.node(0, "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n");
  t.node(2, "cpu_cores_count 0\nsimd_count 80\ngfx_target_version 90010\nvendor_id 4098\ndevice_id 29704\ndrm_render_minor 129\n");
  t.node(1, "simd_count 96\ngfx_target_version 110000\nvendor_id 4098\ndevice_id 29772\ndrm_render_minor 128\n");
  const auto gpus = read_kfd_topology(t.path.string());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].node, 1);
  EXPECT_EQ(gpus[0].target(), "gfx1100");
  EXPECT_TRUE(gpus[0].supported());
  EXPECT_EQ(gpus[0].simd_count, 96u);
  EXPECT_EQ(gpus[0].drm_render_minor, 128u);
  EXPECT_EQ(gpus[1].target(), "gfx90a");
  EXPECT_FALSE(gpus[1].supported());
  for (const uint32_t v : {110001u, 120000u, 120001u}) EXPECT_TRUE((KfdGpu{0, v}).supported()) << v;
  EXPECT_EQ((KfdGpu{0, 120001}).target(), "gfx1201");
  EXPECT_TRUE(read_kfd_topology((t.path / "absent").string()).empty());
}

// What a queue needs of a node: its gpu_id file, SIMDs per CU, XCCs, and the context save area's sizes
// where the kernel lists them (absent: 0, one XCC); a gpu_id file that is not a number says where.
TEST(Kfd, TopologyReadsWhatAQueueNeeds) {
  TempDir t;
  t.node(1, "simd_count 192\nsimd_per_cu 2\ngfx_target_version 110000\ndrm_render_minor 128\ncwsr_size 46047232\nctl_stack_size 40960\n");
  std::ofstream(t.path / "nodes" / "1" / "gpu_id") << "48879\n";
  t.node(2, "simd_count 64\nsimd_per_cu 2\nnum_xcc 2\ngfx_target_version 120001\n");
  const auto gpus = read_kfd_topology(t.path.string());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].gpu_id, 48879u);
  EXPECT_EQ(gpus[0].simd_per_cu, 2u);
  EXPECT_EQ(gpus[0].num_xcc, 1u);
  EXPECT_EQ(gpus[0].cwsr_size, 46047232u);
  EXPECT_EQ(gpus[0].ctl_stack_size, 40960u);
  EXPECT_EQ(gpus[1].gpu_id, 0u);
  EXPECT_EQ(gpus[1].num_xcc, 2u);
  EXPECT_EQ(gpus[1].cwsr_size, 0u);
  std::ofstream(t.path / "nodes" / "2" / "gpu_id") << "gpu\n";
  try {
    (void)read_kfd_topology(t.path.string());
    FAIL() << "a gpu_id that is not a number was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_id"), std::string::npos) << e.what();
  }
}

TEST(Kfd, MalformedTopologySaysWhere) {
  TempDir t;
  t.node(3, "simd_count 96\ngfx_target_version eleven\n");
  try {
    (void)read_kfd_topology(t.path.string());
    FAIL() << "a malformed properties file was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nodes/3/properties line 2"), std::string::npos) << m;
    EXPECT_NE(m.find("gfx_target_version eleven"), std::string::npos) << m;
  }
}

TEST(Kfd, NoDeviceIsAReasonNotACrash) {
  TempDir t;
  const KfdProbe none = probe_kfd((t.path / "kfd").string(), t.path.string());
  EXPECT_FALSE(none.opened);
  EXPECT_FALSE(none.ready());
  EXPECT_NE(none.why.find("no " + (t.path / "kfd").string()), std::string::npos) << none.why;
  // A file that is not the KFD: it opens, the version request fails.
  std::ofstream(t.path / "not_kfd") << "x";
  const KfdProbe wrong = probe_kfd((t.path / "not_kfd").string(), t.path.string());
  EXPECT_TRUE(wrong.opened);
  EXPECT_NE(wrong.why.find("the version request failed"), std::string::npos) << wrong.why;
}

TEST(Kfd, LadderStopsAtTheFirstRungThatFails) {
  TempDir t;
  const auto rungs = run_selftest({(t.path / "kfd").string(), t.path.string()});
  ASSERT_GE(rungs.size(), 8u);
  // Rung 1, the kernels, passes where the build had an AMDGPU compiler; the device rung fails here.
  const size_t first = code_object_bytes_names().empty() ? 0 : 1;
  if (first == 1) {
    EXPECT_EQ(rungs[0].state, Rung::State::Passed) << rungs[0].detail;
  }
  EXPECT_EQ(rungs[first].state, Rung::State::Failed);
  if (first == 1) {
    EXPECT_NE(rungs[1].detail.find("no "), std::string::npos) << rungs[1].detail;
  }
  for (size_t i = first + 1; i < rungs.size(); ++i) EXPECT_EQ(rungs[i].state, Rung::State::NotRun) << rungs[i].name;
}

// struct drm_amdgpu_info_device of Linux 6.16's include/uapi/drm/amdgpu_drm.h, its fields in order
// (runs of one type as arrays), and struct drm_amdgpu_info: the layout the probe's constants assume.
struct DevInfo {
  uint32_t device_id_to_gpu_counter_freq[8];
  uint64_t max_engine_clock, max_memory_clock;
  uint32_t cu_active_number, cu_ao_mask, cu_bitmap[4][4];
  uint32_t enabled_rb_pipes_mask, num_rb_pipes, num_hw_gfx_contexts, pcie_gen;
  uint64_t ids_flags, virtual_address_offset, virtual_address_max;
  uint32_t virtual_address_alignment_to_gc_double_offchip_lds_buf[8];
  uint64_t prim_buf_gpu_addr, pos_buf_gpu_addr, cntl_sb_buf_gpu_addr, param_buf_gpu_addr;
  uint32_t prim_buf_size_to_pcie_num_lanes[12];
  uint32_t cu_ao_bitmap[4][4];
  uint64_t high_va_offset, high_va_max;
  uint32_t pa_sc_tile_steering_override;
  uint64_t tcc_disabled_mask, min_engine_clock, min_memory_clock;
  uint32_t tcp_cache_size_to_gl2c_cache_size[6];
  uint64_t mall_size;
  uint32_t enabled_rb_pipes_mask_hi, shadow_size, shadow_alignment, csa_size, csa_alignment;
  uint32_t userq_ip_mask, pad;
};
struct InfoRequest {
  uint64_t return_pointer;
  uint32_t return_size, query;
  uint32_t query_union[4];
};

TEST(Userq, QueryMatchesTheKernelsLayout) {
  static_assert(offsetof(DevInfo, userq_ip_mask) == kAmdgpuDevInfoUserqMask);
  static_assert(sizeof(DevInfo) == kAmdgpuDevInfoBytes);
  EXPECT_EQ(kDrmIoctlAmdgpuInfo, static_cast<unsigned long>(_IOW('d', 0x40 + 0x05, InfoRequest)));
  // A reply with compute (bit 1) and DMA (bit 3) user queues, and one from a kernel whose struct ends
  // before the field (it copies only its own size into the zeroed buffer).
  DevInfo d{};
  d.csa_alignment = 0xFFFFFFFFu;
  d.userq_ip_mask = 0xAu;
  d.pad = 0xFFFFFFFFu;
  std::vector<uint8_t> bytes(sizeof d);
  std::memcpy(bytes.data(), &d, sizeof d);
  EXPECT_EQ(userq_ip_mask(bytes), 0xAu);
  EXPECT_EQ(userq_ip_mask(std::span<const uint8_t>(bytes).first(offsetof(DevInfo, userq_ip_mask))), 0u);
}

TEST(Userq, NoRenderNodeIsAReasonNotACrash) {
  TempDir t;
  KfdGpu gfx1100, gfx90a;
  gfx1100.gfx_target_version = 110000;
  gfx1100.drm_render_minor = 128;
  gfx90a.gfx_target_version = 90010;
  gfx90a.drm_render_minor = 129;
  // Only supported GPUs are asked; with none, the reason says so.
  const UserqProbe none = probe_userq({gfx90a}, t.path.string());
  EXPECT_TRUE(none.gpus.empty());
  EXPECT_FALSE(none.available());
  EXPECT_NE(none.why.find("no supported GPU"), std::string::npos) << none.why;
  // A missing render node, then a file that is not one (it opens, the INFO request fails).
  const UserqProbe missing = probe_userq({gfx90a, gfx1100}, t.path.string());
  ASSERT_EQ(missing.gpus.size(), 1u);
  EXPECT_EQ(missing.gpus[0].render_node, (t.path / "renderD128").string());
  EXPECT_FALSE(missing.available());
  EXPECT_NE(missing.why.find("gfx1100: no " + (t.path / "renderD128").string()), std::string::npos) << missing.why;
  std::ofstream(t.path / "renderD128") << "x";
  const UserqProbe wrong = probe_userq({gfx1100}, t.path.string());
  EXPECT_FALSE(wrong.available());
  EXPECT_NE(wrong.why.find("the device-info request failed"), std::string::npos) << wrong.why;
}

}  // namespace
}  // namespace zinc::backend::zinc_rt
