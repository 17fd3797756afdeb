/* placeholder until the chat command lands */
#include <stdio.h>
#include "tools/commands.h"
int cmd_chat(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "aiinfra chat: not built yet\n"); return 1; }
