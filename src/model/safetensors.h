/* safetensors reading: memory-mapped files, single or sharded through model.safetensors.index.json.
 *
 * Format: 8-byte little-endian u64 N, N bytes of JSON header mapping tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end)} (plus an optional "__metadata__" of strings), then
 * the data buffer; offsets are relative to the buffer's start. Everything in the header is untrusted:
 * the parser checks sizes, offsets, overlaps and dtype/shape arithmetic and reports the first problem
 * with the file (and tensor) named, never crashing. */
#ifndef GPTOSS_MODEL_SAFETENSORS_H
#define GPTOSS_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E4M3, ST_F8_E5M2, ST_U16, ST_I16, ST_F16, ST_BF16,
    ST_U32, ST_I32, ST_F32, ST_U64, ST_I64, ST_F64,
    ST_DTYPE_COUNT
};

enum { ST_MAX_DIMS = 8 };

/* Header size limit: real headers are a few hundred KB; refuse anything absurd before allocating. */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)

typedef struct {
    char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets inside the data buffer */
    const void *data;    /* points into the mapping (NULL until bound to a mapped file) */
    const char *file;    /* path of the file that holds it (owned by the st_file) */
} st_tensor;

/* One parsed file. */
typedef struct st_file {
    char *path;
    void *map;        /* whole file, read-only mapping */
    size_t map_len;
    st_tensor *tensors;
    int n_tensors;
} st_file;

/* A checkpoint: one or more files, tensors looked up by name. */
typedef struct st_model {
    st_file *files;
    int n_files;
} st_model;

const char *st_dtype_name(enum st_dtype d);
/* Parses "BF16", "U8", ...; -1 if unknown. */
int st_dtype_parse(const char *s);
size_t st_dtype_size(enum st_dtype d);

/* Parses a header from memory (the whole file image: 8-byte length + JSON + data), filling `out`
 * (tensors point into `buf`). `path` only names the file in messages. The fuzz target calls this.
 * Returns 0, or -1 with err_msg() naming the problem. On failure `out` holds nothing to free. */
int st_parse(const uint8_t *buf, size_t len, const char *path, st_file *out);

/* mmap + st_parse. */
int st_file_open(const char *path, st_file *out);
void st_file_close(st_file *f);

/* Opens a checkpoint folder: model.safetensors.index.json if present (every shard named in its
 * weight_map is opened, and every tensor must live in the shard the index says), else the single
 * *.safetensors file in the folder. Tensor names must be unique across shards. */
int st_model_open(const char *dir, st_model *out);
void st_model_close(st_model *m);
const st_tensor *st_model_find(const st_model *m, const char *name);

#endif
