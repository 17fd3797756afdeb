/* cuda_check.h - turning CUDA runtime errors into ai_status (for .cu and host .c files alike).
 *
 *   CUK_TRY(err, cudaMemsetAsync(...), "what");   returns AI_ERR_RUNTIME with the CUDA message
 *   CUK_LAUNCHED(err, "kernel_name");             checks cudaGetLastError after a launch
 */
#ifndef AIINFRA_CUDA_CHECK_H
#define AIINFRA_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "aiinfra/status.h"

#define CUK_TRY(err, call, what)                                                                       \
    do {                                                                                               \
        cudaError_t cuk_e_ = (call);                                                                   \
        if (cuk_e_ != cudaSuccess)                                                                     \
            return ai_err_set((err), AI_ERR_RUNTIME, "%s: %s (%s)", (what), cudaGetErrorString(cuk_e_), \
                              cudaGetErrorName(cuk_e_));                                               \
    } while (0)

#define CUK_LAUNCHED(err, name) CUK_TRY(err, cudaGetLastError(), name)

#endif
