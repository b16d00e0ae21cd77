// A kernel timeline of any CUDA process, for finding where a decode step's time goes: loaded with
// LD_PRELOAD, it records every kernel's start and end (graph nodes each on their own) through CUPTI's
// activity API and writes "start_ns,end_ns,name" lines to $KERNEL_TRACE_OUT (default /tmp/kernel_trace.csv);
// with KERNEL_TRACE_API set, runtime API calls ("API name") and copies ("MEMCPY kindK N bytes") too.
// Build on a machine with the CUDA toolkit's CUPTI (see README.md); not part of the build.
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
static FILE* out;
static void CUPTIAPI req(uint8_t** b, size_t* size, size_t* maxr) { *size = 16 << 20; *b = (uint8_t*)aligned_alloc(8, *size); *maxr = 0; }
static void CUPTIAPI done(CUcontext c, uint32_t s, uint8_t* b, size_t size, size_t valid) {
  CUpti_Activity* r = NULL;
  while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      KV* k = (KV*)r;
      fprintf(out, "%llu,%llu,%s\n", (unsigned long long)k->start, (unsigned long long)k->end, k->name);
    } else if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      CUpti_ActivityAPI* a = (CUpti_ActivityAPI*)r;
      const char* nm = "?";
      cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &nm);
      fprintf(out, "%llu,%llu,API %s\n", (unsigned long long)a->start, (unsigned long long)a->end, nm);
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      struct M { CUpti_ActivityKind kind; uint8_t ck, sk, dk, fl; uint64_t bytes, start, end; }* m = (struct M*)r;
      fprintf(out, "%llu,%llu,MEMCPY kind%d %llu bytes\n", (unsigned long long)m->start, (unsigned long long)m->end, m->ck, (unsigned long long)m->bytes);
    }
  }
  fflush(out);
  free(b);
}
__attribute__((constructor)) static void init(void) {
  const char* p = getenv("KERNEL_TRACE_OUT");
  out = fopen(p ? p : "/tmp/kernel_trace.csv", "w");
  cuptiActivityRegisterCallbacks(req, done);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (getenv("KERNEL_TRACE_API")) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityFlushPeriod(200);
}
__attribute__((destructor)) static void fini(void) { cuptiActivityFlushAll(1); fflush(out); }
