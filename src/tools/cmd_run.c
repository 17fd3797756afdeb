/* placeholder until the run command lands */
#include <stdio.h>
#include "tools/commands.h"
int cmd_run(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "aiinfra run: not built yet\n"); return 1; }
