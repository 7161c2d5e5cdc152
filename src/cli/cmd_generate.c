/* cmd_generate.c - `kvwise generate` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_generate(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise generate: not implemented yet\n");
    return 2;
}
