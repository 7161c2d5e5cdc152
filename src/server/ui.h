/* ui.h - the memory page's files (server-internal): index.html, app.css and
 * app.js from src/server/ui/, compiled in as bytes (cmake/embed_files.cmake
 * generates kw_ui_assets), and how they are served (ui.c). */
#ifndef KW_SERVER_UI_H
#define KW_SERVER_UI_H
#include <stdbool.h>
#include <stddef.h>

typedef struct kw_ui_asset {
    const char *path;           /* "/" for index.html, "/ui/NAME" for the others; NULL ends the table */
    const unsigned char *data;
    size_t len;
} kw_ui_asset;

extern const kw_ui_asset kw_ui_assets[];

/* The asset served at url, or NULL. */
const kw_ui_asset *kw_ui_find(const char *url);
/* Its Content-Type, from the name. */
const char *kw_ui_type(const kw_ui_asset *a);

#endif
