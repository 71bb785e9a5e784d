/* libFuzzer target for the safetensors header parser: any byte string must give either a file whose
 * every invariant holds, or -1 with a one-line message; never a crash, UB or a leak (ASan + UBSan).
 * Built by tests/fuzz/CMakeLists.txt with -DGPTOSS_FUZZ=ON; run through scripts/fuzz.sh. The same
 * checks run on the committed corpus in ordinary ctest (tests/test_fuzz_corpus.c). */
#include "model/safetensors.h"

#include "base/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* An accepted file: tensors tile the data buffer in order, sizes agree with dtype and shape, and
 * every data byte is readable (ASan would catch a pointer outside the input). */
static void check_accepted(const st_file *f, const uint8_t *buf, size_t len) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    const uint8_t *end = buf + len,
                  *at = buf + 8 + hlen; /* the data buffer starts after the header */
    volatile uint8_t sink = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        const uint8_t *d = t->data;
        uint64_t n = st_tensor_nbytes(t);
        if (d != at || d < buf || n > (uint64_t)(end - d)) abort();
        if (st_tensor_numel(t) * st_dtype_size(t->dtype) != n) abort();
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || !t->name || t->file != f->path) abort();
        if (st_dtype_parse(st_dtype_name(t->dtype)) != (int)t->dtype) abort();
        if (n) sink ^= d[0] ^ d[n - 1];
        at = d + n;
    }
    if (at != end) abort(); /* the last tensor ends where the file ends */
    for (int i = 0; i < f->n_meta; i++)
        if (st_file_meta(f, f->meta[i].key) == NULL) abort();
    (void)sink;
}

/* Images accepted so far (the corpus replay test reports it). */
static long fuzz_accepted;

/* Parses one image and checks the outcome either way. */
static void parse_one(const uint8_t *buf, size_t len) {
    st_file f;
    err_clear();
    int r = st_parse(buf, len, "fuzz.safetensors", &f);
    if (r == 0) {
        check_accepted(&f, buf, len);
        fuzz_accepted++;
        st_file_close(&f);
        return;
    }
    const char *m = err_msg();
    if (r != -1 || !m[0] || strchr(m, '\n') || strncmp(m, "fuzz.safetensors", 16) != 0) abort();
    if (f.tensors || f.meta || f.path) abort(); /* a failure leaves nothing to free */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Each input is tried twice: as a file image as it is, and as header text (up to the first NUL
 * byte) followed by the data after that NUL, with the 8-byte length computed here. The second way
 * keeps mutations of the JSON from being wasted on a length prefix they made stale. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_one(data, size);

    const uint8_t *nul = size ? memchr(data, 0, size) : NULL;
    size_t hlen = nul ? (size_t)(nul - data) : size, dlen = nul ? size - hlen - 1 : 0;
    uint8_t *img = malloc(8 + hlen + dlen);
    if (!img) return 0;
    for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(img + 8, data, hlen);
    if (dlen) memcpy(img + 8 + hlen, nul + 1, dlen);
    parse_one(img, 8 + hlen + dlen);
    free(img);
    return 0;
}
