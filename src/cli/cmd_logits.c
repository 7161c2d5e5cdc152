/* cmd_logits.c - `kvwise logits` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_logits(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise logits: not implemented yet\n");
    return 2;
}
