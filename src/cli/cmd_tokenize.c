/* cmd_tokenize.c - `kvwise tokenize` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise tokenize: not implemented yet\n");
    return 2;
}
