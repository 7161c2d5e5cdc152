/* main.c - `kvwise <command> ...`: dispatches to the subcommands (cli.h). */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "kvwise/common.h"

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } kw_command;

static const kw_command commands[] = {
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with a memory wall"},
    {"generate", cmd_generate, "generate text from a prompt (streams only the new text)"},
    {"plan", cmd_plan, "memory budget, KV bytes/token, cache caps and decode ceiling"},
    {"info", cmd_info, "architecture, shapes, tensor types, tokenizer of a GGUF file"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"logits", cmd_logits, "write the raw logits of a prompt (float32 LE)"},
    {"perplexity", cmd_perplexity, "perplexity over a text file"},
    {"bench", cmd_bench, "prefill/decode speed vs the memory-bandwidth ceiling"},
    {"mkmodel", cmd_mkmodel, "write a random-weight GGUF model of a named shape"},
    {"quantize", cmd_quantize, "convert a GGUF model's weights to another type"},
};

static void usage(FILE *f) {
    fprintf(f, "kvwise %s - a local LLM inference server that stays inside its memory\n\n"
               "usage: kvwise <command> [options]   (kvwise <command> --help for details)\n\n"
               "commands:\n", KW_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    if (!strcmp(argv[1], "--version")) { printf("kvwise %s\n", KW_VERSION); return 0; }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kvwise: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
