#include "config.h"
#include "commands.h"
int cmd_policy(int argc, char **argv) { (void)argc; (void)argv; return 2; }
