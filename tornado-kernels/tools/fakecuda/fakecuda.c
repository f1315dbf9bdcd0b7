/*
 * A fake CUDA driver (libcuda.so.1) for machines without an NVIDIA GPU: it reports one
 * "NVIDIA H100 80GB HBM3 (fake)" (sm_90, 132 SMs), backs "device memory" with host memory, and
 * turns kernel launches into no-ops. TornadoVM's PTX backend then starts, JIT-compiles Java
 * kernels to PTX and hands the PTX to cuModuleLoadData(Ex), which writes it to $FAKECUDA_PTX_DIR
 * (one file per module) so that ptxas can check it and report registers, spills and shared
 * memory. Results of "launched" kernels are meaningless: this is a compiler harness, not an emulator.
 * Build and use: tools/ptx-dump.sh.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda.h>

static int verbose(void) { return getenv("FAKECUDA_VERBOSE") != NULL; }

/* Device allocations, so that launches can report which argument points where. */
#define MAX_ALLOCATIONS 4096
static uintptr_t alloc_base[MAX_ALLOCATIONS];
static size_t alloc_size[MAX_ALLOCATIONS];
static int alloc_freed[MAX_ALLOCATIONS];
static int allocations;

/* The newest allocation holding p (freed ones included, so that a use after free is reported). */
static int allocation_of(uintptr_t p) {
    for (int i = allocations - 1; i >= 0; i--) {
        if (p >= alloc_base[i] && p < alloc_base[i] + alloc_size[i]) return i;
    }
    return -1;
}

static void check_live(const char *what, uintptr_t p) {
    int i = allocation_of(p);
    if (i >= 0 && alloc_freed[i]) fprintf(stderr, "[fakecuda] ERROR %s uses freed allocation #%d\n", what, i);
}

/* A copy must start in a live allocation and end inside it (the real driver answers INVALID_VALUE). */
static void check_range(const char *what, uintptr_t p, size_t n) {
    int i = allocation_of(p);
    if (i < 0) { fprintf(stderr, "[fakecuda] ERROR %s of %zu bytes to/from an address that was never allocated\n", what, n); return; }
    if (alloc_freed[i]) fprintf(stderr, "[fakecuda] ERROR %s uses freed allocation #%d\n", what, i);
    if (p + n > alloc_base[i] + alloc_size[i])
        fprintf(stderr, "[fakecuda] ERROR %s of %zu bytes at #%d+%zu overruns its %zu bytes\n", what, n, i,
                (size_t) (p - alloc_base[i]), alloc_size[i]);
}
static void *dummy(void) { return malloc(16); }

/* Counters a test in the same process reads through fakecuda_count (Java: the core module's FakeDriver):
 * module loads, cuFuncSetAttribute calls with the last value set, launches with the last one's dynamic shared memory. */
static long module_loads, func_set_attribute_calls, last_max_dynamic_shared, kernel_launches, last_launch_dynamic_shared;
static long ctx_push_calls, ctx_pop_calls, ctx_get_current_calls;
long fakecuda_count(const char *what) {
    if (!strcmp(what, "cuCtxPushCurrent")) return ctx_push_calls;
    if (!strcmp(what, "cuCtxPopCurrent")) return ctx_pop_calls;
    if (!strcmp(what, "cuCtxGetCurrent")) return ctx_get_current_calls;
    if (!strcmp(what, "cuMemAlloc")) return allocations;
    if (!strcmp(what, "cuModuleLoadData")) return module_loads;
    if (!strcmp(what, "cuFuncSetAttribute")) return func_set_attribute_calls;
    if (!strcmp(what, "maxDynamicSharedBytes")) return last_max_dynamic_shared;
    if (!strcmp(what, "cuLaunchKernel")) return kernel_launches;
    if (!strcmp(what, "lastLaunchDynamicSharedBytes")) return last_launch_dynamic_shared;
    return -1;
}

CUresult cuInit(unsigned int flags) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    snprintf(name, len, "NVIDIA H100 80GB HBM3 (fake)");
    return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) { *bytes = 80ull << 30; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    switch (a) {
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
        case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *v = 65536; break;
        case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
        case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
        case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
        case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
        case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
        case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
        case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = 32; break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = 0; break;
        case CU_DEVICE_ATTRIBUTE_INTEGRATED: *v = 0; break;
        default: *v = 1; break;
    }
    return CUDA_SUCCESS;
}
CUresult cuCtxCreate_v4(CUcontext *c, CUctxCreateParams *p, unsigned int flags, CUdevice d) { *c = dummy(); return CUDA_SUCCESS; }
CUresult cuCtxDestroy_v2(CUcontext c) { return CUDA_SUCCESS; }
/* This thread's context stack, as the driver keeps it: cuCtxSetCurrent replaces its top, push and pop move it. */
#define MAX_CONTEXT_DEPTH 64
static __thread CUcontext context_stack[MAX_CONTEXT_DEPTH];
static __thread int context_depth;
CUresult cuCtxSetCurrent(CUcontext c) {
    if (context_depth == 0) context_depth = 1;
    context_stack[context_depth - 1] = c;
    return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *c) {
    ctx_get_current_calls++;
    *c = context_depth > 0 ? context_stack[context_depth - 1] : NULL;
    return CUDA_SUCCESS;
}
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0; *greatest = -5; return CUDA_SUCCESS; }
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int prio) { *s = dummy(); return CUDA_SUCCESS; }
CUresult cuStreamDestroy_v2(CUstream s) { return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) { return CUDA_SUCCESS; }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) { return CUDA_SUCCESS; }
/* Stream capture in CU_STREAM_CAPTURE_MODE_GLOBAL (TornadoVM's PTX and CUDA backends capture so): while a thread
 * captures, the real driver refuses "potentially unsafe" calls (allocations, frees, host registrations, synchronous
 * copies, context synchronisation) from every other thread with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates
 * the capture. Modelled for other threads, so that a test running plans from several threads sees a capture that
 * overlaps another plan's build or first execution. */
static int global_captures;                 /* captures under way, all threads (atomic) */
static __thread int own_captures;           /* this thread's */
static CUresult capture_guard(const char *what) {
    if (__atomic_load_n(&global_captures, __ATOMIC_SEQ_CST) - own_captures > 0) {
        fprintf(stderr, "[fakecuda] ERROR %s while another thread captures a stream in global mode\n", what);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { *st = CU_STREAM_CAPTURE_STATUS_NONE; return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) {
    if (m == CU_STREAM_CAPTURE_MODE_GLOBAL) {
        own_captures++;
        __atomic_add_fetch(&global_captures, 1, __ATOMIC_SEQ_CST);
    }
    return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    /* A capture here takes no time of its own; 5 ms (a few per test) give another thread's overlapping call a
     * chance to show, as a real capture of a plan's copies and launches would. */
    usleep(5000);
    if (own_captures > 0) {
        own_captures--;
        __atomic_sub_fetch(&global_captures, 1, __ATOMIC_SEQ_CST);
    }
    *g = dummy();
    return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) { *e = dummy(); return CUDA_SUCCESS; }
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { return CUDA_SUCCESS; }
CUresult cuGraphDestroy(CUgraph g) { return CUDA_SUCCESS; }
CUresult cuGraphExecDestroy(CUgraphExec e) { return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent *e, unsigned int flags) { *e = dummy(); return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent e) { return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) { return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent e) { return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent e) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { *ms = 0.001f; return CUDA_SUCCESS; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (capture_guard("cuMemAlloc")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    void *m = malloc(n ? n : 1);   /* never reused while the process runs: freed blocks are leaked on purpose */
    if (m) memset(m, 0, n);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr) (uintptr_t) m;
    if (allocations < MAX_ALLOCATIONS) {
        alloc_base[allocations] = (uintptr_t) m;
        alloc_size[allocations] = n;
        allocations++;
    }
    if (verbose()) fprintf(stderr, "[fakecuda] alloc #%d %zu bytes\n", allocations - 1, n);
    return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    if (capture_guard("cuMemFree")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    int i = allocation_of((uintptr_t) p);
    if (i >= 0 && alloc_freed[i]) fprintf(stderr, "[fakecuda] ERROR double free of #%d\n", i);
    if (i >= 0) alloc_freed[i] = 1;
    if (verbose()) fprintf(stderr, "[fakecuda] free #%d\n", i);
    return CUDA_SUCCESS;   /* not returned to malloc, so that later uses can be told apart */
}
CUresult cuMemAllocHost_v2(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY; }
CUresult cuMemFreeHost(void *p) { free(p); return CUDA_SUCCESS; }
CUresult cuMemGetInfo_v2(size_t *freeBytes, size_t *total) { *freeBytes = 79ull << 30; *total = 80ull << 30; return CUDA_SUCCESS; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) { return capture_guard("cuMemHostRegister"); }
CUresult cuMemHostUnregister(void *p) { return capture_guard("cuMemHostUnregister"); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    check_range("HtoD", (uintptr_t) dst, n);
    memcpy((void *) (uintptr_t) dst, src, n);
    if (verbose()) {
        int i = allocation_of((uintptr_t) dst);
        fprintf(stderr, "[fakecuda] HtoD %zu bytes into #%d+%zu\n", n, i, i >= 0 ? (size_t) (dst - alloc_base[i]) : 0);
    }
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    check_range("DtoH", (uintptr_t) src, n);
    memcpy(dst, (const void *) (uintptr_t) src, n);
    if (verbose()) {
        int i = allocation_of((uintptr_t) src);
        fprintf(stderr, "[fakecuda] DtoH %zu bytes from #%d+%zu\n", n, i, i >= 0 ? (size_t) (src - alloc_base[i]) : 0);
    }
    return CUDA_SUCCESS;
}

/* A loaded module: its PTX, where known (text images; a cubin of tools/fakenvrtc's through fakenvrtc_ptx_of_image),
 * so that a function can say how its parameters are laid out. */
struct module { const char *ptx; };

/* TornadoVM's CUDA backend loads the cubin NVRTC gave it; tools/fakenvrtc, if loaded, knows its PTX. */
static const char *ptx_of(const void *image) {
    if (memcmp(image, "\177ELF", 4) != 0) return strdup((const char *) image);
    const char *(*lookup)(const void *) = (const char *(*)(const void *)) dlsym(RTLD_DEFAULT, "fakenvrtc_ptx_of_image");
    return lookup ? lookup(image) : NULL;
}

static int modules;
static CUresult dump(CUmodule *m, const void *image) {
    struct module *mod = calloc(1, sizeof *mod);
    mod->ptx = ptx_of(image);
    const char *dir = getenv("FAKECUDA_PTX_DIR");
    if (dir && mod->ptx) {
        char path[4096];
        snprintf(path, sizeof path, "%s/module-%03d.ptx", dir, modules);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(mod->ptx, f);
            fclose(f);
        }
    }
    if (verbose()) fprintf(stderr, "[fakecuda] module load #%d%s\n", modules, memcmp(image, "\177ELF", 4) ? "" : " (cubin)");
    modules++;
    module_loads++;
    *m = (CUmodule) mod;
    return CUDA_SUCCESS;
}
CUresult cuModuleLoadData(CUmodule *m, const void *image) { return dump(m, image); }
CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v) { return dump(m, image); }
CUresult cuModuleUnload(CUmodule m) { return CUDA_SUCCESS; }

/* A function handle: its name, then the number of parameters (-1: unknown) and each one's bytes, read from the
 * module's PTX ".entry name(.param .u64 ..., ...)", so that a launch through kernelParams can say what it passes. */
#define MAX_PARAMS 64
struct function { char name[256]; int params; unsigned char bytes[MAX_PARAMS]; };

static void read_params(struct function *fn, const char *ptx) {
    fn->params = -1;
    if (!ptx) return;
    char key[300];
    snprintf(key, sizeof key, ".entry %s(", fn->name);
    const char *p = strstr(ptx, key);
    if (!p) return;
    const char *end = strchr(p, ')');
    fn->params = 0;
    for (p = strstr(p, ".param"); p && p < end && fn->params < MAX_PARAMS; p = strstr(p + 6, ".param")) {
        const char *type = p + 6;
        while (*type == ' ' || *type == '\t') type++;
        fn->bytes[fn->params++] = (strncmp(type, ".u64", 4) && strncmp(type, ".b64", 4) && strncmp(type, ".s64", 4)
                                   && strncmp(type, ".f64", 4)) ? 4 : 8;
    }
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    struct function *fn = calloc(1, sizeof *fn);
    snprintf(fn->name, sizeof fn->name, "%s", name);
    read_params(fn, m ? ((struct module *) m)->ptx : NULL);
    *f = (CUfunction) fn;
    return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxPotentialBlockSize(int *minGrid, int *block, CUfunction f, CUoccupancyB2DSize fn, size_t smem, int limit) {
    *minGrid = 264;
    *block = 1024;
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int smem, CUstream s, void **params, void **extra) {
    const struct function *fn = (const struct function *) f;
    kernel_launches++;
    last_launch_dynamic_shared = smem;
    /* The arguments as 64-bit words: TornadoVM's PTX backend passes them as one buffer (extra = {BUFFER_POINTER, buf,
     * BUFFER_SIZE, &size, END}), its CUDA backend as kernelParams, one pointer per parameter of the entry. */
    uint64_t words[MAX_PARAMS];
    int present[MAX_PARAMS];
    int n = 0;
    if (extra && extra[0] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[2] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        const uint64_t *buffer = (const uint64_t *) extra[1];
        for (size_t w = 0; w < *(size_t *) extra[3] / 8 && n < MAX_PARAMS; w++, n++) { words[n] = buffer[w]; present[n] = 1; }
    } else if (params && fn->params > 0) {
        for (; n < fn->params; n++) {
            present[n] = params[n] != NULL;
            words[n] = 0;
            if (present[n]) memcpy(&words[n], params[n], fn->bytes[n]);
        }
    }
    for (int w = 0; w < n; w++) if (present[w]) check_live("launch argument", (uintptr_t) words[w]);
    if (verbose()) {
        /* One write per line: lanes launch from several threads, and a line split between writes would interleave. */
        char line[8192];
        size_t len = (size_t) snprintf(line, sizeof line, "[fakecuda] launch %s grid (%u,%u,%u) block (%u,%u,%u) dynamic smem %u args:",
                                       fn->name, gx, gy, gz, bx, by, bz, smem);
        for (int w = 0; w < n && len < sizeof line - 64; w++) {
            int i = present[w] ? allocation_of((uintptr_t) words[w]) : -1;
            if (!present[w]) len += (size_t) snprintf(line + len, sizeof line - len, " null");
            else if (i >= 0) len += (size_t) snprintf(line + len, sizeof line - len, " #%d+%zu", i, (size_t) (words[w] - alloc_base[i]));
            else len += (size_t) snprintf(line + len, sizeof line - len, " %llu", (unsigned long long) words[w]);
        }
        fprintf(stderr, "%s\n", line);
    }
    return CUDA_SUCCESS;
}

/* TornadoVM's CUDA backend (libtornado-cuda.so, with tools/fakenvrtc standing in for NVRTC) needs these too. */
CUresult cuCtxSynchronize(void) { return capture_guard("cuCtxSynchronize"); }
CUresult cuGetErrorName(CUresult e, const char **s) { *s = e ? "CUDA_ERROR_FAKE" : "CUDA_SUCCESS"; return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult e, const char **s) { *s = e ? "fake error" : "no error"; return CUDA_SUCCESS; }
CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info) { return CUDA_SUCCESS; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    check_range("cuMemcpyDtoD destination", (uintptr_t) dst, n);
    check_range("cuMemcpyDtoD source", (uintptr_t) src, n);
    memmove((void *) dst, (const void *) src, n);
    return CUDA_SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    check_range("cuMemsetD8", (uintptr_t) dst, n);
    memset((void *) dst, v, n);
    return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream *s, unsigned int flags) { *s = dummy(); return CUDA_SUCCESS; }

/* The CUDA-driver host of the core library (cuda/CudaDriver) binds these too. */
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = dummy(); return CUDA_SUCCESS; }
CUresult cuCtxPushCurrent_v2(CUcontext c) {
    ctx_push_calls++;
    if (context_depth < MAX_CONTEXT_DEPTH) context_stack[context_depth++] = c;
    return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    ctx_pop_calls++;
    if (c) *c = context_depth > 0 ? context_stack[context_depth - 1] : NULL;
    if (context_depth > 0) context_depth--;
    return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
#undef cuEventElapsedTime /* cuda.h maps the name to _v2; the host binds the original symbol */
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { *ms = 0.001f; return CUDA_SUCCESS; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) { *p = malloc(n ? n : 1); return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    if (capture_guard("cuMemcpyHtoD")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    check_range("HtoD", (uintptr_t) dst, n);
    memcpy((void *) (uintptr_t) dst, src, n);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return cuMemcpyDtoD_v2(dst, src, n); }
/* Device memory is what cuMemAlloc handed out (live allocations); anything else is not device memory. */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    int i = allocation_of((uintptr_t) p);
    if (i < 0 || alloc_freed[i]) return CUDA_ERROR_INVALID_VALUE;
    if (a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) { *(int *) data = 0; return CUDA_SUCCESS; }
    return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int value) {
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        func_set_attribute_calls++;
        last_max_dynamic_shared = value;
    }
    if (verbose()) fprintf(stderr, "[fakecuda] cuFuncSetAttribute %s %d = %d\n", (const char *) f, (int) a, value);
    return CUDA_SUCCESS;
}
