#include "base/files.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *file_read_all(const char *path, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set("%s: %s", path, strerror(errno)), NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return err_set("%s: cannot seek", path), NULL;
    }
    long n = ftell(f);
    if (n < 0) {
        fclose(f);
        return err_set("%s: cannot tell size", path), NULL;
    }
    rewind(f);
    char *buf = xmalloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(buf);
        return err_set("%s: short read (%zu of %ld bytes)", path, got, n), NULL;
    }
    buf[n] = 0;
    if (len_out) *len_out = (size_t)n;
    return buf;
}

int file_write_all(const char *path, const void *data, size_t len) {
    char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        err_set("%s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    size_t put = fwrite(data, 1, len, f);
    int bad = put != len || fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        err_set("%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int dir_make_p(const char *path) {
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            err_set("%s: cannot create folder: %s", p, strerror(errno));
            free(p);
            return -1;
        }
        *s = '/';
    }
    int r = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        r = err_set("%s: cannot create folder: %s", p, strerror(errno));
    free(p);
    return r;
}

char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir);
    return xasprintf("%s%s%s", dir, (n && dir[n - 1] == '/') ? "" : "/", name);
}

char *cache_dir(void) {
    const char *e = getenv("GPTOSS_CACHE");
    if (e && *e) return xstrdup(e);
    e = getenv("XDG_CACHE_HOME");
    if (e && *e) return path_join(e, "gptoss");
    e = getenv("HOME");
    return xasprintf("%s/.cache/gptoss", (e && *e) ? e : "/tmp");
}
