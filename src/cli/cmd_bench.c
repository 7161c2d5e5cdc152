/* cmd_bench.c - `kvwise bench` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_bench(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise bench: not implemented yet\n");
    return 2;
}
