/* gguf_internal.h - the reader's private state, shared by gguf.c (parsing) and
 * gguf_get.c (lookups). Not installed; only src/formats/ includes it. */
#ifndef AIINFRA_GGUF_INTERNAL_H
#define AIINFRA_GGUF_INTERNAL_H

#include "aiinfra/fileio.h"
#include "aiinfra/gguf.h"

#include <string.h>

struct gguf_kv {
    gguf_str key;
    enum gguf_type type;
    enum gguf_type elem_type;  /* ARRAY only */
    uint64_t n;                /* ARRAY only: element count */
    const unsigned char *val;  /* scalar bytes | string's u64 length | array's first element */
    const uint64_t *str_off;   /* string arrays: n file offsets of each element's u64 length */
};

struct gguf {
    file_map map;              /* the file, or the caller's bytes (gguf_open_memory) */
    bool owns_map;             /* gguf_open mapped it: unmap at close */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    uint64_t data_start;       /* file offset of the data section */
    struct gguf_kv *kv;        /* (n_kv) */
    gguf_tensor *tensors;      /* (n_tensors) */
    uint64_t *str_off;         /* (total string-array elements): every string array's table */
    uint64_t *kv_slots;        /* open addressing, kv index + 1 (0 = empty), (kv_mask + 1) */
    uint64_t *tensor_slots;    /* same for tensor names */
    uint64_t kv_mask, tensor_mask;
};

/* Little-endian loads from possibly unaligned map bytes (one load on little-endian
 * hosts: the parser's hot path is reading string lengths). */
static inline uint64_t gguf_le(const unsigned char *p, unsigned nbytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (nbytes == 8) { uint64_t v; memcpy(&v, p, 8); return v; }
    if (nbytes == 4) { uint32_t v; memcpy(&v, p, 4); return v; }
#endif
    uint64_t v = 0;
    for (unsigned i = 0; i < nbytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint64_t gguf_hash(const char *p, uint64_t len);
/* Slot lookup: index or -1. */
int64_t gguf_slot_find(const uint64_t *slots, uint64_t mask, const void *items, size_t stride,
                       const char *name, uint64_t len);

#endif
