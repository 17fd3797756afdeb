/* commands.h - the subcommands of the `aiinfra` CLI. Each returns the process exit code. */
#ifndef AIINFRA_COMMANDS_H
#define AIINFRA_COMMANDS_H

int cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */
int cmd_detokenize(int argc, char **argv); /* cmd_tokenize.c */
int cmd_template(int argc, char **argv);   /* cmd_template.c */
int cmd_gguf(int argc, char **argv);       /* cmd_gguf.c: dump GGUF metadata */
int cmd_safetensors(int argc, char **argv); /* cmd_safetensors.c: dump a safetensors file/folder */
int cmd_run(int argc, char **argv);        /* cmd_run.c: generate text from a prompt */
int cmd_chat(int argc, char **argv);       /* cmd_chat.c: interactive multi-turn chat */
int cmd_info(int argc, char **argv);       /* cmd_info.c: architecture, parameters, memory ledger */
int cmd_bench(int argc, char **argv);      /* cmd_bench.c: prefill/decode speed against the roofline */
int cmd_serve(int argc, char **argv);      /* cmd_serve.c: the OpenAI-compatible HTTP server */
int cmd_bench_serve(int argc, char **argv);
int cmd_kernels(int argc, char **argv);    /* cmd_kernels.c: kernel ladders (src/kernels/) and their roofline */ /* cmd_bench_serve.c: `bench serve`, load generator for a server */

#endif
