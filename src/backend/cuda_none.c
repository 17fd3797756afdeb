/* cuda_none.c - the CUDA backend's entry points in a build without nvcc: they say so. */
#ifndef AIINFRA_CUDA
#include "aiinfra/backend.h"

ai_status backend_cuda_init(backend *out, int device, ai_err *err)
{
    *out = (backend){0};
    return ai_err_set(err, AI_ERR_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at build time)");
}

bool backend_cuda_describe(int device, char *buf, size_t cap) { return false; }
#else
typedef int cuda_none_unused; /* ISO C forbids an empty translation unit */
#endif
