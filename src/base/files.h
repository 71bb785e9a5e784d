/* Small file helpers: read a whole file, join paths, find the tokenizer cache. */
#ifndef GPTOSS_BASE_FILES_H
#define GPTOSS_BASE_FILES_H

#include <stddef.h>

/* Opens a regular file for reading (O_CLOEXEC); anything else — a directory, a FIFO (which would
 * block the open until a writer comes), a device like /dev/zero — is refused before a byte is read,
 * with an error naming the path and what it is. -1 + err_set() on failure. */
int file_open_regular(const char *path);
/* Reads a whole regular file into a NUL-terminated heap buffer; NULL + err_set() on failure. */
char *file_read_all(const char *path, size_t *len_out);
/* Writes a buffer to path (through a temporary name and rename, so readers never see half a file). */
int file_write_all(const char *path, const void *data, size_t len);
int file_exists(const char *path);
int dir_make_p(const char *path);
/* dir + "/" + name in a fresh heap string. */
char *path_join(const char *dir, const char *name);
/* The folder the setup script unpacks shared data into: $GPTOSS_CACHE, else $XDG_CACHE_HOME/gptoss,
 * else $HOME/.cache/gptoss. Heap string. */
char *cache_dir(void);

#endif
