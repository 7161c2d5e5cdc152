/* cmd_perplexity.c - `kvwise perplexity` (placeholder until its issue lands). */
#include <stdio.h>
#include "cli.h"

int cmd_perplexity(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "kvwise perplexity: not implemented yet\n");
    return 2;
}
