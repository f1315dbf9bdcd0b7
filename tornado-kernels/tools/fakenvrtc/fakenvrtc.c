/*
 * A stand-in NVRTC (libnvrtc.so) for machines whose CUDA toolkit has nvcc but no NVRTC: each
 * nvrtcCompileProgram writes the source to a temporary directory and runs
 *   nvcc -x cu --ptx -arch=compute_XX <options> -o prog.ptx <name>
 * (and, for -arch=sm_XX, also nvcc --cubin -arch=sm_XX prog.ptx -o prog.cubin), keeping the PTX,
 * the cubin and nvcc's output as the program log. nvcc is $FAKENVRTC_NVCC, else nvcc on PATH.
 * $FAKENVRTC_KEEP=DIR keeps each compilation's files in DIR/nvrtc-NNN instead of deleting them.
 * fakenvrtc_ptx_of_image(image) gives the PTX a cubin it produced was built from, so that the fake driver
 * (tools/fakecuda) can write it out and read the kernels' parameter lists, as it does for loaded PTX.
 * It lets TornadoVM's CUDA backend build and compile kernels next to tools/fakecuda (no GPU).
 * Build: gcc -shared -fPIC -O1 -I. -Wl,-soname,libnvrtc.so.13 -o libnvrtc.so.13 fakenvrtc.c
 *        (plus the link libnvrtc.so -> libnvrtc.so.13 for -lnvrtc).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
#include "nvrtc.h"

extern char **environ;

struct _nvrtcProgram {
    char *src, *name;
    int num_headers;
    char **headers, **include_names;
    char *ptx, *cubin, *log;
    size_t ptx_size, cubin_size, log_size;   /* sizes as NVRTC reports them (PTX and log: with NUL) */
};

static const char *nvcc(void) {
    const char *n = getenv("FAKENVRTC_NVCC");
    return n && *n ? n : "nvcc";
}

/* Runs argv with stdout and stderr appended to log_path; returns the exit status (-1: not run). */
static int run(char *const argv[], const char *log_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Whole file into a malloc'd buffer with a NUL after it; *size excludes the NUL. */
static char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n + 1);
    if (buf && fread(buf, 1, n, f) != (size_t) n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; *size = n; }
    return buf;
}

static int spit(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Runs "nvcc --version" or "nvcc --list-gpu-code" and returns its output (static buffer). */
static const char *nvcc_says(const char *what) {
    static char out[4096];
    char log[] = "/tmp/fakenvrtc-XXXXXX";
    int fd = mkstemp(log);
    if (fd < 0) return "";
    close(fd);
    char *argv[] = {(char *) nvcc(), (char *) what, NULL};
    size_t n = 0;
    char *text = run(argv, log) == 0 ? slurp(log, &n) : NULL;
    unlink(log);
    snprintf(out, sizeof out, "%s", text ? text : "");
    free(text);
    return out;
}

const char *nvrtcGetErrorString(nvrtcResult r) {
    static const char *names[] = {
        "NVRTC_SUCCESS", "NVRTC_ERROR_OUT_OF_MEMORY", "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
        "NVRTC_ERROR_INVALID_INPUT", "NVRTC_ERROR_INVALID_PROGRAM", "NVRTC_ERROR_INVALID_OPTION",
        "NVRTC_ERROR_COMPILATION", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION", "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID", "NVRTC_ERROR_INTERNAL_ERROR"};
    return r >= 0 && r < (int) (sizeof names / sizeof *names) ? names[r] : "NVRTC_ERROR unknown";
}

/* The version of the nvcc behind it ("release 13.0"), 13.0 if it cannot be asked. */
nvrtcResult nvrtcVersion(int *major, int *minor) {
    static int ma = -1, mi = -1;
    if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
    if (ma < 0) {
        const char *r = strstr(nvcc_says("--version"), "release ");
        if (!r || sscanf(r, "release %d.%d", &ma, &mi) != 2) { ma = 13; mi = 0; }
    }
    *major = ma;
    *minor = mi;
    return NVRTC_SUCCESS;
}

/* The sm_XX that "nvcc --list-gpu-code" names, ascending (as NVRTC lists them). */
static int archs[64], num_archs = -1;
static int by_value(const void *a, const void *b) { return *(const int *) a - *(const int *) b; }
static void load_archs(void) {
    if (num_archs >= 0) return;
    num_archs = 0;
    for (const char *p = nvcc_says("--list-gpu-code"); (p = strstr(p, "sm_")) && num_archs < 64; p += 3) {
        archs[num_archs++] = atoi(p + 3);
    }
    qsort(archs, num_archs, sizeof *archs, by_value);
}
nvrtcResult nvrtcGetNumSupportedArchs(int *n) {
    if (!n) return NVRTC_ERROR_INVALID_INPUT;
    load_archs();
    *n = num_archs;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetSupportedArchs(int *out) {
    if (!out) return NVRTC_ERROR_INVALID_INPUT;
    load_archs();
    memcpy(out, archs, num_archs * sizeof *archs);
    return NVRTC_SUCCESS;
}

static char *dup_or(const char *s, const char *fallback) { return strdup(s ? s : fallback); }

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int num_headers,
                               const char *const *headers, const char *const *include_names) {
    if (!prog || !src || num_headers < 0 || (num_headers > 0 && (!headers || !include_names)))
        return NVRTC_ERROR_INVALID_INPUT;
    nvrtcProgram p = calloc(1, sizeof *p);
    if (!p) return NVRTC_ERROR_OUT_OF_MEMORY;
    p->src = strdup(src);
    /* nvcc gets the source under this name, so the log names it as NVRTC's would. */
    const char *base = name && *name ? strrchr(name, '/') : NULL;
    p->name = dup_or(base ? base + 1 : name && *name ? name : NULL, "default_program");
    p->num_headers = num_headers;
    p->headers = calloc(num_headers + 1, sizeof(char *));
    p->include_names = calloc(num_headers + 1, sizeof(char *));
    for (int i = 0; i < num_headers; i++) {
        p->headers[i] = dup_or(headers[i], "");
        p->include_names[i] = dup_or(include_names[i], "");
    }
    *prog = p;
    return NVRTC_SUCCESS;
}

static void clear_outputs(nvrtcProgram p) {
    free(p->ptx); free(p->cubin); free(p->log);
    p->ptx = p->cubin = p->log = NULL;
    p->ptx_size = p->cubin_size = p->log_size = 0;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
    if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
    nvrtcProgram p = *prog;
    clear_outputs(p);
    for (int i = 0; i < p->num_headers; i++) { free(p->headers[i]); free(p->include_names[i]); }
    free(p->headers); free(p->include_names); free(p->src); free(p->name); free(p);
    *prog = NULL;
    return NVRTC_SUCCESS;
}

/* A work directory: $FAKENVRTC_KEEP/nvrtc-NNN (kept) or a fresh /tmp one (removed afterwards). */
static int work_dir(char *dir, size_t n, int *keep) {
    static int serial;
    const char *kept = getenv("FAKENVRTC_KEEP");
    *keep = kept && *kept;
    if (*keep) {
        mkdir(kept, 0755);
        for (;;) {
            snprintf(dir, n, "%s/nvrtc-%03d", kept, __atomic_fetch_add(&serial, 1, __ATOMIC_SEQ_CST));
            if (mkdir(dir, 0755) == 0) return 0;
            if (errno != EEXIST) return -1;
        }
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, n, "%s/fakenvrtc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static void remove_dir(const char *dir) {
    char *argv[] = {"rm", "-rf", (char *) dir, NULL};
    run(argv, "/dev/null");
}

/* NVRTC spellings nvcc does not take, and options that only matter to NVRTC. */
static const char *translate(const char *opt) {
    if (!strncmp(opt, "--include-path=", 15)) return "-I";
    if (!strncmp(opt, "--define-macro=", 15)) return "-D";
    if (!strncmp(opt, "--undefine-macro=", 17)) return "-U";
    return NULL;
}
static int nvrtc_only(const char *opt) {
    static const char *ignored[] = {"-default-device", "--device-as-default-execution-space",
                                    "--builtin-move-forward", "--builtin-initializer-list",
                                    "-no-builtin-move-forward", "-no-builtin-initializer-list", NULL};
    for (int i = 0; ignored[i]; i++)
        if (!strcmp(opt, ignored[i])) return 1;
    return 0;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int num_options, const char *const *options) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (num_options < 0 || (num_options > 0 && !options)) return NVRTC_ERROR_INVALID_INPUT;
    clear_outputs(p);

    /* The target: -arch=X, -arch X, --gpu-architecture=X or --gpu-architecture X. */
    const char *arch = "compute_80";
    int n_args = 0;
    char **args = calloc(2 * num_options + 1, sizeof(char *));   /* the options passed on to nvcc */
    for (int i = 0; i < num_options; i++) {
        const char *o = options[i];
        if (!strncmp(o, "-arch=", 6)) arch = o + 6;
        else if (!strncmp(o, "--gpu-architecture=", 19)) arch = o + 19;
        else if ((!strcmp(o, "-arch") || !strcmp(o, "--gpu-architecture")) && i + 1 < num_options) arch = options[++i];
        else if (nvrtc_only(o)) continue;
        else if (translate(o)) {
            const char *flag = translate(o);
            args[n_args++] = strdup(flag);
            args[n_args++] = strdup(strchr(o, '=') + 1);
        } else args[n_args++] = strdup(o);
    }
    int sm = !strncmp(arch, "sm_", 3);
    char virtual_arch[64];
    snprintf(virtual_arch, sizeof virtual_arch, "-arch=compute_%s", sm ? arch + 3 : arch + (strncmp(arch, "compute_", 8) ? 0 : 8));

    char dir[PATH_MAX - 64], src[PATH_MAX], ptx[PATH_MAX], cubin[PATH_MAX], log[PATH_MAX];
    int keep;
    if (work_dir(dir, sizeof dir, &keep) != 0) {
        for (int i = 0; i < n_args; i++) free(args[i]);
        free(args);
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    snprintf(src, sizeof src, "%s/%s", dir, p->name);
    snprintf(ptx, sizeof ptx, "%s/prog.ptx", dir);
    snprintf(cubin, sizeof cubin, "%s/prog.cubin", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    nvrtcResult result = NVRTC_SUCCESS;
    int wrote = spit(src, p->src) == 0;
    for (int i = 0; wrote && i < p->num_headers; i++) {   /* in-memory headers, next to the source */
        char h[PATH_MAX];
        snprintf(h, sizeof h, "%s/%s", dir, p->include_names[i]);
        wrote = spit(h, p->headers[i]) == 0;
    }
    if (!wrote) result = NVRTC_ERROR_INTERNAL_ERROR;

    if (result == NVRTC_SUCCESS) {
        char **argv = calloc(n_args + 10, sizeof(char *));
        int a = 0;
        argv[a++] = (char *) nvcc();
        argv[a++] = "-x";
        argv[a++] = "cu";
        argv[a++] = "--ptx";
        argv[a++] = virtual_arch;
        for (int i = 0; i < n_args; i++) argv[a++] = args[i];
        argv[a++] = "-o";
        argv[a++] = ptx;
        argv[a++] = src;
        int rc = run(argv, log);
        if (rc == 0 && sm) {
            char real_arch[64];
            snprintf(real_arch, sizeof real_arch, "-arch=%s", arch);
            char *argv2[] = {(char *) nvcc(), "--cubin", real_arch, "-o", cubin, ptx, NULL};
            rc = run(argv2, log);
        }
        if (rc < 0) {
            FILE *f = fopen(log, "a");
            if (f) { fprintf(f, "fakenvrtc: could not run %s\n", nvcc()); fclose(f); }
        }
        free(argv);
        if (rc != 0) result = NVRTC_ERROR_COMPILATION;
        if (result == NVRTC_SUCCESS) {
            p->ptx = slurp(ptx, &p->ptx_size);
            p->ptx_size++;
            if (sm) p->cubin = slurp(cubin, &p->cubin_size);
            if (!p->ptx || (sm && !p->cubin)) result = NVRTC_ERROR_INTERNAL_ERROR;
        }
    }
    size_t n = 0;
    p->log = slurp(log, &n);
    if (!p->log) p->log = strdup("");
    p->log_size = n + 1;
    if (!keep) remove_dir(dir);
    for (int i = 0; i < n_args; i++) free(args[i]);
    free(args);
    return result;
}

/* Every cubin handed out, with the PTX it came from (never freed: a test process compiles a few hundred). */
struct built { char *cubin; size_t size; char *ptx; struct built *next; };
static struct built *built_list;
static pthread_mutex_t built_lock = PTHREAD_MUTEX_INITIALIZER;

static void remember(const char *cubin, size_t size, const char *ptx) {
    struct built *b = malloc(sizeof *b);
    if (!b) return;
    b->cubin = malloc(size);
    b->ptx = strdup(ptx);
    if (!b->cubin || !b->ptx) { free(b->cubin); free(b->ptx); free(b); return; }
    memcpy(b->cubin, cubin, size);
    b->size = size;
    pthread_mutex_lock(&built_lock);
    b->next = built_list;
    built_list = b;
    pthread_mutex_unlock(&built_lock);
}

/* The PTX of the cubin at image (a copy of one this library produced), or NULL. The ELF header (64 bytes) is
 * compared first, so no more of image is read than a cubin of the same header has. */
const char *fakenvrtc_ptx_of_image(const void *image) {
    const char *found = NULL;
    pthread_mutex_lock(&built_lock);
    for (struct built *b = built_list; b && !found; b = b->next) {
        if (b->size >= 64 && !memcmp(image, b->cubin, 64) && !memcmp(image, b->cubin, b->size)) found = b->ptx;
    }
    pthread_mutex_unlock(&built_lock);
    return found;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t *size) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!size || !p->ptx) return NVRTC_ERROR_INVALID_INPUT;
    *size = p->ptx_size;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetPTX(nvrtcProgram p, char *out) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!out || !p->ptx) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, p->ptx, p->ptx_size);
    return NVRTC_SUCCESS;
}
/* A cubin exists only for -arch=sm_XX, as with NVRTC. */
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *size) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!size || !p->cubin) return NVRTC_ERROR_INVALID_INPUT;
    *size = p->cubin_size;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *out) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!out || !p->cubin) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, p->cubin, p->cubin_size);
    if (p->ptx) remember(p->cubin, p->cubin_size, p->ptx);
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *size) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!size) return NVRTC_ERROR_INVALID_INPUT;
    *size = p->log ? p->log_size : 1;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *out) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!out) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, p->log ? p->log : "", p->log ? p->log_size : 1);
    return NVRTC_SUCCESS;
}
