/* The structured-output state machine of a sequence (constraint.h). */
#include "engine/constraint.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *head;
    int n_head;
    constraint_body body;
    grammar *g;
    int32_t close;
} cmsg;

struct engine_constraint {
    atomic_int refs;
    grammar *root; /* root shape */
    cmsg *msgs;    /* messages shape */
    int n_msgs, cap_msgs;
    int32_t cont;
    int32_t *restart;
    int n_restart;
    int budget; /* < 0: none */
};

typedef enum { ST_HEAD, ST_BODY, ST_RESTART, ST_DONE } st_kind;

struct constraint_state {
    engine_constraint *c;
    const grammar_vocab *v;
    size_t words;
    st_kind st;
    int pos;    /* HEAD / RESTART: tokens of the header or restart read */
    bool *cand; /* HEAD: [n_msgs] headers still consistent with what was read */
    int msg;    /* BODY: which message (-1: the root grammar) */
    grammar_matcher *m;
    int reasoning; /* reasoning tokens so far */
};

engine_constraint *constraint_new_root(grammar *g) {
    engine_constraint *c = xcalloc(1, sizeof *c);
    atomic_init(&c->refs, 1);
    c->root = g;
    c->budget = -1;
    return c;
}

engine_constraint *constraint_new_messages(int32_t cont, const int32_t *restart, int n_restart) {
    engine_constraint *c = xcalloc(1, sizeof *c);
    atomic_init(&c->refs, 1);
    c->cont = cont;
    c->budget = -1;
    c->restart = xmalloc((size_t)(n_restart > 0 ? n_restart : 1) * sizeof *c->restart);
    if (n_restart > 0) memcpy(c->restart, restart, (size_t)n_restart * sizeof *restart);
    c->n_restart = n_restart;
    return c;
}

int constraint_add_message(engine_constraint *c, const int32_t *head, int n_head,
                           constraint_body body, grammar *g, int32_t close) {
    if (c->n_msgs >= CONSTRAINT_MAX_MESSAGES || n_head < 1 || n_head > CONSTRAINT_MAX_HEAD) {
        grammar_free(g);
        return err_set("structured output: too many messages or a header of %d tokens", n_head);
    }
    if (c->n_msgs == c->cap_msgs) {
        c->cap_msgs = c->cap_msgs ? 2 * c->cap_msgs : 4;
        c->msgs = xrealloc(c->msgs, (size_t)c->cap_msgs * sizeof *c->msgs);
    }
    cmsg *m = &c->msgs[c->n_msgs++];
    m->head = xmalloc((size_t)n_head * sizeof *m->head);
    memcpy(m->head, head, (size_t)n_head * sizeof *head);
    m->n_head = n_head;
    m->body = body;
    m->g = body == CONSTRAINT_GRAMMAR ? g : NULL;
    if (body != CONSTRAINT_GRAMMAR) grammar_free(g);
    m->close = close;
    return 0;
}

void constraint_set_reasoning_budget(engine_constraint *c, int budget) {
    c->budget = budget;
}

engine_constraint *constraint_ref(engine_constraint *c) {
    if (c) atomic_fetch_add(&c->refs, 1);
    return c;
}

void constraint_unref(engine_constraint *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    grammar_free(c->root);
    for (int i = 0; i < c->n_msgs; i++) free(c->msgs[i].head), grammar_free(c->msgs[i].g);
    free(c->msgs), free(c->restart), free(c);
}

/* ---- per sequence ---- */

static bool budget_spent(const constraint_state *s) {
    return s->c->budget >= 0 && s->reasoning >= s->c->budget;
}

/* A header is offered unless it opens reasoning and the budget is spent. */
static bool offered(const constraint_state *s, int i) {
    return !(s->c->msgs[i].body == CONSTRAINT_REASONING && budget_spent(s));
}

static void enter_head(constraint_state *s) {
    s->st = ST_HEAD;
    s->pos = 0;
    bool any = false;
    for (int i = 0; i < s->c->n_msgs; i++) any |= (s->cand[i] = offered(s, i));
    if (!any) s->st = ST_DONE;
}

static void leave_body(constraint_state *s) {
    grammar_matcher_free(s->m);
    s->m = NULL;
}

constraint_state *constraint_state_new(engine_constraint *c, const grammar_vocab *v) {
    constraint_state *s = xcalloc(1, sizeof *s);
    s->c = constraint_ref(c);
    s->v = v;
    s->words = grammar_mask_words(v);
    s->msg = -1;
    if (c->root) {
        s->st = ST_BODY;
        s->m = grammar_matcher_new(c->root, v);
    } else {
        s->cand = xcalloc((size_t)(c->n_msgs ? c->n_msgs : 1), sizeof *s->cand);
        enter_head(s);
    }
    return s;
}

void constraint_state_free(constraint_state *s) {
    if (!s) return;
    grammar_matcher_free(s->m);
    constraint_unref(s->c);
    free(s->cand);
    free(s);
}

static void set_bit(uint32_t *mask, size_t words, int32_t t) {
    if (t >= 0 && (size_t)t / 32 < words) mask[t / 32] |= 1u << (t % 32);
}

static void only(constraint_state *s, uint32_t *mask, int32_t t) {
    memset(mask, 0, s->words * sizeof *mask);
    set_bit(mask, s->words, t);
}

bool constraint_fill_mask(constraint_state *s, uint32_t *mask, const int32_t *stop_ids,
                          int n_stop) {
    const engine_constraint *c = s->c;
    switch (s->st) {
    case ST_DONE:
        return false;
    case ST_RESTART:
        only(s, mask, c->restart[s->pos]);
        return true;
    case ST_HEAD:
        memset(mask, 0, s->words * sizeof *mask);
        for (int i = 0; i < c->n_msgs; i++)
            if (s->cand[i]) set_bit(mask, s->words, c->msgs[i].head[s->pos]);
        return true;
    case ST_BODY:
        break;
    }
    if (s->msg >= 0 && c->msgs[s->msg].body != CONSTRAINT_GRAMMAR) {
        if (c->msgs[s->msg].body == CONSTRAINT_REASONING && budget_spent(s)) {
            only(s, mask, c->msgs[s->msg].close);
            return true;
        }
        return false;
    }
    /* A grammar body: its mask, plus the closing tokens once it may end. */
    const bool root = s->msg < 0;
    const int32_t close = root ? -1 : c->msgs[s->msg].close;
    if (grammar_matcher_is_terminated(s->m)) {
        if (root) { /* the engine ends it on the token that completed it; a stop token anyway */
            memset(mask, 0, s->words * sizeof *mask);
            for (int i = 0; i < n_stop; i++) set_bit(mask, s->words, stop_ids[i]);
        } else {
            only(s, mask, close);
        }
        return true;
    }
    grammar_matcher_fill_mask(s->m, mask);
    if (grammar_matcher_can_end(s->m)) {
        if (root)
            for (int i = 0; i < n_stop; i++) set_bit(mask, s->words, stop_ids[i]);
        else
            set_bit(mask, s->words, close);
    }
    bool any = false;
    for (size_t w = 0; w < s->words && !any; w++) any = mask[w] != 0;
    if (!any && !root) set_bit(mask, s->words, close); /* never an empty mask */
    return true;
}

static int broken(constraint_state *s, int32_t tok, const char *where) {
    leave_body(s);
    s->st = ST_DONE;
    return err_set("structured output: token %d breaks the constraint in %s", (int)tok, where);
}

int constraint_advance(constraint_state *s, int32_t tok) {
    const engine_constraint *c = s->c;
    switch (s->st) {
    case ST_DONE:
        return 0;
    case ST_RESTART:
        if (tok != c->restart[s->pos]) return broken(s, tok, "a message start");
        if (++s->pos == c->n_restart) enter_head(s);
        return 0;
    case ST_HEAD: {
        bool any = false;
        int full = -1;
        for (int i = 0; i < c->n_msgs; i++) {
            if (!s->cand[i]) continue;
            s->cand[i] = c->msgs[i].head[s->pos] == tok;
            if (s->cand[i]) {
                any = true;
                if (c->msgs[i].n_head == s->pos + 1 && full < 0) full = i;
            }
        }
        if (!any) return broken(s, tok, "a message header");
        s->pos++;
        if (full >= 0) {
            s->st = ST_BODY;
            s->msg = full;
            if (c->msgs[full].body == CONSTRAINT_GRAMMAR)
                s->m = grammar_matcher_new(c->msgs[full].g, s->v);
        }
        return 0;
    }
    case ST_BODY:
        break;
    }
    if (s->msg < 0) { /* root grammar */
        if (grammar_matcher_advance_token(s->m, tok) != 0) {
            /* A stop token allowed at the end: the engine stops on it. */
            if (grammar_matcher_can_end(s->m)) {
                leave_body(s);
                s->st = ST_DONE;
                return 0;
            }
            return broken(s, tok, "the output");
        }
        if (grammar_matcher_is_terminated(s->m)) {
            leave_body(s);
            s->st = ST_DONE;
            return 1;
        }
        return 0;
    }
    const cmsg *m = &c->msgs[s->msg];
    if (m->body != CONSTRAINT_GRAMMAR) {
        if (tok == m->close || tok == c->cont) {
            s->st = tok == c->cont && c->n_restart > 0 ? ST_RESTART : ST_DONE;
            s->pos = 0;
            return 0;
        }
        if (m->body == CONSTRAINT_REASONING) s->reasoning++;
        return 0;
    }
    if (tok == m->close) {
        leave_body(s);
        s->st = tok == c->cont && c->n_restart > 0 ? ST_RESTART : ST_DONE;
        s->pos = 0;
        return 0;
    }
    if (grammar_matcher_advance_token(s->m, tok) != 0) return broken(s, tok, "a message body");
    return 0;
}

bool constraint_needs_mask(const constraint_state *s) {
    switch (s->st) {
    case ST_DONE:
        return false;
    case ST_HEAD:
    case ST_RESTART:
        return true;
    case ST_BODY:
        break;
    }
    if (s->msg < 0) return true;
    const constraint_body b = s->c->msgs[s->msg].body;
    return b == CONSTRAINT_GRAMMAR || (b == CONSTRAINT_REASONING && budget_spent(s));
}

bool constraint_done(const constraint_state *s) {
    return s->st == ST_DONE;
}

int constraint_reasoning_used(const constraint_state *s) {
    return s->reasoning;
}
