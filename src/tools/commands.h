/* commands.h - the subcommands of the `aiinfra` CLI. Each returns the process exit code. */
#ifndef AIINFRA_COMMANDS_H
#define AIINFRA_COMMANDS_H

int cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */
int cmd_detokenize(int argc, char **argv); /* cmd_tokenize.c */
int cmd_template(int argc, char **argv);   /* cmd_template.c */
int cmd_gguf(int argc, char **argv);       /* cmd_gguf.c: dump GGUF metadata */

#endif
