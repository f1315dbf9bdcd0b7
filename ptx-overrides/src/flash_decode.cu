// Shipped decode entries (ptx/flash_decode.ptx): the split-KV pass (one warp per CTA, 16 packed
// rows = query heads of one KV head x Sq) and the combine pass (the CUDA-driver host's decode),
// and the two fused into one launch (the TornadoVM host's decode kernel, flash_decode_fused.cuh).
// Decode shapes of either causal flag (the kernels read it from params).  The configurations:
// ../generate_kernels.py, which writes generated/flash_decode.inc.
#include "flash_entries.cuh"
#include "flash_decode_fused.cuh"

#include "generated/flash_decode.inc"
