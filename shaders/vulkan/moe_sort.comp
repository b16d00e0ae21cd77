#version 450
// Tokens grouped by expert for the expert products of a prefill step (mul_mm_q's experts): from the
// routing's ids [n_slots] (slot s = token * n_used + j selects expert ids[s], clamped to n_expert - 1)
// to route[], read by mm_q.glsl:
//   route[0]                       the number of tiles
//   route[1 + 3i], [2 + 3i], [3 + 3i]  tile i: its expert, first list entry, entry count (at most
//                                  tile_tokens; an expert's entries cut into tiles in turn)
//   route[list_offset + i]         the slots, grouped by expert in expert order
// At most ceil(n_slots / tile_tokens) + min(n_expert, n_slots) tiles. Within an expert the slots come
// in whatever order the atomics give: each product row is computed alone, so the order changes no
// value. One workgroup: counts per expert in shared memory, one invocation lays out the tiles, then
// every slot is placed. n_expert <= 512.
// Bindings: 0 ids, 1 route. Grid: 1 workgroup.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Ibuf { uint ids[]; };
layout(std430, binding = 1) writeonly buffer Rbuf { uint route[]; };
layout(push_constant) uniform Params {
  uint n_slots;
  uint n_expert;
  uint tile_tokens;
  uint list_offset;
} p;

shared uint cnt[512];   // per expert: its slots
shared uint next[512];  // per expert: the list entry its next slot takes

void main() {
  const uint lid = gl_LocalInvocationIndex;
  for (uint e = lid; e < p.n_expert; e += 256u) cnt[e] = 0u;
  barrier();
  for (uint s = lid; s < p.n_slots; s += 256u) atomicAdd(cnt[min(ids[s], p.n_expert - 1u)], 1u);
  barrier();
  if (lid == 0u) {
    uint at = 0u, tiles = 0u;
    for (uint e = 0u; e < p.n_expert; ++e) {
      const uint c = cnt[e];
      next[e] = at;
      for (uint i = 0u; i < c; i += p.tile_tokens) {
        route[1u + 3u * tiles] = e;
        route[2u + 3u * tiles] = at + i;
        route[3u + 3u * tiles] = min(p.tile_tokens, c - i);
        ++tiles;
      }
      at += c;
    }
    route[0] = tiles;
  }
  barrier();
  for (uint s = lid; s < p.n_slots; s += 256u) {
    route[p.list_offset + atomicAdd(next[min(ids[s], p.n_expert - 1u)], 1u)] = s;
  }
}
