/* serve_notify.h - systemd's readiness protocol for `kvwise serve` under a
 * Type=notify unit (docs/SERVICE.md): one datagram to the unix socket named
 * by $NOTIFY_SOCKET ("READY=1", "RELOADING=1", "STOPPING=1", "STATUS=...").
 * Without $NOTIFY_SOCKET it does nothing, so the same binary runs anywhere. */
#ifndef KW_CLI_SERVE_NOTIFY_H
#define KW_CLI_SERVE_NOTIFY_H

/* Sends text (newline-separated KEY=VALUE assignments). 1 sent, 0 no socket, -1 failed. */
int serve_notify(const char *text);

#endif
