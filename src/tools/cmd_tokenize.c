/* placeholder until the tokenize command lands */
#include <stdio.h>
#include "tools/commands.h"
int cmd_tokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "aiinfra tokenize: not built yet\n"); return 1; }
int cmd_detokenize(int argc, char **argv) { return cmd_tokenize(argc, argv); }
