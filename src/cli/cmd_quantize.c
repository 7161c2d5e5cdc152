/* cmd_quantize.c - `kvwise quantize` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_quantize(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise quantize: not implemented yet\n");
    return 2;
}
