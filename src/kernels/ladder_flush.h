/* ladder_flush.h - L2 eviction before timed ladder kernels (see ladder_flush.cu for why a read). */
#ifndef AIINFRA_KERNELS_LADDER_FLUSH_H
#define AIINFRA_KERNELS_LADDER_FLUSH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads bytes (a multiple of 16, >= 16) of buf on the stream; sink: 4 device bytes outside buf that
 * may be written. Returns a cudaError_t value. */
int ladder_flush_l2(void *stream, const void *buf, size_t bytes, unsigned *sink);

#ifdef __cplusplus
}
#endif

#endif
