/* cmd_plan.c - `kvwise plan` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_plan(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise plan: not implemented yet\n");
    return 2;
}
