#include "model/safetensors_write.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void st_writer_init(st_writer *w) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
}

int st_writer_add(st_writer *w, const char *name, enum st_dtype dtype, int ndim,
                  const int64_t *shape) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->entries = xrealloc(w->entries, (size_t)w->cap * sizeof *w->entries);
    }
    st_write_entry *e = &w->entries[w->n];
    memset(e, 0, sizeof *e);
    e->name = xstrdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    uint64_t bytes = st_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i], bytes *= (uint64_t)shape[i];
    e->begin = w->n ? w->entries[w->n - 1].end : 0;
    e->end = e->begin + bytes;
    return w->n++;
}

uint64_t st_writer_data_bytes(const st_writer *w) {
    return w->n ? w->entries[w->n - 1].end : 0;
}

static char *header_json(const st_writer *w) {
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    for (int i = 0; i < w->n; i++) {
        const st_write_entry *e = &w->entries[i];
        json_t *t = json_object(), *shape = json_array(), *off = json_array();
        json_object_set_new(t, "dtype", json_string(st_dtype_name(e->dtype)));
        for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
        json_object_set_new(t, "shape", shape);
        json_array_append_new(off, json_integer((json_int_t)e->begin));
        json_array_append_new(off, json_integer((json_int_t)e->end));
        json_object_set_new(t, "data_offsets", off);
        json_object_set_new(root, e->name, t);
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return s;
}

int st_writer_open(st_writer *w, const char *path) {
    char *hdr = header_json(w);
    size_t hlen = strlen(hdr);
    size_t padded =
        (hlen + 7) & ~(size_t)7; /* the data buffer starts 8-byte aligned, as torch writes it */
    w->data_start = 8 + padded;
    w->map_len = w->data_start + st_writer_data_bytes(w);
    w->path = xstrdup(path);
    w->fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (w->fd < 0) {
        free(hdr);
        return err_set("%s: cannot create: %s", path, strerror(errno));
    }
    /* Blocks are reserved now, not when the mapping is first written: on a full disk a sparse
     * file (ftruncate) would let mmap succeed and the process die of SIGBUS at the first store. */
    int fe = posix_fallocate(w->fd, 0, (off_t)w->map_len);
    if (fe != 0) {
        free(hdr);
        return err_set("%s: cannot reserve %zu bytes: %s", path, w->map_len, strerror(fe));
    }
    w->map = mmap(NULL, w->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd, 0);
    if (w->map == MAP_FAILED) {
        w->map = NULL;
        free(hdr);
        return err_set("%s: cannot map for writing: %s", path, strerror(errno));
    }
    uint64_t n = padded;
    for (int i = 0; i < 8; i++) w->map[i] = (uint8_t)(n >> (8 * i));
    memcpy(w->map + 8, hdr, hlen);
    memset(w->map + 8 + hlen, ' ', padded - hlen);
    free(hdr);
    return 0;
}

void *st_writer_tensor(st_writer *w, int index) {
    return w->map + w->data_start + w->entries[index].begin;
}

int st_writer_close(st_writer *w) {
    int rc = 0;
    if (w->map && munmap(w->map, w->map_len) != 0)
        rc = err_set("%s: unmap failed: %s", w->path, strerror(errno));
    w->map = NULL;
    if (w->fd >= 0 && close(w->fd) != 0 && rc == 0)
        rc = err_set("%s: close failed: %s", w->path, strerror(errno));
    w->fd = -1;
    return rc;
}

void st_writer_free(st_writer *w) {
    if (w->map || w->fd >= 0) st_writer_close(w);
    for (int i = 0; i < w->n; i++) free(w->entries[i].name);
    free(w->entries);
    free(w->path);
    st_writer_init(w);
}
