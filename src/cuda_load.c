/* cuda_load.c: finding the NVIDIA driver and loading libtfm-cuda.so (cuda_plugin.h), and
 * the library's CUDA entry points that go through it (tfm_backend_cuda in backend.h).
 *
 * The driver is asked first, through its own library (libcuda.so.1, small, always present
 * where a GPU is): is there one, does it start, is it new enough for the toolkit this
 * build used.  Only then is the plugin, which pulls in cudart, cuBLAS and NCCL, mapped.
 */
#include "cuda_plugin.h"

#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "so_check.h"

#ifdef TFM_CUDA

/* The driver API's few calls used here, by their documented C signatures (cuda.h). */
typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_count_fn)(int *count);
typedef int (*cu_version_fn)(int *version);
typedef int (*cu_error_name_fn)(int code, const char **name);

static struct {
    pthread_once_t once;
    const struct tfm_cuda_plugin *plugin;
    char why[512];
    int gpus;           /* tfm_cuda_driver_gpus */
    /* the driver library the search found: the first whole copy the loader would take,
     * and the first it would pass over (another machine's, no library, unreadable), each
     * as "PATH" and "PATH: REASON" (empty: none) */
    char taken[PATH_MAX], skipped[PATH_MAX + 128];
} loaded = {.once = PTHREAD_ONCE_INIT, .gpus = -1};

__attribute__((format(printf, 1, 2))) static void why(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(loaded.why, sizeof loaded.why, fmt, ap);
    va_end(ap);
}

/* The driver's errors that can end its start, by number, for a library that cannot name
 * them itself (the toolkit's stub answers every call, cuGetErrorName too, with 34). */
static const struct {
    int code;
    const char *name, *what;
} driver_errors[] = {
    {3, "CUDA_ERROR_NOT_INITIALIZED", NULL},
    {34, "CUDA_ERROR_STUB_LIBRARY", NULL},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "the GPU is in use by another process or prohibited"},
    {100, "CUDA_ERROR_NO_DEVICE", NULL},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", NULL},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", NULL},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "libcuda.so.1 and the loaded kernel module are of different driver versions"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", NULL},
    {999, "CUDA_ERROR_UNKNOWN", NULL},
};

/* "NAME: description" of a driver error code: from the driver (cuGetErrorName,
 * cuGetErrorString), else from driver_errors, else "error N".  The stub library of the
 * toolkit (34: what a build links against, taken for the driver when its directory is on
 * LD_LIBRARY_PATH) is named with its path. */
static const char *driver_error(void *drv, int code, char *buf, size_t n)
{
    cu_error_name_fn name = (cu_error_name_fn)dlsym(drv, "cuGetErrorName");
    cu_error_name_fn text = (cu_error_name_fn)dlsym(drv, "cuGetErrorString");
    const char *s = NULL, *t = NULL;
    if (!name || name(code, &s) != 0)
        s = NULL;
    if (!text || text(code, &t) != 0)
        t = NULL;
    for (size_t i = 0; i < sizeof driver_errors / sizeof *driver_errors && !s; i++)
        if (driver_errors[i].code == code) {
            s = driver_errors[i].name;
            t = driver_errors[i].what;
        }
    struct link_map *lm = NULL;
    if (code == 34 && dlinfo(drv, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        snprintf(buf, n, "%s (%s is the CUDA toolkit's stub library, not a driver)",
                 s ? s : "error 34", lm->l_name);
    else if (s && t)
        snprintf(buf, n, "%s: %s", s, t);
    else if (s)
        snprintf(buf, n, "%s", s);
    else
        snprintf(buf, n, "error %d", code);
    return buf;
}

static int driver_whole(void);

/* 0 when the driver reports at least one GPU and supports this build's CUDA major
 * version; -1 with loaded.why otherwise.  loaded.gpus: what the driver counted, 0 when
 * there is none or it says there is no GPU. */
static int driver_ready(void)
{
    int whole = driver_whole();
    if (whole < 0)
        return -1;
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
        /* not there, or there and not loadable (not a library, another machine's,
         * unreadable, missing its own dependencies): the second is a broken install.  The
         * loader's "libcuda.so.1: cannot open shared object file" is about the library
         * itself; it says the same of a copy it passed over, which the search names. */
        const char *e = dlerror();
        if (!e)
            e = "libcuda.so.1: cannot open shared object file";
        const char *colon = strchr(e, ':');
        int itself = strncmp(e, "libcuda.so.1:", 13) == 0;
        int named = colon && colon - e >= 12 && memcmp(colon - 12, "libcuda.so.1", 12) == 0;
        if (itself && !whole && !loaded.skipped[0]) {
            loaded.gpus = 0;
            why("no NVIDIA driver (libcuda.so.1 not found)");
        } else if (itself && !whole) {
            why("the NVIDIA driver library cannot be loaded: %s", loaded.skipped);
        } else if (!named && whole) {   /* a dependency's error: which library needs it */
            why("the NVIDIA driver library cannot be loaded: %s: %s", loaded.taken, e);
        } else {
            why("the NVIDIA driver library cannot be loaded: %s", e);
        }
        return -1;
    }
    cu_init_fn init = (cu_init_fn)dlsym(drv, "cuInit");
    cu_count_fn count = (cu_count_fn)dlsym(drv, "cuDeviceGetCount");
    cu_version_fn version = (cu_version_fn)dlsym(drv, "cuDriverGetVersion");
    if (!init || !count || !version) {
        why("the NVIDIA driver library libcuda.so.1 lacks %s",
            !init ? "cuInit" : !count ? "cuDeviceGetCount" : "cuDriverGetVersion");
        return -1;
    }
    char buf[PATH_MAX + 160], need[32], have[32];
    int v = 0, n = 0, rc;
    if ((rc = version(&v)) != 0) {
        why("the NVIDIA driver: cuDriverGetVersion: %s", driver_error(drv, rc, buf, sizeof buf));
        return -1;
    }
    snprintf(have, sizeof have, "%d.%d", v / 1000, v % 1000 / 10);
    snprintf(need, sizeof need, "%d.0", TFM_CUDA_TOOLKIT_VERSION / 1000);
    /* CUDA's minor version compatibility: a driver of the same major version runs it */
    if (v / 1000 < TFM_CUDA_TOOLKIT_VERSION / 1000) {
        why("the NVIDIA driver supports CUDA %s; this build needs %s or newer", have, need);
        return -1;
    }
    if ((rc = init(0)) != 0) {
        if (rc == 100)          /* CUDA_ERROR_NO_DEVICE: the driver sees none */
            loaded.gpus = 0;
        why("the NVIDIA driver did not start: cuInit: %s", driver_error(drv, rc, buf, sizeof buf));
        return -1;
    }
    if ((rc = count(&n)) != 0) {
        why("the NVIDIA driver: cuDeviceGetCount: %s", driver_error(drv, rc, buf, sizeof buf));
        return -1;
    }
    loaded.gpus = n > 0 ? n : 0;
    if (n < 1) {
        why("no GPU (the NVIDIA driver sees none)");
        return -1;
    }
    return 0;   /* drv stays loaded: the CUDA runtime uses it next */
}

/* The plugin's path into buf: $TFM_CUDA_LIB, beside an installed tool, or this build's.
 * TFM_CUDA_LIB names a file: one without a slash is in the working directory, as for every
 * other file a tool is given (dlopen would search the library path for it instead). */
static const char *plugin_path(char *buf, size_t n)
{
    const char *env = getenv("TFM_CUDA_LIB");
    if (env && *env && !strchr(env, '/')) {
        int w = snprintf(buf, n, "./%s", env);
        return w > 0 && (size_t)w < n ? buf : env;
    }
    if (env)
        return env;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            int w = snprintf(buf, n, "%s/../lib/tfm/" TFM_CUDA_PLUGIN_NAME, exe);
            if (w > 0 && (size_t)w < n && access(buf, R_OK) == 0)
                return buf;
        }
    }
    return TFM_CUDA_PLUGIN_PATH;
}

/* The subdirectories of glibc-hwcaps that the loader looks in before each directory of
 * the library path (glibc 2.33 on), best first; which it takes depends on the CPU. */
static const char *const hwcaps[] = {
#if defined(__x86_64__)
    "x86-64-v4", "x86-64-v3", "x86-64-v2",
#elif defined(__powerpc64__)
    "power10", "power9",
#endif
    NULL};

/* The loader's own directories, searched after its cache (glibc's system directories,
 * with the multiarch ones of Debian and its derivatives first). */
static const char *const system_dirs[] = {
#if defined(__x86_64__)
    "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
#elif defined(__aarch64__)
    "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
#elif defined(__powerpc64__)
    "/lib/powerpc64le-linux-gnu", "/usr/lib/powerpc64le-linux-gnu",
#endif
    "/lib64", "/usr/lib64"};

enum { TAKEN = 1, BAD = 2 };

/* One place the loader may take the driver library from: TAKEN when a whole copy is there
 * (the loader would take it), 0 when there is none the loader would take (nothing, another
 * architecture's, no library: it goes on searching), BAD with loaded.why when the copy
 * there would crash dlopen (cut short) or hang it (no regular file). */
static int driver_at(const char *path)
{
    char bad[PATH_MAX + 128];
    if (access(path, F_OK) != 0)
        return 0;
    int rc = tfm_so_whole(path, bad, sizeof bad);
    if (rc == -1) {
        why("the NVIDIA driver library %s", bad);
        return BAD;
    }
    if (rc == 0 && !loaded.taken[0])
        snprintf(loaded.taken, sizeof loaded.taken, "%s", path);
    if (rc != 0 && !loaded.skipped[0])
        snprintf(loaded.skipped, sizeof loaded.skipped, "%s", bad);
    return rc == 0 ? TAKEN : 0;
}

/* The cache's entries for the driver library: every one is looked at (the loader prefers
 * the glibc-hwcaps subdirectories this CPU supports, which this does not work out), and
 * the first cut short stops the search. */
static int cache_entry(const char *path, void *taken)
{
    int rc = driver_at(path);
    if (rc == TAKEN)
        *(int *)taken = 1;
    return rc == BAD ? BAD : 0;
}

/* The driver library the loader would take: 1 when it is whole, 0 when there is none
 * (loaded.taken and loaded.skipped say what was found), -1 with loaded.why when it would
 * crash dlopen (SIGBUS reading a copy cut short) or hang it (a
 * FIFO).  Looked for where the loader looks, in its order:
 *   LD_LIBRARY_PATH: each directory as the loader reads it (an empty entry, leading,
 *     doubled or trailing, is the working directory), its glibc-hwcaps subdirectories
 *     first.  A copy in one of those that is cut short is refused even where this CPU
 *     would skip that subdirectory; the search ends at the first whole copy in a
 *     directory itself.
 *   the loader's cache, /etc/ld.so.cache (where a driver install's copy is found):
 *     every entry for libcuda.so.1 of this machine's.
 *   when the cache has no whole copy, the system directories: the first copy there. */
static int driver_whole(void)
{
    const char *p = getenv("LD_LIBRARY_PATH");
    int rc;
    for (int last = !p || !*p; !last;) {
        size_t l = strcspn(p, ":;");
        int dl = l ? (int)l : 1;
        const char *dir = l ? p : ".";
        for (size_t k = 0; k < sizeof hwcaps / sizeof *hwcaps; k++) {
            const char *sub = hwcaps[k];
            char path[PATH_MAX];
            int w = sub ? snprintf(path, sizeof path, "%.*s/glibc-hwcaps/%s/libcuda.so.1",
                                   dl, dir, sub)
                        : snprintf(path, sizeof path, "%.*s/libcuda.so.1", dl, dir);
            if (w <= 0 || (size_t)w >= sizeof path)
                continue;
            if ((rc = driver_at(path)) == BAD)
                return -1;
            if (rc == TAKEN && !sub)
                return 1;
        }
        last = !p[l];
        p += l + !last;         /* past a trailing separator: "", the working directory */
    }
    int taken = 0;
    if (tfm_so_cache_each("/etc/ld.so.cache", "libcuda.so.1", cache_entry, &taken) == BAD)
        return -1;
    for (size_t k = 0; k < sizeof system_dirs / sizeof *system_dirs && !taken; k++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/libcuda.so.1", system_dirs[k]);
        if ((rc = driver_at(path)) == BAD)
            return -1;
        taken = rc == TAKEN;
    }
    return taken;
}

/* The first copy of library name in the directories of list (separated by ':' or ';'; an
 * empty entry is the working directory) that the loader would take: 1 when it is whole, -1
 * with "PATH: REASON" in bad when it is cut short or no regular file, 0 when no directory
 * has one the loader would take. */
static int lib_in(const char *list, const char *name, char *bad, size_t n)
{
    for (int last = !list || !*list; !last;) {
        size_t l = strcspn(list, ":;");
        char path[PATH_MAX];
        int w = snprintf(path, sizeof path, "%.*s/%s", l ? (int)l : 1, l ? list : ".", name);
        if (w > 0 && (size_t)w < sizeof path && access(path, F_OK) == 0) {
            int rc = tfm_so_whole(path, bad, n);
            if (rc != -2)
                return rc == 0 ? 1 : -1;
        }
        last = !list[l];
        list += l + !last;
    }
    return 0;
}

struct cached {
    char *bad;
    size_t n;
};

/* A cache entry of a library the plugin needs: TAKEN when whole (the loader takes the
 * first that loads), BAD when cut short. */
static int cache_lib(const char *path, void *ctx)
{
    struct cached *c = ctx;
    int rc = tfm_so_whole(path, c->bad, c->n);
    return rc == 0 ? TAKEN : rc == -1 ? BAD : 0;
}

/* The libraries the plugin needs (the CUDA runtime, cuBLAS, cuBLASLt, NCCL: hundreds of
 * megabytes, copied from a wheel or an install that may have been cut short), each where
 * the loader would find it: in the plugin's DT_RPATH, LD_LIBRARY_PATH, its DT_RUNPATH, the
 * loader's cache, the system directories.  0 when each is whole, mapped already (the C
 * and C++ libraries) or not found (then dlopen says so); -1 with loaded.why when one would
 * crash dlopen. */
static int plugin_libs_whole(const char *plugin)
{
    char needed[4096], search[4096], bad[PATH_MAX + 128];
    int is_rpath = 0;
    if (tfm_so_needed(plugin, needed, sizeof needed, search, sizeof search, &is_rpath))
        return 0;           /* dlopen says what is wrong with the plugin itself */
    const char *ld = getenv("LD_LIBRARY_PATH");
    for (const char *name = needed; *name; name += strlen(name) + 1) {
        void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            dlclose(h);
            continue;
        }
        int rc = 0;
        if (strchr(name, '/')) {
            rc = tfm_so_whole(name, bad, sizeof bad) == -1 ? -1 : 1;
        } else {
            if (is_rpath)
                rc = lib_in(search, name, bad, sizeof bad);
            if (rc == 0)
                rc = lib_in(ld, name, bad, sizeof bad);
            if (rc == 0 && !is_rpath)
                rc = lib_in(search, name, bad, sizeof bad);
            if (rc == 0) {
                struct cached c = {bad, sizeof bad};
                int r = tfm_so_cache_each("/etc/ld.so.cache", name, cache_lib, &c);
                rc = r == BAD ? -1 : r == TAKEN;
            }
            for (size_t k = 0; k < sizeof system_dirs / sizeof *system_dirs && rc == 0; k++)
                rc = lib_in(system_dirs[k], name, bad, sizeof bad);
        }
        if (rc < 0) {
            why("cannot load the CUDA code: its library %s", bad);
            return -1;
        }
    }
    return 0;
}

static void load(void)
{
    char buf[PATH_MAX + 64];
    const char *path = plugin_path(buf, sizeof buf);
    /* the driver first even when CUDA is turned off: whether there is a GPU to leave */
    int ready = driver_ready();
    if (!*path) {
        why("CUDA turned off (TFM_CUDA_LIB is empty)");
        return;
    }
    if (ready)
        return;
    char bad[PATH_MAX + 128];
    if (tfm_so_whole(path, bad, sizeof bad) < 0) {
        why("cannot load the CUDA code: %s", bad);
        return;
    }
    if (plugin_libs_whole(path))
        return;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        why("cannot load the CUDA code: %s", dlerror());
        return;
    }
    const struct tfm_cuda_plugin *(*entry)(void) =
        (const struct tfm_cuda_plugin *(*)(void))dlsym(h, "tfm_cuda_plugin_entry");
    const struct tfm_cuda_plugin *p = entry ? entry() : NULL;
    if (!p || p->abi != TFM_CUDA_PLUGIN_ABI) {
        if (p)
            why("%s: interface version %d, not this build's %d (reinstall tfm)", path, p->abi,
                TFM_CUDA_PLUGIN_ABI);
        else if (entry)
            why("%s: its tfm_cuda_plugin_entry returned no table (a broken plugin: "
                "reinstall tfm)", path);
        else
            why("%s: not a tfm CUDA plugin (no tfm_cuda_plugin_entry)", path);
        dlclose(h);
        return;
    }
    loaded.plugin = p;   /* h stays open for the life of the process */
}

const struct tfm_cuda_plugin *tfm_cuda_plugin(char *why_out, size_t n)
{
    pthread_once(&loaded.once, load);
    if (!loaded.plugin && why_out && n)
        snprintf(why_out, n, "%s", loaded.why);
    return loaded.plugin;
}

int tfm_cuda_driver_gpus(void)
{
    pthread_once(&loaded.once, load);
    return loaded.gpus;
}

/* The plugin of CUDA backend be (loaded: a CUDA backend came from it); NULL for another. */
static const struct tfm_cuda_plugin *plugin_of(const struct tfm_backend *be)
{
    return be && be->kind == TFM_BACKEND_CUDA ? tfm_cuda_plugin(NULL, 0) : NULL;
}

long tfm_backend_cuda_work_grows(const struct tfm_backend *be)
{
    const struct tfm_cuda_plugin *p = plugin_of(be);
    return p ? p->work_grows((struct tfm_backend *)be) : -1;
}

long tfm_backend_cuda_bias_fallbacks(const struct tfm_backend *be)
{
    const struct tfm_cuda_plugin *p = plugin_of(be);
    return p ? p->bias_fallbacks((struct tfm_backend *)be) : -1;
}

#else

long tfm_backend_cuda_work_grows(const struct tfm_backend *be)
{
    (void)be;
    return -1;
}

long tfm_backend_cuda_bias_fallbacks(const struct tfm_backend *be)
{
    (void)be;
    return -1;
}

const struct tfm_cuda_plugin *tfm_cuda_plugin(char *why_out, size_t n)
{
    if (why_out && n)
        snprintf(why_out, n, "built without CUDA");
    return NULL;
}

int tfm_cuda_driver_gpus(void)
{
    return 0;
}

#endif

struct tfm_backend *tfm_backend_cuda(int device, struct tfm_error *err)
{
    char why_not[512];
    const struct tfm_cuda_plugin *p = tfm_cuda_plugin(why_not, sizeof why_not);
    if (!p) {
        tfm_fail(err, "the CUDA backend: %s", why_not);
        return NULL;
    }
    return p->backend(device, err);
}
