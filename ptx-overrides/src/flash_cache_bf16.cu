// bf16 entries of flash_cache.cu's kinds (ptx/flash_cache_bf16.ptx): the same rows of the kernel table in
// element type bf16, a module of their own (generate_kernels.py, module_of).  ABI: flash_cache.cu.
#include "flash_cache.cuh"

#include "generated/flash_cache_bf16.inc"
