#include "base/files.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a plain file";
}

int file_open_regular(const char *path) {
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; the flag is
     * dropped again once fstat says the file is regular. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return err_set("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err_set("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set("%s: not a regular file (%s)", path, file_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

char *file_read_all(const char *path, size_t *len_out) {
    int fd = file_open_regular(path);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size >= SIZE_MAX) {
        close(fd);
        return err_set("%s: cannot tell size", path), NULL;
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = xmalloc(n + 1);
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return err_set("%s: short read (%zu of %zu bytes)%s%s", path, got, n, e ? ": " : "",
                           e ? strerror(e) : ""),
                   NULL;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    if (len_out) *len_out = n;
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
