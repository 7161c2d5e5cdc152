/* guard.h - what keeps one client from hurting the others before a request
 * is parsed (server-internal, guard.c):
 *
 *  - who may send a request: the Host a request names (DNS rebinding: when
 *    no API key is set, only IP addresses, localhost, *.localhost, the
 *    listen host and --allowed-hosts), the Origin of a browser's POST (its
 *    own origin or --allowed-origins), and the body's media type (JSON only:
 *    a browser page can send text/plain or a form without a CORS preflight,
 *    never application/json);
 *  - the connection table: every open connection with its state and since
 *    when, so that a connection whose request headers are not complete
 *    within the header deadline, or whose body is not complete within the
 *    body deadline, is shut down (a reaper thread), and a full table makes
 *    room by closing its oldest idle or incomplete connection instead of
 *    refusing the new one. A connection is shut down with shutdown(2) on its
 *    socket: libmicrohttpd then sees the end of the stream and closes it
 *    itself (its memory is released in its own thread). */
#ifndef KW_SERVER_GUARD_H
#define KW_SERVER_GUARD_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Without an API key: may a request with this Host header (NULL: none) be
 * served? listen_host is --host; allowed is --allowed-hosts (NULL: none):
 * comma-separated names, ".domain" for a domain and its subdomains, "*". */
bool kw_guard_host_ok(const char *host_header, const char *listen_host, const char *allowed);
/* May a POST carrying this Origin (NULL: none, not a browser's cross-site
 * request) be served? Yes without one, when it is the server's own origin
 * (its host:port equals the Host header) or when allowed_origins (NULL:
 * none, "*": any) lists it. */
bool kw_guard_origin_ok(const char *origin, const char *host_header, const char *allowed_origins);
/* Does allowed_origins (comma-separated, or "*") list origin (CORS)? */
bool kw_guard_origin_listed(const char *allowed_origins, const char *origin);
/* Is this Content-Type (NULL: none) JSON: application/json or
 * application/SOMETHING+json, any parameters, any case? */
bool kw_guard_is_json(const char *content_type);

/* ---- the connection table ---- */

typedef enum {
    KW_CONN_NEW = 0,    /* accepted, no complete request headers yet */
    KW_CONN_BODY,       /* headers complete, reading the body */
    KW_CONN_BUSY,       /* the request is being handled or answered */
    KW_CONN_IDLE,       /* keep-alive between requests */
} kw_conn_state;

typedef struct kw_conn_slot {
    int fd;             /* -1: free */
    kw_conn_state state;
    double since;       /* when it entered its state (monotonic s) */
    bool shed;          /* shut down by the table, closing */
} kw_conn_slot;

typedef struct kw_conntab {
    pthread_mutex_t mu;
    kw_conn_slot *slot;
    int cap;
    int n_shedding;                 /* shut down, not yet reported closed */
    double header_timeout, body_timeout;
    uint64_t n_shed_header, n_shed_body, n_shed_full;   /* why connections were shut down */
    pthread_t reaper;
    bool reaper_on, stop;
    pthread_cond_t cv;
} kw_conntab;

/* Room for cap connections; starts the reaper thread. -1 when out of memory. */
int kw_conntab_init(kw_conntab *t, int cap, double header_timeout, double body_timeout);
void kw_conntab_free(kw_conntab *t);
/* A connection came in while the table holds n_open: true when it may be
 * accepted (there is room, or the oldest idle or incomplete connection was
 * shut down to make some: at most KW_SERVER_SHED_MARGIN at a time). */
bool kw_conntab_make_room(kw_conntab *t, int n_open, int max_open);
/* A new connection on fd: its slot, or NULL when the table is full. */
kw_conn_slot *kw_conntab_add(kw_conntab *t, int fd);
void kw_conntab_set(kw_conntab *t, kw_conn_slot *c, kw_conn_state state);
/* Is c's body past the body deadline? */
bool kw_conntab_body_late(kw_conntab *t, const kw_conn_slot *c);
/* The connection on c closed: the slot is free again. */
void kw_conntab_remove(kw_conntab *t, kw_conn_slot *c);

#endif
