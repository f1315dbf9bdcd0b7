// bf16 entries of flash_decode.cu's kinds (ptx/flash_decode_bf16.ptx): the same rows of the kernel table in
// element type bf16, a module of their own (generate_kernels.py, module_of).  ABI: flash_decode.cu.
#include "flash_entries.cuh"
#include "flash_decode_fused.cuh"

#include "generated/flash_decode_bf16.inc"
