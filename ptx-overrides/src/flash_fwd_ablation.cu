// Benchmark-only ablation entries (ptx/flash_fwd_ablation.ptx): each shipped default
// configuration with exactly one optimisation switched off (kernel_traits.cuh, Opt).
// They use dynamic shared memory (the P round trip needs more than 48 KB) and are launched
// by the CUDA-driver harness only; their bytes follow FwdTraits::kSmemBytes.
#include "flash_entries.cuh"

using OptNoCpAsync = flash::Opt<false, true, true, true, true>;
using OptNoLdmatrix = flash::Opt<true, false, true, true, true>;
using OptNoSwizzle = flash::Opt<true, true, false, true, true>;
using OptPSmem = flash::Opt<true, true, true, false, true>;
using OptNoCausalSkip = flash::Opt<true, true, true, true, false>;

#define FLASH_ABLATIONS(D, BR, BC, W, S, MINB, QREGS, SFX)                                        \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, SFX##_no_cpasync, OptNoCpAsync)             \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, SFX##_no_ldmatrix, OptNoLdmatrix)           \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, SFX##_no_swizzle, OptNoSwizzle)             \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, SFX##_p_smem, OptPSmem)                     \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, true, SFX##_no_causal_skip, OptNoCausalSkip)

FLASH_ABLATIONS(64, 128, 64, 4, 2, 2, true, )
FLASH_ABLATIONS(128, 64, 32, 4, 2, 3, true, )
