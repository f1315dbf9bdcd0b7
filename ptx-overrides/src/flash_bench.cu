// Candidate configurations (tuning) -- temporary
#include "flash_entries.cuh"
using namespace flash;
#define CAND(NAME, ...) using Kt_##NAME = FwdTraits<__VA_ARGS__>; FLASH_FWD_ENTRY(NAME, Kt_##NAME)
//        name              D   Br   Bc  W  St minB dyn
CAND(d64_m128n64w8s2,       64, 128, 64, 8, 2, 1)
CAND(d64_m128n64w4s2,       64, 128, 64, 4, 2, 1)
CAND(d64_m64n64w4s2,        64,  64, 64, 4, 2, 2)
CAND(d64_m128n128w8s2_dyn,  64, 128,128, 8, 2, 1, true)
CAND(d128_m128n32w8s2,     128, 128, 32, 8, 2, 1)
CAND(d128_m64n32w4s2,      128,  64, 32, 4, 2, 3)
CAND(d128_m64n64w4s2_dyn,  128,  64, 64, 4, 2, 2, true)
CAND(d128_m128n64w8s2_dyn, 128, 128, 64, 8, 2, 1, true)
using KtDec128 = DecodeTraits<128, 32, 2, 4>;
FLASH_DECODE_SPLIT_ENTRY(d128, KtDec128)
FLASH_DECODE_COMBINE_ENTRY(d128, 128)
