/* gptoss bench-tokenizer: single-threaded encoding speed of the tokenizer, in MB/s of input text.
 *
 * On files: each file is encoded once to warm up, then --repeat times; the best and the median run
 * are reported. With --pathological: generated inputs that defeat the pre-tokeniser's usual short
 * pieces (one megabyte of one letter is a single piece), at growing sizes, to show the time stays
 * linear. The generators are mirrored exactly by tests/node/bench_tiktoken.js, which measures
 * tiktoken the same way. */
#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "tokenizer/bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char USAGE[] =
    "usage: gptoss bench-tokenizer [--model DIR | --tokenizer FILE] [--repeat N] [--pathological]\n"
    "                              [FILE...]\n"
    "Measures single-threaded encode_ordinary speed on each FILE (MB/s, best and median of N "
    "runs)\n"
    "and, with --pathological, on generated worst cases (a single piece of up to 1 MB).\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times n runs of encoding text; prints one line. */
static void measure(const tokenizer *t, const char *name, const char *text, size_t len,
                    int repeat) {
    ivec ids = {0};
    tokenizer_encode_ordinary(t, text, len, &ids); /* warm-up: caches, page faults, JIT */
    size_t ntok = ids.len;
    double *sec = xmalloc((size_t)repeat * sizeof *sec);
    for (int r = 0; r < repeat; r++) {
        ids.len = 0;
        double t0 = now_s();
        tokenizer_encode_ordinary(t, text, len, &ids);
        sec[r] = now_s() - t0;
    }
    qsort(sec, (size_t)repeat, sizeof *sec, cmp_double);
    double mb = (double)len / 1e6;
    printf("%-34s %10zu bytes %9zu tokens  best %8.2f MB/s  median %8.2f MB/s  (%.4f s)\n", name,
           len, ntok, mb / sec[0], mb / sec[repeat / 2], sec[repeat / 2]);
    fflush(stdout);
    free(sec);
    ivec_free(&ids);
}

/* The generated worst cases. next_rand is a 31-bit LCG the Node script reproduces bit for bit. */
static uint32_t next_rand(uint32_t *x) {
    *x = (*x * 1103515245u + 12345u) & 0x7FFFFFFFu;
    return *x >> 16;
}

static char *gen(int kind, size_t n, size_t *len) {
    static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = xmalloc(n + 1);
    uint32_t x = 12345;
    size_t i = 0;
    for (; i < n; i++) {
        switch (kind) {
        case 0:
            s[i] = 'a';
            break;
        case 1:
            s[i] = ' ';
            break;
        case 2:
            s[i] = (char)('a' + next_rand(&x) % 26);
            break;
        case 3:
            s[i] = B64[next_rand(&x) % 64];
            break;
        default: /* U+4E2D, three bytes: only whole characters */
            if (i + 3 > n) goto done;
            memcpy(s + i, "\xE4\xB8\xAD", 3);
            i += 2;
        }
    }
done:
    s[i] = 0;
    *len = i;
    return s;
}

static const char *const GEN_NAME[] = {"a*N", "space*N", "random a-z (no spaces)", "random base64",
                                       "U+4E2D*N"};

int cmd_bench_tokenizer(int argc, char **argv) {
    args_t a;
    args_init(&a, argc, argv);
    const char *model = NULL, *file = NULL, *v;
    long repeat = 5;
    int patho = 0, nfiles = 0;
    char **files = xcalloc((size_t)argc, sizeof *files);
    while (a.i < argc) {
        if (args_flag(&a, "--help") || args_flag(&a, "-h")) {
            fputs(USAGE, stdout);
            free(files);
            return 0;
        } else if (args_opt(&a, "--model", &model)) {
            if (!model) return free(files), args_fail(&a);
        } else if (args_opt(&a, "--tokenizer", &file)) {
            if (!file) return free(files), args_fail(&a);
        } else if (args_opt(&a, "--repeat", &v)) {
            if (args_int("--repeat", v, 1, 1000, &repeat)) return free(files), args_fail(&a);
        } else if (args_flag(&a, "--pathological")) {
            patho = 1;
        } else if (argv[a.i][0] != '-') {
            files[nfiles++] = argv[a.i++];
        } else {
            fprintf(stderr, "gptoss bench-tokenizer: unknown option '%s'\n%s", argv[a.i], USAGE);
            free(files);
            return 2;
        }
    }
    if (!nfiles && !patho) {
        fprintf(stderr, "gptoss bench-tokenizer: give a FILE or --pathological\n%s", USAGE);
        free(files);
        return 2;
    }
    double t0 = now_s();
    tokenizer *t = file ? tokenizer_load(file) : tokenizer_load_for_model(model);
    if (!t) {
        fprintf(stderr, "gptoss bench-tokenizer: %s\n", err_msg());
        free(files);
        return 1;
    }
    printf("tokenizer loaded in %.3f s; %ld timed runs each\n", now_s() - t0, repeat);
    int rc = 0;
    for (int f = 0; f < nfiles; f++) {
        size_t len;
        char *text = file_read_all(files[f], &len);
        if (!text) {
            fprintf(stderr, "gptoss bench-tokenizer: %s\n", err_msg());
            rc = 1;
            continue;
        }
        const char *base = strrchr(files[f], '/');
        measure(t, base ? base + 1 : files[f], text, len, (int)repeat);
        free(text);
    }
    for (int k = 0; patho && k < 5; k++) {
        for (size_t n = 1 << 12; n <= 1 << 20; n <<= 2) {
            size_t len;
            char *text = gen(k, n, &len);
            char name[64];
            snprintf(name, sizeof name, "%s N=%zu", GEN_NAME[k], n);
            measure(t, name, text, len, (int)repeat);
            free(text);
        }
    }
    tokenizer_free(t);
    free(files);
    return rc;
}
