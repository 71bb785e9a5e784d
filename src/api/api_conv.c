/* A conversation built from a chat or responses request, rendered with harmony.
 *
 * The prompt is what vLLM builds for gpt-oss (spec serving-landscape §3a):
 *   1. a system message: harmony's defaults (identity, knowledge cutoff, "# Valid channels"), the
 *      current date, and "Reasoning: <effort>" (medium unless the request says otherwise);
 *   2. a developer message when there is anything to put in it: "# Instructions" (the request's
 *      system/developer text), the function tools as a TypeScript namespace, and a
 *      "# Response Formats" section for a json_schema response format (harmony's documented way to
 *      ask for structured output, docs/format.md; it guides the model but does not constrain it);
 *   3. the conversation's messages; then <|start|>assistant for the model to continue.
 *
 * Chain of thought: analysis messages before the conversation's last final answer are dropped
 * (vLLM's auto_drop_analysis_messages). Reasoning that belongs to an ongoing tool-calling chain
 * (after the last final answer) is kept, which is what the model was trained to see. This is a
 * superset of harmony's own rule (which only drops analysis before the *first* final, and only
 * when the conversation ends on one) that also cleans up long multi-turn histories. */
#include "api/api_internal.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "harmony/harmony_special.h"
#include "harmony/harmony_tools.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void api_conv_init(api_conv *c, const api_config *cfg) {
    memset(c, 0, sizeof *c);
    c->effort = HARMONY_EFFORT_MEDIUM;
    if (cfg->current_date) {
        /* "" asks for no date line (tests compare with harmony's golden renderings). */
        c->current_date = cfg->current_date[0] ? cfg->current_date : NULL;
    } else {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[32];
        strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
        c->current_date = api_conv_own(c, xstrdup(buf));
    }
}

void api_conv_free(api_conv *c) {
    for (size_t i = 0; i < c->n_owned; i++) free(c->owned[i]);
    free(c->owned);
    free(c->msgs);
    free(c->tools);
    hsb_free(&c->instructions);
    hsb_free(&c->response_format);
    memset(c, 0, sizeof *c);
}

const char *api_conv_own(api_conv *c, char *s) {
    if (c->n_owned == c->cap_owned) {
        c->cap_owned = c->cap_owned ? 2 * c->cap_owned : 16;
        c->owned = xrealloc(c->owned, c->cap_owned * sizeof *c->owned);
    }
    c->owned[c->n_owned++] = s;
    return s;
}

harmony_message *api_conv_add(api_conv *c, harmony_role role) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->msgs = xrealloc(c->msgs, c->cap * sizeof *c->msgs);
    }
    harmony_message *m = &c->msgs[c->n++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

void api_conv_add_instructions(api_conv *c, const char *text) {
    if (!text || !*text) return;
    if (c->instructions.len) hsb_add(&c->instructions, "\n\n");
    hsb_add(&c->instructions, text);
}

void api_conv_add_tool(api_conv *c, const char *name, const char *description,
                       const json_t *parameters) {
    if (c->n_tools == c->cap_tools) {
        c->cap_tools = c->cap_tools ? 2 * c->cap_tools : 8;
        c->tools = xrealloc(c->tools, c->cap_tools * sizeof *c->tools);
    }
    c->tools[c->n_tools++] = (harmony_tool){name, description, parameters};
}

int api_parse_effort(const json_t *v, const char *param, harmony_effort *out, api_error *err) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) {
        api_error_set(err, 400, NULL, param, "Invalid type for '%s': expected a string, but got %s",
                      param, api_json_type_name(v));
        return -1;
    }
    const char *s = json_string_value(v);
    if (!strcmp(s, "low") || !strcmp(s, "minimal"))
        *out = HARMONY_EFFORT_LOW;
    else if (!strcmp(s, "medium"))
        *out = HARMONY_EFFORT_MEDIUM;
    else if (!strcmp(s, "high"))
        *out = HARMONY_EFFORT_HIGH;
    else {
        api_error_set(
            err, 400, NULL, param,
            "Invalid value for '%s': '%.40s' (gpt-oss supports 'low', 'medium' and 'high')", param,
            s);
        return -1;
    }
    return 1;
}

void api_conv_set_response_format(api_conv *c, const char *name, const char *description,
                                  const json_t *schema) {
    hsb *b = &c->response_format;
    hsb_clear(b);
    hsb_printf(b, "# Response Formats\n\n## %s\n\n", name && *name ? name : "response");
    if (description && *description) hsb_printf(b, "// %s\n", description);
    if (schema)
        harmony_json_compact(b, schema);
    else
        hsb_add(b, "{}");
}

int api_check_function_name(const char *name, const char *param, api_error *err) {
    size_t n = strlen(name);
    bool ok = n >= 1 && n <= 64;
    for (size_t i = 0; ok && i < n; i++) {
        char ch = name[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '-' || ch == '.' || ch == ':';
    }
    if (!ok) {
        api_error_set(err, 400, NULL, param,
                      "Invalid value for '%s': '%.64s' is not a valid function name (1 to 64 of "
                      "a-z, A-Z, 0-9, '_', '-', '.', ':')",
                      param, name);
        return -1;
    }
    return 0;
}

static bool is_analysis(const harmony_message *m) {
    return m->channel && strcmp(m->channel, "analysis") == 0;
}

/* Renders the developer message by hand when it carries a response format: harmony puts that
 * section at the very end of the developer message, after the tools, in the same text run. */
static int render_developer(const harmony_developer *dev, const hsb *formats, bool has_tools,
                            harmony_pieces *out) {
    harmony_message m = {.role = HARMONY_ROLE_DEVELOPER, .developer = dev};
    if (!formats->len) return harmony_render_message(&m, has_tools, out);
    harmony_pieces tmp = {0};
    if (harmony_render_message(&m, has_tools, &tmp) != 0) {
        harmony_pieces_free(&tmp);
        return -1;
    }
    /* tmp = <|start|> "developer" <|message|> [body] <|end|> */
    hsb body = {0};
    for (size_t i = 0; i < tmp.len; i++)
        if (i >= 3 && tmp.v[i].special < 0) hsb_addn(&body, tmp.text + tmp.v[i].off, tmp.v[i].len);
    if (body.len) hsb_add(&body, "\n\n");
    hsb_addn(&body, formats->s, formats->len);
    harmony_pieces_add_special(out, HARMONY_TOK_START);
    harmony_pieces_add_text(out, "developer", 9);
    harmony_pieces_add_special(out, HARMONY_TOK_MESSAGE);
    harmony_pieces_add_text(out, body.s, body.len);
    harmony_pieces_add_special(out, HARMONY_TOK_END);
    hsb_free(&body);
    harmony_pieces_free(&tmp);
    return 0;
}

static int render_pieces(api_conv *c, harmony_pieces *out, api_error *err) {
    harmony_system sys = harmony_system_defaults();
    sys.current_date = c->current_date;
    sys.effort = c->effort;
    bool has_tools = c->n_tools > 0;
    harmony_message sm = {.role = HARMONY_ROLE_SYSTEM, .system = &sys};
    int rc = harmony_render_message(&sm, has_tools, out);
    if (rc == 0 && (c->instructions.len || has_tools || c->response_format.len)) {
        harmony_developer dev = {c->instructions.len ? c->instructions.s : NULL, c->tools,
                                 c->n_tools};
        rc = render_developer(&dev, &c->response_format, has_tools, out);
    }
    size_t last_final = 0;
    bool any_final = false;
    for (size_t i = 0; i < c->n; i++)
        if (c->msgs[i].role == HARMONY_ROLE_ASSISTANT && c->msgs[i].channel &&
            !strcmp(c->msgs[i].channel, "final"))
            last_final = i, any_final = true;
    for (size_t i = 0; rc == 0 && i < c->n; i++) {
        if (any_final && i < last_final && is_analysis(&c->msgs[i])) continue;
        rc = harmony_render_message(&c->msgs[i], has_tools, out);
    }
    if (rc != 0) {
        api_error_set(err, 400, NULL, NULL, "The conversation cannot be rendered: %s", err_msg());
        return -1;
    }
    harmony_pieces_add_special(out, HARMONY_TOK_START);
    harmony_pieces_add_text(out, "assistant", 9);
    return 0;
}

int api_conv_render(api_conv *c, const tokenizer *tok, ivec *out, api_error *err) {
    harmony_pieces pieces = {0};
    int rc = render_pieces(c, &pieces, err);
    if (rc == 0 &&
        harmony_pieces_to_tokens(&pieces, tokenizer_encode_ordinary_cb, (void *)tok, out) != 0) {
        api_error_set(err, 400, NULL, NULL, "The conversation cannot be tokenized: %s", err_msg());
        rc = -1;
    }
    harmony_pieces_free(&pieces);
    return rc;
}

int api_parse_function_def(const json_t *fn, const char *param, api_conv *c, bool add,
                           api_error *err) {
    char p[96];
    if (!fn || json_is_null(fn)) {
        api_error_set(err, 400, NULL, param, "Missing required parameter: '%s'", param);
        return -1;
    }
    if (!json_is_object(fn)) {
        api_error_set(err, 400, NULL, param,
                      "Invalid type for '%s': expected an object, but got %s", param,
                      api_json_type_name(fn));
        return -1;
    }
    const char *name = NULL, *desc = NULL;
    snprintf(p, sizeof p, "%s.name", param);
    if (api_get_string(fn, "name", p, &name, err) < 0) return -1;
    if (!name) {
        api_error_set(err, 400, NULL, p, "Missing required parameter: '%s'", p);
        return -1;
    }
    if (api_check_function_name(name, p, err) < 0) return -1;
    snprintf(p, sizeof p, "%s.description", param);
    if (api_get_string(fn, "description", p, &desc, err) < 0) return -1;
    json_t *params = json_object_get(fn, "parameters");
    if (params && json_is_null(params)) params = NULL;
    if (params && !json_is_object(params)) {
        snprintf(p, sizeof p, "%s.parameters", param);
        api_error_set(err, 400, NULL, p,
                      "Invalid type for '%s': expected a JSON Schema object, but got %s", p,
                      api_json_type_name(params));
        return -1;
    }
    if (add) api_conv_add_tool(c, name, desc, params);
    return 0;
}

int api_parse_conversation(const char *body, size_t len, api_kind kind, api_conv_fields_fn fields,
                           const tokenizer *tok, const api_config *cfg, api_call *out,
                           api_error *err) {
    api_call_init(out, kind);
    json_t *root = api_json_load(body, len, err);
    if (!root) {
        api_call_free(out);
        return -1;
    }
    api_conv c;
    api_conv_init(&c, cfg);
    int rc = fields(root, tok, cfg, out, &c, err);
    if (rc == 0) rc = api_structured_parse(root, kind, tok, out, err);
    api_conv_free(&c);
    json_decref(root);
    if (rc < 0) api_call_free(out);
    return rc < 0 ? -1 : 0;
}

int api_tools_present(const json_t *tools, api_error *err) {
    if (!tools || json_is_null(tools)) return 0;
    if (json_is_array(tools)) return 1;
    api_error_set(err, 400, NULL, "tools",
                  "Invalid type for 'tools': expected an array, but got %s",
                  api_json_type_name(tools));
    return -1;
}

int api_tool_entry(const json_t *t, size_t i, api_tool_paths *tp, const char **type,
                   api_error *err) {
    snprintf(tp->path, sizeof tp->path, "tools[%zu]", i);
    snprintf(tp->type_path, sizeof tp->type_path, "tools[%zu].type", i);
    *type = NULL;
    if (!json_is_object(t)) {
        api_error_set(err, 400, NULL, tp->path,
                      "Invalid type for '%s': expected an object, but got %s", tp->path,
                      api_json_type_name(t));
        return -1;
    }
    return api_get_string(t, "type", tp->type_path, type, err) < 0 ? -1 : 0;
}

int api_format_type(const json_t *format, const char *path, api_error *err) {
    char tp[64];
    snprintf(tp, sizeof tp, "%s.type", path);
    const char *type = NULL;
    if (api_get_string(format, "type", tp, &type, err) < 0) return -1;
    if (!type) {
        api_error_set(err, 400, NULL, tp, "Missing required parameter: '%s'", tp);
        return -1;
    }
    if (!strcmp(type, "text") || !strcmp(type, "json_object")) return 0;
    if (!strcmp(type, "json_schema")) return 1;
    api_error_set(
        err, 400, NULL, tp,
        "Invalid value for '%s': '%.40s' (expected 'text', 'json_object' or 'json_schema')", tp,
        type);
    return -1;
}

int api_format_schema(const json_t *def, const char *path, api_conv *c, api_error *err) {
    char name_p[80], desc_p[80], schema_p[80];
    snprintf(name_p, sizeof name_p, "%s.name", path);
    snprintf(desc_p, sizeof desc_p, "%s.description", path);
    snprintf(schema_p, sizeof schema_p, "%s.schema", path);
    const char *name = NULL, *desc = NULL;
    if (api_get_string(def, "name", name_p, &name, err) < 0) return -1;
    if (api_get_string(def, "description", desc_p, &desc, err) < 0) return -1;
    json_t *schema = json_object_get(def, "schema");
    if (schema && !json_is_null(schema) && !json_is_object(schema)) {
        api_error_set(err, 400, NULL, schema_p, "Invalid type for '%s': expected an object",
                      schema_p);
        return -1;
    }
    api_conv_set_response_format(c, name, desc, json_is_object(schema) ? schema : NULL);
    return 0;
}

int api_tool_choice(const json_t *root, const json_t **object, api_error *err) {
    const json_t *choice = json_object_get(root, "tool_choice");
    *object = NULL;
    if (!choice || json_is_null(choice)) return 1;
    if (json_is_object(choice)) {
        *object = choice;
        return 1;
    }
    if (!json_is_string(choice)) {
        api_error_set(err, 400, NULL, "tool_choice",
                      "Invalid type for 'tool_choice': expected a string or an object, but got %s",
                      api_json_type_name(choice));
        return -1;
    }
    const char *s = json_string_value(choice);
    if (!strcmp(s, "none")) return 0;
    if (!strcmp(s, "auto") || !strcmp(s, "required")) return 1;
    api_error_set(
        err, 400, NULL, "tool_choice",
        "Invalid value for 'tool_choice': '%.40s' (expected 'none', 'auto', 'required' or "
        "an object naming a function)",
        s);
    return -1;
}
