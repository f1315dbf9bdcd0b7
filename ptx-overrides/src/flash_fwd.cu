// Shipped prefill entries (ptx/flash_fwd.ptx): one tile per head dim and causal flag (the
// manifest's causal column, which both hosts and the harness read), each with its CUDA-driver
// entry and TornadoVM twins (all fit 48 KB of static shared memory).  The tiles and why each
// was picked: the table in ../generate_kernels.py, which writes generated/flash_fwd.inc.
#include "flash_entries.cuh"

#include "generated/flash_fwd.inc"
