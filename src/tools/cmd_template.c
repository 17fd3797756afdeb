/* placeholder until the template command lands */
#include <stdio.h>
#include "tools/commands.h"
int cmd_template(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "aiinfra template: not built yet\n"); return 1; }
