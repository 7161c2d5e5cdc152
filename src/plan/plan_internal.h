/* plan_internal.h - shared by the src/plan/ files: defaults and the two
 * figures that other modules own (KV bytes per token: kv.h; workspace:
 * model.h), reached through one name each so there is one source of truth. */
#ifndef KW_PLAN_INTERNAL_H
#define KW_PLAN_INTERNAL_H
#include "kvwise/plan.h"
#include "kvwise/kv.h"

#define KW_PLAN_DEFAULT_STEP 512
#define KW_PLAN_DEFAULT_BLOCK 32
#define KW_PLAN_DEFAULT_CTX 8192
#define KW_PLAN_MAX_CTX (1 << 24)
/* Fixed process overhead when nothing was measured: binary, libc,
 * libmicrohttpd, PCRE2, cJSON, thread stacks actually touched, HTTP
 * buffers. `kvwise plan` measures its own baseline instead (same binary). */
#define KW_PLAN_DEFAULT_OVERHEAD (48ULL << 20)
/* Most blocks a server's KV pool is given (its block ids are int32). */
#define KW_PLAN_SERVE_MAX_BLOCKS (1 << 24)
/* Added to the measured baseline for the HTTP server's threads and buffers (open
 * connections are their own ledger line: kw_plan_connections_bytes). */
#define KW_PLAN_SERVER_ALLOWANCE (16ULL << 20)
/* Tokenizer heap per vocab entry when the vocab itself is not at hand (HF
 * config): the string, its score/type, hash-table and trie slots. */
#define KW_PLAN_TOKENIZER_BYTES_PER_TOKEN 64

/* KV bytes per token: the pool's own figure (kv.h) */
#define plan_kv_bytes_per_token kw_kv_bytes_per_token
/* the forward pass's workspace: the same function sizes the real one (model.h) */
#define plan_ctx_workspace_bytes kw_ctx_workspace_bytes
const char *kw_plan_type_name(uint32_t type);
/* Bytes kw_matrix_pack() allocates for a rows x cols matrix of `type` on
 * this CPU's kernels (0: no packed form): kw_matrix_pack_bytes of the shape. */

#endif
