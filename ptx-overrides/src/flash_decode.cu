// Shipped decode entries (ptx/flash_decode.ptx): split-KV pass (one warp per CTA, 16 packed
// rows = query heads of one KV head x Sq) and the combine pass, for D = 128 and 64 (the
// CUDA-driver host's decode); and the two fused into one launch (the TornadoVM host's decode
// kernel, flash_decode_fused.cuh).
#include "flash_entries.cuh"
#include "flash_decode_fused.cuh"

//           D   Bc  St minCTAs/SM
FLASH_DECODE(128, 32, 2, 6)
FLASH_DECODE(64, 64, 2, 6)
FLASH_DECODE_COMBINE_ENTRY(d128, 128)
FLASH_DECODE_COMBINE_ENTRY(d64, 64)
FLASH_DECODE_FUSED_ENTRY(d128_n32s2, KtDec_d128_n32s2)
FLASH_DECODE_FUSED_ENTRY(d64_n64s2, KtDec_d64_n64s2)

// Decode shapes of either causal flag (the kernels read it from params).
FLASH_SELECT(flash_decode_split_d128_n32s2, any)
FLASH_SELECT(flash_decode_split_d64_n64s2, any)
FLASH_SELECT(flash_decode_combine_d128, any)
FLASH_SELECT(flash_decode_combine_d64, any)
FLASH_SELECT(flash_decode_fused_d128_n32s2, any)
FLASH_SELECT(flash_decode_fused_d64_n64s2, any)

FLASH_MODULE_ARCH(sm80)
