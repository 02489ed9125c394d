/* A test double of NVIDIA's libcuda.so.1 for the unit tests of package cuda and of the workload: it
 * implements the few driver calls the suite makes on the CPU, and runs the suite's three kernels by name.
 * It is built by the tests (gcc -shared) and never enters an image or a cluster.
 *
 * Knobs, read at cuInit (test-only variables of this double):
 *   CUDA_DOUBLE_INIT=<code>      cuInit fails with that CUresult (100: CUDA_ERROR_NO_DEVICE)
 *   CUDA_DOUBLE_DEVICES=<n>      devices shown (default 1)
 *   CUDA_DOUBLE_WRONG_SUM=1      vector_add gets element 7 wrong
 *   CUDA_DOUBLE_MEM_LIMIT=<b>    memory per context (MPS pinned limit): larger allocations fail
 *   CUDA_DOUBLE_SMS=<n>          SMs the context may use (MPS active thread percentage); default all
 *   CUDA_DOUBLE_SLOW=<f>         every kernel's measured time is multiplied by f (a slow GPU)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;

enum { SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_IMAGE = 200,
       NOT_FOUND = 500, INVALID_DEVICE = 101 };

static int initialized, devices = 1, wrong_sum, device_sms = 8, ctx_sms;
static uint64_t mem_limit = 80ull << 30, in_use;
static double slow = 1;

static int env_int(const char *k, int def) { const char *v = getenv(k); return v ? atoi(v) : def; }

CUresult cuInit(unsigned flags) {
  (void)flags;
  int code = env_int("CUDA_DOUBLE_INIT", 0);
  if (code) return code;
  devices = env_int("CUDA_DOUBLE_DEVICES", 1);
  wrong_sum = env_int("CUDA_DOUBLE_WRONG_SUM", 0);
  ctx_sms = env_int("CUDA_DOUBLE_SMS", device_sms);
  if (getenv("CUDA_DOUBLE_MEM_LIMIT")) mem_limit = strtoull(getenv("CUDA_DOUBLE_MEM_LIMIT"), 0, 10);
  if (getenv("CUDA_DOUBLE_SLOW")) slow = atof(getenv("CUDA_DOUBLE_SLOW"));
  initialized = 1;
  return SUCCESS;
}

CUresult cuDriverGetVersion(int *v) { *v = 12040; return SUCCESS; }

CUresult cuGetErrorName(CUresult code, const char **name) {
  switch (code) {
  case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return SUCCESS;
  case 100: *name = "CUDA_ERROR_NO_DEVICE"; return SUCCESS;
  case 803: *name = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"; return SUCCESS;
  case INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; return SUCCESS;
  case NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return SUCCESS;
  }
  *name = "CUDA_ERROR_UNKNOWN";
  return SUCCESS;
}

#define NEED_INIT if (!initialized) return NOT_INITIALIZED
CUresult cuDeviceGetCount(int *n) { NEED_INIT; *n = devices; return SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int i) { NEED_INIT; if (i < 0 || i >= devices) return INVALID_DEVICE; *d = i; return SUCCESS; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { snprintf(name, len, "Double GPU %d", d); return SUCCESS; }
CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) { for (int i = 0; i < 16; i++) u[i] = (unsigned char)(0x10 * d + i); return SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  (void)d;
  switch (attr) {
  case 13: *v = 1980000; break;  /* SM clock, kHz */
  case 16: *v = device_sms; break;
  case 36: *v = 2619000; break;  /* memory clock, kHz */
  case 37: *v = 5120; break;     /* bus width, bits */
  case 75: *v = 9; break;
  case 76: *v = 0; break;
  default: return INVALID_VALUE;
  }
  return SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = 80ull << 30; return SUCCESS; }

static int ctx_token = 1;
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) { (void)d; NEED_INIT; *ctx = &ctx_token; return SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return SUCCESS; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return SUCCESS; }
CUresult cuCtxSynchronize(void) { return SUCCESS; }
typedef struct { int type; unsigned sms; } affinity;
CUresult cuCtxGetExecAffinity(affinity *p, int type) { if (type != 0) return INVALID_VALUE; p->type = 0; p->sms = ctx_sms; return SUCCESS; }

/* Modules: the double accepts PTX that declares the kernels it knows. */
static int module_token = 1;
CUresult cuModuleLoadData(void **mod, const void *image) {
  if (!strstr(image, ".entry vector_add") || !strstr(image, ".entry fma_load") || !strstr(image, ".entry copy_words")) return INVALID_IMAGE;
  *mod = &module_token;
  return SUCCESS;
}
CUresult cuModuleUnload(void *mod) { (void)mod; return SUCCESS; }
static const char *kernels[] = {"vector_add", "fma_load", "copy_words"};
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  (void)mod;
  for (int i = 0; i < 3; i++) if (!strcmp(name, kernels[i])) { *fn = (void *)kernels[i]; return SUCCESS; }
  return NOT_FOUND;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (in_use + n > mem_limit) return OUT_OF_MEMORY;
  void *m = malloc(n + sizeof(size_t));
  if (!m) return OUT_OF_MEMORY;
  *(size_t *)m = n;
  in_use += n;
  *p = (CUdeviceptr)((char *)m + sizeof(size_t));
  return SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) { char *m = (char *)p - sizeof(size_t); in_use -= *(size_t *)m; free(m); return SUCCESS; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { memcpy((void *)dst, src, n); return SUCCESS; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { memcpy(dst, (void *)src, n); return SUCCESS; }
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) { *total = mem_limit; *free_ = mem_limit - in_use; return SUCCESS; }

/* Events measure the host's clock around the kernels, which run synchronously here. */
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
typedef struct { double at; } event;
static double kernel_ms_extra;
CUresult cuEventCreate(event **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof(event)); return SUCCESS; }
CUresult cuEventRecord(event *e, void *stream) { (void)stream; e->at = now_ms() + kernel_ms_extra; return SUCCESS; }
CUresult cuEventSynchronize(event *e) { (void)e; return SUCCESS; }
CUresult cuEventElapsedTime(float *ms, event *a, event *b) { *ms = (float)(b->at - a->at); if (*ms <= 0) *ms = 0.001f; return SUCCESS; }
CUresult cuEventDestroy_v2(event *e) { free(e); return SUCCESS; }

CUresult cuLaunchKernel(const char *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  (void)gy; (void)gz; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
  unsigned long long threads = (unsigned long long)gx * bx;
  double start = now_ms();
  if (!strcmp(fn, "vector_add")) {
    float *a = (float *)*(CUdeviceptr *)params[0], *b = (float *)*(CUdeviceptr *)params[1], *c = (float *)*(CUdeviceptr *)params[2];
    int n = *(int *)params[3];
    for (unsigned long long i = 0; i < threads; i++) {
      for (unsigned long long j = i; j < (unsigned long long)n; j += threads) c[j] = a[j] + b[j];
    }
    if (wrong_sum && n > 7) c[7] += 1;
  } else if (!strcmp(fn, "fma_load")) {
    float *out = (float *)*(CUdeviceptr *)params[0];
    int iters = *(int *)params[1];
    float a = *(float *)params[2], b = *(float *)params[3];
    for (unsigned long long t = 0; t < threads; t++) {
      float x = (float)t;
      for (int i = 0; i < iters; i++) x = x * a + b;
      out[t] = 8 * x;
    }
  } else if (!strcmp(fn, "copy_words")) {
    char *src = (char *)*(CUdeviceptr *)params[0], *dst = (char *)*(CUdeviceptr *)params[1];
    unsigned long long n = *(unsigned long long *)params[2];
    memcpy(dst, src, n * 16);
  } else {
    return NOT_FOUND;
  }
  /* A slow GPU: the end event lands (slow-1) times the kernel's own time later. */
  kernel_ms_extra += (now_ms() - start) * (slow - 1);
  return SUCCESS;
}
