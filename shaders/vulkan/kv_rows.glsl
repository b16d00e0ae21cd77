// Where a sequence's positions live in a layer's KV cache: the cache is blocks of KV_BLOCK rows
// shared by every sequence (backend/exec_common.h, KvBlocks), and a step's part finds its sequence's
// block table in the step buffer after its header (words 0..3: n_past, n_tokens; word 4 + i: the
// block holding positions i * KV_BLOCK ..). The including shader declares `step` (the part's header
// and table) before including this.
const uint KV_BLOCK = 32u;  // positions per block: VulkanExecutable::kKvBlock

// The first position visible from position pos under a sliding window of `window` positions (0: none).
uint window_start(uint pos, uint window) { return window > 0u && pos + 1u > window ? pos + 1u - window : 0u; }

// The cache row holding position pos of the part's sequence.
uint cache_row(uint pos) { return step[4u + pos / KV_BLOCK] * KV_BLOCK + pos % KV_BLOCK; }
