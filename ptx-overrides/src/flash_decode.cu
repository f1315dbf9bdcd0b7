// Shipped decode entries (ptx/flash_decode.ptx): split-KV pass (one warp per CTA, 16 packed
// rows = query heads of one KV head x Sq) and the combine pass, for D = 128 and 64.
#include "flash_entries.cuh"

//           D   Bc  St minCTAs/SM
FLASH_DECODE(128, 32, 2, 6)
FLASH_DECODE(64, 64, 2, 6)
FLASH_DECODE_COMBINE_ENTRY(d128, 128)
FLASH_DECODE_COMBINE_ENTRY(d64, 64)
