/*
 * gputop's fake NVIDIA driver: a libnvidia-ml.so.1 for tests, with no GPU needed.
 *
 * The real pynvml loads it through LD_LIBRARY_PATH and sees the GPUs a scenario file
 * describes, so tests run gputop's real ctypes path (struct layouts, return codes, the
 * two-call buffer protocol, handles as pointers) anywhere.  It implements what gputop's
 * collector, our tests and nvitop (bench/) call, nothing more: pynvml reports every other
 * function as NVMLError_FunctionNotFound, which callers must survive anyway.
 *
 * The scenario (README.md here lists its keys) is a file of "key value" lines named by
 * FAKENVML_SCENARIO.  tests/helpers/fakenvml.py writes it from a nested dict: dict keys
 * joined by dots, list items by position; a list's own key holds its length and a dict's
 * own key "{}", so a null list item (an empty MIG slot) is told from an empty dict:
 *
 *     devices 1
 *     devices.0 {}
 *     devices.0.name NVIDIA H100 80GB HBM3
 *     devices.0.processes 1
 *     devices.0.processes.0 {}
 *     devices.0.processes.0.pid 4242
 *
 * Lines, not JSON: the helper is the only writer, and a sorted table of lines needs no
 * parser beyond splitting at the first space, and gives O(log n) lookups at 8x500
 * processes.  Every call stat()s the file and re-reads it when it changed, so a test
 * changes the machine while gputop runs (writers rename a complete file into place).
 * FAKENVML_TRACE names a file that gets one line per call (bench/ counts NVML calls).
 *
 * Structs mirror nvidia-ml-py's ctypes declarations (pynvml.py): that is the ABI the
 * client really uses; the _Static_asserts pin the sizes it declares.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* nvmlReturn_t values (nvml.h) this library gives. */
enum {
    SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
    NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9, TIMEOUT = 10,
    CORRUPTED_INFOROM = 14, GPU_IS_LOST = 15, ARGUMENT_VERSION_MISMATCH = 25, UNKNOWN = 999,
};

/* Names (for the scenario's errors and init_error) and the texts nvmlErrorString gives,
 * which pynvml puts in every NVMLError message. */
static const struct { int code; const char *name, *text; } RETURNS[] = {
    {0, "SUCCESS", "Success"},
    {1, "UNINITIALIZED", "Uninitialized"},
    {2, "INVALID_ARGUMENT", "Invalid Argument"},
    {3, "NOT_SUPPORTED", "Not Supported"},
    {4, "NO_PERMISSION", "Insufficient Permissions"},
    {5, "ALREADY_INITIALIZED", "Already Initialized"},
    {6, "NOT_FOUND", "Not Found"},
    {7, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {8, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {9, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {10, "TIMEOUT", "Timeout"},
    {11, "IRQ_ISSUE", "Interrupt request issue"},
    {12, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {13, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {14, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {15, "GPU_IS_LOST", "GPU is lost"},
    {16, "RESET_REQUIRED", "GPU requires restart"},
    {17, "OPERATING_SYSTEM", "GPU access blocked by the operating system"},
    {18, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch"},
    {19, "IN_USE", "In use by another client"},
    {20, "MEMORY", "Insufficient Memory"},
    {21, "NO_DATA", "No data"},
    {25, "ARGUMENT_VERSION_MISMATCH", "Argument version mismatch"},
    {999, "UNKNOWN", "Unknown Error"},
};

#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFull /* NVML_VALUE_NOT_AVAILABLE: memory of a process */
#define NO_INSTANCE 0xFFFFFFFFu             /* gpuInstanceId of a process outside MIG */
#define EVENT_XID 0x8ull                    /* nvmlEventTypeXidCriticalError */
#define MAX_GPUS 64
#define MAX_MIG 8                           /* MIG slots per GPU: 7 on A100/H100, one spare */
#define MAX_DELIVERED 256                   /* XID events one event set remembers */

/* -- the ABI: pynvml's ctypes structures ---------------------------------------------- */

struct handle { unsigned magic; int gpu, slot; }; /* slot -1: the GPU, else a MIG device */
#define HANDLE_MAGIC 0x6e766d6cu
typedef struct handle *nvmlDevice_t;

struct pci_info { /* nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
struct memory_v1 { unsigned long long total, free, used; };
struct memory_v2 { unsigned version; unsigned long long total, reserved, free, used; };
struct bar1 { unsigned long long total, free, used; };
struct utilization { unsigned gpu, memory; };
struct process { unsigned pid; unsigned long long used; unsigned gi, ci; }; /* v2 = v3 */
struct process_sample { unsigned pid; unsigned long long timestamp; unsigned sm, mem, enc, dec; };
struct field_value {
    unsigned field_id, scope_id;
    long long timestamp, latency_us;
    unsigned value_type, ret;
    union { double d; unsigned ui; unsigned long long ull; long long sll; } value;
};
struct event_data { struct handle *device; unsigned long long type, data; unsigned gi, ci; };
struct gpm_support { unsigned version, supported; };
struct gpm_metric {
    unsigned id, ret;
    double value;
    const char *short_name, *long_name, *unit;
};
struct gpm_metrics_get {
    unsigned version, count;
    struct gpm_sample *sample1, *sample2;
    struct gpm_metric metrics[];
};

_Static_assert(sizeof(struct pci_info) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(struct memory_v2) == 40, "c_nvmlMemory_v2_t");
_Static_assert(sizeof(struct process) == 24, "c_nvmlProcessInfo_v2_t");
_Static_assert(sizeof(struct process_sample) == 32, "c_nvmlProcessUtilizationSample_t");
_Static_assert(sizeof(struct field_value) == 40, "c_nvmlFieldValue_t");
_Static_assert(sizeof(struct event_data) == 32, "c_nvmlEventData_t");
_Static_assert(sizeof(struct gpm_metric) == 40, "c_nvmlGpmMetric_t");
_Static_assert(offsetof(struct gpm_metrics_get, metrics) == 24, "c_nvmlGpmMetricsGet_t");

/* Versioned structs carry sizeof | version << 24 (nvml.h's NVML_STRUCT_VERSION). */
#define MEMORY_V2_VERSION ((unsigned)sizeof(struct memory_v2) | 2u << 24)
#define GPM_VERSION 1u

/* -- state ------------------------------------------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* one call at a time */
static int initialized;     /* nvmlInit calls not yet matched by nvmlShutdown */
static double t0;           /* first nvmlInit of this process: origin of lost_after_s, at_s */
static char *scenario_path;
static struct handle gpus[MAX_GPUS], migs[MAX_GPUS][MAX_MIG];

struct entry { char *key, *value; };
static struct {
    char *text;              /* the file, cut in place into keys and values */
    struct entry *entries;   /* sorted by key */
    size_t count;
    struct stat st;          /* of the file as read: another one means re-read */
    int loaded;
} store;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* -- the scenario store ------------------------------------------------------------------ */

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->key, ((const struct entry *)b)->key);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size
        && a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Reads the scenario if it is new or changed; 0 when a scenario is loaded.  A file that
 * cannot be read keeps the previous state (a writer between unlink and rename). */
static int load(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return store.loaded ? 0 : -1;
    if (store.loaded && same_file(&st, &store.st))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return store.loaded ? 0 : -1;
    char *text = NULL;
    if (fstat(fd, &st) == 0 && (text = malloc((size_t)st.st_size + 1)) != NULL) {
        ssize_t got = read(fd, text, (size_t)st.st_size);
        if (got < 0 || got != st.st_size) {
            free(text);
            text = NULL;
        } else {
            text[got] = '\0';
        }
    }
    close(fd);
    if (text == NULL)
        return store.loaded ? 0 : -1;
    size_t lines = 1;
    for (char *c = text; *c; c++)
        lines += *c == '\n';
    struct entry *entries = malloc(lines * sizeof *entries);
    if (entries == NULL) {
        free(text);
        return store.loaded ? 0 : -1;
    }
    size_t count = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *space = strchr(line, ' ');
        if (space)
            *space = '\0';
        entries[count++] = (struct entry){line, space ? space + 1 : line + strlen(line)};
    }
    qsort(entries, count, sizeof *entries, by_key);
    free(store.text);
    free(store.entries);
    store.text = text;
    store.entries = entries;
    store.count = count;
    store.st = st;
    store.loaded = 1;
    return 0;
}

static const char *vlookup(const char *fmt, va_list ap)
{
    char key[256];
    vsnprintf(key, sizeof key, fmt, ap);
    struct entry probe = {key, NULL};
    const struct entry *e = bsearch(&probe, store.entries, store.count, sizeof probe, by_key);
    return e ? e->value : NULL;
}

/* The value at a key (printf-style), NULL when absent. */
__attribute__((format(printf, 1, 2))) static const char *value(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *v = vlookup(fmt, ap);
    va_end(ap);
    return v;
}

/* Where a handle's keys live: "devices.2" or "devices.2.mig_devices.5". */
static void scope(const struct handle *h, char *out, size_t size)
{
    if (h->slot < 0)
        snprintf(out, size, "devices.%d", h->gpu);
    else
        snprintf(out, size, "devices.%d.mig_devices.%d", h->gpu, h->slot);
}

/* The value at a key under a handle's scope. */
__attribute__((format(printf, 2, 3))) static const char *at(const struct handle *h,
                                                            const char *fmt, ...)
{
    char where[64], key[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    scope(h, where, sizeof where);
    return value("%s.%s", where, key);
}

static long long integer(const char *v, long long fallback)
{
    if (v == NULL)
        return fallback;
    char *end;
    long long n = strtoll(v, &end, 0); /* base 0: "0x40" for bit masks */
    return end == v ? fallback : n;
}

static double real(const char *v, double fallback)
{
    if (v == NULL)
        return fallback;
    char *end;
    double d = strtod(v, &end);
    return end == v ? fallback : d;
}

static long long num(const struct handle *h, const char *key, long long fallback)
{
    return integer(at(h, "%s", key), fallback);
}

static unsigned long long mib(long long n)
{
    return (unsigned long long)n << 20;
}

/* -- values that move: waveforms, steps, and the counters that integrate them ---------- */

/* A gauge (utilization, memory, temperature, power, clocks, fan, PCIe throughput, a
 * process's memory and SM) may be a number, a waveform {"base", "amp", "period_s",
 * "phase_s", "clamp": [lo, hi]} (base + amp * sin(2 pi (t + phase_s) / period_s)), or
 * steps: a list of numbers, or {"steps": [...], "step_s": 1}, each held step_s seconds
 * and cycled.  t is the scenario's clock: frozen_time when set (snapshot tests stay
 * exact), else seconds since time_origin (a Unix time: two processes reading one
 * scenario see the same values at the same moment) or since this process's nvmlInit. */
static double scenario_time(void)
{
    const char *frozen = value("frozen_time");
    if (frozen != NULL)
        return real(frozen, 0);
    const char *origin = value("time_origin");
    return now() - (origin != NULL ? real(origin, 0) : t0);
}

struct shape {
    int kind; /* 0 a number, 1 a waveform, 2 steps */
    double number, base, amp, period, phase, lo, hi;
    char key[256]; /* where a waveform's or steps' own keys are */
    long long steps;
    double step_s;
};

static struct shape shape_of(const char *key, double fallback)
{
    struct shape s = {.kind = 0, .number = fallback, .lo = -HUGE_VAL, .hi = HUGE_VAL};
    snprintf(s.key, sizeof s.key, "%s", key);
    const char *v = value("%s", key);
    if (v == NULL)
        return s;
    if (strcmp(v, "{}") == 0 && value("%s.steps", key) != NULL) {
        snprintf(s.key, sizeof s.key, "%s.steps", key);
        s.kind = 2;
        s.steps = integer(value("%s", s.key), 0);
        s.step_s = real(value("%s.step_s", key), 1);
    } else if (strcmp(v, "{}") == 0) {
        s.kind = 1;
        s.base = real(value("%s.base", key), fallback);
        s.amp = real(value("%s.amp", key), 0);
        s.period = real(value("%s.period_s", key), 60);
        s.phase = real(value("%s.phase_s", key), 0);
        s.lo = real(value("%s.clamp.0", key), -HUGE_VAL);
        s.hi = real(value("%s.clamp.1", key), HUGE_VAL);
    } else if (value("%s.0", key) != NULL) { /* a bare list: steps of a second */
        s.kind = 2;
        s.steps = integer(v, 0);
        s.step_s = 1;
    } else {
        s.number = real(v, fallback);
    }
    if (s.kind == 2 && (s.steps <= 0 || !(s.step_s > 0)))
        s.kind = 0; /* an empty list or a zero step: the fallback */
    if (s.kind == 1 && !(s.period > 0))
        s.amp = 0, s.period = 1;
    return s;
}

static double shape_at(const struct shape *s, double t)
{
    if (s->kind == 1) {
        double x = s->base + s->amp * sin(2 * M_PI * (t + s->phase) / s->period);
        return x < s->lo ? s->lo : x > s->hi ? s->hi : x;
    }
    if (s->kind == 2) {
        long long i = (long long)floor(t / s->step_s) % s->steps;
        return real(value("%s.%lld", s->key, i < 0 ? i + s->steps : i), 0);
    }
    return s->number;
}

/* The integral of a gauge from 0 to t: exact for numbers and steps; a waveform's whole
 * periods and the rest by the midpoint rule (a clamped sine has no handy closed form). */
static double shape_integral(const struct shape *s, double t)
{
    if (t <= 0)
        return 0;
    if (s->kind == 2) {
        double cycle = 0;
        for (long long i = 0; i < s->steps; i++)
            cycle += real(value("%s.%lld", s->key, i), 0) * s->step_s;
        double span = s->steps * s->step_s, whole = floor(t / span), rest = t - whole * span;
        double sum = whole * cycle;
        for (long long i = 0; rest > 0 && i < s->steps; i++, rest -= s->step_s)
            sum += real(value("%s.%lld", s->key, i), 0) * (rest < s->step_s ? rest : s->step_s);
        return sum;
    }
    if (s->kind == 0)
        return s->number * t;
    enum { POINTS = 512 };
    double whole = floor(t / s->period), rest = t - whole * s->period, one = 0, part = 0;
    for (int i = 0; i < POINTS; i++) {
        one += shape_at(s, (i + 0.5) * s->period / POINTS);
        part += shape_at(s, whole * s->period + (i + 0.5) * rest / POINTS);
    }
    return whole * one * s->period / POINTS + part * rest / POINTS;
}

/* A gauge at a full key, now; `gauge` rounds it to the integer NVML reports. */
static double gauge_real(const char *key, double fallback)
{
    struct shape s = shape_of(key, fallback);
    return s.kind == 0 ? s.number : shape_at(&s, scenario_time());
}

static long long gauge(const struct handle *h, const char *key, long long fallback)
{
    char where[64], full[256];
    scope(h, where, sizeof where);
    snprintf(full, sizeof full, "%s.%s", where, key);
    double x = gauge_real(full, (double)fallback);
    return x < 0 ? 0 : llround(x);
}

/* Whether a key moves (a waveform or steps): a counter of it runs. */
static int moves(const char *key)
{
    return shape_of(key, 0).kind != 0;
}

/* A counter (energy, ECC errors, PCIe replays, NVLink bytes): a number stays put;
 * {"start": n, "per_s": gauge} is start plus the gauge's integral, so the rate a reader
 * works out from two reads is the gauge. */
static long long counter(const struct handle *h, const char *key, long long fallback)
{
    char where[64], full[256], rate[280];
    scope(h, where, sizeof where);
    snprintf(full, sizeof full, "%s.%s", where, key);
    const char *v = value("%s", full);
    if (v == NULL || strcmp(v, "{}") != 0)
        return integer(v, fallback);
    snprintf(rate, sizeof rate, "%s.per_s", full);
    struct shape s = shape_of(rate, 0);
    double total = real(value("%s.start", full), 0) + shape_integral(&s, scenario_time());
    return total < 0 ? 0 : (long long)total;
}

/* Energy is the integral of power: with a moving power_draw_mw, energy_mj (a number) is
 * where the counter starts. */
static long long energy_mj(const struct handle *h)
{
    char where[64], power[128];
    scope(h, where, sizeof where);
    snprintf(power, sizeof power, "%s.power_draw_mw", where);
    const char *v = at(h, "energy_mj");
    if (v == NULL || strcmp(v, "{}") == 0 || !moves(power))
        return counter(h, "energy_mj", 0);
    struct shape s = shape_of(power, 70000);
    return integer(v, 0) + (long long)(shape_integral(&s, scenario_time()) / 1000);
}

/* A return code by name ("NO_PERMISSION", "NVML_ERROR_NO_PERMISSION") or number. */
static int code_of(const char *v)
{
    if (*v >= '0' && *v <= '9')
        return (int)integer(v, UNKNOWN);
    if (strncmp(v, "NVML_ERROR_", 11) == 0)
        v += 11;
    for (size_t i = 0; i < sizeof RETURNS / sizeof *RETURNS; i++)
        if (strcmp(v, RETURNS[i].name) == 0)
            return RETURNS[i].code;
    return UNKNOWN;
}

/* -- the devices --------------------------------------------------------------------- */

static int device_count(void)
{
    long long n = integer(value("devices"), 0);
    return n < 0 ? 0 : n > MAX_GPUS ? MAX_GPUS : (int)n;
}

static int lost(int gpu)
{
    if (integer(value("devices.%d.lost", gpu), 0))
        return 1;
    const char *after = value("devices.%d.lost_after_s", gpu);
    return after != NULL && now() - t0 >= real(after, 0);
}

static int mig_on(int gpu)
{
    return integer(value("devices.%d.mig_mode", gpu), 0) != 0;
}

static int mig_exists(int gpu, int slot)
{
    return slot < MAX_MIG && mig_on(gpu) && value("devices.%d.mig_devices.%d", gpu, slot);
}

static int numa_node(int gpu)
{
    return (int)integer(value("devices.%d.numa_node", gpu), -1);
}

static int known_handle(const struct handle *h)
{
    uintptr_t p = (uintptr_t)h;
    uintptr_t g = (uintptr_t)gpus, m = (uintptr_t)migs;
    int ours = (p >= g && p < g + sizeof gpus && (p - g) % sizeof *h == 0)
        || (p >= m && p < m + sizeof migs && (p - m) % sizeof *h == 0);
    return ours && h->magic == HANDLE_MAGIC;
}

/* -- every call -------------------------------------------------------------------------- */

static void trace(const char *function)
{
    static int fd = -2;
    if (fd == -2) {
        const char *path = getenv("FAKENVML_TRACE");
        fd = path && *path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    }
    if (fd >= 0)
        dprintf(fd, "%s\n", function);
}

/* What a call takes: no device, a GPU's handle, or (also) a MIG device's. */
enum { SYSTEM = 0, DEVICE = 1, MIG_TOO = 3 };

/* Whether a device handle can be used now: INVALID_ARGUMENT for a pointer that is none of
 * ours or a MIG device that no longer exists, GPU_IS_LOST for a lost GPU (or one the
 * scenario dropped: it fell off the bus), NOT_SUPPORTED for a MIG device where the call
 * belongs to its GPU (temperature, power, clocks, ...), as real drivers answer. */
static int usable(const struct handle *h, int accepts)
{
    if (!known_handle(h))
        return INVALID_ARGUMENT;
    if (h->gpu >= device_count() || lost(h->gpu))
        return GPU_IS_LOST;
    if (h->slot >= 0) {
        if (!mig_exists(h->gpu, h->slot))
            return INVALID_ARGUMENT;
        if (accepts != MIG_TOO)
            return NOT_SUPPORTED;
    }
    return SUCCESS;
}

/* The scenario's errors: {function name or feature: code}, on the device (a MIG device
 * has its own), then at the top level.  not_supported lists become such entries in the
 * helper. */
static int configured(const struct handle *h, const char *function, const char *feature)
{
    const char *names[] = {function, feature};
    for (int i = 0; i < 2; i++) {
        if (names[i] == NULL)
            continue;
        const char *v = h ? at(h, "errors.%s", names[i]) : NULL;
        if (v == NULL)
            v = value("errors.%s", names[i]);
        if (v != NULL)
            return code_of(v);
    }
    return SUCCESS;
}

static int begin(const char *function, const char *feature, const struct handle *h,
                 int accepts)
{
    trace(function);
    if (scenario_path)
        load(scenario_path);
    if (!initialized)
        return UNINITIALIZED;
    if (accepts != SYSTEM) {
        int rc = usable(h, accepts);
        if (rc != SUCCESS)
            return rc;
    }
    return configured(accepts != SYSTEM ? h : NULL, function, feature);
}

static void unlock(int *unused)
{
    (void)unused;
    pthread_mutex_unlock(&lock);
}

/* Holds the lock until the function returns, whichever return that is. */
#define LOCKED __attribute__((cleanup(unlock))) int locked_ = pthread_mutex_lock(&lock)

/* The start of every exported call: lock, trace, re-read the scenario, check the state,
 * the handle and the configured errors; return early on any of them. */
#define BEGIN(feature, h, accepts)                                                  \
    LOCKED;                                                                         \
    (void)locked_;                                                                  \
    do {                                                                            \
        int rc_ = begin(__func__, feature, (const struct handle *)(h), accepts);    \
        if (rc_ != SUCCESS)                                                         \
            return rc_;                                                             \
    } while (0)

#define OUT(...)                                                                    \
    do {                                                                            \
        const void *outs_[] = {__VA_ARGS__};                                        \
        for (size_t i_ = 0; i_ < sizeof outs_ / sizeof *outs_; i_++)                \
            if (outs_[i_] == NULL)                                                  \
                return INVALID_ARGUMENT;                                            \
    } while (0)

static int copy_text(char *out, unsigned length, const char *text)
{
    if (out == NULL)
        return INVALID_ARGUMENT;
    if (strlen(text) + 1 > length)
        return INSUFFICIENT_SIZE;
    strcpy(out, text);
    return SUCCESS;
}

/* A call that reads one number of a card: the key under it, or the fallback (an
 * expression that may use the device). */
#define READ_WITH(reader, name, type, feature, key, fallback)                       \
    EXPORT int name(nvmlDevice_t device, type *out)                                 \
    {                                                                               \
        BEGIN(feature, device, DEVICE);                                             \
        OUT(out);                                                                   \
        *out = (type)reader(device, key, fallback);                                 \
        return SUCCESS;                                                             \
    }
#define READ(...) READ_WITH(num, __VA_ARGS__)
/* The same for a gauge: a number, a waveform or steps. */
#define READ_GAUGE(...) READ_WITH(gauge, __VA_ARGS__)

/* Objects the caller holds (GPM samples, event sets) start with a magic word, so a
 * pointer that is none of ours, or one already freed, is refused. */
static int hand_out(void **out, size_t size, unsigned magic)
{
    *out = calloc(1, size);
    if (*out == NULL)
        return UNKNOWN;
    *(unsigned *)*out = magic;
    return SUCCESS;
}

static int ours(const void *object, unsigned magic)
{
    return object != NULL && *(const unsigned *)object == magic;
}

static int take_back(void *object, unsigned magic)
{
    if (!ours(object, magic))
        return INVALID_ARGUMENT;
    *(unsigned *)object = 0;
    free(object);
    return SUCCESS;
}

/* -- init ---------------------------------------------------------------------------- */

/* A missing scenario is a machine without the kernel module: DRIVER_NOT_LOADED. */
EXPORT int nvmlInitWithFlags(unsigned flags)
{
    (void)flags;
    LOCKED;
    (void)locked_;
    trace(__func__);
    const char *path = getenv("FAKENVML_SCENARIO");
    if (path == NULL || load(path) != 0)
        return DRIVER_NOT_LOADED;
    if (scenario_path == NULL || strcmp(scenario_path, path) != 0) {
        free(scenario_path);
        scenario_path = strdup(path);
    }
    const char *failure = value("init_error");
    if (failure != NULL)
        return code_of(failure);
    if (t0 == 0) {
        t0 = now();
        for (int g = 0; g < MAX_GPUS; g++) {
            gpus[g] = (struct handle){HANDLE_MAGIC, g, -1};
            for (int s = 0; s < MAX_MIG; s++)
                migs[g][s] = (struct handle){HANDLE_MAGIC, g, s};
        }
    }
    initialized++;
    return SUCCESS;
}

EXPORT int nvmlShutdown(void)
{
    LOCKED;
    (void)locked_;
    trace(__func__);
    if (!initialized)
        return UNINITIALIZED;
    initialized--;
    return SUCCESS;
}

EXPORT const char *nvmlErrorString(int code)
{
    for (size_t i = 0; i < sizeof RETURNS / sizeof *RETURNS; i++)
        if (RETURNS[i].code == code)
            return RETURNS[i].text;
    return "Unknown Error";
}

/* -- system --------------------------------------------------------------------------- */

static const char *driver_version(void)
{
    const char *v = value("driver_version");
    return v ? v : "550.54.15";
}

EXPORT int nvmlSystemGetDriverVersion(char *version, unsigned length)
{
    BEGIN("driver_version", NULL, SYSTEM);
    return copy_text(version, length, driver_version());
}

EXPORT int nvmlSystemGetNVMLVersion(char *version, unsigned length)
{
    BEGIN("nvml_version", NULL, SYSTEM);
    char text[96];
    const char *v = value("nvml_version");
    snprintf(text, sizeof text, "12.%s", driver_version()); /* as 12.550.54.15 */
    return copy_text(version, length, v ? v : text);
}

static int cuda_version(int *version)
{
    OUT(version);
    *version = (int)integer(value("cuda_version"), 12040);
    return SUCCESS;
}

EXPORT int nvmlSystemGetCudaDriverVersion(int *version)
{
    BEGIN("cuda_version", NULL, SYSTEM);
    return cuda_version(version);
}

EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    BEGIN("cuda_version", NULL, SYSTEM);
    return cuda_version(version);
}

/* -- enumeration and identity -------------------------------------------------------------- */

/* Only the _v2 names: pynvml's nvmlDeviceGetCount and ...HandleByIndex call those. */
EXPORT int nvmlDeviceGetCount_v2(unsigned *count)
{
    BEGIN("count", NULL, SYSTEM);
    OUT(count);
    *count = (unsigned)device_count();
    return SUCCESS;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device)
{
    BEGIN("handle", NULL, SYSTEM);
    OUT(device);
    if (index >= (unsigned)device_count())
        return INVALID_ARGUMENT;
    if (lost((int)index))
        return GPU_IS_LOST;
    int rc = configured(&gpus[index], __func__, "handle");
    if (rc == SUCCESS)
        *device = &gpus[index];
    return rc;
}

static void uuid_of(const struct handle *h, char *out, size_t size)
{
    const char *v = at(h, "uuid");
    if (v)
        snprintf(out, size, "%s", v);
    else if (h->slot < 0)
        snprintf(out, size, "GPU-fa6e0000-0000-4000-8000-%012d", h->gpu);
    else
        snprintf(out, size, "MIG-fa6e0000-%04d-5000-8000-%012d", h->slot, h->gpu);
}

EXPORT int nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length)
{
    BEGIN("uuid", device, MIG_TOO);
    char text[96];
    uuid_of(device, text, sizeof text);
    return copy_text(uuid, length, text);
}

/* A GPU's or a MIG device's handle by its UUID (nvitop resolves CUDA_VISIBLE_DEVICES so). */
EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    BEGIN("handle", NULL, SYSTEM);
    OUT(uuid, device);
    char text[96];
    for (int g = 0; g < device_count(); g++) {
        struct handle *candidates[1 + MAX_MIG] = {&gpus[g]};
        for (int s = 0; s < MAX_MIG; s++)
            candidates[1 + s] = mig_exists(g, s) ? &migs[g][s] : NULL;
        for (int i = 0; i < 1 + MAX_MIG; i++) {
            if (candidates[i] == NULL)
                continue;
            uuid_of(candidates[i], text, sizeof text);
            if (strcmp(text, uuid) == 0) {
                *device = candidates[i];
                return lost(g) ? GPU_IS_LOST : SUCCESS;
            }
        }
    }
    return NOT_FOUND;
}

/* "NVIDIA H100 80GB HBM3", and "NVIDIA H100 80GB HBM3 MIG 1g.10gb" for its MIG device. */
EXPORT int nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned length)
{
    BEGIN("name", device, MIG_TOO);
    const char *own = at(device, "name");
    if (own != NULL)
        return copy_text(name, length, own);
    const char *card = value("devices.%d.name", device->gpu);
    if (card == NULL)
        card = "NVIDIA Fake GPU";
    if (device->slot < 0)
        return copy_text(name, length, card);
    const char *profile = at(device, "profile");
    char text[160];
    snprintf(text, sizeof text, "%s MIG %s", card, profile ? profile : "1g.10gb");
    return copy_text(name, length, text);
}

/* Optional: cards without a serial (GeForce) answer NOT_SUPPORTED. */
EXPORT int nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned length)
{
    BEGIN("serial", device, DEVICE);
    const char *v = at(device, "serial");
    return v ? copy_text(serial, length, v) : NOT_SUPPORTED;
}

EXPORT int nvmlDeviceGetIndex(nvmlDevice_t device, unsigned *index)
{
    BEGIN("index", device, DEVICE);
    OUT(index);
    *index = (unsigned)device->gpu;
    return SUCCESS;
}

static int fill_pci(struct pci_info *pci, const char *bus_id, unsigned device_id,
                    unsigned subsystem_id)
{
    unsigned domain, bus, dev, function;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4)
        return UNKNOWN;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->bus_id, sizeof pci->bus_id, "%08X:%02X:%02X.%X", domain, bus, dev, function);
    snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "%04X:%02X:%02X.%X", domain & 0xFFFF,
             bus & 0xFF, dev & 0xFF, function & 0xF);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pci_device_id = device_id;
    pci->pci_subsystem_id = subsystem_id;
    return SUCCESS;
}

static void bus_id_of(int gpu, char *out, size_t size)
{
    const char *v = value("devices.%d.pci_bus_id", gpu);
    if (v)
        snprintf(out, size, "%s", v);
    else
        snprintf(out, size, "00000000:%02X:00.0", (0x10 + gpu) & 0xFF);
}

EXPORT int nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, struct pci_info *pci)
{
    BEGIN("pci", device, DEVICE);
    OUT(pci);
    char bus_id[64];
    bus_id_of(device->gpu, bus_id, sizeof bus_id);
    return fill_pci(pci, bus_id, (unsigned)num(device, "pci_device_id", 0x233010DE),
                    (unsigned)num(device, "pci_subsystem_id", 0x16C110DE));
}

/* -- memory and utilization ------------------------------------------------------------ */

struct proc { unsigned pid; unsigned long long used; unsigned gi, ci, sm, mem; int sampled; };
struct procs { struct proc *items; size_t count, size; };

static unsigned instance_id(const struct handle *mig, const char *key, long long fallback)
{
    return (unsigned)num(mig, key, fallback);
}

/* One holder's processes of a kind ('C', 'G', 'M'; 0: every kind). */
static void add_processes(const struct handle *h, char kind, unsigned gi, unsigned ci,
                          struct procs *out)
{
    long long n = num(h, "processes", 0);
    for (long long i = 0; i < n; i++) {
        if (!at(h, "processes.%lld", i))
            continue;
        const char *type = at(h, "processes.%lld.type", i);
        if (kind != 0 && !strchr(type ? type : "C", kind)) /* "C+G" is both */
            continue;
        if (out->count == out->size) {
            size_t size = out->size ? 2 * out->size : 16;
            struct proc *items = realloc(out->items, size * sizeof *items);
            if (items == NULL)
                return;
            out->items = items;
            out->size = size;
        }
        char key[64];
        snprintf(key, sizeof key, "processes.%lld.used_mib", i);
        const char *used = at(h, "%s", key);
        long long used_mib = gauge(h, key, 0);
        snprintf(key, sizeof key, "processes.%lld.sm_util", i);
        const char *sm = at(h, "%s", key);
        long long sm_util = gauge(h, key, 0);
        snprintf(key, sizeof key, "processes.%lld.mem_util", i);
        out->items[out->count++] = (struct proc){
            .pid = (unsigned)integer(at(h, "processes.%lld.pid", i), 0),
            .used = used ? mib(used_mib) : NOT_AVAILABLE,
            .gi = gi,
            .ci = ci,
            .sm = (unsigned)sm_util,
            .mem = (unsigned)gauge(h, key, 0),
            .sampled = sm != NULL, /* no sm_util: the process has no samples */
        };
    }
}

/* A GPU lists its own processes and, in MIG mode, those of its MIG devices (as drivers do
 * for root); a MIG device lists its own. */
static struct procs gather(const struct handle *h, char kind)
{
    struct procs out = {0};
    if (h->slot >= 0) {
        add_processes(h, kind, instance_id(h, "gi", h->slot + 1), instance_id(h, "ci", 0), &out);
        return out;
    }
    add_processes(h, kind, NO_INSTANCE, NO_INSTANCE, &out);
    for (int s = 0; s < MAX_MIG; s++)
        if (mig_exists(h->gpu, s))
            add_processes(&migs[h->gpu][s], kind, instance_id(&migs[h->gpu][s], "gi", s + 1),
                          instance_id(&migs[h->gpu][s], "ci", 0), &out);
    return out;
}

/* memory_used_mib, else what the processes hold: a GPU's own, plus its MIG devices'. */
static unsigned long long used_bytes(const struct handle *h)
{
    if (at(h, "memory_used_mib"))
        return mib(gauge(h, "memory_used_mib", 0));
    struct procs own = {0};
    add_processes(h, 0, 0, 0, &own);
    unsigned long long sum = 0;
    for (size_t i = 0; i < own.count; i++)
        sum += own.items[i].used == NOT_AVAILABLE ? 0 : own.items[i].used;
    free(own.items);
    if (h->slot < 0)
        for (int s = 0; s < MAX_MIG; s++)
            if (mig_exists(h->gpu, s))
                sum += used_bytes(&migs[h->gpu][s]);
    return sum;
}

/* A MIG device's size defaults to its profile's: 1g.10gb -> 10 GiB. */
static unsigned long long total_bytes(const struct handle *h)
{
    if (h->slot < 0)
        return mib(num(h, "memory_total_mib", 16384));
    const char *profile = at(h, "profile");
    const char *size = profile ? strrchr(profile, '.') : NULL;
    return mib(num(h, "memory_total_mib", size ? 1024 * integer(size + 1, 10) : 10240));
}

/* v2's view: v1 is the same with reserved memory counted as used. */
static struct memory_v2 memory_of(const struct handle *h)
{
    unsigned long long total = total_bytes(h), used = used_bytes(h);
    unsigned long long reserved = mib(num(h, "memory_reserved_mib", 0));
    unsigned long long taken = used + reserved;
    return (struct memory_v2){MEMORY_V2_VERSION, total, reserved,
                              taken < total ? total - taken : 0, used};
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, struct memory_v1 *memory)
{
    BEGIN("memory", device, MIG_TOO);
    OUT(memory);
    struct memory_v2 m = memory_of(device);
    *memory = (struct memory_v1){m.total, m.free, m.used + m.reserved};
    return SUCCESS;
}

EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, struct memory_v2 *memory)
{
    BEGIN("memory", device, MIG_TOO);
    OUT(memory);
    if (memory->version != MEMORY_V2_VERSION)
        return ARGUMENT_VERSION_MISMATCH;
    *memory = memory_of(device);
    return SUCCESS;
}

/* A MIG device's BAR1 defaults to its GPU's size, none of it used. */
EXPORT int nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, struct bar1 *bar1)
{
    BEGIN("bar1", device, MIG_TOO);
    OUT(bar1);
    const struct handle *card = &gpus[device->gpu];
    unsigned long long total = mib(num(device, "bar1_total_mib", num(card, "bar1_total_mib", 256)));
    unsigned long long used = mib(num(device, "bar1_used_mib", device->slot < 0 ? 2 : 0));
    *bar1 = (struct bar1){total, used < total ? total - used : 0, used};
    return SUCCESS;
}

/* Not per card in MIG mode: real drivers answer NOT_SUPPORTED there. */
EXPORT int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, struct utilization *util)
{
    BEGIN("utilization", device, DEVICE);
    OUT(util);
    if (mig_on(device->gpu))
        return NOT_SUPPORTED;
    util->gpu = (unsigned)gauge(device, "util_gpu", 0);
    util->memory = (unsigned)gauge(device, "util_mem", 0);
    return SUCCESS;
}

static int codec(const struct handle *h, const char *key, unsigned *util, unsigned *period_us)
{
    OUT(util, period_us);
    *util = (unsigned)gauge(h, key, 0);
    *period_us = 167000; /* the encoder/decoder sampling window of current drivers */
    return SUCCESS;
}

EXPORT int nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned *util, unsigned *period)
{
    BEGIN("encoder", device, DEVICE);
    return codec(device, "util_enc", util, period);
}

EXPORT int nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned *util, unsigned *period)
{
    BEGIN("decoder", device, DEVICE);
    return codec(device, "util_dec", util, period);
}

/* -- temperature, power, fans, clocks, modes ---------------------------------------------- */

EXPORT int nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned *temp)
{
    BEGIN("temperature", device, DEVICE);
    OUT(temp);
    if (sensor != 0) /* NVML_TEMPERATURE_GPU is the only sensor */
        return INVALID_ARGUMENT;
    *temp = (unsigned)gauge(device, "temperature", 40);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int kind, unsigned *temp)
{
    BEGIN("temperature_thresholds", device, DEVICE);
    OUT(temp);
    /* NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, _SLOWDOWN, _MEM_MAX, _GPU_MAX */
    static const struct { const char *key; unsigned fallback; } kinds[] = {
        {"temp_shutdown", 92}, {"temp_slowdown", 89}, {"temp_mem_max", 95}, {"temp_gpu_max", 87},
    };
    if (kind < 0 || kind >= 4)
        return NOT_SUPPORTED;
    *temp = (unsigned)num(device, kinds[kind].key, kinds[kind].fallback);
    return SUCCESS;
}

static long long power_limit(const struct handle *h)
{
    return num(h, "power_limit_mw", 300000);
}

READ_GAUGE(nvmlDeviceGetPowerUsage, unsigned, "power_draw", "power_draw_mw", 70000)
READ(nvmlDeviceGetPowerManagementLimit, unsigned, "power_limit", "power_limit_mw", 300000)
READ(nvmlDeviceGetEnforcedPowerLimit, unsigned, "power_limit", "power_limit_mw", 300000)
READ(nvmlDeviceGetPowerManagementDefaultLimit, unsigned, "power_limit", "power_default_limit_mw",
     power_limit(device))

EXPORT int nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned *min,
                                                        unsigned *max)
{
    BEGIN("power_limit", device, DEVICE);
    OUT(min, max);
    *min = (unsigned)num(device, "power_min_limit_mw", power_limit(device) / 2);
    *max = (unsigned)num(device, "power_max_limit_mw", power_limit(device));
    return SUCCESS;
}

/* Fans are optional (datacenter cards have none): no fan_speed, NOT_SUPPORTED.  Every fan
 * of a card turns at fan_speed. */
static int fans(const struct handle *h, const char *key, unsigned fan, unsigned *out)
{
    OUT(out);
    if (!at(h, "fan_speed"))
        return NOT_SUPPORTED;
    if (fan >= (unsigned)num(h, "num_fans", 1))
        return INVALID_ARGUMENT;
    *out = (unsigned)gauge(h, key, 1);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned *count)
{
    BEGIN("fan_speed", device, DEVICE);
    return fans(device, "num_fans", 0, count);
}

EXPORT int nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned fan, unsigned *speed)
{
    BEGIN("fan_speed", device, DEVICE);
    return fans(device, "fan_speed", fan, speed);
}

EXPORT int nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned *speed)
{
    BEGIN("fan_speed", device, DEVICE);
    return fans(device, "fan_speed", 0, speed);
}

/* nvmlClockType_t: graphics, sm, mem, video. */
static int clock_mhz(const struct handle *h, const char *group, int type, const unsigned *fallbacks,
                 unsigned *mhz)
{
    static const char *names[] = {"graphics", "sm", "mem", "video"};
    OUT(mhz);
    if (type < 0 || type >= 4)
        return INVALID_ARGUMENT;
    char key[32];
    snprintf(key, sizeof key, "%s.%s", group, names[type]);
    *mhz = (unsigned)gauge(h, key, fallbacks[type]);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned *mhz)
{
    BEGIN("clocks", device, DEVICE);
    static const unsigned fallbacks[] = {1410, 1410, 1215, 1275};
    return clock_mhz(device, "clocks", type, fallbacks, mhz);
}

EXPORT int nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned *mhz)
{
    BEGIN("max_clocks", device, DEVICE);
    static const unsigned fallbacks[] = {1980, 1980, 2619, 1755};
    return clock_mhz(device, "max_clocks", type, fallbacks, mhz);
}

/* An idle card sits in P8 with the idle clock-event bit, a busy one in P0. */
READ(nvmlDeviceGetPerformanceState, int, "pstate", "pstate",
     gauge(device, "util_gpu", 0) > 0 ? 0 : 8)
READ(nvmlDeviceGetCurrentClocksEventReasons, unsigned long long, "throttle_reasons",
     "throttle_reasons", gauge(device, "util_gpu", 0) > 0 ? 0 : 1)
READ(nvmlDeviceGetCurrentClocksThrottleReasons, unsigned long long, "throttle_reasons",
     "throttle_reasons", gauge(device, "util_gpu", 0) > 0 ? 0 : 1)
READ(nvmlDeviceGetPersistenceMode, int, "persistence_mode", "persistence_mode", 0)
/* nvmlGpuVirtualizationMode_t: 0 none (bare metal), 1 passthrough, 2 vGPU guest, 3/4 host. */
READ(nvmlDeviceGetVirtualizationMode, int, "virtualization_mode", "virtualization_mode", 0)
/* nvmlComputeMode_t: 0 Default, 1 Exclusive_Thread, 2 Prohibited, 3 Exclusive_Process. */
READ(nvmlDeviceGetComputeMode, int, "compute_mode", "compute_mode", 0)
READ(nvmlDeviceGetDisplayMode, int, "display_mode", "display_mode", 0)
READ(nvmlDeviceGetDisplayActive, int, "display_active", "display_active", 0)

/* WDDM/TCC driver models are Windows-only: Linux drivers export this and answer
 * NOT_SUPPORTED (nvitop asks, and logs an error when the symbol is missing). */
EXPORT int nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, int *current, int *pending)
{
    (void)current;
    (void)pending;
    BEGIN("driver_model", device, DEVICE);
    return NOT_SUPPORTED;
}

/* -- reliability: ECC, retired pages, row remapping (also as field values) ------------ */

static int ecc_on(const struct handle *h)
{
    return num(h, "ecc_mode", 0) != 0;
}

EXPORT int nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending)
{
    BEGIN("ecc_mode", device, DEVICE);
    OUT(current, pending);
    if (!at(device, "ecc_mode")) /* GeForce cards have no ECC */
        return NOT_SUPPORTED;
    *current = ecc_on(device);
    *pending = (int)num(device, "ecc_pending", *current);
    return SUCCESS;
}

/* Counters exist only while ECC is on. */
static int ecc_count(const struct handle *h, int uncorrected, int aggregate,
                     unsigned long long *count)
{
    if (!ecc_on(h))
        return NOT_SUPPORTED;
    char key[64];
    snprintf(key, sizeof key, "ecc_errors.%s.%s", aggregate ? "aggregate" : "volatile",
             uncorrected ? "uncorrected" : "corrected");
    *count = (unsigned long long)counter(h, key, 0);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                       unsigned long long *count)
{
    BEGIN("ecc_errors", device, DEVICE);
    OUT(count);
    if (error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        return INVALID_ARGUMENT;
    return ecc_count(device, error_type, counter_type, count);
}

/* retired_pages: {"sbe": n, "dbe": n, "pending": bool}; absent: NOT_SUPPORTED (cards with
 * row remapping instead). */
static int retired(const struct handle *h, const char *key, unsigned long long *out)
{
    if (!at(h, "retired_pages"))
        return NOT_SUPPORTED;
    *out = (unsigned long long)integer(at(h, "retired_pages.%s", key), 0);
    return SUCCESS;
}

/* cause: NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS (0), _DOUBLE_BIT (1). */
EXPORT int nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned *count,
                                     unsigned long long *addresses)
{
    BEGIN("retired_pages", device, DEVICE);
    OUT(count);
    if (cause < 0 || cause > 1)
        return INVALID_ARGUMENT;
    unsigned long long pages;
    int rc = retired(device, cause ? "dbe" : "sbe", &pages);
    if (rc != SUCCESS)
        return rc;
    if (*count < pages || (pages && addresses == NULL)) {
        *count = (unsigned)pages;
        return pages ? INSUFFICIENT_SIZE : SUCCESS;
    }
    for (unsigned long long i = 0; i < pages; i++)
        addresses[i] = ((unsigned long long)cause + 1) << 32 | i << 12; /* made-up pages */
    *count = (unsigned)pages;
    return SUCCESS;
}

EXPORT int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending)
{
    BEGIN("retired_pages", device, DEVICE);
    OUT(pending);
    unsigned long long v = 0;
    int rc = retired(device, "pending", &v);
    *pending = (int)v;
    return rc;
}

/* remapped_rows: {"correctable", "uncorrectable", "pending", "failure"}; absent:
 * NOT_SUPPORTED (before Ampere). */
static int remapped(const struct handle *h, int which, unsigned *out)
{
    static const char *keys[] = {"correctable", "uncorrectable", "pending", "failure"};
    if (!at(h, "remapped_rows"))
        return NOT_SUPPORTED;
    *out = (unsigned)integer(at(h, "remapped_rows.%s", keys[which]), 0);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned *correctable,
                                     unsigned *uncorrectable, unsigned *pending, unsigned *failure)
{
    BEGIN("remapped_rows", device, DEVICE);
    OUT(correctable, uncorrectable, pending, failure);
    unsigned *outs[] = {correctable, uncorrectable, pending, failure};
    for (int i = 0; i < 4; i++) {
        int rc = remapped(device, i, outs[i]);
        if (rc != SUCCESS)
            return rc;
    }
    return SUCCESS;
}

/* -- PCIe, NVLink, topology, affinity ------------------------------------------------- */

READ(nvmlDeviceGetCurrPcieLinkGeneration, unsigned, "pcie", "pcie.gen", 4)
READ(nvmlDeviceGetCurrPcieLinkWidth, unsigned, "pcie", "pcie.width", 16)
READ(nvmlDeviceGetMaxPcieLinkGeneration, unsigned, "pcie", "pcie.max_gen",
     num(device, "pcie.gen", 4))
READ(nvmlDeviceGetMaxPcieLinkWidth, unsigned, "pcie", "pcie.max_width",
     num(device, "pcie.width", 16))

/* counter: NVML_PCIE_UTIL_TX_BYTES (0) or _RX_BYTES (1); KB/s. */
EXPORT int nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned *kbs)
{
    BEGIN("pcie", device, DEVICE);
    OUT(kbs);
    if (counter < 0 || counter > 1)
        return INVALID_ARGUMENT;
    *kbs = (unsigned)gauge(device, counter ? "pcie.rx_kbps" : "pcie.tx_kbps", 0);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned *replays)
{
    BEGIN("pcie", device, DEVICE);
    OUT(replays);
    if (!at(device, "pcie.replays"))
        return NOT_SUPPORTED;
    *replays = (unsigned)counter(device, "pcie.replays", 0);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *mj)
{
    BEGIN("energy", device, DEVICE);
    OUT(mj);
    if (!at(device, "energy_mj"))
        return NOT_SUPPORTED;
    *mj = (unsigned long long)energy_mj(device);
    return SUCCESS;
}

/* nvlink: {"links": n, "inactive": [...], "remote_pci_bus_ids": [...], "remote_type"};
 * absent: no NVLink (NOT_SUPPORTED); a link past the last: INVALID_ARGUMENT. */
static int nvlink(const struct handle *h, unsigned link)
{
    if (!at(h, "nvlink"))
        return NOT_SUPPORTED;
    return link < (unsigned)num(h, "nvlink.links", 0) ? SUCCESS : INVALID_ARGUMENT;
}

static unsigned link_active(const struct handle *h, unsigned link)
{
    long long n = num(h, "nvlink.inactive", 0);
    for (long long i = 0; i < n; i++)
        if (integer(at(h, "nvlink.inactive.%lld", i), -1) == (long long)link)
            return 0;
    return 1;
}

EXPORT int nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, unsigned *active)
{
    BEGIN("nvlink", device, DEVICE);
    OUT(active);
    int rc = nvlink(device, link);
    if (rc == SUCCESS)
        *active = link_active(device, link);
    return rc;
}

/* The remote end of a link: remote_pci_bus_ids cycled over the links (an NVSwitch system
 * spreads its 18 links over 4 switches). */
EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link,
                                               struct pci_info *pci)
{
    BEGIN("nvlink", device, DEVICE);
    OUT(pci);
    int rc = nvlink(device, link);
    long long remotes = num(device, "nvlink.remote_pci_bus_ids", 0);
    if (rc != SUCCESS || remotes <= 0)
        return rc != SUCCESS ? rc : NOT_SUPPORTED;
    const char *bus = at(device, "nvlink.remote_pci_bus_ids.%lld", (long long)link % remotes);
    return bus ? fill_pci(pci, bus, 0, 0) : NOT_SUPPORTED;
}

/* nvmlIntNvLinkDeviceType_t: 0 GPU, 2 NVSwitch (the default: where links are many). */
EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned link, int *type)
{
    BEGIN("nvlink", device, DEVICE);
    OUT(type);
    int rc = nvlink(device, link);
    const char *kind = at(device, "nvlink.remote_type");
    if (rc == SUCCESS)
        *type = kind && strcmp(kind, "gpu") == 0 ? 0 : 2;
    return rc;
}

/* nvmlGpuTopologyLevel_t from the topology matrix; else NODE (40) for GPUs on one NUMA node
 * and SYS (50) across nodes. */
EXPORT int nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level)
{
    BEGIN("topology", a, DEVICE);
    OUT(level);
    int rc = usable(b, DEVICE);
    if (rc != SUCCESS)
        return rc;
    int fallback = a->gpu == b->gpu ? 0 : numa_node(a->gpu) == numa_node(b->gpu) ? 40 : 50;
    *level = (int)integer(value("topology.%d.%d", a->gpu, b->gpu), fallback);
    return SUCCESS;
}

/* cpu_affinity "0-23,48-71" as a bit mask of 64-bit words; default every CPU here. */
EXPORT int nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned words, unsigned long *mask)
{
    BEGIN("cpu_affinity", device, DEVICE);
    OUT(mask);
    memset(mask, 0, words * sizeof *mask);
    char all[32];
    const char *list = at(device, "cpu_affinity");
    if (list == NULL) {
        snprintf(all, sizeof all, "0-%ld", sysconf(_SC_NPROCESSORS_CONF) - 1);
        list = all;
    }
    for (const char *p = list; *p;) {
        char *end;
        unsigned long first = strtoul(p, &end, 10), last = first;
        if (end == p)
            break;
        if (*end == '-')
            last = strtoul(end + 1, &end, 10);
        for (unsigned long cpu = first; cpu <= last && cpu < 64ul * words; cpu++)
            mask[cpu / 64] |= 1ul << (cpu % 64);
        p = *end == ',' ? end + 1 : end;
        if (*end != ',')
            break;
    }
    return SUCCESS;
}

/* The NUMA node near the GPU; absent numa_node: NOT_SUPPORTED (an old driver). */
EXPORT int nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned words, unsigned long *mask,
                                       int scope_kind)
{
    (void)scope_kind;
    BEGIN("numa_node", device, DEVICE);
    OUT(mask);
    int node = numa_node(device->gpu);
    if (node < 0)
        return NOT_SUPPORTED;
    memset(mask, 0, words * sizeof *mask);
    if ((unsigned)node < 64u * words)
        mask[node / 64] |= 1ul << (node % 64);
    return SUCCESS;
}

/* -- field values: the batched reads of ECC, retired pages, remapping, NVLink ------------- */

enum { VALUE_UINT = 1, VALUE_ULL = 3 }; /* nvmlValueType_t */

/* One field; the same numbers and the same configured errors as the single calls, so a
 * batched read equals one call per field. */
static int field(const struct handle *h, struct field_value *v)
{
    unsigned long long ull = 0;
    unsigned ui = 0;
    int rc;
    unsigned id = v->field_id;
    v->value_type = VALUE_ULL;
    switch (id) {
    case 3: case 4: case 5: case 6: /* NVML_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL */
        rc = configured(h, NULL, "ecc_errors");
        if (rc == SUCCESS)
            rc = ecc_count(h, id == 4 || id == 6, id >= 5, &ull);
        break;
    case 29: case 30: case 31: /* NVML_FI_DEV_RETIRED_SBE, _DBE, _PENDING */
        rc = configured(h, NULL, "retired_pages");
        if (rc == SUCCESS)
            rc = retired(h, id == 29 ? "sbe" : id == 30 ? "dbe" : "pending", &ull);
        break;
    case 91: /* NVML_FI_DEV_NVLINK_LINK_COUNT */
        v->value_type = VALUE_UINT;
        rc = configured(h, NULL, "nvlink");
        if (rc == SUCCESS)
            rc = at(h, "nvlink") ? SUCCESS : NOT_SUPPORTED;
        ui = (unsigned)num(h, "nvlink.links", 0);
        break;
    case 82: /* NVML_FI_DEV_MEMORY_TEMP */
        v->value_type = VALUE_UINT;
        rc = configured(h, NULL, "temperature");
        if (rc == SUCCESS)
            rc = at(h, "temperature_memory") ? SUCCESS : NOT_SUPPORTED;
        ui = (unsigned)gauge(h, "temperature_memory", 0);
        break;
    case 83: /* NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION */
        rc = configured(h, NULL, "energy");
        if (rc == SUCCESS)
            rc = at(h, "energy_mj") ? SUCCESS : NOT_SUPPORTED;
        ull = (unsigned long long)energy_mj(h);
        break;
    case 94: /* NVML_FI_DEV_PCIE_REPLAY_COUNTER */
        v->value_type = VALUE_UINT;
        rc = configured(h, NULL, "pcie");
        if (rc == SUCCESS)
            rc = at(h, "pcie.replays") ? SUCCESS : NOT_SUPPORTED;
        ui = (unsigned)counter(h, "pcie.replays", 0);
        break;
    case 138: case 139: /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _RX (KiB), link = scopeId */
        rc = configured(h, NULL, "nvlink");
        if (rc == SUCCESS)
            rc = nvlink(h, v->scope_id);
        if (rc == SUCCESS)
            rc = at(h, id == 138 ? "nvlink.data_tx_kib" : "nvlink.data_rx_kib") ? SUCCESS
                                                                              : NOT_SUPPORTED;
        ull = (unsigned long long)counter(h, id == 138 ? "nvlink.data_tx_kib" : "nvlink.data_rx_kib", 0);
        break;
    case 142: case 143: case 144: case 145: /* NVML_FI_DEV_REMAPPED_COR, _UNC, _PENDING, _FAILURE */
        v->value_type = VALUE_UINT;
        rc = configured(h, NULL, "remapped_rows");
        if (rc == SUCCESS)
            rc = remapped(h, (int)(id - 142), &ui);
        break;
    case 165: /* NVML_FI_DEV_NVLINK_GET_STATE, link = scopeId */
        v->value_type = VALUE_UINT;
        rc = configured(h, NULL, "nvlink");
        if (rc == SUCCESS)
            rc = nvlink(h, v->scope_id);
        if (rc == SUCCESS)
            ui = link_active(h, v->scope_id);
        break;
    default:
        return NOT_SUPPORTED;
    }
    if (v->value_type == VALUE_UINT)
        v->value.ui = ui;
    else
        v->value.ull = ull;
    return rc;
}

EXPORT int nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, struct field_value *values)
{
    BEGIN("field_values", device, DEVICE);
    if (count < 0 || (count > 0 && values == NULL))
        return INVALID_ARGUMENT;
    long long stamp = (long long)(now() * 1e6);
    for (int i = 0; i < count; i++) {
        values[i].timestamp = stamp;
        values[i].latency_us = 0;
        values[i].ret = (unsigned)field(device, &values[i]);
    }
    return SUCCESS;
}

/* -- processes ------------------------------------------------------------------------------ */

/* The two-call protocol: with too small a buffer (the first call passes 0 and NULL), the
 * count needed and INSUFFICIENT_SIZE; SUCCESS with count 0 when there are none. */
static int running(const struct handle *h, char kind, unsigned *count, struct process *infos)
{
    OUT(count);
    struct procs found = gather(h, kind);
    int rc = SUCCESS;
    if (*count < found.count || (found.count && infos == NULL))
        rc = INSUFFICIENT_SIZE;
    else
        for (size_t i = 0; i < found.count; i++)
            infos[i] = (struct process){found.items[i].pid, found.items[i].used,
                                        found.items[i].gi, found.items[i].ci};
    *count = (unsigned)found.count;
    free(found.items);
    return rc;
}

/* processes[].type: "C" compute, "G" graphics, "C+G" both, "M" an MPS client. */
#define RUNNING(name, kind)                                                                 \
    EXPORT int name(nvmlDevice_t device, unsigned *count, struct process *infos)           \
    {                                                                                       \
        BEGIN("processes", device, MIG_TOO);                                                \
        return running(device, kind, count, infos);                                        \
    }
RUNNING(nvmlDeviceGetComputeRunningProcesses_v3, 'C')
RUNNING(nvmlDeviceGetComputeRunningProcesses_v2, 'C')
RUNNING(nvmlDeviceGetGraphicsRunningProcesses_v3, 'G')
RUNNING(nvmlDeviceGetGraphicsRunningProcesses_v2, 'G')
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses_v3, 'M')
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses_v2, 'M')

/* One sample per process with an sm_util, stamped now, so every call has news.  No samples
 * newer than last_seen: NOT_FOUND, as the driver answers for an idle window.  Not
 * available per card in MIG mode. */
EXPORT int nvmlDeviceGetProcessUtilization(nvmlDevice_t device, struct process_sample *samples,
                                           unsigned *count, unsigned long long last_seen)
{
    BEGIN("process_utilization", device, DEVICE);
    OUT(count);
    if (mig_on(device->gpu))
        return NOT_SUPPORTED;
    unsigned long long stamp = (unsigned long long)(now() * 1e6);
    struct procs found = gather(device, 0);
    unsigned n = 0;
    for (size_t i = 0; i < found.count; i++)
        n += (unsigned)found.items[i].sampled;
    int rc = SUCCESS;
    if (n == 0 || stamp <= last_seen) {
        n = 0;
        rc = NOT_FOUND;
    } else if (samples == NULL || *count < n) {
        rc = INSUFFICIENT_SIZE;
    } else {
        unsigned k = 0;
        for (size_t i = 0; i < found.count; i++)
            if (found.items[i].sampled)
                samples[k++] = (struct process_sample){found.items[i].pid, stamp,
                                                       found.items[i].sm, found.items[i].mem, 0, 0};
    }
    *count = n;
    free(found.items);
    return rc;
}

/* -- MIG -------------------------------------------------------------------------------------- */

/* mig_mode absent: a card without MIG (NOT_SUPPORTED); pending defaults to current. */
EXPORT int nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned *current, unsigned *pending)
{
    BEGIN("mig_mode", device, DEVICE);
    OUT(current, pending);
    if (!at(device, "mig_mode"))
        return NOT_SUPPORTED;
    *current = (unsigned)mig_on(device->gpu);
    *pending = (unsigned)num(device, "mig_pending", *current);
    return SUCCESS;
}

static int max_mig(const struct handle *h)
{
    long long n = num(h, "max_mig_devices", 7);
    return n < 0 ? 0 : n > MAX_MIG ? MAX_MIG : (int)n;
}

EXPORT int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned *count)
{
    BEGIN("mig_mode", device, DEVICE);
    OUT(count);
    if (!at(device, "mig_mode"))
        return NOT_SUPPORTED;
    *count = (unsigned)max_mig(device);
    return SUCCESS;
}

/* INVALID_ARGUMENT with MIG off or past the last slot; NOT_FOUND for an empty slot (a
 * null in mig_devices). */
EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index,
                                               nvmlDevice_t *mig)
{
    BEGIN("mig_devices", device, DEVICE);
    OUT(mig);
    if (!mig_on(device->gpu) || index >= (unsigned)max_mig(device))
        return INVALID_ARGUMENT;
    if (!mig_exists(device->gpu, (int)index))
        return NOT_FOUND;
    *mig = &migs[device->gpu][index];
    return SUCCESS;
}

EXPORT int nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned *is_mig)
{
    BEGIN("mig_devices", device, MIG_TOO);
    OUT(is_mig);
    *is_mig = device->slot >= 0;
    return SUCCESS;
}

EXPORT int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device)
{
    BEGIN("mig_devices", mig, MIG_TOO);
    OUT(device);
    if (mig->slot < 0)
        return INVALID_ARGUMENT;
    *device = &gpus[mig->gpu];
    return SUCCESS;
}

/* On a GPU: INVALID_ARGUMENT in MIG mode (it is no instance), else NOT_SUPPORTED. */
static int instance(const struct handle *h, const char *key, long long fallback, unsigned *id)
{
    OUT(id);
    if (h->slot < 0)
        return mig_on(h->gpu) ? INVALID_ARGUMENT : NOT_SUPPORTED;
    *id = instance_id(h, key, fallback);
    return SUCCESS;
}

EXPORT int nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned *id)
{
    BEGIN("mig_devices", device, MIG_TOO);
    return instance(device, "gi", device->slot + 1, id);
}

EXPORT int nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned *id)
{
    BEGIN("mig_devices", device, MIG_TOO);
    return instance(device, "ci", 0, id);
}

/* -- GPM: SM activity per GPU instance (Hopper and newer; "gpm": true on the card) ------- */

/* GPM metrics are rates between two samples, as the driver's counters are: a sample keeps
 * the scenario time and, per metric, the integral of its gauge until then (and the value
 * then, for two samples at one frozen time); the metric is the mean between the two.
 * Slot 0 is SM activity (util_gpu, or a MIG device's sm_active), then the whole-card
 * metrics of gpm_ids; `have` marks those the card gives, `moving` those that are no
 * constant (whose mean is worked out), a bit per slot. */
#define GPM_SLOTS 5
struct gpm_sample {
    unsigned magic;
    double t, area[GPM_SLOTS], value[GPM_SLOTS];
    unsigned have, moving;
};

/* The whole-card metrics: NVML_GPM_METRIC_ANY_TENSOR_UTIL, _DRAM_BW_UTIL (percent),
 * _PCIE_TX_PER_SEC, _PCIE_RX_PER_SEC (MiB/s), and the scenario keys that give them: the
 * four DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, _DRAM_ACTIVE, _PCIE_TX_BYTES, _PCIE_RX_BYTES. */
static const unsigned gpm_ids[GPM_SLOTS - 1] = {5, 10, 20, 21};
static const char *const gpm_keys[GPM_SLOTS - 1] = {"gpm_tensor_active", "gpm_dram_active",
                                                    "gpm_pcie_tx_mibs", "gpm_pcie_rx_mibs"};

/* Records one metric's gauge (under a handle) into a sample's slot. */
static void gpm_record(struct gpm_sample *sample, int slot, const struct handle *h,
                       const char *key)
{
    char where[64], full[256];
    scope(h, where, sizeof where);
    snprintf(full, sizeof full, "%s.%s", where, key);
    struct shape s = shape_of(full, 0);
    sample->value[slot] = shape_at(&s, sample->t);
    sample->area[slot] = shape_integral(&s, sample->t);
    if (value("%s", full) != NULL)
        sample->have |= 1u << slot;
    if (s.kind != 0)
        sample->moving |= 1u << slot;
}

/* The mean of a slot between two samples; at one moment, the later sample's value. */
static double gpm_mean(const struct gpm_sample *first, const struct gpm_sample *second,
                       int slot)
{
    double span = second->t - first->t;
    int moving = (first->moving | second->moving) & (1u << slot);
    return moving && span > 0 ? (second->area[slot] - first->area[slot]) / span
                              : second->value[slot];
}

#define GPM_MAGIC 0x67706d73u
#define GPM_SM_UTIL 2 /* NVML_GPM_METRIC_SM_UTIL */

EXPORT int nvmlGpmQueryDeviceSupport(nvmlDevice_t device, struct gpm_support *support)
{
    BEGIN("gpm", device, DEVICE);
    OUT(support);
    if (support->version != GPM_VERSION)
        return ARGUMENT_VERSION_MISMATCH;
    support->supported = num(device, "gpm", 0) != 0;
    return SUCCESS;
}

EXPORT int nvmlGpmSampleAlloc(struct gpm_sample **sample)
{
    BEGIN("gpm", NULL, SYSTEM);
    OUT(sample);
    return hand_out((void **)sample, sizeof **sample, GPM_MAGIC);
}

EXPORT int nvmlGpmSampleFree(struct gpm_sample *sample)
{
    BEGIN("gpm", NULL, SYSTEM);
    return take_back(sample, GPM_MAGIC);
}

/* A sample of the whole card (not in MIG mode): SM activity is util_gpu; the others are
 * the gpm_* keys (gauges: numbers, waveforms, steps), each NOT_SUPPORTED as a metric where
 * the card has no such key. */
EXPORT int nvmlGpmSampleGet(nvmlDevice_t device, struct gpm_sample *sample)
{
    BEGIN("gpm", device, DEVICE);
    if (!ours(sample, GPM_MAGIC))
        return INVALID_ARGUMENT;
    if (num(device, "gpm", 0) == 0)
        return NOT_SUPPORTED;
    sample->t = scenario_time();
    sample->have = sample->moving = 0;
    gpm_record(sample, 0, device, "util_gpu");
    for (int i = 1; i < GPM_SLOTS; i++)
        gpm_record(sample, i, device, gpm_keys[i - 1]);
    return SUCCESS;
}

/* A sample of the GPU instance gi: it records the instance's sm_active (percent). */
EXPORT int nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned gi, struct gpm_sample *sample)
{
    BEGIN("gpm", device, DEVICE);
    if (!ours(sample, GPM_MAGIC))
        return INVALID_ARGUMENT;
    if (num(device, "gpm", 0) == 0)
        return NOT_SUPPORTED;
    for (int s = 0; s < MAX_MIG; s++) {
        const struct handle *mig = &migs[device->gpu][s];
        if (mig_exists(device->gpu, s) && instance_id(mig, "gi", s + 1) == gi) {
            sample->t = scenario_time();
            sample->have = sample->moving = 0;
            gpm_record(sample, 0, mig, "sm_active");
            sample->have = 0; /* SM activity is always there; the rest is the card's */
            return SUCCESS;
        }
    }
    return INVALID_ARGUMENT;
}

/* SM_UTIL, and on whole-card samples the gpm_* metrics the card has, as the mean between
 * the two samples; others get a per-metric NOT_SUPPORTED. */
EXPORT int nvmlGpmMetricsGet(struct gpm_metrics_get *request)
{
    BEGIN("gpm", NULL, SYSTEM);
    OUT(request);
    if (request->version != GPM_VERSION)
        return ARGUMENT_VERSION_MISMATCH;
    const struct gpm_sample *first = request->sample1, *second = request->sample2;
    if (!ours(first, GPM_MAGIC) || !ours(second, GPM_MAGIC) || request->count > 1024)
        return INVALID_ARGUMENT;
    for (unsigned i = 0; i < request->count; i++) {
        struct gpm_metric *m = &request->metrics[i];
        int slot = m->id == GPM_SM_UTIL ? 0 : -1;
        for (int k = 1; k < GPM_SLOTS; k++)
            if (m->id == gpm_ids[k - 1] && (first->have & second->have & (1u << k)))
                slot = k;
        m->ret = slot >= 0 ? SUCCESS : NOT_SUPPORTED;
        m->value = slot >= 0 ? gpm_mean(first, second, slot) : 0;
        m->short_name = slot >= 0 ? "metric" : NULL;
        m->long_name = slot >= 0 ? "GPM metric" : NULL;
        m->unit = NULL;
    }
    return SUCCESS;
}

/* -- XID events ------------------------------------------------------------------------------- */

/* xid_events: [{"device": 3, "xid": 79, "at_s": 5}], due at_s seconds after t0.  A set
 * delivers each due event of a registered GPU once, remembered by what it is (device, xid,
 * time) so that a rewritten scenario does not deliver it again. */
struct event_set {
    unsigned magic;
    unsigned long long types[MAX_GPUS];
    struct { int gpu; long long xid; double at; } delivered[MAX_DELIVERED];
    int ndelivered;
};

#define EVENTS_MAGIC 0x65766e74u

EXPORT int nvmlEventSetCreate(struct event_set **set)
{
    BEGIN("events", NULL, SYSTEM);
    OUT(set);
    return hand_out((void **)set, sizeof **set, EVENTS_MAGIC);
}

EXPORT int nvmlEventSetFree(struct event_set *set)
{
    BEGIN("events", NULL, SYSTEM);
    return take_back(set, EVENTS_MAGIC);
}

/* Only XID events are delivered, so that is all a card claims. */
EXPORT int nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
    BEGIN("events", device, DEVICE);
    OUT(types);
    *types = EVENT_XID;
    return SUCCESS;
}

EXPORT int nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                    struct event_set *set)
{
    BEGIN("events", device, DEVICE);
    if (!ours(set, EVENTS_MAGIC))
        return INVALID_ARGUMENT;
    if (types & ~EVENT_XID)
        return NOT_SUPPORTED;
    set->types[device->gpu] |= types;
    return SUCCESS;
}

static int next_event(struct event_set *set, struct event_data *data)
{
    long long n = integer(value("xid_events"), 0);
    double elapsed = now() - t0;
    for (long long i = 0; i < n; i++) {
        int gpu = (int)integer(value("xid_events.%lld.device", i), -1);
        long long xid = integer(value("xid_events.%lld.xid", i), 0);
        double when = real(value("xid_events.%lld.at_s", i), 0);
        if (gpu < 0 || gpu >= MAX_GPUS || !(set->types[gpu] & EVENT_XID) || when > elapsed)
            continue;
        int seen = 0;
        for (int k = 0; k < set->ndelivered && !seen; k++)
            seen = set->delivered[k].gpu == gpu && set->delivered[k].xid == xid
                && set->delivered[k].at == when;
        if (seen || set->ndelivered == MAX_DELIVERED)
            continue;
        set->delivered[set->ndelivered++] = (typeof(set->delivered[0])){gpu, xid, when};
        *data = (struct event_data){&gpus[gpu], EVENT_XID, (unsigned long long)xid,
                                    NO_INSTANCE, NO_INSTANCE};
        return SUCCESS;
    }
    return TIMEOUT;
}

/* TIMEOUT when no event is due within timeout_ms (gputop polls with 0). */
EXPORT int nvmlEventSetWait_v2(struct event_set *set, struct event_data *data, unsigned timeout_ms)
{
    BEGIN("events", NULL, SYSTEM);
    OUT(data);
    if (!ours(set, EVENTS_MAGIC))
        return INVALID_ARGUMENT;
    double until = now() + timeout_ms / 1000.0;
    for (;;) {
        if (next_event(set, data) == SUCCESS)
            return SUCCESS;
        if (now() >= until)
            return TIMEOUT;
        pthread_mutex_unlock(&lock); /* let other threads call while this one waits */
        usleep(10000);
        pthread_mutex_lock(&lock);
        load(scenario_path);
    }
}

/* -- NVSwitch fabric and GPU instance profiles (issue 37) ---------------------------------- */

/* pynvml's c_nvmlGpuFabricInfo_t. */
struct fabric_info {
    unsigned char cluster_uuid[16];
    int status;
    unsigned clique_id;
    unsigned state; /* nvmlGpuFabricState_t: 0 not supported, 1 not started, 2 in progress, 3 completed */
};
_Static_assert(sizeof(struct fabric_info) == 28, "c_nvmlGpuFabricInfo_t");

/* The scenario's fabric_state (a card of an NVSwitch system); NOT_SUPPORTED without. */
EXPORT int nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, struct fabric_info *info)
{
    BEGIN("fabric", device, DEVICE);
    OUT(info);
    const char *state = at(device, "fabric_state");
    if (state == NULL)
        return NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->state = (unsigned)integer(state, 0);
    info->status = SUCCESS;
    return SUCCESS;
}

/* The scenario's inforom_corrupted (true: the checksum fails, as nvidia-smi's "infoROM is
 * corrupted" warning); a sound infoROM validates. */
EXPORT int nvmlDeviceValidateInforom(nvmlDevice_t device)
{
    BEGIN("inforom", device, DEVICE);
    return num(device, "inforom_corrupted", 0) != 0 ? CORRUPTED_INFOROM : SUCCESS;
}

/* What real drivers answer on a card without MIG (and here on every card: profiles are
 * not modelled): NOT_SUPPORTED, not "function not found".  pynvml calls the V name by
 * default, the plain one with version=1. */
EXPORT int nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned profile, void *info)
{
    BEGIN("mig_profiles", device, DEVICE);
    OUT(info);
    (void)profile;
    return NOT_SUPPORTED;
}

EXPORT int nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned profile, void *info)
{
    BEGIN("mig_profiles", device, DEVICE);
    OUT(info);
    (void)profile;
    return NOT_SUPPORTED;
}
