/* POST /v1/chat/completions: the request → a harmony prompt and an engine request.
 *
 * Messages → harmony (what vLLM does for gpt-oss, with the choices noted):
 *   system, developer   the leading ones become the developer message's "# Instructions" (joined
 *                       by blank lines), as vLLM and the HF template do; a later one stays a
 *                       message of its role, in place.
 *   user                a user message.
 *   assistant           `reasoning` (or `reasoning_content`) → an analysis message; then, with
 *                       `tool_calls`, the content as a commentary preamble and one message per call
 *                       (`<|start|>assistant to=functions.NAME<|channel|>commentary
 *                       <|constrain|>json<|message|>ARGS<|call|>`); without, the content on the
 *                       final channel. Old analysis is dropped when rendering (api_conv.c).
 *   tool                `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>OUT
 *                       <|end|>`, NAME found through `tool_call_id` among the earlier calls (or the
 *                       message's `name`, or the next unanswered call of the last assistant turn).
 *   function            (legacy) the same, named by `name`.
 * Content is a string or an array of text parts, concatenated.
 *
 * response_format json_schema is also shown to the model as harmony's "# Response Formats" section;
 * it, json_object, strict tools and tool_choice "required" / named are enforced by api_structured.c.
 * Accepted and not enforced: parallel_tool_calls (harmony stops at <|call|>, so a turn has at most
 * one call anyway). */
#include "api/api_internal.h"

#include "base/strmap.h"
#include "base/xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const TEXT_PARTS[] = {"text", "input_text", "output_text", NULL};
static const char *const ASSISTANT_PARTS[] = {"text", "input_text", "output_text", "refusal", NULL};

/* The tool calls seen so far, to name tool results. A history may hold tens of thousands of calls
 * and results: ids are found through a hash map and the next unanswered call through a cursor, so
 * naming every result costs linear time in all (scanning the calls per result was quadratic). */
typedef struct {
    const char *id, *name;
    size_t turn; /* index of the assistant message that made the call */
    bool answered;
} seen_call;

typedef struct {
    seen_call *v;
    size_t n, cap;
    size_t last_turn;
    size_t next;  /* no call of the last turn before this index is unanswered */
    strmap by_id; /* id → 1 + index of the latest call with that id */
} calls;

static void calls_add(calls *c, const char *id, const char *name, size_t turn) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->v = xrealloc(c->v, c->cap * sizeof *c->v);
    }
    /* A new assistant turn: its calls are the ones the fallback may answer from now on. */
    if (c->n == 0 || turn != c->last_turn) c->next = c->n;
    if (id) strmap_put(&c->by_id, id, (void *)(uintptr_t)(c->n + 1));
    c->v[c->n++] = (seen_call){id, name, turn, false};
    c->last_turn = turn;
}

static void calls_free(calls *c) {
    free(c->v);
    strmap_free(&c->by_id);
}

/* The function a tool result answers: the call with its tool_call_id (the latest of that id), else
 * the message's own name; without either, the next unanswered call of the last assistant turn. An
 * id that matches no call is an error (NULL): the history is inconsistent. */
static const char *calls_resolve(calls *c, const char *id, const char *name) {
    if (id) {
        void **slot = strmap_find(&c->by_id, id);
        if (slot) {
            seen_call *sc = &c->v[(uintptr_t)*slot - 1];
            sc->answered = true;
            return sc->name;
        }
    }
    if (name) return name;
    if (id) return NULL;
    /* Calls of the last turn are the last ones added; answered ones never become unanswered, so
     * the cursor only moves forward. */
    while (c->next < c->n && c->v[c->next].answered) c->next++;
    if (c->next < c->n) {
        c->v[c->next].answered = true;
        return c->v[c->next].name;
    }
    return NULL;
}

static const char *own_printf(api_conv *c, const char *fmt, const char *s) {
    return api_conv_own(c, xasprintf(fmt, s));
}

/* The arguments of a tool call: a string as it is, anything else as compact JSON. */
static const char *call_arguments(api_conv *c, const json_t *args) {
    if (!args || json_is_null(args)) return "{}";
    if (json_is_string(args)) return json_string_value(args);
    char *s = json_dumps(args, JSON_COMPACT);
    return s ? api_conv_own(c, s) : "{}";
}

static int parse_tool_calls(const json_t *tcs, size_t i, api_conv *c, calls *seen, api_error *err) {
    char p[96];
    snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
    if (!json_is_array(tcs)) {
        api_error_set(err, 400, NULL, p, "Invalid type for '%s': expected an array, but got %s", p,
                      api_json_type_name(tcs));
        return -1;
    }
    size_t k;
    json_t *tc;
    json_array_foreach(tcs, k, tc) {
        snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu]", i, k);
        if (!json_is_object(tc)) {
            api_error_set(err, 400, NULL, p,
                          "Invalid type for '%s': expected an object, but got %s", p,
                          api_json_type_name(tc));
            return -1;
        }
        char pf[112], pn[128], pi[112];
        snprintf(pf, sizeof pf, "%s.function", p);
        snprintf(pn, sizeof pn, "%s.function.name", p);
        snprintf(pi, sizeof pi, "%s.id", p);
        const char *id = NULL, *name = NULL;
        if (api_get_string(tc, "id", pi, &id, err) < 0) return -1;
        json_t *fn = json_object_get(tc, "function");
        if (!json_is_object(fn)) {
            api_error_set(err, 400, NULL, pf,
                          fn ? "Invalid type for '%s': expected an object"
                             : "Missing required parameter: '%s'",
                          pf);
            return -1;
        }
        if (api_get_string(fn, "name", pn, &name, err) < 0) return -1;
        if (!name) {
            api_error_set(err, 400, NULL, pn, "Missing required parameter: '%s'", pn);
            return -1;
        }
        if (api_check_function_name(name, pn, err) < 0) return -1;
        harmony_message *m = api_conv_add(c, HARMONY_ROLE_ASSISTANT);
        m->channel = "commentary";
        m->recipient = own_printf(c, "functions.%s", name);
        m->content_type = "<|constrain|>json";
        m->text = call_arguments(c, json_object_get(fn, "arguments"));
        calls_add(seen, id, name, i);
    }
    return 0;
}

static const char *conv_text(api_conv *c, char *heap) {
    return heap ? api_conv_own(c, heap) : NULL;
}

/* One assistant message from the history. */
static int parse_assistant(const json_t *msg, size_t i, api_conv *c, calls *seen, api_error *err) {
    char p[64];
    char *content = NULL;
    snprintf(p, sizeof p, "messages[%zu].content", i);
    if (api_content_text(json_object_get(msg, "content"), p, ASSISTANT_PARTS, true, &content, err) <
        0)
        return -1;
    conv_text(c, content);
    const char *reasoning = NULL;
    snprintf(p, sizeof p, "messages[%zu].reasoning", i);
    if (api_get_string(msg, "reasoning", p, &reasoning, err) < 0) return -1;
    if (!reasoning) {
        snprintf(p, sizeof p, "messages[%zu].reasoning_content", i);
        if (api_get_string(msg, "reasoning_content", p, &reasoning, err) < 0) return -1;
    }
    if (reasoning && *reasoning) {
        harmony_message *m = api_conv_add(c, HARMONY_ROLE_ASSISTANT);
        m->channel = "analysis";
        m->text = reasoning;
    }
    json_t *tcs = json_object_get(msg, "tool_calls");
    if (tcs && !json_is_null(tcs) && !(json_is_array(tcs) && json_array_size(tcs) == 0)) {
        if (content && *content) {
            harmony_message *m = api_conv_add(c, HARMONY_ROLE_ASSISTANT);
            m->channel = "commentary";
            m->text = content;
        }
        return parse_tool_calls(tcs, i, c, seen, err);
    }
    if (content && *content) {
        harmony_message *m = api_conv_add(c, HARMONY_ROLE_ASSISTANT);
        m->channel = "final";
        m->text = content;
    }
    return 0;
}

static int parse_tool_result(const json_t *msg, size_t i, bool legacy, api_conv *c, calls *seen,
                             api_error *err) {
    char p[64], pid[64];
    const char *id = NULL, *name = NULL;
    snprintf(pid, sizeof pid, "messages[%zu].tool_call_id", i);
    if (!legacy && api_get_string(msg, "tool_call_id", pid, &id, err) < 0) return -1;
    snprintf(p, sizeof p, "messages[%zu].name", i);
    if (api_get_string(msg, "name", p, &name, err) < 0) return -1;
    const char *fn = calls_resolve(seen, id, name);
    if (!fn) {
        if (id)
            api_error_set(
                err, 400, NULL, pid,
                "Invalid value for '%s': no earlier assistant tool call has the id '%.64s'", pid,
                id);
        else
            api_error_set(err, 400, NULL, legacy ? p : pid, "Missing required parameter: '%s'",
                          legacy ? p : pid);
        return -1;
    }
    char *content = NULL;
    snprintf(p, sizeof p, "messages[%zu].content", i);
    if (api_content_text(json_object_get(msg, "content"), p, TEXT_PARTS, false, &content, err) < 0)
        return -1;
    harmony_message *m = api_conv_add(c, HARMONY_ROLE_TOOL);
    m->name = own_printf(c, "functions.%s", fn);
    m->recipient = "assistant";
    m->channel = "commentary";
    m->text = conv_text(c, content);
    return 0;
}

static int parse_messages(const json_t *root, api_conv *c, api_error *err) {
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs || json_is_null(msgs)) {
        api_error_set(err, 400, NULL, "messages", "Missing required parameter: 'messages'");
        return -1;
    }
    if (!json_is_array(msgs)) {
        api_error_set(err, 400, NULL, "messages",
                      "Invalid type for 'messages': expected an array, but got %s",
                      api_json_type_name(msgs));
        return -1;
    }
    if (json_array_size(msgs) == 0) {
        api_error_set(err, 400, NULL, "messages",
                      "Invalid value for 'messages': the array is empty");
        return -1;
    }
    calls seen = {0};
    bool leading = true; /* still in the leading run of system/developer messages */
    size_t i;
    json_t *msg;
    int rc = 0;
    json_array_foreach(msgs, i, msg) {
        char p[64];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(msg)) {
            api_error_set(err, 400, NULL, p,
                          "Invalid type for '%s': expected an object, but got %s", p,
                          api_json_type_name(msg));
            rc = -1;
            break;
        }
        const char *role = NULL;
        snprintf(p, sizeof p, "messages[%zu].role", i);
        if ((rc = api_get_string(msg, "role", p, &role, err)) < 0) break;
        if (!role) {
            api_error_set(err, 400, NULL, p, "Missing required parameter: '%s'", p);
            rc = -1;
            break;
        }
        rc = 0;
        bool sysdev = !strcmp(role, "system") || !strcmp(role, "developer");
        if (sysdev || !strcmp(role, "user")) {
            char *text = NULL;
            snprintf(p, sizeof p, "messages[%zu].content", i);
            if ((rc = api_content_text(json_object_get(msg, "content"), p, TEXT_PARTS, false, &text,
                                       err)) < 0)
                break;
            conv_text(c, text);
            if (sysdev && leading) {
                api_conv_add_instructions(c, text);
            } else {
                harmony_role r = !strcmp(role, "user")     ? HARMONY_ROLE_USER
                                 : !strcmp(role, "system") ? HARMONY_ROLE_SYSTEM
                                                           : HARMONY_ROLE_DEVELOPER;
                api_conv_add(c, r)->text = text;
            }
        } else if (!strcmp(role, "assistant")) {
            rc = parse_assistant(msg, i, c, &seen, err);
        } else if (!strcmp(role, "tool") || !strcmp(role, "function")) {
            rc = parse_tool_result(msg, i, !strcmp(role, "function"), c, &seen, err);
        } else {
            api_error_set(err, 400, NULL, p,
                          "Invalid value for '%s': '%.40s' (expected one of 'system', 'developer', "
                          "'user', 'assistant', 'tool')",
                          p, role);
            rc = -1;
        }
        if (rc < 0) break;
        leading = leading && sysdev;
    }
    calls_free(&seen);
    return rc < 0 ? -1 : 0;
}

/* tools + tool_choice: which functions the developer message lists. */
static int parse_tools(const json_t *root, api_conv *c, api_error *err) {
    json_t *tools = json_object_get(root, "tools");
    const json_t *choice = NULL;
    const int render_i = api_tool_choice(root, &choice, err);
    if (render_i < 0) return -1;
    const bool render = render_i;
    const char *named = NULL;
    if (choice) { /* {"type": "function", "function": {"name": ...}} */
        json_t *fn = json_object_get(choice, "function");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            api_error_set(err, 400, NULL, "tool_choice.function.name",
                          "Missing required parameter: 'tool_choice.function.name'");
            return -1;
        }
        named = json_string_value(json_object_get(fn, "name"));
    }
    const int present = api_tools_present(tools, err);
    if (present < 0) return -1;
    if (!present) {
        if (named) {
            api_error_set(err, 400, NULL, "tool_choice",
                          "Invalid value for 'tool_choice': no tools were given");
            return -1;
        }
        return 0;
    }
    bool found = false;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        api_tool_paths tp;
        const char *type;
        if (api_tool_entry(t, i, &tp, &type, err) < 0) return -1;
        if (type && strcmp(type, "function") != 0) {
            api_error_set(err, 400, NULL, tp.type_path,
                          "Invalid value for '%s': '%.40s' (only 'function' tools are supported)",
                          tp.type_path, type);
            return -1;
        }
        char pf[64];
        snprintf(pf, sizeof pf, "tools[%zu].function", i);
        json_t *fn = json_object_get(t, "function");
        if (api_parse_function_def(fn, pf, c, render, err) < 0) return -1;
        if (named && !strcmp(named, json_string_value(json_object_get(fn, "name")))) found = true;
    }
    if (named && !found) {
        api_error_set(
            err, 400, NULL, "tool_choice",
            "Invalid value for 'tool_choice': the function '%.64s' is not among the tools", named);
        return -1;
    }
    return 0;
}

/* response_format: text | json_object | json_schema {name, description, schema}. */
static int parse_response_format(const json_t *root, api_conv *c, api_error *err) {
    json_t *rf = NULL;
    const int has = api_get_object(root, "response_format", "response_format", &rf, err);
    if (has <= 0) return has;
    const int is_schema = api_format_type(rf, "response_format", err);
    if (is_schema <= 0) return is_schema;
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) {
        api_error_set(err, 400, NULL, "response_format.json_schema",
                      "Missing required parameter: 'response_format.json_schema'");
        return -1;
    }
    return api_format_schema(js, "response_format.json_schema", c, err);
}

static int parse_chat_fields(const json_t *root, const tokenizer *tok, const api_config *cfg,
                             api_call *out, api_conv *c, api_error *err) {
    api_opts *o = api_call_opts(out);
    if (api_parse_model(root, cfg, out, err) < 0) return -1;
    if (api_parse_sampling(root, tok, true, out, o, err) < 0) return -1;
    long long top = 0;
    if (api_get_bool(root, "logprobs", "logprobs", &o->logprobs, err) < 0) return -1;
    int r = api_get_int(root, "top_logprobs", "top_logprobs", 0, API_MAX_TOP_LOGPROBS, &top, err);
    if (r < 0) return -1;
    if (r && top > 0 && !o->logprobs) {
        api_error_set(err, 400, NULL, "top_logprobs",
                      "Invalid value for 'top_logprobs': 'logprobs' must be true to use it");
        return -1;
    }
    o->top_logprobs = (int)top;
    out->req.params.logprobs = (int32_t)top;
    if (api_get_bool(root, "include_reasoning", "include_reasoning", &o->include_reasoning, err) <
        0)
        return -1;
    json_t *effort = json_object_get(root, "reasoning_effort");
    json_t *kwargs = json_object_get(root, "chat_template_kwargs");
    const char *eparam = "reasoning_effort";
    if ((!effort || json_is_null(effort)) && json_is_object(kwargs)) {
        effort = json_object_get(kwargs, "reasoning_effort");
        eparam = "chat_template_kwargs.reasoning_effort";
    }
    if (api_parse_effort(effort, eparam, &c->effort, err) < 0) return -1;
    if (parse_tools(root, c, err) < 0) return -1;
    if (parse_response_format(root, c, err) < 0) return -1;
    if (parse_messages(root, c, err) < 0) return -1;
    ivec prompt = {0};
    if (api_conv_render(c, tok, &prompt, err) < 0) {
        ivec_free(&prompt);
        return -1;
    }
    out->req.prompt = prompt.v;
    out->req.n_prompt = (int)prompt.len;
    out->req.stop_body_token = HARMONY_TOK_MESSAGE; /* stop strings: message bodies only */
    static const char *const keys[] = {"max_completion_tokens", "max_tokens", NULL};
    return api_finish_lengths(root, keys, "messages", cfg, out, err);
}

int api_parse_chat(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                   api_call *out, api_error *err) {
    return api_parse_conversation(body, len, API_CHAT, parse_chat_fields, tok, cfg, out, err);
}
