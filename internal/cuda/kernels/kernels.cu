// The suite's GPU kernels, compiled to PTX (kernels.ptx, embedded in the workload binary) by `make ptx`
// with clang's CUDA front end: no CUDA toolkit is needed to build them, and the NVIDIA driver compiles
// the PTX for whatever GPU it runs on (cuModuleLoadData). extern "C" keeps the entry names plain.
#define GLOBAL extern "C" __attribute__((global))

static __attribute__((device)) inline unsigned tid() {
  return __nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
}
static __attribute__((device)) inline unsigned nthreads() {
  return __nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
}

// vector_add: c[i] = a[i] + b[i], CUDA's vectorAdd sample; the host checks every element.
GLOBAL void vector_add(const float *a, const float *b, float *c, int n) {
  for (unsigned i = tid(); i < (unsigned)n; i += nthreads())
    c[i] = a[i] + b[i];
}

// fma_load: eight independent multiply-add chains of iters steps per thread, 16*iters floating-point
// operations per thread, bound by the SMs' FP32 units; the sum is stored so no step can be left out.
GLOBAL void fma_load(float *out, int iters, float a, float b) {
  unsigned t = tid();
  float x0 = t, x1 = t + 1, x2 = t + 2, x3 = t + 3, x4 = t + 4, x5 = t + 5, x6 = t + 6, x7 = t + 7;
  for (int i = 0; i < iters; i++) {
    x0 = x0 * a + b; x1 = x1 * a + b; x2 = x2 * a + b; x3 = x3 * a + b;
    x4 = x4 * a + b; x5 = x5 * a + b; x6 = x6 * a + b; x7 = x7 * a + b;
  }
  out[t] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}

// copy_words: dst[i] = src[i] over n 16-byte words, bound by the GPU's memory bandwidth.
struct __attribute__((aligned(16))) word { unsigned x, y, z, w; };
GLOBAL void copy_words(const struct word *src, struct word *dst, unsigned long long n) {
  for (unsigned long long i = tid(); i < n; i += nthreads())
    dst[i] = src[i];
}
