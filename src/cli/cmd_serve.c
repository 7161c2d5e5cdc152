/* cmd_serve.c - `kvwise serve` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_serve(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise serve: not implemented yet\n");
    return 2;
}
