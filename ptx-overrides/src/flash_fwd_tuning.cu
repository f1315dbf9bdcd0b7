// Benchmark-only tile candidates (ptx/flash_fwd_tuning.ptx; not packed into the jar): run by
// `harness/check_and_time.py --tuning [--head-dims 96,192]`, which checks each one and times it
// beside SDPA and the shipped entries of its head dim (the baselines).  The rows and their reasons:
// ../generate_kernels.py (D=96, 192 and 256 rows: tiles for the non-causal prefill and for
// ptx-tornado's 48 KB at D=256).
//
// D=128, the question: the shipped Br=64 configuration gives each warp one 16-row group, so every K/V
// fragment read with ldmatrix feeds a single mma and the kernel is bound by shared-memory
// bandwidth.  With Br=128 and 4 warps each warp owns 2 row groups (32 rows), every K/V
// fragment feeds two mmas, but O then takes 128 registers and Q has to stay in shared memory
// (_qs).  FlashAttention-2's choices for D=128: Br=128, Bc=64, split K/V pipeline (sm80/sm90);
// Br=128, Bc=32, 48 KB (sm86/sm89, non-causal).
//   s1 = one K and one V buffer loaded apart (kernel_traits.cuh, kSplitKV), s2 = 2-stage ring.
// Launch bounds: 128 threads x 2 CTAs/SM leaves 255 registers per thread, 256 threads x 1
// CTA/SM the same.  Bc=48/64 with two row groups sit right at 255 and spill a few bytes
// (generate.sh reports them; this file is benchmark-only, like the ablation one).  The
// candidates and their spill-free rewrites (Opt::kLean): ../generate_kernels.py, which writes
// generated/flash_fwd_tuning.inc.
#include "flash_entries.cuh"

#include "generated/flash_fwd_tuning.inc"
