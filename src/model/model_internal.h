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

#endif
