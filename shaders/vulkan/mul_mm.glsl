// Shared by the matrix-matrix kernels (mul_mm.comp, mul_mm_coopmat.comp): their push constants and the
// tile a workgroup owns. Y[t * y_stride + y_offset + r] = sum_c W[r][c] * X[t][c] for r < nrows,
// t < n_tokens; the output is cut into tiles of rows_per_tile W rows by tokens_per_tile tokens.
layout(push_constant) uniform Params {
  uint ncols;        // K: columns of W and X (a multiple of 32)
  uint nrows;        // rows of W: outputs per token
  uint n_tokens;
  uint y_stride;     // floats between Y's token rows (the full output width)
  uint y_offset;     // column of Y that W's row 0 writes (first row of a slab)
  uint token_tiles;  // ceil(n_tokens / tokens_per_tile)
  uint tiles;        // token_tiles * ceil(nrows / rows_per_tile)
  uint pad;
} p;

// Workgroups are numbered x-fastest over a grid that the launcher splits into y when it passes the
// device's x limit (so the last row of the grid may hold workgroups past the end: false). Consecutive
// workgroups take the token tiles of one W tile, so the workgroups that read a W tile run at the same
// time and W comes from DRAM once while X (the smaller operand) stays in L2.
bool tile_origin(uint rows_per_tile, uint tokens_per_tile, out uint r0, out uint t0) {
  const uint tile = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  r0 = (tile / p.token_tiles) * rows_per_tile;
  t0 = (tile % p.token_tiles) * tokens_per_tile;
  return tile < p.tiles;
}
