/* ui.c - the memory page's files (ui.h): finding one by URL and its
 * Content-Type. The page is static (no data in it): it reads the same
 * endpoints a script would (/v1/memory, /v1/memory/history, /v1/requests,
 * /v1/config) with the API key the user gives it. */
#include "ui.h"
#include <string.h>

const kw_ui_asset *kw_ui_find(const char *url) {
    for (const kw_ui_asset *a = kw_ui_assets; a->path; a++)
        if (!strcmp(url, a->path)) return a;
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

const char *kw_ui_type(const kw_ui_asset *a) {
    if (ends_with(a->path, ".js")) return "text/javascript; charset=utf-8";
    if (ends_with(a->path, ".css")) return "text/css; charset=utf-8";
    return "text/html; charset=utf-8";
}
