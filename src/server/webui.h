/* The built-in chat page (web/ in the source tree), compiled into the binary as byte arrays by
 * cmake/embed_files.cmake, so `gptoss serve` needs no files beside it and the page no CDN. */
#ifndef GPTOSS_SERVER_WEBUI_H
#define GPTOSS_SERVER_WEBUI_H

#include <stddef.h>

typedef struct {
    const char *path; /* the URL path it answers: "/" for the page, "/webui/…" for its parts */
    const unsigned char *data;
    size_t len;
} webui_asset;

/* Ends with an entry whose path is NULL. */
extern const webui_asset webui_assets[];

#endif
