// Shared by the matrix-matrix products that read weights in their stored type (mul_mm_q.comp,
// mul_mm_q_coopmat.comp): their push constants, the tile a workgroup owns (of a dense product, or of
// one expert's tokens), and the K-steps of 32 elements that the weight's units (quant.glsl) make up.
// The includer includes quant.glsl first and declares binding 3 (`route`: moe_sort.comp's output).
//
// Dense (n_expert == 0): Y[t * y_stride + y_offset + r] = sum_c W[r][c] * X[t][c], t < n_tokens.
// Experts (n_expert > 0): the list entries are slots s = token * n_used + j, grouped by expert by
// moe_sort; tile i of an expert's entries multiplies its weight W_e (bytes from e * nrows * row_bytes)
// by the x rows of its slots (row s / n_used, or s with x_per_slot) into Y[s * y_stride + r], plus
// bias[e * nrows + r] with has_bias.
//
// A product's value does not depend on the order the columns are summed in beyond float rounding,
// and each kernel sums a K-step's 32 elements in slot order: the columns of a step are the ones its
// units decode, which for the K-quants are 4 runs of 8 consecutive columns rather than 32 in a row.
// X's columns are read in the same order, so W and X meet slot for slot.
layout(push_constant) uniform Params {
  uint ncols;        // K: a multiple of 32 and of the type's block
  uint nrows;        // rows of W (of each expert's W)
  uint n_tokens;     // dense: tokens; experts: slots (tokens * n_used)
  uint y_stride;     // floats between Y's rows
  uint y_offset;     // dense: the column of Y that W's row 0 writes
  uint token_tiles;  // token tiles per row tile (experts: the most moe_sort can make)
  uint tiles;        // token_tiles * row tiles
  uint row_bytes;    // bytes of a stored row of W
  uint n_expert;     // 0: a dense product
  uint n_used;
  uint x_per_slot;
  uint has_bias;
  uint list_offset;  // where route[] holds the slots grouped by expert
} p;

// route[0]: the number of tiles; route[1 + 3i ..]: tile i's expert, first entry and entry count.
#define ROUTE_TILES 0u

// The tile of workgroup (x, y) over a grid split into y past the device's limit: W rows from r0, its
// token entries [start, start + count) of expert e. False: no tile (past the end, or an expert tile
// moe_sort did not make).
bool mm_tile(uint rows_per_tile, uint tokens_per_tile, out uint r0, out uint e, out uint start, out uint count) {
  const uint tile = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint tt = tile % p.token_tiles;
  r0 = (tile / p.token_tiles) * rows_per_tile;
  e = 0u;
  start = tt * tokens_per_tile;
  count = 0u;
  if (tile >= p.tiles) return false;
  if (p.n_expert == 0u) {
    count = min(tokens_per_tile, p.n_tokens - start);
    return true;
  }
  if (tt >= route[ROUTE_TILES]) return false;
  e = route[1u + 3u * tt];
  start = route[2u + 3u * tt];
  count = route[3u + 3u * tt];
  return true;
}

// The X row and the Y element offset of entry i of the tile (i < count).
uint mm_x_row(uint start, uint i) {
  if (p.n_expert == 0u) return start + i;
  const uint s = route[p.list_offset + start + i];
  return p.x_per_slot != 0u ? s : s / p.n_used;
}
uint mm_y_at(uint start, uint i, uint r) {
  if (p.n_expert == 0u) return (start + i) * p.y_stride + p.y_offset + r;
  return route[p.list_offset + start + i] * p.y_stride + r;
}

// Units of a K-step, and the first column of run r (0..3) of the 8 consecutive columns the step's
// slots 8r..8r+7 hold.
const uint UPS = 32u / UE;
uint kstep_run(uint kt, uint r) {
#if defined(TYPE_Q2_K) || defined(TYPE_Q3_K)
  const uint s = kt & 7u;
  return (kt >> 3) * 256u + (s >> 2) * 128u + 32u * r + ((s >> 1) & 1u) * 16u + (s & 1u) * 8u;
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  const uint s = kt & 7u;
  return (kt >> 3) * 256u + (s >> 1) * 64u + 16u * r + (s & 1u) * 8u;
#elif defined(TYPE_Q6_K)
  const uint s = kt & 7u;
  return (kt >> 3) * 256u + (s >> 2) * 128u + 32u * r + (s & 3u) * 8u;
#else
  return kt * 32u + 8u * r;
#endif
}
// The slot of run k (4 columns) of unit u, one of step kt's units kt * UPS ..
uint kstep_slot(uint kt, uint u, uint k) {
#if defined(TYPE_Q2_K) || defined(TYPE_Q3_K) || defined(TYPE_Q4_K) || defined(TYPE_Q5_K) || defined(TYPE_Q6_K)
  return 8u * k + unit_col(u, k) - kstep_run(kt, k);
#else
  return unit_col(u, k) - kt * 32u;
#endif
}

// Run k of a unit as floats.
vec4 unit_run(vec4 q[UR], float a[UR], float b[UR], uint k) {
#if defined(HAS_B)
  return q[k] * a[k] + b[k];
#else
  return q[k] * a[k];
#endif
}
