/* cli.h - the subcommands of the kvwise binary. Each lives in cmd_<name>.c
 * and is a thin front-end over libkvwise. Exit codes: 0 ok, 1 runtime
 * failure, 2 bad usage / bad input. */
#ifndef KW_CLI_H
#define KW_CLI_H

int cmd_generate(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

#endif
