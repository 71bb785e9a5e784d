/* Messages and conversations → pieces (see harmony_render.h for the format). */
#include "harmony/harmony_render.h"
#include "base/error.h"
#include "harmony/harmony_special.h"
#include "harmony/harmony_strbuf.h"
#include "harmony/harmony_tools.h"

#include <string.h>

static const char CONSTRAIN[] = "<|constrain|>";

const char *harmony_role_name(harmony_role role) {
    switch (role) {
    case HARMONY_ROLE_SYSTEM:
        return "system";
    case HARMONY_ROLE_DEVELOPER:
        return "developer";
    case HARMONY_ROLE_USER:
        return "user";
    case HARMONY_ROLE_ASSISTANT:
        return "assistant";
    case HARMONY_ROLE_TOOL:
        return "tool";
    }
    return "?";
}

harmony_system harmony_system_defaults(void) {
    static const char *const channels[] = {"analysis", "commentary", "final"};
    return (harmony_system){
        .model_identity = "You are ChatGPT, a large language model trained by OpenAI.",
        .knowledge_cutoff = "2024-06",
        .effort = HARMONY_EFFORT_MEDIUM,
        .valid_channels = channels,
        .n_valid_channels = 3,
        .channel_required = true,
    };
}

static void add_text(harmony_pieces *out, const char *s) {
    harmony_pieces_add_text(out, s, strlen(s));
}

/* The system message's sections, separated by blank lines (spec §5.2). */
static int render_system(const harmony_system *sys, bool has_function_tools, hsb *out) {
    int n_sections = 0; /* every section after the first is preceded by a blank line */
#define SECTION_SEP() (n_sections++ ? hsb_add(out, "\n\n") : (void)0)
    hsb top = {0};
    bool any_top = false;
    const char *lines[3] = {sys->model_identity, NULL, NULL};
    char *cutoff =
        sys->knowledge_cutoff ? xasprintf("Knowledge cutoff: %s", sys->knowledge_cutoff) : NULL;
    char *date = sys->current_date ? xasprintf("Current date: %s", sys->current_date) : NULL;
    lines[1] = cutoff, lines[2] = date;
    for (int i = 0; i < 3; i++) {
        if (!lines[i]) continue;
        if (any_top) hsb_addc(&top, '\n');
        any_top = true;
        hsb_add(&top, lines[i]);
    }
    free(cutoff);
    free(date);

    if (any_top) {
        SECTION_SEP();
        hsb_add(out, hsb_str(&top));
    }
    hsb_free(&top);

    static const char *const effort_names[] = {NULL, "low", "medium", "high"};
    if (sys->effort != HARMONY_EFFORT_UNSET) {
        if ((unsigned)sys->effort > HARMONY_EFFORT_HIGH)
            return err_set("system content: reasoning effort %d out of range", (int)sys->effort);
        SECTION_SEP();
        hsb_printf(out, "Reasoning: %s", effort_names[sys->effort]);
    }

    size_t n_ns = sys->n_tools + (sys->browser_tool ? 1 : 0) + (sys->python_tool ? 1 : 0);
    if (n_ns) {
        harmony_builtin browser = {0}, python = {0};
        const harmony_namespace **ns = xmalloc(n_ns * sizeof *ns);
        size_t k = 0;
        if (sys->browser_tool) {
            if (harmony_builtin_browser(&browser) != 0) {
                free(ns);
                return -1;
            }
            ns[k++] = &browser.ns;
        }
        if (sys->python_tool) {
            harmony_builtin_python(&python);
            ns[k++] = &python.ns;
        }
        for (size_t i = 0; i < sys->n_tools; i++) {
            if (!sys->tools[i].name) {
                harmony_builtin_free(&browser);
                free(ns);
                return err_set("system content: tools[%zu].name is missing", i);
            }
            ns[k++] = &sys->tools[i];
        }
        SECTION_SEP();
        harmony_tools_section(out, ns, n_ns);
        harmony_builtin_free(&browser);
        harmony_builtin_free(&python);
        free(ns);
    }

    if (sys->n_valid_channels) {
        SECTION_SEP();
        hsb_add(out, "# Valid channels: ");
        for (size_t i = 0; i < sys->n_valid_channels; i++) {
            if (!sys->valid_channels[i])
                return err_set("system content: valid_channels[%zu] is NULL", i);
            hsb_printf(out, "%s%s", i ? ", " : "", sys->valid_channels[i]);
        }
        hsb_addc(out, '.');
        if (sys->channel_required) hsb_add(out, " Channel must be included for every message.");
        if (has_function_tools)
            hsb_add(out, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    }
#undef SECTION_SEP
    return 0;
}

static int check_tools(const harmony_tool *tools, size_t n, const char *where) {
    for (size_t i = 0; i < n; i++)
        if (!tools[i].name || !tools[i].name[0])
            return err_set("%s: functions[%zu].name is missing", where, i);
    return 0;
}

/* "# Instructions" + text, then the functions namespace (spec §5.3). */
static int render_developer(const harmony_developer *dev, hsb *out) {
    if (dev->instructions) hsb_printf(out, "# Instructions\n\n%s", dev->instructions);
    if (dev->n_functions) {
        if (check_tools(dev->functions, dev->n_functions, "developer content") != 0) return -1;
        harmony_namespace fns = {"functions", NULL, dev->functions, dev->n_functions};
        const harmony_namespace *ns = &fns;
        if (out->len) hsb_add(out, "\n\n");
        harmony_tools_section(out, &ns, 1);
    }
    return 0;
}

/* The header between <|start|> and <|message|>. */
static int render_header(const harmony_message *m, harmony_pieces *out) {
    if (m->role == HARMONY_ROLE_TOOL) {
        /* A tool's output is authored by the tool: its name stands where the role would. */
        if (!m->name || !m->name[0]) return err_set("tool message: author name is missing");
        add_text(out, m->name);
    } else {
        if ((unsigned)m->role > HARMONY_ROLE_TOOL)
            return err_set("role %d out of range", (int)m->role);
        add_text(out, harmony_role_name(m->role));
        if (m->name) {
            char *s = xasprintf(":%s", m->name);
            add_text(out, s);
            free(s);
        }
    }
    if (m->recipient && strcmp(m->recipient, "all") != 0) {
        char *s = xasprintf(" to=%s", m->recipient);
        add_text(out, s);
        free(s);
    }
    if (m->channel) {
        harmony_pieces_add_special(out, HARMONY_TOK_CHANNEL);
        add_text(out, m->channel);
    }
    if (m->content_type) {
        /* "<|constrain|>json" in the data model is the special token, not its spelling as text. */
        if (strncmp(m->content_type, CONSTRAIN, sizeof CONSTRAIN - 1) == 0) {
            add_text(out, " ");
            harmony_pieces_add_special(out, HARMONY_TOK_CONSTRAIN);
            add_text(out, m->content_type + sizeof CONSTRAIN - 1);
        } else {
            char *s = xasprintf(" %s", m->content_type);
            add_text(out, s);
            free(s);
        }
    }
    return 0;
}

int harmony_render_message(const harmony_message *m, bool has_function_tools, harmony_pieces *out) {
    if (m->system && m->role != HARMONY_ROLE_SYSTEM)
        return err_set("%s message: system content is only allowed in system messages",
                       harmony_role_name(m->role));
    if (m->developer && m->role != HARMONY_ROLE_DEVELOPER)
        return err_set("%s message: developer content is only allowed in developer messages",
                       harmony_role_name(m->role));
    harmony_pieces_add_special(out, HARMONY_TOK_START);
    if (render_header(m, out) != 0) return -1;
    harmony_pieces_add_special(out, HARMONY_TOK_MESSAGE);

    /* The reference renders each content item as its own text run, in this order. */
    if (m->text) add_text(out, m->text);
    hsb body = {0};
    int rc = 0;
    if (m->system) rc = render_system(m->system, has_function_tools, &body);
    if (rc == 0 && body.len) harmony_pieces_add_text(out, body.s, body.len);
    hsb_clear(&body);
    if (rc == 0 && m->developer) rc = render_developer(m->developer, &body);
    if (rc == 0 && body.len) harmony_pieces_add_text(out, body.s, body.len);
    hsb_free(&body);
    if (rc != 0) return -1;

    /* An assistant message with a recipient is a tool call: it ends with <|call|>, which is also
     * where the model stopped sampling. Everything else ends with <|end|>. */
    bool is_call = m->role == HARMONY_ROLE_ASSISTANT && m->recipient;
    harmony_pieces_add_special(out, is_call ? HARMONY_TOK_CALL : HARMONY_TOK_END);
    return 0;
}

static bool channel_is(const harmony_message *m, const char *channel) {
    return m->channel && strcmp(m->channel, channel) == 0;
}

int harmony_render_conversation(const harmony_conversation *conv, bool for_completion,
                                bool auto_drop_analysis, harmony_pieces *out) {
    const harmony_message *msgs = conv->messages;
    size_t n = conv->n_messages;

    bool has_function_tools = false;
    for (size_t i = 0; i < n; i++)
        if (msgs[i].developer && msgs[i].developer->n_functions) has_function_tools = true;

    /* Chain-of-thought hygiene, exactly as the reference does it: only when the conversation's last
     * assistant message is a final answer, and then only the analysis before the first final. */
    bool drop = false;
    size_t first_final = n;
    if (auto_drop_analysis) {
        for (size_t i = n; i-- > 0;) {
            if (msgs[i].role == HARMONY_ROLE_ASSISTANT) {
                drop = channel_is(&msgs[i], "final");
                break;
            }
        }
        for (size_t i = 0; i < n && first_final == n; i++)
            if (channel_is(&msgs[i], "final")) first_final = i;
    }

    for (size_t i = 0; i < n; i++) {
        if (drop && i < first_final && channel_is(&msgs[i], "analysis")) continue;
        if (harmony_render_message(&msgs[i], has_function_tools, out) != 0)
            return err_prefix("harmony: messages[%zu]", i);
    }
    if (for_completion) {
        harmony_pieces_add_special(out, HARMONY_TOK_START);
        add_text(out, "assistant");
    }
    return 0;
}
