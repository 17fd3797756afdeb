/* main.c - the `aiinfra` command line: dispatches to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "tools/commands.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"tokenize", cmd_tokenize, "-m PATH [--no-special] [-p TEXT]   text (stdin) -> token ids"},
    {"detokenize", cmd_detokenize, "-m PATH                         token ids (stdin) -> text"},
    {"template", cmd_template, "(-m MODEL | --template F) --messages F.json [...]  render a chat template"},
    {"run", cmd_run, "-m MODEL -p PROMPT [-n N] [--temp T] [--top-p P] [--top-k K] [--seed S] [--chat]"},
    {"chat", cmd_chat, "-m MODEL                          interactive multi-turn chat"},
    {"info", cmd_info, "MODEL                              architecture, parameters, memory ledger"},
    {"serve", cmd_serve, "-m MODEL [--host H] [--port P] [--api-key K] [--backend cpu|cuda]  OpenAI-compatible server"},
    {"bench", cmd_bench, "(-m MODEL | --arch NAME --random-weights) [--batch B --prompt P --gen G --json]  speed vs roofline"},
    {"kernels", cmd_kernels, "bench [OP|all] [--json] | roofline [--out F.svg]  CUDA kernel ladders (reduce, softmax, gemm, attention, decode)"},
    {"gguf", cmd_gguf, "FILE [--json]                      print a GGUF file's metadata and tensors"},
    {"safetensors", cmd_safetensors, "PATH [--json]               print a safetensors file's (or folder's) tensors"},
};

static void usage(FILE *fp)
{
    fprintf(fp, "usage: aiinfra COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(fp, "  %-11s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "aiinfra: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
