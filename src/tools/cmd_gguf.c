/* placeholder until the gguf command lands */
#include <stdio.h>
#include "tools/commands.h"
int cmd_gguf(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "aiinfra gguf: not built yet\n"); return 1; }
