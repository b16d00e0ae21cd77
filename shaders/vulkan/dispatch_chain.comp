#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// A chain of dependent dispatches (VulkanMisc.DependentDispatchLatency, a measurement): stage s of
// the chain reads its own chunk of w (stand-in for a product's weights) and one value stage s - 1
// wrote, and writes its own values. Between stages either a pipeline barrier orders the dispatches
// (mode 0), or no barrier does and each workgroup waits for every workgroup of the stage before to
// have counted itself in done[s - 1] (modes 1 and 2: the next dispatch's workgroups start while the
// last ones of the one before still run). Mode 1 waits before its loads; mode 2 issues them first,
// as a kernel whose weights do not depend on the stage before can. Mode 3 zeroes the counts (one
// workgroup, before the chain, behind a barrier). Mode 4 is the whole chain in one dispatch of
// resident workgroups (stage 0 only): each loops over the stages, loads its chunk of stage s, then
// waits for every workgroup to have counted itself in done[s - 1] (a grid-wide barrier; the host
// keeps the grid within what the device holds at once). A wait gives up after 2^24 reads and counts itself
// in done[stages] (the host checks it stayed 0).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer W { vec4 w[]; };
layout(std430, binding = 1) coherent buffer X { float x[]; };
layout(std430, binding = 2) coherent volatile buffer D { uint done[]; };
layout(push_constant) uniform Params {
  uint stage;   // s
  uint words;   // vec4 of w a workgroup reads
  uint mode;
  uint stages;  // the chain's length (mode 3 zeroes done[0..stages])
} p;

shared float part[256];

void main() {
  const uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
  if (p.mode == 3u) {
    for (uint i = lid; i <= p.stages; i += 256u) done[i] = 0u;
    return;
  }
  if (p.mode == 4u) {
    for (uint s = 0u; s < p.stages; ++s) {
      const uint base = (s * groups + wg) * p.words;
      vec4 acc = vec4(0.0);
      for (uint i = lid; i < p.words; i += 256u) acc += w[base + i];
      if (s > 0u) {
        if (lid == 0u) {
          uint n = 0u;
          while (done[s - 1u] < groups && ++n < (1u << 24)) {}
          if (n == (1u << 24)) atomicAdd(done[p.stages], 1u);
        }
        barrier();
        memoryBarrierBuffer();
      }
      const float prev = s > 0u ? x[(s - 1u) * groups + (wg * 7u + 3u) % groups] : 0.0;
      const float sum = subgroupAdd(acc.x + acc.y + acc.z + acc.w);
      if (subgroupElect()) part[gl_SubgroupID] = sum;
      barrier();
      if (lid == 0u) {
        float all = prev * 0.5;
        for (uint i = 0u; i < gl_NumSubgroups; ++i) all += part[i];
        x[s * groups + wg] = all;
        memoryBarrierBuffer();
        atomicAdd(done[s], 1u);
      }
      barrier();
    }
    return;
  }
  const uint base = (p.stage * groups + wg) * p.words;
  vec4 acc = vec4(0.0);
  if (p.mode == 2u) {
    for (uint i = lid; i < p.words; i += 256u) acc += w[base + i];
  }
  if (p.mode != 0u && p.stage > 0u) {
    if (lid == 0u) {
      uint n = 0u;
      while (done[p.stage - 1u] < groups && ++n < (1u << 24)) {}
      if (n == (1u << 24)) atomicAdd(done[p.stages], 1u);
    }
    barrier();
    memoryBarrierBuffer();
  }
  if (p.mode != 2u) {
    for (uint i = lid; i < p.words; i += 256u) acc += w[base + i];
  }
  const float prev = p.stage > 0u ? x[(p.stage - 1u) * groups + (wg * 7u + 3u) % groups] : 0.0;
  const float sum = subgroupAdd(acc.x + acc.y + acc.z + acc.w);
  if (subgroupElect()) part[gl_SubgroupID] = sum;
  barrier();
  if (lid == 0u) {
    float all = prev * 0.5;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) all += part[i];
    x[p.stage * groups + wg] = all;
    memoryBarrierBuffer();
    atomicAdd(done[p.stage], 1u);
  }
}
