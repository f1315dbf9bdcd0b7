/*
 * hostpin: an LD_PRELOAD companion of fakecuda.c that models the CUDA driver's page-locked host memory
 * (cuMemHostRegister / cuMemHostUnregister) and reports its misuse. Used by tools/ResidencyRepro.java and
 * ResidencyReproTest; fakecuda.c itself accepts every registration and forgets it.
 *
 *   LD_PRELOAD=libhostpin.so LD_LIBRARY_PATH=<dir of the fake libcuda.so.1> java ... ResidencyRepro ...
 *
 * What the real driver does and this models:
 *  - cuMemHostRegister of a range that overlaps a registered one answers
 *    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712); TornadoVM's JNI (PTXContext.cpp) takes 712 as
 *    "already pinned, DMA works".
 *  - cuMemHostUnregister of an address that is not the start of a registration answers
 *    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED (713).
 *  - Pages stay pinned, and the registration stays, until cuMemHostUnregister, even when the process
 *    frees the memory. Freeing registered memory is undefined (CUDA driver API: memory registered with
 *    cuMemHostRegister must be unregistered before it is freed): the driver keeps DMA-ing to/from the
 *    physical pages it pinned, which are no longer the pages at those virtual addresses once the
 *    allocator unmaps them and maps new memory there.
 *
 * Reported on stderr (always; one line each):
 *   [hostpin] register 0x.. +N -> 0 | 712 (overlaps #i)       [hostpin] unregister 0x.. -> 0 | 713
 *   [hostpin] ERROR host memory 0x.. (+N) freed while registered (#i)   (free() of a registered block)
 *   [hostpin] ERROR HtoD|DtoH through stale registration #i ...        (a copy through such a range)
 *   [hostpin] exit: R registered, U unregistered, L still registered, F freed while registered
 * free() is interposed to see the JVM release off-heap memory (Arena.ofAuto's Cleaner, Arena.close),
 * which glibc unmaps at once for blocks of 32 MiB and more.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda.h>

extern void __libc_free(void *p);

#define MAX_REGISTRATIONS 4096
static uintptr_t reg_base[MAX_REGISTRATIONS];
static size_t reg_size[MAX_REGISTRATIONS];
static int reg_live[MAX_REGISTRATIONS];    /* registered and not unregistered */
static int reg_stale[MAX_REGISTRATIONS];   /* its memory was freed while registered */
static int registrations, unregistered, freed_registered;
static volatile int live_count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int overlapping(uintptr_t p, size_t n) {
    for (int i = registrations - 1; i >= 0; i--) {
        if (reg_live[i] && p < reg_base[i] + reg_size[i] && reg_base[i] < p + n) return i;
    }
    return -1;
}

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
    pthread_mutex_lock(&lock);
    int i = overlapping((uintptr_t) p, n);
    CUresult rc = CUDA_SUCCESS;
    if (i >= 0) {
        rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        fprintf(stderr, "[hostpin] register %p +%zu -> 712 (overlaps #%d%s)\n", p, n, i,
                reg_stale[i] ? ", whose memory was freed while registered: DMA would use the old pages" : "");
    } else if (registrations < MAX_REGISTRATIONS) {
        i = registrations++;
        reg_base[i] = (uintptr_t) p;
        reg_size[i] = n;
        reg_live[i] = 1;
        reg_stale[i] = 0;
        live_count++;
        fprintf(stderr, "[hostpin] register %p +%zu -> 0 (#%d)\n", p, n, i);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemHostUnregister(void *p) {
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    for (int i = registrations - 1; i >= 0; i--) {
        if (reg_live[i] && reg_base[i] == (uintptr_t) p) {
            reg_live[i] = 0;
            live_count--;
            unregistered++;
            rc = CUDA_SUCCESS;
            fprintf(stderr, "[hostpin] unregister %p -> 0 (#%d)\n", p, i);
            break;
        }
    }
    if (rc != CUDA_SUCCESS) fprintf(stderr, "[hostpin] unregister %p -> 713\n", p);
    pthread_mutex_unlock(&lock);
    return rc;
}

static void check_copy(const char *what, uintptr_t host, size_t n) {
    if (live_count == 0) return;
    pthread_mutex_lock(&lock);
    int i = overlapping(host, n);
    if (i >= 0 && reg_stale[i])
        fprintf(stderr, "[hostpin] ERROR %s of %zu bytes through stale registration #%d (host %p): the real driver"
                " copies to/from the pages pinned before that memory was freed, not the memory now at %p\n",
                what, n, i, (void *) host, (void *) host);
    pthread_mutex_unlock(&lock);
}

/* The fake libcuda.so.1's own function (loaded after this preload, locally: RTLD_NEXT does not see it). */
static void *driver(const char *name) {
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? dlsym(lib, name) : NULL;
}

typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t, CUstream);

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    static htod_fn next;
    if (!next) next = (htod_fn) driver("cuMemcpyHtoDAsync_v2");
    check_copy("HtoD", (uintptr_t) src, n);
    return next(dst, src, n, s);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    static dtoh_fn next;
    if (!next) next = (dtoh_fn) driver("cuMemcpyDtoHAsync_v2");
    check_copy("DtoH", (uintptr_t) dst, n);
    return next(dst, src, n, s);
}

void free(void *p) {
    if (p != NULL && live_count > 0) {
        size_t n = malloc_usable_size(p);
        pthread_mutex_lock(&lock);
        for (int i = 0; i < registrations; i++) {
            if (reg_live[i] && !reg_stale[i] && (uintptr_t) p < reg_base[i] + reg_size[i]
                    && reg_base[i] < (uintptr_t) p + n) {
                reg_stale[i] = 1;
                freed_registered++;
                fprintf(stderr, "[hostpin] ERROR host memory %p (+%zu) freed while registered (#%d, never unregistered)\n",
                        (void *) reg_base[i], reg_size[i], i);
            }
        }
        pthread_mutex_unlock(&lock);
    }
    __libc_free(p);
}

__attribute__((destructor)) static void summary(void) {
    fprintf(stderr, "[hostpin] exit: %d registered, %d unregistered, %d still registered, %d freed while registered\n",
            registrations, unregistered, live_count, freed_registered);
}
