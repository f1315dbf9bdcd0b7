// Benchmark-only ablation entries (ptx/flash_fwd_ablation.ptx): each shipped default
// configuration with exactly one optimisation switched off (kernel_traits.cuh, Opt).
// They use dynamic shared memory (the P round trip needs more than 48 KB) and are launched
// by the CUDA-driver harness only; their bytes follow FwdTraits::kSmemBytes.
#include "flash_entries.cuh"

// The last Opt flag (lazy O rescale) follows the shipped configuration (flash_fwd.cu).
#define FLASH_ABLATIONS(D, BR, BC, W, S, MINB, QREGS, LAZY)                                       \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, _no_cpasync, flash::Opt<false, true, true, true, true, LAZY>) \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, _no_ldmatrix, flash::Opt<true, false, true, true, true, LAZY>) \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, _no_swizzle, flash::Opt<true, true, false, true, true, LAZY>) \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, _p_smem, flash::Opt<true, true, true, false, true, LAZY>) \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, _no_causal_skip, flash::Opt<true, true, true, true, false, LAZY>)

FLASH_ABLATIONS(64, 128, 64, 4, 2, 2, true, false)
FLASH_ABLATIONS(128, 64, 48, 4, 2, 3, true, true)

FLASH_MODULE_ARCH(sm80)
