// Tile configurations ("kernel traits"), kept apart from the kernel body as in FlashAttention-2.
// A configuration fixes the head dim, the query tile (Br = kBlockM), the key/value tile
// (Bc = kBlockN), the warps, the K/V pipeline depth and the shared-memory layout; the Opt
// switches exist for the ablation benchmark (the first five) and for the lazy O rescale, which
// the shipped D=128 configuration turns on (flash_fwd.cu).
#pragma once
#include "element_type.cuh"

namespace flash {

// Opt::kLean bits (register-saving variants of the kernel body; 0 = the shipped body).  The
// Br=128 Q-in-shared-memory configurations with Bc >= 48 sit at 255 registers, where ptxas's
// scheduling (how far it hoists fragment loads) decides whether a few bytes spill; these
// bound it.
constexpr int kLeanKRoles = 1;   // K fragments read with the A-operand ldmatrix lane roles
constexpr int kLeanHalves = 2;   // S / softmax / P V in two chunks of Bc/2 keys, chunk loop not unrolled
constexpr int kLeanKsLoop = 4;   // S = Q K^T k-step loop unrolled by 4 only
constexpr int kLeanKsLoop2 = 16; // S = Q K^T k-step loop unrolled by 2 only
constexpr int kLeanRereadWords = 32;  // the softcap's and the window's words re-read every tile, not held

// Ablation switches.  Each one, set false, turns off exactly one optimisation.
template <bool kCpAsyncPipeline_ = true,  // false: one K/V buffer, load -> wait -> compute (synchronous)
          bool kLdmatrix_ = true,         // false: fragments read with 16/32-bit ld.shared
          bool kSwizzle_ = true,          // false: plain row-major tiles (8-way bank conflicts)
          bool kPInRegs_ = true,          // false: P goes through shared memory before P V
          bool kCausalSkip_ = true,       // false: every K/V tile is loaded and masked
          bool kLazyRescale_ = false>     // true: skip O *= alpha when no row of the warp needs it
struct Opt {
  static constexpr bool kCpAsyncPipeline = kCpAsyncPipeline_;
  static constexpr bool kLdmatrix = kLdmatrix_;
  static constexpr bool kSwizzle = kSwizzle_;
  static constexpr bool kPInRegs = kPInRegs_;
  static constexpr bool kCausalSkip = kCausalSkip_;
  static constexpr bool kLazyRescale = kLazyRescale_;
  static constexpr int kLean = 0;  // see OptLean
  static constexpr bool kFeatures = true;  // see OptPlain
  static constexpr bool kSinks = true;     // see OptPlain
};

// An Opt with register-saving variants of the kernel body switched on (bit mask of kLean*
// below; the table's Tile.lean, for the tiles at the register limit).  A derived type rather than a seventh Opt
// parameter, so that the shipped entries' PTX (which names Opt in mangled symbols) is unchanged.
template <class Base, int kLean_>
struct OptLean : Base {
  static constexpr int kLean = kLean_;
};

// An Opt without the run-time window and softcap: the entry ignores those params words and compiles to
// the plain body, without their loads, compares and registers (sinks, the softmax's starting state,
// every entry serves).  The table gives every attention tile a plain entry and one with the features (the manifest's
// features column); hosts run the plain one unless a call has a window or a softcap.  A derived type, as OptLean, so
// the entries with the features keep their PTX.  kSinks_ false: a plain entry without sinks either (a tile at the
// register limit whose speed moves with the sink's reads; its "_feat" twin serves sinks).
template <class Base, bool kSinks_ = true>
struct OptPlain : Base {
  static constexpr bool kFeatures = false;
  static constexpr bool kSinks = kSinks_;
};

constexpr int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kStages_,
          int kMinBlocksPerSm_, bool kQInRegs_ = true, bool kDynamicSmem_ = false, class Opt_ = Opt<>>
struct FwdTraits {
  using O = Opt_;
  // The element type of Q, K, V and O (element_type.cuh).  A member rather than a parameter, so
  // that the PTX of the entries that existed before it (FwdTraits appears in mangled symbols) is
  // unchanged; other types: WithElement below.
  using Element = Fp16;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = 32 * kNWarps;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr bool kDynamicSmem = kDynamicSmem_;
  // Q fragments in registers (read from shared memory once) or re-read with ldmatrix every
  // K/V tile.  Registers pay when a warp owns 16 rows; with 32 rows (two row groups) and
  // D = 128 the O accumulator alone takes 128 registers and Q has to stay in shared memory.
  static constexpr bool kQInRegs = kQInRegs_;
  // The synchronous ablation is a one-stage ring.
  static constexpr int kStages = O::kCpAsyncPipeline ? kStages_ : 1;
  // One K and one V buffer, pipelined apart (FlashAttention-2's schedule): V_j loads during
  // S = Q K_j^T, K_{j+1} during softmax and P V_j.  Two barriers per tile instead of one, but
  // half the shared memory of a 2-stage ring, which is what lets Br=128 with Q in shared
  // memory fit 48 KB at D=128.
  static constexpr bool kSplitKV = O::kCpAsyncPipeline && kStages_ == 1;

  // Each warp owns kRowGroups groups of 16 query rows: its rows never meet another warp's,
  // so the softmax statistics stay in registers with only quad shuffles.
  static constexpr int kRowsPerWarp = kBlockM / kNWarps;
  static constexpr int kRowGroups = kRowsPerWarp / 16;
  static_assert(kRowGroups * 16 * kNWarps == kBlockM, "Br must be 16 * warps * row groups");
  // What the body relies on (which head dims ship is the kernel table's business): k-steps of
  // 16 for Q K^T and pairs of 8-column n-tiles for P V; every row whole 16-byte chunks, and with
  // the swizzle whole groups of 4 or 8 chunks (TileLayout); registers for O and S bound it
  // at 256.
  static_assert(kHeadDim % 16 == 0 && kHeadDim > 0 && kHeadDim <= 256, "head dim: a multiple of 16, at most 256");
  static_assert(!O::kSwizzle || kHeadDim % 32 == 0, "the swizzle permutes chunks in groups of 4 or 8: head dim a multiple of 32");
  static_assert(kBlockN % 16 == 0, "Bc must be a multiple of 16 (one mma k-step of P V)");
  static_assert(kStages >= 1 && kStages <= 4, "1..4 K/V stages");

  // Shared memory: rows of kHeadDim 16-bit elements = kChunks 16-byte chunks, unpadded.  With the
  // swizzle, chunk c of row r lives at chunk c ^ swizzle(r) (TileLayout): the 8 rows one ldmatrix
  // 8x8 reads (same logical chunk) land on 8 different 16-byte bank groups, and so do cp.async's
  // 16-byte writes.  kChunks % 8 == 0 (D = 64, 128, 192, 256): every row starts at bank group 0,
  // swizzle(r) = r % 8 permutes groups of 8 chunks.  kChunks % 8 == 4 (D = 32, 96): rows start
  // at bank group 0 and 4 alternately (the row term r % 2), so swizzle(r) = (r / 2) % 4 within
  // groups of 4 chunks gives the 8 rows 4 * (r % 2) + (c ^ (r / 2) % 4), 8 different groups.
  // (Padding rows by 16 bytes would also be conflict-free but costs shared memory and breaks
  // the 128-byte alignment of rows; the xor costs nothing.)
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunks = kHeadDim / 8;
  static constexpr bool kSwizzle8 = kChunks % 8 == 0;
  static constexpr int kTileBytes = kBlockN * kRowBytes;  // one K or V tile
  static constexpr int kStageBytes = 2 * kTileBytes;      // K then V
  static constexpr int kQBytes = kBlockM * kRowBytes;
  // Q read into registers once may overlap the K/V buffers: stages 1.. of a ring (stage 0 is free
  // to load tile 0 while Q arrives), or the V buffer of the split pipeline (its prologue loads K_0
  // alone; V_0 follows in the loop, after Q is in registers).  Q kept in shared memory gets its own
  // region after the ring.  The same bytes stage O at the end.
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kQOffset = !kQInRegs ? kRingBytes : kSplitKV ? kTileBytes : kStageBytes;
  static constexpr int kQEnd = kQOffset + kQBytes;
  static constexpr int kMainBytes = kRingBytes > kQEnd ? kRingBytes : kQEnd;
  // P round trip (ablation): per warp and row group a 16 x Bc tile of elements, rows padded by 16
  // bytes so that both the fragment writes and the ldmatrix reads are conflict-free.
  static constexpr int kPPitch = kBlockN * 2 + 16;
  static constexpr int kPOffset = kMainBytes;
  static constexpr int kPBytes = O::kPInRegs ? 0 : kNWarps * kRowGroups * 16 * kPPitch;
  static constexpr int kSmemBytes = kMainBytes + kPBytes;
  static_assert(kDynamicSmem || kSmemBytes <= 48 * 1024, "static shared memory is limited to 48 KB");

  // Tile copies: consecutive threads copy consecutive 16-byte chunks of a row (coalesced).  Where
  // the threads are no multiple of the chunks per row (D = 96, 192), kCopyPasses = lcm / threads
  // passes of the threads cover kCopyRows = lcm / chunks whole rows, thread t copying chunk
  // (t + pass * threads) % kChunks of row (t + pass * threads) / kChunks in each, and the pattern
  // repeats every kCopyRows rows; otherwise one pass covers kNThreads / kChunks rows.
  static constexpr int kTileChunks = kBlockN * kChunks;
  static constexpr int kCopyLcm = kNThreads / gcd_int(kNThreads, kChunks) * kChunks;
  static constexpr int kCopyPasses = kCopyLcm / kNThreads;
  static constexpr int kCopyRows = kCopyLcm / kChunks;
  static_assert(kTileChunks % kNThreads == 0 && kBlockN % kCopyRows == 0 && kBlockM * kChunks % kNThreads == 0,
                "every thread copies the same number of chunks");
};

// A configuration with another element type (same tile, same layout: every element type is 16
// bits wide).
template <class Kt, class E>
struct WithElement : Kt {
  using Element = E;
};

// Split-KV decode: a single warp per CTA owns 16 packed rows (the query heads of one KV head
// times Sq), so K/V are read once per KV head instead of once per query head.
template <int kHeadDim_, int kBlockN_, int kStages_, int kMinBlocksPerSm_>
using DecodeTraits = FwdTraits<kHeadDim_, 16, kBlockN_, 1, kStages_, kMinBlocksPerSm_, true>;

}  // namespace flash
