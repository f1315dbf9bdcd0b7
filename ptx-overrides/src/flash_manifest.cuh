// The rows of ptx/manifest.tsv, the one launch table of the shipped and benchmark entries.
//
// Every entry macro names its entry here once more, with its kind and its tile configuration
// (the traits type it is compiled from), and a .cu file says which configuration a host runs
// for which head dim and causal flag (FLASH_SELECT).  In the PTX build these macros expand to
// nothing.  generate.sh compiles each src/*.cu once more with -DFLASH_MANIFEST: on the host side
// the macros then register rows, and main() prints them; ptxas adds registers and static shared
// memory.  So Br, Bc, warps, threads and shared memory come from the same constexprs the kernel
// is compiled with, never from its name.
#pragma once

#if defined(FLASH_MANIFEST) && !defined(__CUDA_ARCH__)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "flash_params.cuh"

namespace flash::manifest {

struct Row {
  std::string kind, config, entry;
  int header_bytes;  // 0: CUDA-driver ABI; > 0: TornadoVM prebuilt ABI, arrays behind this header
  std::string dtype;   // the element type's name (element_type.cuh)
  std::string layout;  // none, contiguous, paged, any (the K/V layouts the entry reads)
  std::string causal = "-";  // which causal flag selects the entry (0, 1, any); - = none
  std::string features = "-";  // run-time features the entry supports, joined with +; - = none
  int head_dim = 0, br = 0, bc = 0, warps = 0, threads = 0, stages = 0, q_in_smem = 0;
  std::string opt = "-";
  int smem_dynamic = 0;
};

inline std::vector<Row>& rows() {
  static std::vector<Row> r;
  return r;
}

// The architecture family the module is compiled for (FLASH_MODULE_ARCH).
inline std::string& module_arch() {
  static std::string a = "-";
  return a;
}
inline bool set_module_arch(const char* arch) {
  module_arch() = arch;
  return true;
}

// The K/V layout of an entry compiled in cache mode MODE (flash_params.cuh, CacheMode).
inline const char* layout_of(int mode) {
  return mode == kCacheContig ? "contiguous" : mode == kCachePaged ? "paged" : "none";
}

// The switches of an ablation or tuning entry that differ from the shipped kernel body.
template <class O>
std::string opt_name() {
  std::string s;
  auto add = [&](bool on, const char* name) { if (on) s += (s.empty() ? "" : "+") + std::string(name); };
  add(!O::kCpAsyncPipeline, "no_cpasync");
  add(!O::kLdmatrix, "no_ldmatrix");
  add(!O::kSwizzle, "no_swizzle");
  add(!O::kPInRegs, "p_smem");
  add(!O::kCausalSkip, "no_causal_skip");
  add(O::kLazyRescale, "lazy_rescale");
  if (O::kLean != 0) add(true, ("lean" + std::to_string(O::kLean)).c_str());
  return s.empty() ? "-" : s;
}

// The run-time score features (params words P_WINDOW_LEFT..P_SINKS), in the manifest's spelling
// (Java's KernelVariant.Feature.column()).  The entries of the one kernel body (fwd_body) built with
// them (Opt::kFeatures) and every combine of its split passes implement all three.
inline const char* kScoreFeatures = "window+softcap+sinks";

// What a plain entry (OptPlain) serves: sinks, which are the softmax's starting state in a prefill tile (fwd_body)
// and join in the combine of the split passes, so every entry takes them (but an OptPlain<..., false>).
inline const char* kPlainFeatures = "sinks";

// An entry compiled from a FwdTraits configuration (prefill and split-KV decode tiles): fwd_body,
// which serves all the score features unless its Opt is an OptPlain (then sinks only).
template <class KT>
bool add(const char* kind, const char* config, const char* entry, int header_bytes, const char* layout) {
  Row r{kind, config, entry, header_bytes, KT::Element::kName, layout};
  r.features = KT::O::kFeatures ? kScoreFeatures : KT::O::kSinks ? kPlainFeatures : "-";
  r.head_dim = KT::kHeadDim;
  r.br = KT::kBlockM;
  r.bc = KT::kBlockN;
  r.warps = KT::kNWarps;
  r.threads = KT::kNThreads;
  r.stages = KT::kStages;
  r.q_in_smem = KT::kQInRegs ? 0 : 1;
  r.opt = opt_name<typename KT::O>();
  r.smem_dynamic = KT::kDynamicSmem ? KT::kSmemBytes : 0;
  rows().push_back(r);
  return true;
}

// An entry without a tile configuration, of element type E: `rows` rows of `head_dim` values per
// block (head_dim 0: any); `features`: its run-time features (kScoreFeatures or "-").
template <class E>
bool add_plain(const char* kind, const char* config, const char* entry, int header_bytes, const char* layout,
               const char* features, int head_dim, int rows_per_block, int threads) {
  Row r{kind, config, entry, header_bytes, E::kName, layout};
  r.features = features;
  r.head_dim = head_dim;
  r.br = rows_per_block;
  r.warps = threads / 32;
  r.threads = threads;
  rows().push_back(r);
  return true;
}

inline bool select(const char* config, const char* causal) {
  bool found = false;
  for (Row& r : rows()) {
    if (r.config == config) {
      r.causal = causal;
      found = true;
    }
  }
  if (!found) {
    std::fprintf(stderr, "FLASH_SELECT(%s, %s): no entry of that configuration above it\n", config, causal);
    std::exit(1);
  }
  return true;
}

// One line per entry, tab-separated, in the order the entries are defined, the manifest's
// columns from entry to smem_dynamic (generate.sh adds the module and the ptxas columns).
inline void print() {
  for (const Row& r : rows()) {
    std::printf("%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\n", r.entry.c_str(),
                r.kind.c_str(), r.dtype.c_str(), r.head_dim, r.causal.c_str(), r.layout.c_str(), r.features.c_str(),
                r.header_bytes == 0 ? "cuda" : "tornado", r.header_bytes, module_arch().c_str(), r.br, r.bc, r.warps,
                r.threads, r.stages, r.q_in_smem, r.opt.c_str(), r.smem_dynamic);
  }
}

}  // namespace flash::manifest

// KIND: prefill, decode-split, decode-combine, decode-fused, ...; CONFIG: the name the twins of
// one configuration share (FLASH_SELECT names it); ENTRY: the .entry name; HEADER: bytes before
// each array's data (0 for the CUDA-driver entries, TornadoVM's header for its twins); LAYOUT:
// the K/V layouts it reads (none, contiguous, paged, any).  The element type comes from KT (E).
// FEATURES (plain rows): flash::manifest::kScoreFeatures for a combine, "-" otherwise; tile rows
// serve the score features (Opt::kFeatures) or sinks only (OptPlain; none with OptPlain<..., false>).
#define FLASH_MANIFEST_ROW(KIND, CONFIG, ENTRY, HEADER, KT, LAYOUT) \
  static const bool ENTRY##_in_manifest = flash::manifest::add<KT>(KIND, #CONFIG, #ENTRY, HEADER, LAYOUT);
#define FLASH_MANIFEST_PLAIN(KIND, CONFIG, ENTRY, HEADER, E, LAYOUT, FEATURES, D, ROWS, THREADS) \
  static const bool ENTRY##_in_manifest =                                                         \
      flash::manifest::add_plain<E>(KIND, #CONFIG, #ENTRY, HEADER, LAYOUT, FEATURES, D, ROWS, THREADS);
// The architecture family the module is compiled for (the manifest's arch: sm80 = compute_80 PTX).
#define FLASH_MODULE_ARCH(ARCH) static const bool flash_module_arch = flash::manifest::set_module_arch(#ARCH);
// The launch table: configuration CONFIG runs calls of its head dim whose causal flag is CAUSAL
// (0, 1 or any).  Must follow the configuration's entries.
#define FLASH_SELECT(CONFIG, CAUSAL) \
  static const bool CONFIG##_selected = flash::manifest::select(#CONFIG, #CAUSAL);
#else
#define FLASH_MANIFEST_ROW(KIND, CONFIG, ENTRY, HEADER, KT, LAYOUT)
#define FLASH_MANIFEST_PLAIN(KIND, CONFIG, ENTRY, HEADER, E, LAYOUT, FEATURES, D, ROWS, THREADS)
#define FLASH_MODULE_ARCH(ARCH)
#define FLASH_SELECT(CONFIG, CAUSAL)
#endif
