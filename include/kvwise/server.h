/* kvwise/server.h - the OpenAI-compatible HTTP server.
 *
 * libmicrohttpd (epoll, a small pool of internal threads) parses HTTP;
 * handlers check auth/CORS/limits, parse the JSON body (cJSON), render the
 * chat template, tokenize and submit to the scheduler (sched.h). Streaming
 * responses are SSE produced by callback responses: the connection is
 * suspended while it waits for tokens and resumed by the engine thread.
 * The server starts listening before the model is loaded (GET /health is
 * 503 "loading" until kw_server_set_engine). kw_server_wait() returns on
 * SIGTERM/SIGINT; kw_server_stop() then cancels in-flight requests (their
 * streams end cleanly), waits for connections to drain and closes. */
#ifndef KVWISE_SERVER_H
#define KVWISE_SERVER_H
#include "kvwise/common.h"
#include "kvwise/sched.h"

struct kw_ledger;

/* HTTP connections and their memory (docs/MEMORY.md, "HTTP connections").
 * libmicrohttpd gives each connection a pool of KW_SERVER_CONN_POOL_BYTES
 * for its read buffer, headers and response header (431/413 above it).
 * KW_SERVER_CONN_BYTES is what one open connection may hold: that pool +
 * MHD's connection struct + ours (struct conn) + allocator slack, measured
 * at 64.5 KiB RSS per keep-alive connection (the pool fully touched) and
 * rounded up to 68 KiB. Request bodies come on top: all bodies being read
 * or parsed share one allowance of --max-body bytes (a body that does not
 * fit beside the others gets 503). The ledger's "connections" line is
 * --max-connections x KW_SERVER_CONN_BYTES + --max-body, and the request
 * handling of every HTTP thread: --http-threads x --request-memory, what one
 * thread may hold while it parses a body, builds and renders the template
 * context and tokenizes (a thread budget, memory.h; more gets 413) (docs/MEMORY.md). */
#define KW_SERVER_CONN_POOL_BYTES (64u * 1024u)
#define KW_SERVER_CONN_BYTES (68ull * 1024ull)
/* Default --max-connections: every decode slot + a full default queue (8 +
 * 64) + pollers and idle keep-alive pools of a few clients, at 8.5 MiB. */
#define KW_SERVER_DEFAULT_MAX_CONNECTIONS 128
#define KW_SERVER_DEFAULT_MAX_BODY (16ull << 20)
/* Default --request-memory (per HTTP thread) and --http-threads. A prompt
 * that cannot fit the context is refused before it is tokenized or rendered
 * (prompt_bound.c), so what is left to handle is bounded by the context:
 * 16 MiB covers a 128k-token conversation's JSON tree, template context and
 * tokenizer tables (docs/MEMORY.md, "Request handling"). */
#define KW_SERVER_DEFAULT_REQUEST_MEMORY (16ull << 20)
#define KW_SERVER_DEFAULT_HTTP_THREADS 2
/* Places lent at once to new connections while the oldest idle or
 * incomplete ones, shut down to make room, are closing (the connections
 * line counts them: kw_plan_connections_bytes). */
#define KW_SERVER_SHED_MARGIN 8
/* After a 413, up to this many times --max-body more body bytes are read
 * and dropped before the connection closes, so a client still writing its
 * body reads the answer. */
#define KW_SERVER_DRAIN_FACTOR 4
/* A new connection's request headers must be complete within this (s). */
#define KW_SERVER_DEFAULT_HEADER_TIMEOUT 10
/* A request body must be complete within this of its headers (s). */
#define KW_SERVER_DEFAULT_BODY_TIMEOUT 60

typedef struct kw_server_opts {
    const char *host;             /* default "127.0.0.1" */
    int port;                     /* default 8080; 0 = any free port (see kw_server_port) */
    const char *api_key;          /* NULL = no auth */
    const char *allowed_origins;  /* comma-separated, "*" = any; NULL = no CORS headers */
    uint64_t max_body_bytes;      /* 413 above this; also what all buffered bodies share (503 above) */
    int timeout_s;                /* idle connection timeout */
    int header_timeout_s;         /* a new connection's headers complete within this (0 = default) */
    int body_timeout_s;           /* a body complete within this of its headers: else 408 (0 = default) */
    const char *allowed_hosts;    /* without api_key: Host names allowed besides IPs, localhost, host */
    int max_client_connections;   /* open connections per client address; 0 = unlimited */
    int max_connections;          /* open connections in all; more are closed at once (0 = default) */
    int http_threads;
    uint64_t request_memory_bytes;/* what one HTTP thread may hold handling a request (0 = default) */
    const char *chat_template;    /* --chat-template NAME|FILE or NULL */
    const char *model_alias;      /* id in /v1/models (default: the engine's) */
    const char *config_json;      /* GET /v1/config body (the effective settings) */
    struct kw_ledger *ledger;     /* the memory budget shown by /v1/memory and /metrics (or NULL) */
} kw_server_opts;

typedef struct kw_server kw_server;

kw_server *kw_server_start(const kw_server_opts *o, kw_err *err);
int kw_server_port(const kw_server *s);
/* Attaches the loaded engine and its scheduler: /health turns 200.
 * note (may be NULL) receives a startup note about the chat template. */
int kw_server_set_engine(kw_server *s, kw_engine *e, kw_sched *sched, char *note, size_t note_cap, kw_err *err);
/* Replaces the GET /v1/config body (the effective settings as JSON). */
void kw_server_set_config(kw_server *s, const char *json);
/* The chat template family in use ("chatml", ...) and where it came from. */
const char *kw_server_template_desc(const kw_server *s);
/* What SIGHUP does: kw_server_wait calls fn(ctx) on its own thread (the
 * caller's) for every SIGHUP, then waits on. Without it SIGHUP only logs. */
void kw_server_on_reload(kw_server *s, void (*fn)(void *ctx), void *ctx);
/* Blocks until SIGTERM or SIGINT (installs the handlers). SIGHUP runs the
 * reload hook, SIGUSR1 prints the memory table to stderr, SIGUSR2 is logged
 * and ignored: no signal but SIGTERM/SIGINT stops the server. */
void kw_server_wait(kw_server *s);
/* Stops accepting, cancels in-flight work through the scheduler (which it
 * stops and frees), waits for connections to drain, closes. */
void kw_server_stop(kw_server *s);

#endif
