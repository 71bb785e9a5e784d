/* safetensors reader. Every byte of a file is untrusted: sizes are checked before they are used,
 * arithmetic that could overflow is checked, and each failure names the file (and tensor). */
#define _GNU_SOURCE
#include "model/safetensors.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"

typedef unsigned long long ull; /* for printing uint64_t with %llu without inttypes noise */

/* ---- dtypes ---- */

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},           [ST_I8] = {"I8", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_U16] = {"U16", 2},
    [ST_I16] = {"I16", 2},         [ST_F16] = {"F16", 2},         [ST_BF16] = {"BF16", 2},
    [ST_U32] = {"U32", 4},         [ST_I32] = {"I32", 4},         [ST_F32] = {"F32", 4},
    [ST_U64] = {"U64", 8},         [ST_I64] = {"I64", 8},         [ST_F64] = {"F64", 8},
};

const char *st_dtype_name(enum st_dtype d) {
    return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].name : "?";
}

int st_dtype_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) return i;
    return -1;
}

size_t st_dtype_size(enum st_dtype d) {
    return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].size : 0;
}

uint64_t st_tensor_numel(const st_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i]; /* checked at parse time */
    return n;
}

/* ---- message helpers ---- */

/* Text from a file (tensor names, dtypes, parser excerpts) goes into messages through show(): at
 * most SHOW_MAX bytes, control bytes escaped, so a hostile name can neither break the one-line
 * message nor flood it. */
enum { SHOW_MAX = 120 };
typedef struct {
    char s[SHOW_MAX * 4 + 4];
} shown;

static const char *show(const char *in, shown *b) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, i = 0;
    for (; in[i] && i < SHOW_MAX; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c < 0x20 || c == 0x7f) {
            b->s[o++] = '\\';
            b->s[o++] = 'x';
            b->s[o++] = hex[c >> 4];
            b->s[o++] = hex[c & 15];
        } else {
            b->s[o++] = (char)c;
        }
    }
    if (in[i]) b->s[o++] = '.', b->s[o++] = '.', b->s[o++] = '.';
    b->s[o] = 0;
    return b->s;
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown JSON value";
}

static void format_shape(const st_tensor *t, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* calloc for counts that come from a file: failure is an input error, not a reason to abort. */
static void *calloc_counted(size_t n, size_t size, const char *path) {
    void *p = calloc(n ? n : 1, size);
    if (!p) err_set("%s: out of memory for %zu header entries", path, n);
    return p;
}

/* ---- one tensor entry ---- */

static int parse_dtype(const char *path, const char *tn, json_t *v, st_tensor *t) {
    json_t *dt = json_object_get(v, "dtype");
    if (!dt) return err_set("%s: tensor '%s': field 'dtype' is missing", path, tn);
    if (!json_is_string(dt))
        return err_set("%s: tensor '%s': field 'dtype' must be a string, found %s", path, tn,
                       json_kind(dt));
    int d = st_dtype_parse(json_string_value(dt));
    shown sd;
    if (d < 0)
        return err_set("%s: tensor '%s': unknown dtype \"%s\"", path, tn,
                       show(json_string_value(dt), &sd));
    t->dtype = (enum st_dtype)d;
    return 0;
}

/* Fills shape/ndim and the element count; a zero dimension makes the count 0 whatever the other
 * dimensions are, so it is checked before multiplying. */
static int parse_shape(const char *path, const char *tn, json_t *v, st_tensor *t, uint64_t *numel) {
    json_t *sh = json_object_get(v, "shape");
    if (!sh) return err_set("%s: tensor '%s': field 'shape' is missing", path, tn);
    if (!json_is_array(sh))
        return err_set("%s: tensor '%s': field 'shape' must be an array, found %s", path, tn,
                       json_kind(sh));
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS)
        return err_set("%s: tensor '%s': shape has %zu dimensions, at most %d are supported", path,
                       tn, nd, ST_MAX_DIMS);
    bool has_zero = false;
    for (size_t i = 0; i < nd; i++) {
        json_t *x = json_array_get(sh, i);
        if (!json_is_integer(x))
            return err_set("%s: tensor '%s': shape[%zu] must be an integer, found %s", path, tn, i,
                           json_kind(x));
        json_int_t d = json_integer_value(x);
        if (d < 0)
            return err_set("%s: tensor '%s': shape[%zu] = %lld is negative", path, tn, i,
                           (long long)d);
        t->shape[i] = d;
        has_zero |= d == 0;
    }
    t->ndim = (int)nd;
    uint64_t n = 1;
    for (size_t i = 0; i < nd && !has_zero; i++)
        if (__builtin_mul_overflow(n, (uint64_t)t->shape[i], &n))
            return err_set("%s: tensor '%s': shape's element count overflows 64 bits", path, tn);
    *numel = has_zero ? 0 : n;
    return 0;
}

static int get_offset(const char *path, const char *tn, json_t *off, size_t i, uint64_t *out) {
    json_t *x = json_array_get(off, i);
    if (!json_is_integer(x))
        return err_set("%s: tensor '%s': data_offsets[%zu] must be an integer, found %s", path, tn,
                       i, json_kind(x));
    if (json_integer_value(x) < 0)
        return err_set("%s: tensor '%s': data_offsets[%zu] = %lld is negative", path, tn, i,
                       (long long)json_integer_value(x));
    *out = (uint64_t)json_integer_value(x);
    return 0;
}

static int parse_offsets(const char *path, const char *tn, json_t *v, uint64_t data_len,
                         st_tensor *t) {
    json_t *off = json_object_get(v, "data_offsets");
    if (!off) return err_set("%s: tensor '%s': field 'data_offsets' is missing", path, tn);
    if (!json_is_array(off))
        return err_set("%s: tensor '%s': field 'data_offsets' must be an array, found %s", path, tn,
                       json_kind(off));
    if (json_array_size(off) != 2)
        return err_set("%s: tensor '%s': data_offsets must be [begin, end], found %zu items", path,
                       tn, json_array_size(off));
    if (get_offset(path, tn, off, 0, &t->begin) || get_offset(path, tn, off, 1, &t->end)) return -1;
    if (t->begin > t->end)
        return err_set("%s: tensor '%s': data_offsets [%llu, %llu) have begin > end", path, tn,
                       (ull)t->begin, (ull)t->end);
    if (t->end > data_len)
        return err_set("%s: tensor '%s': data_offsets end %llu is beyond the data buffer "
                       "(%llu bytes)",
                       path, tn, (ull)t->end, (ull)data_len);
    return 0;
}

/* Validates one header entry into *t; t->name is set only on success, so a failed entry owns
 * nothing. */
static int parse_tensor(const char *path, const char *name, json_t *v, uint64_t data_len,
                        st_tensor *t) {
    shown sn;
    const char *tn = show(name, &sn);
    if (!json_is_object(v))
        return err_set("%s: tensor '%s': entry must be an object, found %s", path, tn,
                       json_kind(v));
    uint64_t numel = 0, nbytes = 0;
    if (parse_dtype(path, tn, v, t) || parse_shape(path, tn, v, t, &numel) ||
        parse_offsets(path, tn, v, data_len, t))
        return -1;
    char sh[ST_MAX_DIMS * 24 + 4];
    format_shape(t, sh, sizeof sh);
    if (__builtin_mul_overflow(numel, (uint64_t)st_dtype_size(t->dtype), &nbytes))
        return err_set("%s: tensor '%s': shape %s of %s overflows 64 bits in bytes", path, tn, sh,
                       st_dtype_name(t->dtype));
    if (nbytes != t->end - t->begin)
        return err_set("%s: tensor '%s': shape %s of %s needs %llu bytes but data_offsets "
                       "[%llu, %llu) hold %llu",
                       path, tn, sh, st_dtype_name(t->dtype), (ull)nbytes, (ull)t->begin,
                       (ull)t->end, (ull)(t->end - t->begin));
    t->name = xstrdup(name);
    return 0;
}

static int parse_meta(const char *path, json_t *v, st_file *f) {
    if (!json_is_object(v))
        return err_set("%s: '__metadata__' must be an object of strings, found %s", path,
                       json_kind(v));
    f->meta = calloc_counted(json_object_size(v), sizeof *f->meta, path);
    if (!f->meta) return -1;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        shown sk;
        if (!json_is_string(x))
            return err_set("%s: '__metadata__' entry '%s' must be a string, found %s", path,
                           show(k, &sk), json_kind(x));
        f->meta[f->n_meta].key = xstrdup(k);
        f->meta[f->n_meta].value = xstrdup(json_string_value(x));
        f->n_meta++;
    }
    return 0;
}

/* ---- the whole data buffer ---- */

static int cmp_offsets(const void *pa, const void *pb) {
    const st_tensor *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name); /* ties only in broken files: keep their message stable */
}

/* The reference implementation (safetensors' own validate) sorts entries by offset and requires
 * each to start exactly where the previous one ended, and the last to end at the buffer's end:
 * overlaps, gaps and trailing bytes are all refused. We follow it, so every file we accept is one
 * every other reader accepts too, and no byte of the file hides data that no tensor accounts for.
 */
static int check_tiling(const char *path, st_tensor *ts, int n, uint64_t data_len) {
    qsort(ts, (size_t)n, sizeof *ts, cmp_offsets);
    uint64_t at = 0;
    const st_tensor *prev = NULL;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &ts[i];
        shown a, b;
        if (t->begin < at)
            return err_set("%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", path,
                           show(prev->name, &a), (ull)prev->begin, (ull)prev->end,
                           show(t->name, &b), (ull)t->begin, (ull)t->end);
        if (t->begin > at)
            return err_set("%s: data bytes [%llu, %llu) before tensor '%s' belong to no tensor "
                           "(tensors must cover the data buffer without gaps)",
                           path, (ull)at, (ull)t->begin, show(t->name, &a));
        at = t->end;
        prev = t;
    }
    if (at != data_len)
        return err_set("%s: data bytes [%llu, %llu) at the end of the buffer belong to no tensor "
                       "(tensors must cover the data buffer without gaps)",
                       path, (ull)at, (ull)data_len);
    return 0;
}

/* ---- a file image ---- */

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static json_t *load_header(const uint8_t *buf, size_t len, const char *path, uint64_t *hlen) {
    if (!path) path = "(memory)";
    if (len < 8)
        return err_set("%s: file is %zu bytes, too short for the 8-byte header length", path, len),
               NULL;
    uint64_t n = read_le64(buf);
    if (n > ST_MAX_HEADER_BYTES)
        return err_set("%s: header length %llu exceeds the limit of %u bytes", path, (ull)n,
                       ST_MAX_HEADER_BYTES),
               NULL;
    if (n > len - 8)
        return err_set("%s: header length %llu runs past the end of the file (%zu bytes follow "
                       "the length field)",
                       path, (ull)n, len - 8),
               NULL;
    /* Duplicate keys would otherwise silently keep the last one: a tensor could hide another. */
    json_error_t je;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    shown s;
    if (!root)
        return err_set("%s: header is not valid JSON: %s (line %d, column %d)", path,
                       show(je.text, &s), je.line, je.column),
               NULL;
    if (!json_is_object(root)) {
        err_set("%s: header must be a JSON object, found %s", path, json_kind(root));
        json_decref(root);
        return NULL;
    }
    *hlen = n;
    return root;
}

static int parse_entries(json_t *root, const uint8_t *data, uint64_t data_len, st_file *f) {
    size_t count = json_object_size(root);
    if (count > INT_MAX) return err_set("%s: too many header entries (%zu)", f->path, count);
    f->tensors = calloc_counted(count, sizeof *f->tensors, f->path);
    if (!f->tensors) return -1;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (parse_meta(f->path, v, f)) return -1;
            continue;
        }
        st_tensor *t = &f->tensors[f->n_tensors];
        if (parse_tensor(f->path, key, v, data_len, t)) return -1;
        f->n_tensors++;
    }
    if (check_tiling(f->path, f->tensors, f->n_tensors, data_len)) return -1;
    for (int i = 0; i < f->n_tensors; i++) {
        f->tensors[i].data = data + f->tensors[i].begin;
        f->tensors[i].file = f->path;
    }
    return 0;
}

int st_parse(const uint8_t *buf, size_t len, const char *path, st_file *out) {
    memset(out, 0, sizeof *out);
    uint64_t hlen = 0;
    json_t *root = load_header(buf, len, path, &hlen);
    if (!root) return -1;
    st_file f = {.path = xstrdup(path ? path : "(memory)")};
    const uint8_t *data = buf + 8 + hlen;
    int r = parse_entries(root, data, (uint64_t)(len - 8 - hlen), &f);
    json_decref(root);
    if (r) {
        st_file_close(&f);
        return -1;
    }
    *out = f;
    return 0;
}

int st_file_open(const char *path, st_file *out) {
    memset(out, 0, sizeof *out);
    int fd = file_open_regular(path);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        err_set("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return err_set("%s: file too large to map", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = NULL;
    if (len > 0) { /* mmap refuses length 0; an empty file gets st_parse's "too short" message */
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            err_set("%s: cannot map %zu bytes: %s", path, len, strerror(errno));
            close(fd);
            return -1;
        }
    }
    /* The mapping keeps the file alive. Like every mmap reader we trust the file not to be
     * truncated while mapped (that would fault on access); replacing it by rename is harmless. */
    close(fd);
    static const uint8_t empty[1];
    if (st_parse(map ? map : empty, len, path, out)) {
        if (map) munmap(map, len);
        return -1;
    }
    out->map = map;
    out->map_len = len;
    return 0;
}

void st_file_close(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->meta);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const char *st_file_meta(const st_file *f, const char *key) {
    for (int i = 0; f && key && i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* ---- the name index of a model ---- */

/* Sorted pointers and binary search rather than a hash: names come from untrusted files, and a
 * sorted array has no worst case an attacker can provoke (a hash of crafted colliding names does),
 * while ~1000 tensors cost about ten comparisons per lookup. */
static int cmp_tensor_names(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* Builds the index over every file's tensors; a name held twice is an error naming both files. */
static int index_names(st_model *m) {
    size_t total = 0;
    for (int i = 0; i < m->n_files; i++) total += (size_t)m->files[i].n_tensors;
    if (total > INT_MAX) return err_set("checkpoint has too many tensors (%zu)", total);
    m->sorted = xcalloc(total ? total : 1, sizeof *m->sorted);
    size_t n = 0;
    for (int i = 0; i < m->n_files; i++)
        for (int j = 0; j < m->files[i].n_tensors; j++) m->sorted[n++] = &m->files[i].tensors[j];
    qsort(m->sorted, n, sizeof *m->sorted, cmp_tensor_names);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(m->sorted[i - 1]->name, m->sorted[i]->name) != 0) continue;
        shown s;
        return err_set("tensor '%s' is in both %s and %s", show(m->sorted[i]->name, &s),
                       m->sorted[i - 1]->file, m->sorted[i]->file);
    }
    m->n_tensors = (int)total;
    return 0;
}

const st_tensor *st_model_find(const st_model *m, const char *name) {
    if (!m || !name || !m->sorted) return NULL;
    size_t lo = 0, hi = (size_t)m->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->sorted[mid]->name, name);
        if (c == 0) return m->sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void st_model_close(st_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) st_file_close(&m->files[i]);
    free(m->files);
    free(m->sorted);
    memset(m, 0, sizeof *m);
}

/* ---- opening a checkpoint ---- */

static int open_one(const char *path, st_model *m) {
    m->files = xcalloc(1, sizeof *m->files);
    if (st_file_open(path, &m->files[0])) return -1;
    m->n_files = 1;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* No index: the folder must hold exactly one *.safetensors file. */
static int open_lone_file(const char *dir, st_model *m) {
    DIR *d = opendir(dir);
    if (!d) return err_set("%s: cannot read folder: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!ends_with(e->d_name, ".safetensors")) continue;
        names = xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str); /* stable messages whatever readdir order */
    int r;
    if (n == 0) {
        r = err_set("%s: no *.safetensors file and no " INDEX_NAME, dir);
    } else if (n > 1) {
        shown a, b;
        r = err_set("%s: %zu *.safetensors files (%s, %s%s) but no " INDEX_NAME " to say which "
                    "tensors each holds",
                    dir, n, show(names[0], &a), show(names[1], &b), n > 2 ? ", ..." : "");
    } else {
        char *path = path_join(dir, names[0]);
        r = open_one(path, m);
        free(path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return r;
}

/* Shards must sit beside the index: a plain file name, so "../x", "/etc/x" and "a/../../x" are all
 * refused by one rule. Control characters are refused too (the name goes into messages). */
static int check_shard_name(const char *index, const char *tn, const char *shard) {
    shown s;
    if (!*shard) return err_set("%s: tensor '%s' maps to an empty shard name", index, tn);
    bool bad = strcmp(shard, ".") == 0 || strcmp(shard, "..") == 0;
    for (const char *p = shard; *p; p++) bad |= *p == '/' || *p == '\\' || (unsigned char)*p < 0x20;
    if (bad)
        return err_set("%s: tensor '%s' maps to shard '%s', which is not a plain file name beside "
                       "the index",
                       index, tn, show(shard, &s));
    return 0;
}

/* Opens every distinct shard the weight_map names, in order of first mention; shard_names[i]
 * (pointers into the index JSON) names m->files[i]. */
static int open_shards(const char *dir, const char *index, json_t *wm, st_model *m,
                       const char ***shard_names) {
    size_t cap = 0;
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        shown sn;
        const char *tn = show(name, &sn);
        if (!json_is_string(v))
            return err_set("%s: weight_map entry '%s' must be a string (a shard file name), "
                           "found %s",
                           index, tn, json_kind(v));
        const char *shard = json_string_value(v);
        int i = 0;
        while (i < m->n_files && strcmp((*shard_names)[i], shard) != 0) i++;
        if (i < m->n_files) continue;
        if (check_shard_name(index, tn, shard)) return -1;
        if ((size_t)m->n_files == cap) {
            cap = cap ? cap * 2 : 8;
            m->files = xrealloc(m->files, cap * sizeof *m->files);
            *shard_names = xrealloc(*shard_names, cap * sizeof **shard_names);
        }
        char *path = path_join(dir, shard);
        int r = st_file_open(path, &m->files[m->n_files]);
        free(path);
        if (r) return err_prefix("%s names shard '%s'", index, shard);
        (*shard_names)[m->n_files++] = shard;
    }
    return 0;
}

/* After the shards are open and indexed by name: the index and the shards must agree both ways. */
static int check_index(const char *index, json_t *wm, const st_model *m,
                       const char *const *shard_names) {
    shown a, b;
    for (int i = 0; i < m->n_files; i++) {
        const st_file *f = &m->files[i];
        for (int j = 0; j < f->n_tensors; j++) {
            json_t *where = json_object_get(wm, f->tensors[j].name);
            if (!where)
                return err_set("%s: tensor '%s' of shard %s is not in the index's weight_map",
                               index, show(f->tensors[j].name, &a), f->path);
            if (strcmp(json_string_value(where), shard_names[i]) != 0)
                return err_set("%s: tensor '%s' is in shard %s but the index says '%s'", index,
                               show(f->tensors[j].name, &a), f->path,
                               show(json_string_value(where), &b));
        }
    }
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!st_model_find(m, name))
            return err_set("%s: tensor '%s' is missing from shard '%s' where the index puts it",
                           index, show(name, &a), show(json_string_value(v), &b));
    }
    return 0;
}

static json_t *load_index(const char *index) {
    struct stat sb;
    if (stat(index, &sb) != 0) return err_set("%s: %s", index, strerror(errno)), NULL;
    if ((uint64_t)sb.st_size > ST_MAX_HEADER_BYTES)
        return err_set("%s: %llu bytes is more than an index can sensibly be (limit %u)", index,
                       (ull)sb.st_size, ST_MAX_HEADER_BYTES),
               NULL;
    json_error_t je;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
    shown s;
    if (!root)
        return err_set("%s: not valid JSON: %s (line %d, column %d)", index, show(je.text, &s),
                       je.line, je.column),
               NULL;
    json_t *wm = json_object_get(root, "weight_map"), *md = json_object_get(root, "metadata");
    const char *bad = NULL;
    if (!json_is_object(root))
        bad = "the index must be a JSON object";
    else if (!wm)
        bad = "field 'weight_map' is missing";
    else if (!json_is_object(wm))
        bad = "field 'weight_map' must be an object";
    else if (json_object_size(wm) == 0)
        bad = "field 'weight_map' names no tensors";
    else if (md && !json_is_object(md))
        bad = "field 'metadata' must be an object";
    if (bad) {
        err_set("%s: %s", index, bad);
        json_decref(root);
        return NULL;
    }
    return root;
}

static int open_indexed(const char *dir, const char *index, st_model *m) {
    json_t *root = load_index(index);
    if (!root) return -1;
    json_t *wm = json_object_get(root, "weight_map");
    const char **shard_names = NULL;
    int r = open_shards(dir, index, wm, m, &shard_names);
    if (!r) r = index_names(m);
    if (!r) r = check_index(index, wm, m, shard_names);
    free(shard_names);
    json_decref(root);
    return r;
}

int st_model_open(const char *dir, st_model *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(dir, &sb) != 0) return err_set("%s: %s", dir, strerror(errno));
    int r;
    if (S_ISREG(sb.st_mode)) {
        r = open_one(dir, out);
        if (!r) r = index_names(out);
    } else if (S_ISDIR(sb.st_mode)) {
        char *index = path_join(dir, INDEX_NAME);
        /* lstat: a dangling index symlink (a half-downloaded hub cache) must be reported as a
         * broken index, not silently ignored in favour of whatever .safetensors file lies in the
         * folder. */
        struct stat ib;
        if (lstat(index, &ib) == 0) {
            r = open_indexed(dir, index, out);
        } else {
            r = open_lone_file(dir, out);
            if (!r) r = index_names(out);
        }
        free(index);
    } else {
        r = err_set("%s: neither a folder nor a file", dir);
    }
    if (r) st_model_close(out);
    return r;
}
