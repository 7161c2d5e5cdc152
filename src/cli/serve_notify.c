/* serve_notify.c - the sd_notify datagram (serve_notify.h), written from the
 * protocol as systemd documents it: $NOTIFY_SOCKET is a filesystem path or,
 * with a leading '@', an abstract socket name; the message is one datagram
 * of newline-separated assignments. No libsystemd needed. */
#include "serve_notify.h"
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int serve_notify(const char *text) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0]) return 0;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path) return -1;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@') sa.sun_path[0] = 0;             /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    ssize_t w = sendto(fd, text, strlen(text), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    close(fd);
    return w == (ssize_t)strlen(text) ? 1 : -1;
}
