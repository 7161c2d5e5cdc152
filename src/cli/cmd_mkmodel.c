/* cmd_mkmodel.c - `kvwise mkmodel` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_mkmodel(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise mkmodel: not implemented yet\n");
    return 2;
}
