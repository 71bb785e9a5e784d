/* safetensors reading: memory-mapped files, single or sharded through model.safetensors.index.json.
 *
 * Format: 8-byte little-endian u64 N, N bytes of JSON header mapping tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end)} (plus an optional "__metadata__" of strings),
 * then the data buffer; offsets are relative to the buffer's start. Everything in the header is
 * untrusted: the parser checks sizes, offsets, overlaps and dtype/shape arithmetic and reports the
 * first problem with the file (and tensor) named, never crashing.
 *
 * Like the reference implementation, a file is accepted only when its tensors tile the data buffer
 * exactly: no overlaps, no gaps, no trailing bytes. Tensor data is not guaranteed to be aligned to
 * its dtype's size (the format does not promise it), so readers of wide dtypes copy or use memcpy.
 */
#ifndef GPTOSS_MODEL_SAFETENSORS_H
#define GPTOSS_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum st_dtype {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_F8_E4M3,
    ST_F8_E5M2,
    ST_U16,
    ST_I16,
    ST_F16,
    ST_BF16,
    ST_U32,
    ST_I32,
    ST_F32,
    ST_U64,
    ST_I64,
    ST_F64,
    ST_DTYPE_COUNT
};

enum { ST_MAX_DIMS = 8 };

/* Header size limit: real headers are a few hundred KB; refuse absurd ones before allocating. */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)

typedef struct {
    char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets inside the data buffer */
    const void *data;    /* points into the file image (the mapping, or st_parse's buffer) */
    const char *file;    /* path of the file that holds it (owned by the st_file) */
} st_tensor;

/* One "__metadata__" entry. */
typedef struct {
    char *key, *value;
} st_meta;

/* One parsed file. Tensors are kept in data-offset order (the order they lie in the file). */
typedef struct st_file {
    char *path;
    void *map; /* whole file, read-only mapping (NULL when parsed from memory by st_parse) */
    size_t map_len;
    st_tensor *tensors;
    int n_tensors;
    st_meta *meta; /* the header's "__metadata__", in header order */
    int n_meta;
} st_file;

/* A checkpoint: one or more files, tensors looked up by name. */
typedef struct st_model {
    st_file *files;
    int n_files;
    int n_tensors;            /* over all files */
    const st_tensor **sorted; /* every tensor, sorted by name, for st_model_find (private) */
} st_model;

const char *st_dtype_name(enum st_dtype d);
/* Parses "BF16", "U8", ...; -1 if unknown. */
int st_dtype_parse(const char *s);
size_t st_dtype_size(enum st_dtype d);

/* Element count (product of the shape; 1 for a scalar) and byte size of a tensor. */
uint64_t st_tensor_numel(const st_tensor *t);
static inline uint64_t st_tensor_nbytes(const st_tensor *t) {
    return t->end - t->begin;
}

/* Parses a header from memory (the whole file image: 8-byte length + JSON + data), filling `out`
 * (tensors point into `buf`). `path` only names the file in messages. The fuzz target calls this.
 * Returns 0, or -1 with err_msg() naming the problem. On failure `out` holds nothing to free. */
int st_parse(const uint8_t *buf, size_t len, const char *path, st_file *out);

/* mmap + st_parse. */
int st_file_open(const char *path, st_file *out);
/* Frees everything st_parse/st_file_open made and zeroes *f; safe on a zeroed or closed st_file. */
void st_file_close(st_file *f);
/* The "__metadata__" value for key, or NULL. */
const char *st_file_meta(const st_file *f, const char *key);

/* Opens a checkpoint folder: model.safetensors.index.json if present (every shard named in its
 * weight_map is opened, and every tensor must live in the shard the index says), else the single
 * *.safetensors file in the folder. Tensor names must be unique across shards. Shard names must be
 * plain file names beside the index (no '/', no ".."). `dir` may also name one .safetensors file.
 * Returns 0, or -1 with err_msg() set and nothing to free. */
int st_model_open(const char *dir, st_model *out);
/* Safe on a zeroed or closed st_model. */
void st_model_close(st_model *m);
/* Lookup by exact name (binary search); NULL if absent. */
const st_tensor *st_model_find(const st_model *m, const char *name);

#endif
