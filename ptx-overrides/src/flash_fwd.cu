// Shipped prefill entries (ptx/flash_fwd.ptx): the launch table in README.md picks one per
// head dim and causal flag.  All fit 48 KB of static shared memory, so each has a TornadoVM twin.
#include "flash_entries.cuh"

//             D   Br   Bc  W  St minCTAs/SM QinRegs  suffix
FLASH_FWD_BOTH(64, 128, 64, 4, 2, 2, true, )
FLASH_FWD_BOTH(64, 64, 64, 4, 2, 4, true, )
FLASH_FWD_BOTH(128, 64, 32, 4, 2, 3, true, )
FLASH_FWD_BOTH(128, 128, 16, 4, 2, 2, false, _qs)
