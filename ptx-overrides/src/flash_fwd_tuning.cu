// Benchmark-only D=128 candidates (ptx/flash_fwd_tuning.ptx; not packed into the jar): run by
// `harness/check_and_time.py --tuning`, which checks each one and times it beside SDPA and the
// shipped flash_fwd_d128_m64n48w4s2 (ptx/flash_fwd.ptx, the baseline).
//
// The question: the shipped Br=64 configuration gives each warp one 16-row group, so every K/V
// fragment read with ldmatrix feeds a single mma and the kernel is bound by shared-memory
// bandwidth.  With Br=128 and 4 warps each warp owns 2 row groups (32 rows), every K/V
// fragment feeds two mmas, but O then takes 128 registers and Q has to stay in shared memory
// (_qs).  FlashAttention-2's choices for D=128: Br=128, Bc=64, split K/V pipeline (sm80/sm90);
// Br=128, Bc=32, 48 KB (sm86/sm89, non-causal).
//   s1 = one K and one V buffer loaded apart (kernel_traits.cuh, kSplitKV), s2 = 2-stage ring.
// Launch bounds: 128 threads x 2 CTAs/SM leaves 255 registers per thread, 256 threads x 1
// CTA/SM the same.  Bc=48/64 with two row groups sit right at 255 and spill a few bytes
// (generate.sh reports them; this file is benchmark-only, like the ablation one).
#include "flash_entries.cuh"

// Lazy O rescale as in the shipped D=128 entry (flash_fwd.cu).
using OptLazyRescale = flash::Opt<true, true, true, true, true, true>;

//             D    Br   Bc  W  St minCTAs/SM QinRegs  dyn   suffix  options
// Br=128, 2 row groups per warp, Q in shared memory:
//   split K/V pipeline, 32 + 8 + 8 = 48 KB static (TornadoVM-launchable)
FLASH_FWD_CUDA(128, 128, 32, 4, 1, 2, false, false, _qs, OptLazyRescale)
//   (its eager-rescale twin, d128_m128n32w4s1_qs_eager, won and ships in flash_fwd.cu)
//   split K/V pipeline, Bc=48: 32 + 12 + 12 = 56 KB; Bc=64 (FA2 sm80/sm90): 64 KB
FLASH_FWD_CUDA(128, 128, 48, 4, 1, 2, false, true, _qs_dyn, OptLazyRescale)
FLASH_FWD_CUDA(128, 128, 64, 4, 1, 2, false, true, _qs_dyn, OptLazyRescale)
//   2-stage K/V ring: Bc=32 64 KB, Bc=64 96 KB
FLASH_FWD_CUDA(128, 128, 32, 4, 2, 2, false, true, _qs_dyn, OptLazyRescale)
FLASH_FWD_CUDA(128, 128, 64, 4, 2, 2, false, true, _qs_dyn, OptLazyRescale)
// Br=64 (4 warps x 1 row group, Q in registers) with the split pipeline: Bc=64 in 48 KB
// (Q 16 + K 16 + V 16; FA2's sm86/sm89 causal tile), 2 CTAs/SM (3 would spill).
FLASH_FWD_CUDA(128, 64, 64, 4, 1, 2, true, false, , OptLazyRescale)
// Br=128 as 8 warps x 1 row group, Q in registers (overlapping ring stage 1): Bc=32 fits
// 48 KB static, Bc=48 needs 56 KB.
FLASH_FWD_CUDA(128, 128, 32, 8, 2, 1, true, false, , OptLazyRescale)
FLASH_FWD_CUDA(128, 128, 48, 8, 2, 1, true, true, _dyn, OptLazyRescale)
// Spill-free rebuilds of the Br=128 Q-in-shared-memory candidates (Opt::kLean, kernel_traits.cuh):
// the plain ones above sit at 255 registers and spill 4-32 bytes.  Same tiles, same layout, same
// dynamic shared memory; only the code inside a K/V tile differs.
//   _v2: S = Q K^T k-step loop unrolled by 4 (8 k-steps: two trips) instead of fully, so ptxas
//        cannot hoist every Q/K fragment load of the tile; Bc=64 also reads K with the Q/V
//        ldmatrix lane roles (one set of lane offsets for Q, K and V).
//   _h2: each 64-key tile as two chunks of 32 keys (S, online softmax, P V per chunk; the chunk
//        loop is not unrolled): only 32 S registers live beside O, at the cost of re-reading
//        the Q fragments once more per tile and a second softmax step.
using OptLeanV2 = flash::OptLean<OptLazyRescale, flash::kLeanKsLoop | flash::kLeanKRoles>;
using OptLeanH2 = flash::OptLean<OptLazyRescale, flash::kLeanHalves>;
using OptLeanKs2 = flash::OptLean<OptLazyRescale, flash::kLeanKsLoop2>;
FLASH_FWD_CUDA(128, 128, 64, 4, 2, 2, false, true, _qs_dyn_v2, OptLeanV2)
FLASH_FWD_CUDA(128, 128, 64, 4, 2, 2, false, true, _qs_dyn_h2, OptLeanH2)
//   Bc=48 split pipeline, k-step loop unrolled by 2.
FLASH_FWD_CUDA(128, 128, 48, 4, 1, 2, false, true, _qs_dyn_v2, OptLeanKs2)

FLASH_MODULE_ARCH(sm80)
