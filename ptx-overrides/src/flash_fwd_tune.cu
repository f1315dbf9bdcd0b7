// Candidate configurations, CUDA-driver entries only (tuning run).
#include "flash_entries.cuh"
FLASH_FWD_CUDA(64, 128, 64, 4, 2, 2, false, false, _qs, flash::Opt<>)
FLASH_FWD_CUDA(64, 128, 32, 4, 2, 2, false, false, _qs, flash::Opt<>)
FLASH_FWD_CUDA(64, 128, 64, 4, 3, 2, false, true, _qs_dyn, flash::Opt<>)
FLASH_FWD_CUDA(64, 128, 128, 8, 2, 1, true, true, _dyn, flash::Opt<>)
FLASH_FWD_CUDA(128, 128, 32, 8, 2, 1, true, false, , flash::Opt<>)
FLASH_FWD_CUDA(128, 64, 64, 4, 2, 2, true, true, _dyn, flash::Opt<>)
FLASH_FWD_CUDA(128, 128, 16, 4, 3, 2, false, true, _qs_dyn, flash::Opt<>)
FLASH_FWD_CUDA(128, 128, 64, 8, 2, 1, true, true, _dyn, flash::Opt<>)
FLASH_DECODE(128, 32, 3, 4)
