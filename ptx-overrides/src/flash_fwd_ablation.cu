// Benchmark-only ablation entries (ptx/flash_fwd_ablation.ptx): each shipped dense prefill tile
// with exactly one optimisation switched off (kernel_traits.cuh, Opt; the lazy O rescale follows
// the shipped tile).  They use dynamic shared memory of FwdTraits::kSmemBytes (the P round trip
// needs more than 48 KB) and are launched by the CUDA-driver harness only.  The list:
// ../generate_kernels.py, which writes generated/flash_fwd_ablation.inc.
#include "flash_entries.cuh"

#include "generated/flash_fwd_ablation.inc"
