/* safetensors writing, for synthetic checkpoints and test files.
 *
 * Declare every tensor first (st_writer_add), then st_writer_open lays out the offsets, writes the
 * header and maps the file's data region, so the caller can fill tensors in any order and from several
 * threads (st_writer_tensor gives each one's bytes); st_writer_close flushes and closes. The output is
 * a deterministic function of the declarations and the bytes written. */
#ifndef GPTOSS_MODEL_SAFETENSORS_WRITE_H
#define GPTOSS_MODEL_SAFETENSORS_WRITE_H

#include "model/safetensors.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;
} st_write_entry;

typedef struct {
    st_write_entry *entries;
    int n, cap;
    char *path;
    int fd;
    uint8_t *map;
    size_t map_len, data_start;
} st_writer;

void st_writer_init(st_writer *w);
/* Declares a tensor; returns its index. */
int st_writer_add(st_writer *w, const char *name, enum st_dtype dtype, int ndim,
                  const int64_t *shape);
/* Total bytes of the declared tensors' data. */
uint64_t st_writer_data_bytes(const st_writer *w);
int st_writer_open(st_writer *w, const char *path);
void *st_writer_tensor(st_writer *w, int index);
int st_writer_close(st_writer *w);
/* Frees the declarations (after close, or to abandon a writer that was never opened). */
void st_writer_free(st_writer *w);

#endif
