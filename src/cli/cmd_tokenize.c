/* gptoss tokenize / detokenize: the tokenizer from the command line, for people and for test
 * scripts (tests/test_tokenizer_reference.sh compares `tokenize` with tiktoken on a large corpus).
 */
#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "tokenizer/bpe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char TOKENIZE_USAGE[] =
    "usage: gptoss tokenize [--model DIR | --tokenizer FILE] [--ids | --pieces] [--specials] "
    "TEXT|-\n"
    "Prints the token ids of TEXT (or of standard input for '-'), comma-separated on one line;\n"
    "'-- TEXT' for a text that starts with '-'.\n"
    "  --model DIR       use DIR/tokenizer.json (default: the one setup.sh puts in the cache)\n"
    "  --tokenizer FILE  use this tokenizer.json\n"
    "  --pieces          print one token per line: id, then its bytes as a quoted C string\n"
    "  --specials        recognise special token names (<|start|> ...); otherwise they are plain "
    "text\n";

static const char DETOKENIZE_USAGE[] =
    "usage: gptoss detokenize [--model DIR | --tokenizer FILE] IDS|-\n"
    "Prints the exact bytes the ids spell. IDS is '1,2,3'; '-' reads ids separated by commas or "
    "white\n"
    "space from standard input.\n";

/* Reads all of a stream (standard input may be a pipe, so no seeking). */
static char *read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) buf = xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return err_set("reading standard input: %s", strerror(errno)), NULL;
    }
    buf = xrealloc(buf, n + 1);
    buf[n] = 0;
    *len = n;
    return buf;
}

typedef struct {
    const char *model, *file, *input;
    int pieces, specials;
} tok_opts;

/* Parses the options both commands share; returns 0, or an exit code (2 for bad usage, or 0 after
 * printing help) with *done set. */
static int parse(int argc, char **argv, const char *usage, bool for_tokenize, tok_opts *o,
                 int *done) {
    args_t a;
    args_init(&a, argc, argv);
    *done = 1;
    while (a.i < argc) {
        if (args_flag(&a, "--help") || args_flag(&a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (args_opt(&a, "--model", &o->model)) {
            if (!o->model) return args_fail(&a);
        } else if (args_opt(&a, "--tokenizer", &o->file)) {
            if (!o->file) return args_fail(&a);
        } else if (for_tokenize && args_flag(&a, "--ids")) {
            o->pieces = 0;
        } else if (for_tokenize && args_flag(&a, "--pieces")) {
            o->pieces = 1;
        } else if (for_tokenize && args_flag(&a, "--specials")) {
            o->specials = 1;
        } else if (!o->input && !strcmp(argv[a.i], "--") && a.i + 1 < argc) {
            o->input = argv[a.i + 1]; /* "--" ends the options: a text may start with '-' */
            a.i += 2;
        } else if (!o->input && (argv[a.i][0] != '-' || !strcmp(argv[a.i], "-"))) {
            o->input = argv[a.i++];
        } else {
            fprintf(stderr, "gptoss %s: unexpected argument '%s'\n%s", argv[0], argv[a.i], usage);
            return 2;
        }
    }
    if (!o->input || (o->model && o->file)) {
        fprintf(stderr, "gptoss %s: %s\n%s", argv[0],
                o->input ? "give --model or --tokenizer, not both" : "nothing to do", usage);
        return 2;
    }
    *done = 0;
    return 0;
}

static tokenizer *open_tokenizer(const tok_opts *o) {
    return o->file ? tokenizer_load(o->file) : tokenizer_load_for_model(o->model);
}

/* Writes bytes as a C string literal body: printable ASCII as is, the rest escaped. */
static void put_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c >= 0x20 && c < 0x7F)
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

int cmd_tokenize(int argc, char **argv) {
    tok_opts o = {0};
    int done, rc = parse(argc, argv, TOKENIZE_USAGE, true, &o, &done);
    if (done) return rc;
    size_t len = 0;
    char *owned = NULL;
    const char *text = o.input;
    if (!strcmp(o.input, "-")) {
        if (!(owned = read_stream(stdin, &len))) goto fail;
        text = owned;
    } else {
        len = strlen(text);
    }
    tokenizer *t = open_tokenizer(&o);
    if (!t) goto fail;
    ivec ids = {0};
    rc = o.specials ? tokenizer_encode_with_specials(t, text, len, &ids)
                    : tokenizer_encode_ordinary(t, text, len, &ids);
    if (rc == 0) {
        for (size_t i = 0; i < ids.len; i++) {
            if (o.pieces) {
                size_t n;
                const char *b = tokenizer_token_bytes(t, ids.v[i], &n);
                printf("%d\t\"", ids.v[i]);
                put_escaped(b, n);
                fputs("\"\n", stdout);
            } else {
                printf(i ? ",%d" : "%d", ids.v[i]);
            }
        }
        if (!o.pieces) putchar('\n');
    }
    ivec_free(&ids);
    tokenizer_free(t);
    free(owned);
    if (rc == 0 && fflush(stdout) == 0) return 0;
    if (rc == 0) err_set("writing standard output: %s", strerror(errno));
    fprintf(stderr, "gptoss tokenize: %s\n", err_msg());
    return 1;
fail:
    free(owned);
    fprintf(stderr, "gptoss tokenize: %s\n", err_msg());
    return 1;
}

/* Parses ids separated by commas and/or white space. */
static int parse_ids(const char *s, ivec *out) {
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) return 0;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX)
            return err_set("'%.20s' is not a token id (ids are non-negative integers)", p);
        ivec_push(out, (int32_t)v);
        p = end;
    }
}

int cmd_detokenize(int argc, char **argv) {
    tok_opts o = {0};
    int done, rc = parse(argc, argv, DETOKENIZE_USAGE, false, &o, &done);
    if (done) return rc;
    char *owned = NULL, *text = NULL;
    tokenizer *t = NULL;
    ivec ids = {0};
    size_t n = 0;
    rc = -1;
    const char *src = o.input;
    if (!strcmp(o.input, "-")) {
        size_t len;
        if (!(owned = read_stream(stdin, &len))) goto out;
        src = owned;
    }
    if (parse_ids(src, &ids) != 0 || !(t = open_tokenizer(&o))) goto out;
    if (tokenizer_decode(t, ids.v, ids.len, &text, &n) != 0) goto out;
    if (fwrite(text, 1, n, stdout) != n || fflush(stdout) != 0) {
        err_set("writing standard output: %s", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (rc != 0) fprintf(stderr, "gptoss detokenize: %s\n", err_msg());
    free(text);
    free(owned);
    ivec_free(&ids);
    tokenizer_free(t);
    return rc == 0 ? 0 : 1;
}
