/* The safetensors reader: valid single and sharded checkpoints, and one hostile file per failure
 * kind, each of which must fail with a message naming the file and the problem. Files are composed
 * here byte by byte (length + header + data) in a temporary folder. */
#define _GNU_SOURCE
#include "model/safetensors.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"
#include "check.h"

#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Run with ST_SHOW=1 to print every failure message for review. */
static char *tmp_root;

/* Headers are written with ' for " to keep them readable. */
static char *dequote(const char *s) {
    char *o = xstrdup(s);
    for (char *p = o; *p; p++)
        if (*p == '\'') *p = '"';
    return o;
}

/* Writes raw bytes to dir/name and returns the path (heap). */
static char *put_raw(const char *dir, const char *name, const void *bytes, size_t n) {
    char *path = path_join(dir, name);
    if (file_write_all(path, bytes, n)) fprintf(stderr, "cannot write %s: %s\n", path, err_msg());
    return path;
}

/* Composes a safetensors image: 8-byte LE header length, the header (' → ", then `pad` spaces),
 * then `data_len` data bytes where byte i is (i * 7 + 1) & 0xff. */
static uint8_t *compose(const char *header, size_t pad, size_t data_len, size_t *len_out) {
    char *h = dequote(header);
    size_t hl = strlen(h) + pad, len = 8 + hl + data_len;
    uint8_t *buf = xmalloc(len);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, h, strlen(h));
    memset(buf + 8 + strlen(h), ' ', pad);
    for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (uint8_t)(i * 7 + 1);
    free(h);
    *len_out = len;
    return buf;
}

static char *put_st(const char *dir, const char *name, const char *header, size_t data_len) {
    size_t len;
    uint8_t *buf = compose(header, 0, data_len, &len);
    char *path = put_raw(dir, name, buf, len);
    free(buf);
    return path;
}

static char *new_dir(const char *name) {
    char *d = path_join(tmp_root, name);
    dir_make_p(d);
    return d;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(p);
}

/* ---- failure cases of one file ---- */

typedef struct {
    const char *header; /* ' for " */
    size_t data_len;
    const char *frag1, *frag2; /* fragments the message must hold (frag2 may be NULL) */
} bad_case;

static const bad_case bad_headers[] = {
    {"{'a':", 0, "not valid JSON", NULL},
    {"", 0, "not valid JSON", NULL},
    {"[1, 2]", 0, "must be a JSON object", "an array"},
    {"{'a': 5}", 0, "tensor 'a'", "entry must be an object, found an integer"},
    {"{'a': {'shape': [1], 'data_offsets': [0, 1]}}", 1, "tensor 'a'", "'dtype' is missing"},
    {"{'a': {'dtype': 3, 'shape': [1], 'data_offsets': [0, 1]}}", 1, "tensor 'a'",
     "'dtype' must be a string"},
    {"{'a': {'dtype': 'F4', 'shape': [1], 'data_offsets': [0, 1]}}", 1, "tensor 'a'",
     "unknown dtype \"F4\""},
    {"{'a': {'dtype': 'bf16', 'shape': [1], 'data_offsets': [0, 2]}}", 2, "tensor 'a'",
     "unknown dtype \"bf16\""},
    {"{'a': {'dtype': 'U8', 'data_offsets': [0, 1]}}", 1, "tensor 'a'", "'shape' is missing"},
    {"{'a': {'dtype': 'U8', 'shape': 1, 'data_offsets': [0, 1]}}", 1, "tensor 'a'",
     "'shape' must be an array"},
    {"{'a': {'dtype': 'U8', 'shape': [-1], 'data_offsets': [0, 1]}}", 1, "tensor 'a'",
     "shape[0] = -1 is negative"},
    {"{'a': {'dtype': 'U8', 'shape': [1, 2.0], 'data_offsets': [0, 2]}}", 2, "tensor 'a'",
     "shape[1] must be an integer, found a real number"},
    {"{'a': {'dtype': 'U8', 'shape': ['1'], 'data_offsets': [0, 1]}}", 1, "tensor 'a'",
     "shape[0] must be an integer, found a string"},
    {"{'a': {'dtype': 'U8', 'shape': [1,1,1,1,1,1,1,1,1], 'data_offsets': [0, 1]}}", 1,
     "tensor 'a'", "shape has 9 dimensions, at most 8"},
    {"{'a': {'dtype': 'U8', 'shape': [4294967296, 4294967296], 'data_offsets': [0, 1]}}", 1,
     "tensor 'a'", "element count overflows"},
    {"{'a': {'dtype': 'F64', 'shape': [2305843009213693952], 'data_offsets': [0, 1]}}", 1,
     "tensor 'a'", "overflows 64 bits in bytes"},
    {"{'a': {'dtype': 'U8', 'shape': [1]}}", 1, "tensor 'a'", "'data_offsets' is missing"},
    {"{'a': {'dtype': 'U8', 'shape': [1], 'data_offsets': {}}}", 1, "tensor 'a'",
     "'data_offsets' must be an array"},
    {"{'a': {'dtype': 'U8', 'shape': [1], 'data_offsets': [0, 1, 2]}}", 1, "tensor 'a'",
     "must be [begin, end], found 3 items"},
    {"{'a': {'dtype': 'U8', 'shape': [1], 'data_offsets': [0, null]}}", 1, "tensor 'a'",
     "data_offsets[1] must be an integer, found null"},
    {"{'a': {'dtype': 'U8', 'shape': [1], 'data_offsets': [-1, 0]}}", 1, "tensor 'a'",
     "data_offsets[0] = -1 is negative"},
    {"{'a': {'dtype': 'U8', 'shape': [0], 'data_offsets': [1, 0]}}", 1, "tensor 'a'",
     "begin > end"},
    {"{'a': {'dtype': 'U8', 'shape': [4], 'data_offsets': [0, 4]}}", 3, "tensor 'a'",
     "end 4 is beyond the data buffer (3 bytes)"},
    {"{'a': {'dtype': 'BF16', 'shape': [2, 3], 'data_offsets': [0, 10]}}", 10, "tensor 'a'",
     "shape [2, 3] of BF16 needs 12 bytes but data_offsets [0, 10) hold 10"},
    {"{'a': {'dtype': 'U8', 'shape': [4], 'data_offsets': [0, 4]},"
     " 'b': {'dtype': 'U8', 'shape': [4], 'data_offsets': [2, 6]}}",
     6, "tensors 'a' [0, 4) and 'b' [2, 6) overlap", NULL},
    {"{'a': {'dtype': 'U8', 'shape': [4], 'data_offsets': [0, 4]},"
     " 'z': {'dtype': 'U8', 'shape': [0], 'data_offsets': [2, 2]}}",
     4, "overlap", "'z'"},
    {"{'a': {'dtype': 'U8', 'shape': [4], 'data_offsets': [0, 4]},"
     " 'b': {'dtype': 'U8', 'shape': [4], 'data_offsets': [0, 4]}}",
     4, "overlap", NULL},
    {"{'a': {'dtype': 'U8', 'shape': [2], 'data_offsets': [0, 2]},"
     " 'b': {'dtype': 'U8', 'shape': [2], 'data_offsets': [4, 6]}}",
     6, "data bytes [2, 4) before tensor 'b' belong to no tensor", NULL},
    {"{'b': {'dtype': 'U8', 'shape': [2], 'data_offsets': [1, 3]}}", 3,
     "data bytes [0, 1) before tensor 'b'", NULL},
    {"{'a': {'dtype': 'U8', 'shape': [2], 'data_offsets': [0, 2]}}", 5,
     "data bytes [2, 5) at the end of the buffer belong to no tensor", NULL},
    {"{}", 1, "data bytes [0, 1) at the end", NULL},
    {"{'a': {'dtype': 'U8', 'shape': [1], 'data_offsets': [0, 1]},"
     " 'a': {'dtype': 'U8', 'shape': [1], 'data_offsets': [1, 2]}}",
     2, "not valid JSON", "duplicate"},
    {"{'__metadata__': ['x']}", 0, "'__metadata__' must be an object", NULL},
    {"{'__metadata__': {'format': 1}}", 0, "'__metadata__' entry 'format' must be a string", NULL},
    {"{'__metadata__': {'a': 'x', 'a': 'y'}}", 0, "duplicate", NULL},
    {"{'__metadata__': 'x'}", 0, "'__metadata__' must be an object", "a string"},
    /* A name with a newline must not split the message: it is shown escaped. */
    {"{'a\\nb': 5}", 0, "tensor 'a\\x0ab'", NULL},
    {"{'a': {'dtype': 'U8', 'shape': [99999999999999999999], 'data_offsets': [0, 1]}}", 1,
     "not valid JSON", NULL},
};

static void test_bad_headers(void) {
    char *dir = new_dir("bad");
    for (size_t i = 0; i < sizeof bad_headers / sizeof *bad_headers; i++) {
        const bad_case *c = &bad_headers[i];
        char name[64];
        snprintf(name, sizeof name, "case%02zu.safetensors", i);
        char *path = put_st(dir, name, c->header, c->data_len);
        st_file f;
        err_clear();
        int r = st_file_open(path, &f);
        CHECK(r == -1, "case %zu (%s) was accepted", i, c->header);
        if (getenv("ST_SHOW")) fprintf(stderr, "%s\n", err_msg());
        const char *m = err_msg();
        CHECK_MSG_HAS(m, path);
        CHECK_MSG_HAS(m, c->frag1);
        if (c->frag2) CHECK_MSG_HAS(m, c->frag2);
        CHECK(strchr(m, '\n') == NULL, "case %zu: message has a newline: %s", i, m);
        CHECK(f.tensors == NULL && f.path == NULL && f.map == NULL, "case %zu: out not empty", i);
        free(path);
    }
    free(dir);
}

/* Failures of the outer framing: the 8-byte length and the file itself. */
static void test_bad_framing(void) {
    char *dir = new_dir("framing");
    st_file f;
    uint8_t bytes[64] = {0};

    char *p = put_raw(dir, "empty.safetensors", bytes, 0);
    CHECK(st_file_open(p, &f) == -1, "empty file accepted");
    CHECK_MSG_HAS(err_msg(), p);
    CHECK_MSG_HAS(err_msg(), "file is 0 bytes, too short");
    free(p);

    p = put_raw(dir, "short.safetensors", bytes, 5);
    CHECK(st_file_open(p, &f) == -1, "5-byte file accepted");
    CHECK_MSG_HAS(err_msg(), p);
    CHECK_MSG_HAS(err_msg(), "file is 5 bytes, too short");
    free(p);

    uint64_t huge = (uint64_t)ST_MAX_HEADER_BYTES + 1;
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(huge >> (8 * i));
    p = put_raw(dir, "huge.safetensors", bytes, 16);
    CHECK(st_file_open(p, &f) == -1, "absurd header length accepted");
    CHECK_MSG_HAS(err_msg(), p);
    CHECK_MSG_HAS(err_msg(), "exceeds the limit");
    free(p);

    memset(bytes, 0xff, 8); /* 2^64 - 1: must not wrap around in 8 + N */
    p = put_raw(dir, "max.safetensors", bytes, 16);
    CHECK(st_file_open(p, &f) == -1, "2^64-1 header length accepted");
    CHECK_MSG_HAS(err_msg(), "exceeds the limit");
    free(p);

    memset(bytes, 0, sizeof bytes);
    bytes[0] = 100; /* 100-byte header in a 40-byte file */
    memcpy(bytes + 8, "{}", 2);
    p = put_raw(dir, "past.safetensors", bytes, 40);
    CHECK(st_file_open(p, &f) == -1, "header past the end accepted");
    CHECK_MSG_HAS(err_msg(), p);
    CHECK_MSG_HAS(err_msg(), "header length 100 runs past the end of the file (32 bytes");
    free(p);

    p = path_join(dir, "absent.safetensors");
    CHECK(st_file_open(p, &f) == -1, "absent file opened");
    CHECK_MSG_HAS(err_msg(), p);
    CHECK_MSG_HAS(err_msg(), "cannot open");
    free(p);

    CHECK(st_file_open(dir, &f) == -1, "a folder opened as a file");
    CHECK_MSG_HAS(err_msg(), "not a regular file");
    free(dir);
}

/* ---- valid files ---- */

/* compose() fills data byte i with (i * 7 + 1): a tensor's bytes are that from its begin. */
static int data_ok(const st_tensor *t) {
    const uint8_t *d = t->data;
    for (uint64_t i = 0; i < st_tensor_nbytes(t); i++)
        if (d[i] != (uint8_t)((t->begin + i) * 7 + 1)) return 0;
    return 1;
}

static const char single_header[] =
    "{'__metadata__': {'format': 'pt', 'note': 'x'},"
    " 'w': {'dtype': 'BF16', 'shape': [2, 3], 'data_offsets': [4, 16]},"
    " 'b': {'dtype': 'U8', 'shape': [4], 'data_offsets': [0, 4]},"
    " 'empty': {'dtype': 'F32', 'shape': [0, 5], 'data_offsets': [16, 16]},"
    " 'scalar': {'dtype': 'F32', 'shape': [], 'data_offsets': [16, 20]},"
    " 'tail_empty': {'dtype': 'I64', 'shape': [3, 0], 'data_offsets': [20, 20]}}";

static void test_single_file(void) {
    char *dir = new_dir("single");
    size_t len;
    uint8_t *img = compose(single_header, 13, 20, &len); /* space-padded header */
    char *path = put_raw(dir, "model.safetensors", img, len);

    st_file f;
    CHECK(st_file_open(path, &f) == 0, "valid file refused: %s", err_msg());
    CHECK(f.n_tensors == 5, "n_tensors %d", f.n_tensors);
    CHECK(f.map != NULL && f.map_len == len, "map_len %zu vs %zu", f.map_len, len);
    CHECK(f.n_meta == 2, "n_meta %d", f.n_meta);
    const char *fmt = st_file_meta(&f, "format");
    CHECK(fmt && strcmp(fmt, "pt") == 0, "metadata format '%s'", fmt ? fmt : "(null)");
    CHECK(st_file_meta(&f, "absent") == NULL, "absent metadata found");
    /* Offset order: b [0,4), w [4,16), empty [16,16), scalar [16,20), tail_empty [20,20). */
    static const char *order[] = {"b", "w", "empty", "scalar", "tail_empty"};
    for (int i = 0; i < f.n_tensors && i < 5; i++)
        CHECK(strcmp(f.tensors[i].name, order[i]) == 0, "tensor %d is %s", i, f.tensors[i].name);
    st_file_close(&f);
    st_file_close(&f); /* closing twice is harmless */

    st_model m;
    CHECK(st_model_open(dir, &m) == 0, "folder with one file refused: %s", err_msg());
    uint64_t data_start = len - 20;
    const st_tensor *w = st_model_find(&m, "w");
    CHECK(w && w->dtype == ST_BF16 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3,
          "w wrong");
    if (w) {
        CHECK(st_tensor_numel(w) == 6 && st_tensor_nbytes(w) == 12, "w sizes");
        CHECK(data_ok(w), "w data wrong");
        CHECK(strcmp(w->file, path) == 0, "w file %s", w->file);
        CHECK((const uint8_t *)w->data == (const uint8_t *)m.files[0].map + data_start + 4,
              "w data pointer");
    }
    const st_tensor *b = st_model_find(&m, "b");
    CHECK(b && b->dtype == ST_U8 && data_ok(b), "b wrong");
    const st_tensor *e = st_model_find(&m, "empty");
    CHECK(e && st_tensor_numel(e) == 0 && st_tensor_nbytes(e) == 0, "empty wrong");
    const st_tensor *s = st_model_find(&m, "scalar");
    CHECK(s && s->ndim == 0 && st_tensor_numel(s) == 1 && data_ok(s), "scalar wrong");
    CHECK(st_model_find(&m, "tail_empty") != NULL, "tail_empty missing");
    CHECK(st_model_find(&m, "missing") == NULL, "missing tensor found");
    CHECK(st_model_find(&m, "") == NULL, "empty name found");
    CHECK(st_model_find(&m, "__metadata__") == NULL, "metadata found as a tensor");
    CHECK(m.n_tensors == 5, "model n_tensors %d", m.n_tensors);
    st_model_close(&m);
    st_model_close(&m);

    /* A path to the file itself works too. */
    CHECK(st_model_open(path, &m) == 0, "file path refused: %s", err_msg());
    CHECK(st_model_find(&m, "w") != NULL, "w missing via file path");
    st_model_close(&m);

    /* From memory: tensors point into the caller's buffer. */
    CHECK(st_parse(img, len, "mem", &f) == 0, "st_parse refused: %s", err_msg());
    CHECK(f.map == NULL && strcmp(f.path, "mem") == 0, "st_parse fields");
    CHECK((const uint8_t *)f.tensors[1].data == img + data_start + 4, "st_parse data pointer");
    st_file_close(&f);

    /* No tensors, no data: an empty checkpoint file is valid. */
    char *p2 = put_st(dir, "../empty_only.safetensors", "{}", 0);
    CHECK(st_file_open(p2, &f) == 0 && f.n_tensors == 0, "empty header refused: %s", err_msg());
    st_file_close(&f);
    free(p2);

    free(img);
    free(path);
    free(dir);
}

static void test_dtypes(void) {
    static const size_t sizes[ST_DTYPE_COUNT] = {
        [ST_BOOL] = 1, [ST_U8] = 1,  [ST_I8] = 1,  [ST_F8_E4M3] = 1, [ST_F8_E5M2] = 1,
        [ST_U16] = 2,  [ST_I16] = 2, [ST_F16] = 2, [ST_BF16] = 2,    [ST_U32] = 4,
        [ST_I32] = 4,  [ST_F32] = 4, [ST_U64] = 8, [ST_I64] = 8,     [ST_F64] = 8};
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
        const char *n = st_dtype_name((enum st_dtype)d);
        CHECK(n && strcmp(n, "?") != 0, "dtype %d has no name", d);
        CHECK(st_dtype_parse(n) == d, "dtype %s does not parse back", n);
        CHECK(st_dtype_size((enum st_dtype)d) == sizes[d], "dtype %s size %zu", n,
              st_dtype_size((enum st_dtype)d));
    }
    CHECK(strcmp(st_dtype_name(ST_BF16), "BF16") == 0, "BF16 name");
    CHECK(st_dtype_parse("F8_E4M3") == ST_F8_E4M3, "F8_E4M3");
    CHECK(st_dtype_parse("bf16") == -1 && st_dtype_parse("") == -1 && st_dtype_parse(NULL) == -1,
          "bad dtype names parse");
    CHECK(strcmp(st_dtype_name(ST_DTYPE_COUNT), "?") == 0, "out-of-range name");
    CHECK(st_dtype_size(ST_DTYPE_COUNT) == 0 && st_dtype_size((enum st_dtype) - 1) == 0,
          "out-of-range size");
}

/* ---- sharded checkpoints ---- */

static const char shard1[] = "{'x.a': {'dtype': 'U8', 'shape': [3], 'data_offsets': [0, 3]},"
                             " 'x.b': {'dtype': 'BF16', 'shape': [2], 'data_offsets': [3, 7]}}";
static const char shard2[] = "{'__metadata__': {'format': 'pt'},"
                             " 'y.c': {'dtype': 'F32', 'shape': [1, 2], 'data_offsets': [0, 8]}}";

static char *make_sharded(const char *name, const char *index) {
    char *dir = new_dir(name);
    free(put_st(dir, "s-1.safetensors", shard1, 7));
    free(put_st(dir, "s-2.safetensors", shard2, 8));
    char *idx = dequote(index);
    free(put_raw(dir, "model.safetensors.index.json", idx, strlen(idx)));
    free(idx);
    return dir;
}

static const char good_index[] =
    "{'metadata': {'total_size': 15}, 'weight_map': {'x.a': 's-1.safetensors',"
    " 'y.c': 's-2.safetensors', 'x.b': 's-1.safetensors'}}";

static void test_sharded(void) {
    char *dir = make_sharded("sharded", good_index);
    /* A stray file beside the index is not part of the checkpoint. */
    free(put_st(dir, "consolidated.safetensors", "{}", 0));
    st_model m;
    CHECK(st_model_open(dir, &m) == 0, "sharded checkpoint refused: %s", err_msg());
    CHECK(m.n_files == 2 && m.n_tensors == 3, "files %d tensors %d", m.n_files, m.n_tensors);
    const st_tensor *a = st_model_find(&m, "x.a"), *b = st_model_find(&m, "x.b"),
                    *c = st_model_find(&m, "y.c");
    CHECK(a && b && c, "a shard tensor is missing");
    if (a && b && c) {
        CHECK(strstr(a->file, "s-1.safetensors") && strstr(b->file, "s-1.safetensors") &&
                  strstr(c->file, "s-2.safetensors"),
              "tensor files %s %s %s", a->file, b->file, c->file);
        CHECK(data_ok(a) && data_ok(b) && data_ok(c), "shard tensor data wrong");
        CHECK(((const uint8_t *)b->data)[0] == 3 * 7 + 1, "x.b first byte");
        CHECK(c->ndim == 2 && c->shape[1] == 2 && c->dtype == ST_F32, "y.c shape");
    }
    st_model_close(&m);
    free(dir);
}

typedef struct {
    const char *index; /* ' for " */
    const char *frag1, *frag2;
} bad_index_case;

static const bad_index_case bad_indexes[] = {
    {"{'weight_map': ", "not valid JSON", NULL},
    {"[]", "the index must be a JSON object", NULL},
    {"{'metadata': {}}", "'weight_map' is missing", NULL},
    {"{'weight_map': []}", "'weight_map' must be an object", NULL},
    {"{'weight_map': {}}", "'weight_map' names no tensors", NULL},
    {"{'metadata': 3, 'weight_map': {'x.a': 's-1.safetensors'}}", "'metadata' must be an object",
     NULL},
    {"{'weight_map': {'x.a': 1}}", "weight_map entry 'x.a' must be a string", NULL},
    {"{'weight_map': {'x.a': 's-1.safetensors', 'x.a': 's-1.safetensors'}}", "duplicate", NULL},
    {"{'weight_map': {'x.a': '../s-1.safetensors'}}", "'../s-1.safetensors'",
     "not a plain file name"},
    {"{'weight_map': {'x.a': '/etc/passwd'}}", "'/etc/passwd'", "not a plain file name"},
    {"{'weight_map': {'x.a': '..'}}", "not a plain file name", NULL},
    {"{'weight_map': {'x.a': ''}}", "empty shard name", NULL},
    {"{'weight_map': {'x.a': 's-1.safetensors', 'x.b': 's-1.safetensors',"
     " 'y.c': 's-9.safetensors'}}",
     "names shard 's-9.safetensors'", "s-9.safetensors: cannot open"},
    /* x.b is in shard 1 but the index does not list it. */
    {"{'weight_map': {'x.a': 's-1.safetensors', 'y.c': 's-2.safetensors'}}",
     "tensor 'x.b' of shard", "is not in the index's weight_map"},
    /* The index names a tensor that its shard does not hold. */
    {"{'weight_map': {'x.a': 's-1.safetensors', 'x.b': 's-1.safetensors',"
     " 'y.c': 's-2.safetensors', 'y.d': 's-2.safetensors'}}",
     "tensor 'y.d' is missing from shard 's-2.safetensors'", NULL},
    /* The index puts a tensor in the wrong shard. */
    {"{'weight_map': {'x.a': 's-1.safetensors', 'x.b': 's-1.safetensors',"
     " 'y.c': 's-1.safetensors', 'z': 's-2.safetensors'}}",
     "tensor 'y.c' is in shard", "but the index says 's-1.safetensors'"},
};

static void test_bad_index(void) {
    for (size_t i = 0; i < sizeof bad_indexes / sizeof *bad_indexes; i++) {
        char name[32];
        snprintf(name, sizeof name, "index%02zu", i);
        char *dir = make_sharded(name, bad_indexes[i].index);
        char *index = path_join(dir, "model.safetensors.index.json");
        st_model m;
        err_clear();
        CHECK(st_model_open(dir, &m) == -1, "bad index %zu accepted", i);
        if (getenv("ST_SHOW")) fprintf(stderr, "%s\n", err_msg());
        CHECK_MSG_HAS(err_msg(), index);
        CHECK_MSG_HAS(err_msg(), bad_indexes[i].frag1);
        if (bad_indexes[i].frag2) CHECK_MSG_HAS(err_msg(), bad_indexes[i].frag2);
        CHECK(m.files == NULL && m.sorted == NULL, "index case %zu: out not empty", i);
        free(index);
        free(dir);
    }

    /* A broken shard: the message names the index and the shard's own problem. */
    char *dir = make_sharded("badshard", good_index);
    free(put_st(dir, "s-2.safetensors", "{'y.c': 7}", 0));
    st_model m;
    CHECK(st_model_open(dir, &m) == -1, "broken shard accepted");
    CHECK_MSG_HAS(err_msg(), "model.safetensors.index.json names shard 's-2.safetensors'");
    CHECK_MSG_HAS(err_msg(), "tensor 'y.c': entry must be an object");
    free(dir);

    /* The same name in two shards. */
    dir = make_sharded("dupshard", good_index);
    free(put_st(dir, "s-2.safetensors",
                "{'y.c': {'dtype': 'F32', 'shape': [1, 2], 'data_offsets': [0, 8]},"
                " 'x.a': {'dtype': 'U8', 'shape': [0], 'data_offsets': [8, 8]}}",
                8));
    CHECK(st_model_open(dir, &m) == -1, "duplicate across shards accepted");
    CHECK_MSG_HAS(err_msg(), "tensor 'x.a' is in both");
    CHECK_MSG_HAS(err_msg(), "s-1.safetensors");
    CHECK_MSG_HAS(err_msg(), "s-2.safetensors");
    free(dir);
}

static void test_bad_folders(void) {
    st_model m;
    char *dir = new_dir("nofiles");
    CHECK(st_model_open(dir, &m) == -1, "empty folder accepted");
    CHECK_MSG_HAS(err_msg(), dir);
    CHECK_MSG_HAS(err_msg(), "no *.safetensors file");
    free(dir);

    dir = new_dir("twofiles");
    free(put_st(dir, "a.safetensors", "{}", 0));
    free(put_st(dir, "b.safetensors", "{}", 0));
    CHECK(st_model_open(dir, &m) == -1, "two files without an index accepted");
    CHECK_MSG_HAS(err_msg(), dir);
    CHECK_MSG_HAS(err_msg(), "2 *.safetensors files (a.safetensors, b.safetensors)");
    free(dir);

    dir = path_join(tmp_root, "does-not-exist");
    CHECK(st_model_open(dir, &m) == -1, "missing folder accepted");
    CHECK_MSG_HAS(err_msg(), dir);
    free(dir);

    /* A dangling index symlink is a broken index, not a reason to fall back to a lone file. */
    dir = new_dir("dangling");
    free(put_st(dir, "model.safetensors", "{}", 0));
    char *idx = path_join(dir, "model.safetensors.index.json");
    CHECK(symlink("missing-blob", idx) == 0, "cannot make a symlink");
    CHECK(st_model_open(dir, &m) == -1, "dangling index ignored");
    CHECK_MSG_HAS(err_msg(), idx);
    CHECK_MSG_HAS(err_msg(), "No such file");
    free(idx);
    free(dir);

    dir = new_dir("onebad");
    char *p = put_st(dir, "model.safetensors", "{'a': {}}", 0);
    CHECK(st_model_open(dir, &m) == -1, "folder with a broken file accepted");
    CHECK_MSG_HAS(err_msg(), p);
    CHECK_MSG_HAS(err_msg(), "'dtype' is missing");
    free(p);
    free(dir);
}

/* Lookup over many tensors (real checkpoints hold ~400-1000): every name is found. */
static void test_many(void) {
    enum { N = 1500 };
    size_t cap = N * 96 + 16;
    char *h = xmalloc(cap);
    size_t o = (size_t)snprintf(h, cap, "{");
    for (int i = N - 1; i >= 0; i--) /* reverse order in the header: the parser must sort */
        o += (size_t)snprintf(h + o, cap - o,
                              "'model.layers.%d.w': {'dtype': 'BF16', 'shape': [1], "
                              "'data_offsets': [%d, %d]}%s",
                              i, 2 * i, 2 * i + 2, i ? ", " : "");
    snprintf(h + o, cap - o, "}");
    char *dir = new_dir("many");
    free(put_st(dir, "model.safetensors", h, 2 * N));
    free(h);
    st_model m;
    CHECK(st_model_open(dir, &m) == 0, "many tensors refused: %s", err_msg());
    int found = 0;
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.w", i);
        const st_tensor *t = st_model_find(&m, name);
        found += t && t->begin == (uint64_t)(2 * i) && strcmp(t->name, name) == 0;
    }
    CHECK(found == N, "found %d of %d", found, N);
    CHECK(st_model_find(&m, "model.layers.1500.w") == NULL, "phantom tensor found");
    st_model_close(&m);
    free(dir);
}

int main(void) {
    char tmpl[] = "/tmp/test_safetensors_XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    tmp_root = tmpl;
    test_dtypes();
    test_bad_framing();
    test_bad_headers();
    test_single_file();
    test_sharded();
    test_bad_index();
    test_bad_folders();
    test_many();
    nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_report("test_safetensors");
}
