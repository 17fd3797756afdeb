/* runner_sample.c - sampling the next tokens on the backend, from the logits the step left there.
 *
 * Why: for a 128,256-token vocabulary a batch of 256 sequences has 131 MB of logits per step; copying
 * them to the host (~3 ms over PCIe) and sampling there (a selection over 33 M values) would cost more
 * than the step itself. The backend's sampler (GPU: k_sample.cu, radix select, no sort) reads them in
 * place, and only n_seq tokens cross back. The uniform draws come from the host's per-sequence rngs
 * (the caller's), so a seeded request makes the same draws on every backend. The device walks the
 * kept set in the order (logit desc, id asc); the host sampler walks it in that order only with
 * top-p on (or greedy): otherwise the two pick from the same distribution but may map one u to
 * different tokens (tests/unit/test_cuda_runner.c checks the device against the host's filter).
 */
#include <string.h>

#include "model/runner_internal.h"

bool runner_can_sample(const runner *r) { return r->be->ops->sample != NULL; }

ai_status runner_sample(runner *r, const backend_sample_params *h_params, int32_t n_seq, int32_t *out_tokens,
                        ai_err *err)
{
    const backend_ops *o = r->be->ops;
    if (!o->sample) return ai_err_set(err, AI_ERR_UNSUPPORTED, "runner_sample: backend %s samples on the host", o->name);
    if (n_seq < 1 || n_seq > r->n_seq)
        return ai_err_set(err, AI_ERR_INVALID, "runner_sample: %d rows, the last step had %d", n_seq, r->n_seq);
    const size_t off = runner_meta_offset(r, META_SPARAMS), out = runner_meta_offset(r, META_OUT);
    const size_t bytes = (size_t)n_seq * sizeof *h_params;
    memcpy(r->h_meta + off, h_params, bytes); /* h_meta stays valid until the next sync (upload's rule) */
    const backend_sample_params *d_params = (const backend_sample_params *)(r->d_meta + off);
    ai_status st = o->upload(r->be->ctx, r->d_meta + off, r->h_meta + off, bytes, err);
    if (st == AI_OK) st = o->sample(r->be->ctx, r->logits, n_seq, r->cfg.n_vocab, d_params, r->d_meta + out, err);
    if (st == AI_OK) st = o->download(r->be->ctx, out_tokens, r->d_meta + out, (size_t)n_seq * sizeof(int32_t), err);
    return st;
}
