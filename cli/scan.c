#include "config.h"
#include "commands.h"
int cmd_scan(int argc, char **argv) { (void)argc; (void)argv; return 2; }
