/* Replays the committed fuzz corpus (tests/fuzz/corpus_safetensors) through st_parse under the
 * ordinary compiler, so every build (and the ASan build) re-checks the inputs the fuzzer once found
 * interesting: each must parse or fail with a one-line message, and an accepted file must satisfy
 * the fuzz target's invariants (it is included here and called as is; it aborts on a violation). */
#define _GNU_SOURCE
#include "fuzz/fuzz_safetensors.c"

#include "base/files.h"
#include "base/xalloc.h"
#include "check.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

static const char *current; /* the file being replayed, for the abort handler */
static int n_accepted;

static void on_abort(int sig) {
    static const char msg[] = "test_fuzz_corpus: fuzz invariant violated by ";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    if (current) ignored = write(2, current, strlen(current));
    ignored = write(2, "\n", 1);
    (void)ignored;
    signal(sig, SIG_DFL);
    raise(sig);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay(const char *path) {
    size_t len;
    char *text = file_read_all(path, &len);
    CHECK(text != NULL, "cannot read %s: %s", path, err_msg());
    if (!text) return;
    /* An exact-size copy, so that reading one byte past the input is an ASan error. */
    uint8_t *buf = xmalloc(len);
    memcpy(buf, text, len);
    free(text);

    st_file f;
    err_clear();
    int r = st_parse(buf, len, path, &f);
    CHECK(r == 0 || r == -1, "%s: st_parse returned %d", path, r);
    if (r == 0)
        st_file_close(&f);
    else
        CHECK(err_msg()[0] != 0, "%s: failed without a message", path);
    current = path;
    LLVMFuzzerTestOneInput(buf, len);
    current = NULL;
    free(buf);
}

int main(void) {
    signal(SIGABRT, on_abort);
    const char *dir = GPTOSS_SOURCE_DIR "/tests/fuzz/corpus_safetensors";
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    if (!d) return check_report("test_fuzz_corpus");
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = path_join(dir, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    CHECK(n >= 10, "only %zu corpus files in %s", n, dir);
    for (size_t i = 0; i < n; i++) {
        replay(names[i]);
        free(names[i]);
    }
    free(names);
    fprintf(stderr,
            "test_fuzz_corpus: replayed %zu files; %d accepted as they are, %ld by the fuzz "
            "target (either way)\n",
            n, n_accepted, fuzz_accepted);
    CHECK(fuzz_accepted > 0,
          "no corpus file is a valid checkpoint: the corpus lost its valid seeds");
    return check_report("test_fuzz_corpus");
}
