/* cli.h - small helpers shared by the CLI's subcommands. */
#ifndef AIINFRA_CLI_H
#define AIINFRA_CLI_H

#include <stdbool.h>
#include <stddef.h>

/* Parses all of s as a number in [lo, hi]; false (out untouched) otherwise. */
bool cli_parse_num(const char *s, double lo, double hi, double *out);

/* A comma-separated list of names ("norm,add") -> the OR of their bits in *out (which it adds to);
 * false on a name not in the table. */
typedef struct cli_flag {
    const char *name;
    unsigned bits;
} cli_flag;
bool cli_parse_flags(const char *s, const cli_flag *table, size_t n, unsigned *out);

/* A generate_fn-style text sink: writes to stdout and flushes (streaming). */
bool cli_emit_stdout(void *user, const char *text, size_t len);

struct model;
/* Touches the model's mmapped weights before the first forward; on a terminal, models of 256 MiB
 * and more show a progress bar on stderr. */
void cli_prefetch_weights(const struct model *m);

/* --backend NAME: "cpu" (n_threads, 0 = all cores) or "cuda" (device 0). AI_ERR_INVALID for another name. */
struct backend;
#include "aiinfra/status.h"
ai_status cli_open_backend(const char *name, int n_threads, struct backend *be, ai_err *err);

/* --kv-cache-dtype V for run and chat: the paged cache's type into cp (f16 / f32 also set the CPU forward's
 * cache). false, with a message on stderr naming cmd, for an unknown V. */
struct model_ctx_params;
bool cli_parse_kv_cache_dtype(const char *cmd, const char *v, struct model_ctx_params *cp);

#endif
