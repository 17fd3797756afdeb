/* fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Opens the input with gguf_open_memory (the same validation as gguf_open, minus the
 * mmap) and, when it opens, touches every key, every array element and every tensor's
 * first and last data byte, so a validation gap shows up as an ASan report.
 * Build: make build/fuzz/fuzz_gguf; seed corpus: see docs/formats.md.
 */
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/gguf.h"

static unsigned touch(const void *p, uint64_t n)
{
    const unsigned char *b = p;
    return n ? (unsigned)b[0] + b[n - 1] : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf *g;
    ai_err err;
    if (gguf_open_memory(&g, data, size, "fuzz", &err) != AI_OK) return 0;
    volatile unsigned sink = 0;
    for (int64_t i = 0; i < (int64_t)gguf_n_kv(g); i++) {
        gguf_str k = gguf_key(g, i), s;
        enum gguf_type t = gguf_kv_type(g, i), et;
        uint64_t n;
        sink += touch(k.ptr, k.len);
        if (gguf_kv_str(g, i, &s)) sink += touch(s.ptr, s.len);
        if (gguf_kv_arr(g, i, &et, &n)) {
            const void *d = gguf_kv_data(g, i);
            if (d) sink += touch(d, n * gguf_type_size(et));
            for (uint64_t j = 0; et == GGUF_TYPE_STRING && j < n; j++)
                if (gguf_kv_arr_str(g, i, j, &s)) sink += touch(s.ptr, s.len);
        } else if (gguf_kv_data(g, i)) {
            sink += touch(gguf_kv_data(g, i), gguf_type_size(t));
        }
    }
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        sink += touch(t->name.ptr, t->name.len) + touch(t->data, t->nbytes);
    }
    uint32_t u;
    int64_t v;
    float f;
    gguf_str s;
    sink += gguf_get_u32(g, "general.alignment", &u) + gguf_get_i64(g, "general.alignment", &v) +
            gguf_get_f32(g, "x", &f) + gguf_arr_str(g, "tokenizer.ggml.tokens", 0, &s);
    (void)sink;
    gguf_close(g);
    return 0;
}
