/* fuzz_safetensors.c - libFuzzer target for the safetensors reader: opens the input with
 * safetensors_open_memory and touches every tensor's name, first and last data byte and
 * every metadata entry, so a validation gap shows up as an ASan report. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "aiinfra/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    safetensors *st;
    ai_err err;
    if (safetensors_open_memory(&st, data, size, "fuzz", &err) != AI_OK) return 0;
    volatile size_t sink = 0;
    for (uint64_t i = 0; i < safetensors_n_tensors(st); i++) {
        const safetensors_tensor *t = safetensors_tensor_at(st, i);
        const unsigned char *d = t->data;
        sink += strlen(t->name) + (t->nbytes ? d[0] + d[t->nbytes - 1] : 0);
        sink += safetensors_find(st, t->name) == t;
    }
    const char *k, *v;
    for (uint64_t i = 0; safetensors_metadata_at(st, i, &k, &v); i++) sink += strlen(k) + strlen(v);
    (void)sink;
    safetensors_close(st);
    return 0;
}
