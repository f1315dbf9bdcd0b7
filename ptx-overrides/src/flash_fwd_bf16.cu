// bf16 entries of flash_fwd.cu's kinds (ptx/flash_fwd_bf16.ptx): the same rows of the kernel table in
// element type bf16, a module of their own (generate_kernels.py, module_of).  ABI: flash_fwd.cu.
#include "flash_entries.cuh"

#include "generated/flash_fwd_bf16.inc"
