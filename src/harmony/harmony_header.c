/* Reading a message header: "assistant to=functions.f<|channel|>commentary <|constrain|>json".
 *
 * The reference's rules (spec §5.5): take the channel from after <|channel|> (up to whitespace or
 * '<') and cut it out; split the rest on whitespace, after making sure <|constrain|> starts a word
 * of its own; the first word is the role (unless the role is already known); of the words left, a
 * last word "to=X" is the recipient, a single word is the recipient, and otherwise the last is the
 * content type and the one before it the recipient (with or without "to=").
 *
 * Where the reference gives up, this salvages and sets `malformed`: an unknown first word is taken
 * as a tool's name (a tool result header "functions.f to=assistant"); "role:name" is split; a lone
 * "<|constrain|>json" is a content type, not a recipient; surplus words are dropped. */
#include "harmony/harmony_parse.h"
#include "harmony/harmony_utf8.h"

#include <stdlib.h>
#include <string.h>

static const char CHANNEL[] = "<|channel|>";
static const char CONSTRAIN[] = "<|constrain|>";
#define LIT_LEN(s) (sizeof(s) - 1)

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool starts_with(const char *s, size_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}

static const char *find(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0) return s + i;
    return NULL;
}

/* A header field: bytes [off, off+len) of the store, or absent (off == SIZE_MAX). */
typedef struct {
    size_t off;
} field;
static const field NONE = {SIZE_MAX};

static field store_str(hsb *store, const char *s, size_t n) {
    field f = {store->len};
    hsb_addn(store, s, n);
    hsb_addc(store, 0);
    return f;
}

static const char *field_ptr(const hsb *store, field f) {
    return f.off == SIZE_MAX ? NULL : store->s + f.off;
}

static bool parse_role_word(const char *w, size_t n, harmony_role *role, const char **name,
                            size_t *name_len) {
    static const harmony_role roles[] = {HARMONY_ROLE_SYSTEM, HARMONY_ROLE_DEVELOPER,
                                         HARMONY_ROLE_USER, HARMONY_ROLE_ASSISTANT,
                                         HARMONY_ROLE_TOOL};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        const char *r = harmony_role_name(roles[i]);
        size_t k = strlen(r);
        if (n < k || memcmp(w, r, k) != 0) continue;
        if (n == k) {
            *role = roles[i], *name = NULL, *name_len = 0;
            return true;
        }
        if (w[k] == ':') { /* "user:alice": a role with an author name */
            *role = roles[i], *name = w + k + 1, *name_len = n - k - 1;
            return true;
        }
    }
    return false;
}

static harmony_kind classify(harmony_header *h) {
    if (h->role == HARMONY_ROLE_TOOL) return HARMONY_KIND_TOOL_RESULT;
    if (h->role != HARMONY_ROLE_ASSISTANT) return HARMONY_KIND_OTHER;
    if (h->recipient) {
        const char *r = h->recipient;
        if (strncmp(r, "browser.", 8) == 0 || strcmp(r, "browser") == 0 ||
            strcmp(r, "python") == 0 || strncmp(r, "container.", 10) == 0)
            return HARMONY_KIND_BUILTIN_CALL;
        /* A call to a function: "functions.get_weather", or a bare name as models sometimes write.
         */
        h->function = strncmp(r, "functions.", 10) == 0 ? r + 10 : r;
        if (!h->function[0]) h->malformed = true;
        return HARMONY_KIND_TOOL_CALL;
    }
    if (!h->channel || strcmp(h->channel, "final") == 0) return HARMONY_KIND_FINAL;
    if (strcmp(h->channel, "analysis") == 0) return HARMONY_KIND_REASONING;
    if (strcmp(h->channel, "commentary") == 0) return HARMONY_KIND_PREAMBLE;
    return HARMONY_KIND_OTHER;
}

/* Cuts every "<|channel|>NAME" out of text (in place); the first NAME becomes the channel. */
static field take_channel(hsb *text, hsb *store, bool *malformed) {
    field channel = NONE;
    const char *at;
    while ((at = find(text->s, text->len, CHANNEL)) != NULL) {
        size_t start = (size_t)(at - text->s), i = start + LIT_LEN(CHANNEL);
        size_t v = i;
        while (i < text->len && !is_space(text->s[i]) && text->s[i] != '<') i++;
        if (channel.off == SIZE_MAX && i > v)
            channel = store_str(store, text->s + v, i - v);
        else
            *malformed = true; /* an empty channel name, or a second channel */
        memmove(text->s + start, text->s + i, text->len - i);
        text->len -= i - start;
        text->s[text->len] = 0;
    }
    return channel;
}

/* Words of s (split on ASCII whitespace), with "<|constrain|>" always starting a new word. */
typedef struct {
    const char *s;
    size_t n;
} word;

static size_t split_words(const char *s, size_t n, word *words, size_t cap) {
    size_t count = 0, i = 0;
    while (i < n) {
        while (i < n && is_space(s[i])) i++;
        if (i >= n) break;
        size_t b = i;
        i++;
        while (i < n && !is_space(s[i]) && !starts_with(s + i, n - i, CONSTRAIN)) i++;
        if (count < cap) words[count] = (word){s + b, i - b};
        count++;
    }
    return count;
}

void harmony_parse_header(const char *text, size_t len, bool role_known, harmony_role role,
                          hsb *store, harmony_header *hdr, hsb *salvage) {
    if (!text) text = "", len = 0; /* an empty header buffer may never have been allocated */
    memset(hdr, 0, sizeof *hdr);
    hsb_clear(store);
    hsb_addc(store, 0); /* offset 0 is never a field: keeps the buffer allocated */
    hsb work = {0};
    /* A salvaged header may stop inside a character that its content continues: keep that tail. */
    size_t used = harmony_utf8_clean(text, len, salvage == NULL, &work);
    hsb_addc(&work, 0); /* make sure work.s exists, then drop the NUL from the length */
    work.len--;

    bool malformed = false;
    field channel = take_channel(&work, store, &malformed);
    field author = NONE, recipient = NONE, ctype = NONE;

    size_t nw = split_words(work.s, work.len, NULL, 0);
    word *w = xmalloc((nw ? nw : 1) * sizeof *w);
    split_words(work.s, work.len, w, nw);
    size_t first = 0; /* index of the first word after the role */

    const char *name;
    size_t name_len;
    if (role_known) {
        if (nw && w[0].n == strlen(harmony_role_name(role)) &&
            memcmp(w[0].s, harmony_role_name(role), w[0].n) == 0)
            first = 1;
        hdr->role = role;
    } else if (nw && parse_role_word(w[0].s, w[0].n, &hdr->role, &name, &name_len)) {
        if (name) author = store_str(store, name, name_len);
        first = 1;
    } else if (nw && !salvage && !starts_with(w[0].s, w[0].n, "to=") &&
               !starts_with(w[0].s, w[0].n, CONSTRAIN)) {
        /* A tool's output names the tool where the role would be: "browser.search to=assistant". */
        hdr->role = HARMONY_ROLE_TOOL;
        author = store_str(store, w[0].s, w[0].n);
        first = 1;
    } else {
        hdr->role = HARMONY_ROLE_ASSISTANT; /* no role at all: the parser is reading model output */
        malformed = true;
    }

    if (salvage) {
        const char *rest = first < nw ? w[first].s : work.s + work.len;
        hsb_addn(salvage, rest, (size_t)(work.s + work.len - rest));
        hsb_addn(salvage, text + used, len - used);
    } else if (first < nw) {
        size_t last = nw - 1;
        word lw = w[last];
        if (starts_with(lw.s, lw.n, "to=")) {
            recipient = store_str(store, lw.s + 3, lw.n - 3);
        } else if (last == first) {
            if (starts_with(lw.s, lw.n, CONSTRAIN))
                ctype = store_str(store, lw.s, lw.n);
            else
                recipient = store_str(store, lw.s, lw.n);
        } else {
            ctype = store_str(store, lw.s, lw.n);
            word rw = w[--last];
            if (starts_with(rw.s, rw.n, "to=")) rw.s += 3, rw.n -= 3;
            recipient = store_str(store, rw.s, rw.n);
        }
        if (last > first) malformed = true; /* words between the role and the recipient */
    }
    free(w);
    hsb_free(&work);

    /* The store is complete: only now are its addresses stable. */
    hdr->author = field_ptr(store, author);
    hdr->channel = field_ptr(store, channel);
    hdr->recipient = field_ptr(store, recipient);
    hdr->content_type = field_ptr(store, ctype);
    if (hdr->recipient && !hdr->recipient[0]) hdr->recipient = NULL, malformed = true;
    hdr->malformed = malformed;
    hdr->kind = classify(hdr);
}
