/* placeholder until the info command lands */
#include <stdio.h>
#include "tools/commands.h"
int cmd_info(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "aiinfra info: not built yet\n"); return 1; }
