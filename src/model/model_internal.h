/* model_internal.h - what weights.c, forward.c and hf.c share: one view of a tensor whether it comes
 * from a GGUF file or a safetensors file, looked up by llama.cpp's tensor name. */
#ifndef AIINFRA_MODEL_INTERNAL_H
#define AIINFRA_MODEL_INTERNAL_H

#include "aiinfra/model.h"

typedef struct model_src_tensor {
    char name[160];     /* the name in the source's own spelling, for messages */
    dtype type;         /* DTYPE_COUNT when the source dtype has no equivalent */
    uint64_t ne[4];     /* elements per dim, ne[0] fastest (GGUF order; safetensors shapes reversed) */
    uint64_t nbytes;
    const void *data;   /* NULL when the tensor is absent */
} model_src_tensor;

/* Looks up llama.cpp name `gguf_name` (mapped to the HF name for folders). Absent: AI_OK, data NULL.
 * An unsupported dtype: AI_ERR_UNSUPPORTED naming the tensor. */
ai_status model_src_find(const model *m, const char *gguf_name, model_src_tensor *out, ai_err *err);
uint64_t model_src_n_tensors(const model *m);
bool model_src_at(const model *m, uint64_t i, model_src_tensor *out);

/* Binds every weight (m->cfg read, m->g or m->st set). On failure the caller closes m. */
ai_status model_bind(model *m, const char *name, ai_err *err);
ai_status model_open_hf(model **out, const char *path, ai_err *err);

/* ops_ggml.c: attention over an f16 cache in llama.cpp's CPU float order; `batched` picks the order
 * llama.cpp uses for a forward of >= 2 tokens (its tiled sgemm) or of one (ggml_vec_dot_f16). */
void model_attend_f16_ggml(float *out, const float *q, const uint16_t *k, const uint16_t *v, int32_t n_pos,
                           int32_t head_dim, int32_t head_dim_v, int64_t k_stride, int64_t v_stride, float scale,
                           float *scores, bool batched);
/* g[i] = silu(g[i]) * u[i] with llama.cpp's SIMD expf on AVX2 (libm expf elsewhere). */
void model_swiglu(float *g, const float *u, int64_t n);

#endif
