/* POST /v1/responses: the request → a harmony prompt and an engine request.
 *
 *   instructions                  the developer message's "# Instructions", followed by the text of
 *                                 leading system/developer input messages (as for chat)
 *   input: a string               one user message
 *   input items
 *     message {role, content}     user / system / developer / assistant (assistant text goes back
 *                                 on the final channel); content a string or input_text /
 *                                 output_text parts
 *     reasoning {content: [{type: "reasoning_text", text}]}  an analysis message (its summary
 *                                 when it has no content); dropped once a later final answer exists
 *     function_call {call_id, name, arguments}               the call, as for chat
 *     function_call_output {call_id, output}                 the result from functions.NAME, NAME
 *                                 being that of the function_call with the same call_id
 *   tools                         function tools {type: "function", name, description,
 *                                 parameters}; other tool types (web_search, code_interpreter,
 *                                 mcp, ...) are ignored, as vLLM ignores built-in tools it does
 *                                 not serve
 *   reasoning.effort, max_output_tokens, temperature, top_p (and vLLM's top_k, min_p, penalties,
 *   seed, stop), stream, store (see below), text.format (json_schema → harmony's
 *   "# Response Formats" section), tool_choice (accepted; "none" hides the tools)
 * With the responses store (response_store.h; cfg->store):
 *   previous_response_id          the stored conversation (input and output items) goes first; an
 *                                 unknown or evicted id is vLLM's 404
 *   item_reference {id}           an item of a stored response, as if it were inline (404 unknown)
 *   store (default true)          false: nothing is kept; the response says which
 *   background                    the POST answers at once ("queued"); GET polls the store,
 *                                 POST /v1/responses/{id}/cancel aborts (needs store; no stream)
 * Refused: logprobs (vLLM refuses them for gpt-oss too). */
#include "api/api_internal.h"

#include "base/strmap.h"
#include "base/xalloc.h"

#include <stdio.h>
#include <string.h>

static const char *const TEXT_PARTS[] = {"input_text", "output_text", "text", NULL};
static const char *const ASSISTANT_PARTS[] = {"input_text", "output_text", "text", "refusal", NULL};

/* function_call items by call_id (the latest of an id wins), to name function_call_output items:
 * a hash map, so that a history with many calls costs linear time. */
typedef strmap known_calls;

static const char *lookup_call(const known_calls *k, const char *call_id) {
    void **name = strmap_find(k, call_id);
    return name ? *name : NULL;
}

static int missing(const char *param, api_error *err) {
    api_error_set(err, 400, NULL, param, "Missing required parameter: '%s'", param);
    return -1;
}

/* The text of a reasoning item: its reasoning_text parts, else its summary_text parts. */
static int reasoning_text(const json_t *item, const char *base, hsb *out, api_error *err) {
    static const char *const fields[] = {"content", "summary"};
    for (int f = 0; f < 2 && out->len == 0; f++) {
        json_t *parts = json_object_get(item, fields[f]);
        if (!parts || json_is_null(parts)) continue;
        char p[128];
        snprintf(p, sizeof p, "%s.%s", base, fields[f]);
        if (!json_is_array(parts)) {
            api_error_set(err, 400, NULL, p, "Invalid type for '%s': expected an array, but got %s",
                          p, api_json_type_name(parts));
            return -1;
        }
        size_t k;
        json_t *part;
        json_array_foreach(parts, k, part) {
            json_t *t = json_is_object(part) ? json_object_get(part, "text") : NULL;
            if (!json_is_string(t)) {
                snprintf(p, sizeof p, "%s.%s[%zu].text", base, fields[f], k);
                return missing(p, err);
            }
            if (out->len) hsb_addc(out, '\n');
            hsb_addn(out, json_string_value(t), json_string_length(t));
        }
    }
    return 0;
}

/* What parsing the input builds besides the conversation: the function calls seen so far, whether
 * only system/developer messages came yet, and the resolved input items (kept for the store; they
 * also keep items fetched from it alive while the conversation borrows their strings). */
typedef struct {
    api_conv *c;
    known_calls calls;
    bool leading;
    resp_store *store;
    json_t *items;
} input_ctx;

static int parse_item(const json_t *item, const char *base, input_ctx *x, api_error *err);

/* {type: "item_reference", id}: an item of a stored response, parsed as if it were inline. */
static int parse_reference(const json_t *item, const char *base, input_ctx *x, api_error *err) {
    char p[96];
    const char *id = NULL;
    snprintf(p, sizeof p, "%s.id", base);
    if (api_get_string(item, "id", p, &id, err) < 0) return -1;
    if (!id) return missing(p, err);
    if (!x->store) {
        api_error_set(err, 400, NULL, p,
                      "'item_reference' input items need the responses store, which this server "
                      "has turned off (--responses-store-size 0); send the item itself");
        return -1;
    }
    json_t *found = resp_store_item(x->store, id);
    if (!found) {
        api_error_set(err, 404, "invalid_request_error", p, "Item with id '%.100s' not found.", id);
        return -1;
    }
    /* Stored items are resolved before they are stored, so a reference never leads to another. */
    const json_t *type = json_object_get(found, "type");
    if (json_is_string(type) && !strcmp(json_string_value(type), "item_reference")) {
        json_decref(found);
        api_error_set(err, 400, NULL, p, "Item with id '%.100s' is itself a reference", id);
        return -1;
    }
    int rc = parse_item(found, base, x, err); /* x->items keeps it */
    json_decref(found);
    return rc;
}

static int parse_item(const json_t *item, const char *base, input_ctx *x, api_error *err) {
    api_conv *c = x->c;
    char p[96];
    if (!json_is_object(item)) {
        api_error_set(err, 400, NULL, base, "Invalid type for '%s': expected an object, but got %s",
                      base, api_json_type_name(item));
        return -1;
    }
    const char *type = NULL;
    snprintf(p, sizeof p, "%s.type", base);
    if (api_get_string(item, "type", p, &type, err) < 0) return -1;
    if (type && !strcmp(type, "item_reference")) return parse_reference(item, base, x, err);
    json_array_append_new(x->items, json_incref((json_t *)item));
    bool sysdev = false;
    if (!type || !strcmp(type, "message")) {
        const char *role = NULL;
        snprintf(p, sizeof p, "%s.role", base);
        if (api_get_string(item, "role", p, &role, err) < 0) return -1;
        if (!role) return missing(p, err);
        bool assistant = !strcmp(role, "assistant");
        sysdev = !strcmp(role, "system") || !strcmp(role, "developer");
        if (!assistant && !sysdev && strcmp(role, "user") != 0) {
            api_error_set(err, 400, NULL, p,
                          "Invalid value for '%s': '%.40s' (expected one of 'user', 'assistant', "
                          "'system', 'developer')",
                          p, role);
            return -1;
        }
        char *text;
        snprintf(p, sizeof p, "%s.content", base);
        if (api_content_text(json_object_get(item, "content"), p,
                             assistant ? ASSISTANT_PARTS : TEXT_PARTS, false, &text, err) < 0)
            return -1;
        api_conv_own(c, text);
        if (sysdev && x->leading) {
            api_conv_add_instructions(c, text);
        } else if (assistant) {
            if (*text) {
                harmony_message *m = api_conv_add(c, HARMONY_ROLE_ASSISTANT);
                m->channel = "final";
                m->text = text;
            }
        } else {
            harmony_role r = !strcmp(role, "user")     ? HARMONY_ROLE_USER
                             : !strcmp(role, "system") ? HARMONY_ROLE_SYSTEM
                                                       : HARMONY_ROLE_DEVELOPER;
            api_conv_add(c, r)->text = text;
        }
    } else if (!strcmp(type, "reasoning")) {
        hsb text = {0};
        if (reasoning_text(item, base, &text, err) < 0) {
            hsb_free(&text);
            return -1;
        }
        if (text.len) {
            harmony_message *m = api_conv_add(c, HARMONY_ROLE_ASSISTANT);
            m->channel = "analysis";
            m->text = api_conv_own(c, text.s);
        } else {
            hsb_free(&text);
        }
    } else if (!strcmp(type, "function_call")) {
        const char *name = NULL, *call_id = NULL;
        snprintf(p, sizeof p, "%s.name", base);
        if (api_get_string(item, "name", p, &name, err) < 0) return -1;
        if (!name) return missing(p, err);
        if (api_check_function_name(name, p, err) < 0) return -1;
        snprintf(p, sizeof p, "%s.call_id", base);
        if (api_get_string(item, "call_id", p, &call_id, err) < 0) return -1;
        json_t *args = json_object_get(item, "arguments");
        harmony_message *m = api_conv_add(c, HARMONY_ROLE_ASSISTANT);
        m->channel = "commentary";
        m->recipient = api_conv_own(c, xasprintf("functions.%s", name));
        m->content_type = "<|constrain|>json";
        if (json_is_string(args))
            m->text = json_string_value(args);
        else if (!args || json_is_null(args))
            m->text = "{}";
        else
            m->text = api_conv_own(c, json_dumps(args, JSON_COMPACT));
        if (call_id) strmap_put(&x->calls, call_id, (void *)name);
    } else if (!strcmp(type, "function_call_output")) {
        const char *call_id = NULL;
        snprintf(p, sizeof p, "%s.call_id", base);
        if (api_get_string(item, "call_id", p, &call_id, err) < 0) return -1;
        if (!call_id) return missing(p, err);
        const char *name = lookup_call(&x->calls, call_id);
        if (!name) {
            api_error_set(err, 400, NULL, p,
                          "Invalid value for '%s': no earlier function_call item has the call_id "
                          "'%.64s'",
                          p, call_id);
            return -1;
        }
        char *text;
        snprintf(p, sizeof p, "%s.output", base);
        if (api_content_text(json_object_get(item, "output"), p, TEXT_PARTS, false, &text, err) < 0)
            return -1;
        harmony_message *m = api_conv_add(c, HARMONY_ROLE_TOOL);
        m->name = api_conv_own(c, xasprintf("functions.%s", name));
        m->recipient = "assistant";
        m->channel = "commentary";
        m->text = api_conv_own(c, text);
    } else {
        api_error_set(err, 400, NULL, p,
                      "Invalid value for '%s': input items of type '%.40s' are not supported "
                      "(message, reasoning, function_call, function_call_output, item_reference)",
                      p, type);
        return -1;
    }
    x->leading = x->leading && sysdev;
    return 0;
}

/* previous_response_id: the stored conversation (its input and output items) comes first. */
static int parse_previous(const json_t *root, input_ctx *x, const char **prev_id, api_error *err) {
    if (api_get_string(root, "previous_response_id", "previous_response_id", prev_id, err) < 0)
        return -1;
    const char *id = *prev_id;
    if (!id) return 0;
    if (!x->store) {
        api_error_set(err, 400, NULL, "previous_response_id",
                      "'previous_response_id' needs the responses store, which this server has "
                      "turned off (--responses-store-size 0); send the whole conversation in "
                      "'input'");
        return -1;
    }
    if (strncmp(id, "resp", 4) != 0) {
        api_error_set(err, 400, NULL, "previous_response_id",
                      "Invalid 'previous_response_id': '%.100s'. Expected an ID that begins with "
                      "'resp'.",
                      id);
        return -1;
    }
    json_t *conv = resp_store_conversation(x->store, id);
    if (!conv) {
        /* vLLM's shape for a response it does not have (status 404, code 404). */
        api_error_set(err, 404, "invalid_request_error", "previous_response_id",
                      "Response with id '%.100s' not found.", id);
        snprintf(err->code, sizeof err->code, "404");
        return -1;
    }
    int rc = 0;
    size_t i;
    json_t *item;
    json_array_foreach(conv, i, item) {
        char base[64];
        snprintf(base, sizeof base, "previous_response_id.input[%zu]", i);
        if ((rc = parse_item(item, base, x, err)) < 0) break;
    }
    /* x->items holds the items now (the conversation's strings point into them). */
    json_decref(conv);
    return rc;
}

static int parse_input(const json_t *root, input_ctx *x, api_error *err) {
    json_t *input = json_object_get(root, "input");
    if (!input || json_is_null(input)) return missing("input", err);
    if (json_is_string(input)) {
        api_conv_add(x->c, HARMONY_ROLE_USER)->text = json_string_value(input);
        json_array_append_new(
            x->items, json_pack("{sssssO}", "type", "message", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input)) {
        api_error_set(
            err, 400, NULL, "input",
            "Invalid type for 'input': expected a string or an array of items, but got %s",
            api_json_type_name(input));
        return -1;
    }
    if (json_array_size(input) == 0) {
        api_error_set(err, 400, NULL, "input", "Invalid value for 'input': the array is empty");
        return -1;
    }
    size_t i;
    json_t *item;
    json_array_foreach(input, i, item) {
        char base[48];
        snprintf(base, sizeof base, "input[%zu]", i);
        if (parse_item(item, base, x, err) < 0) return -1;
    }
    return 0;
}

static int parse_tools(const json_t *root, api_conv *c, api_error *err) {
    /* An object (a named function, or a built-in tool) is accepted and not enforced. */
    const json_t *choice;
    const int render = api_tool_choice(root, &choice, err);
    if (render < 0) return -1;
    json_t *tools = json_object_get(root, "tools");
    const int present = api_tools_present(tools, err);
    if (present <= 0) return present;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        api_tool_paths tp;
        const char *type;
        if (api_tool_entry(t, i, &tp, &type, err) < 0) return -1;
        if (!type) return missing(tp.type_path, err);
        if (strcmp(type, "function") != 0) continue; /* built-in tools: not offered to the model */
        if (api_parse_function_def(t, tp.path, c, render, err) < 0) return -1;
    }
    return 0;
}

/* text.format: {type: text | json_object | json_schema, name, description, schema}. */
static int parse_text_format(const json_t *root, api_conv *c, api_error *err) {
    json_t *text = NULL, *f = NULL;
    int has = api_get_object(root, "text", "text", &text, err);
    if (has <= 0) return has;
    has = api_get_object(text, "format", "text.format", &f, err);
    if (has <= 0) return has;
    const int is_schema = api_format_type(f, "text.format", err);
    if (is_schema <= 0) return is_schema;
    return api_format_schema(f, "text.format", c, err);
}

static void echo_field(json_t *echo, const json_t *root, const char *key, json_t *dflt) {
    json_t *v = json_object_get(root, key);
    if (v && !json_is_null(v)) {
        json_object_set_new(echo, key, json_deep_copy(v));
        json_decref(dflt);
    } else {
        json_object_set_new(echo, key, dflt);
    }
}

/* The request fields a response object repeats (store: whether it was kept). */
static json_t *echo_fields(const json_t *root, harmony_effort effort, bool stored,
                           const char *prev_id) {
    static const char *const efforts[] = {NULL, "low", "medium", "high"};
    json_t *e = json_object();
    echo_field(e, root, "instructions", json_null());
    echo_field(e, root, "max_output_tokens", json_null());
    echo_field(e, root, "temperature", json_real(1.0));
    echo_field(e, root, "top_p", json_real(1.0));
    echo_field(e, root, "tool_choice", json_string("auto"));
    echo_field(e, root, "tools", json_array());
    echo_field(e, root, "parallel_tool_calls", json_true());
    echo_field(e, root, "metadata", json_object());
    echo_field(e, root, "user", json_null());
    echo_field(e, root, "text", json_pack("{s{ss}}", "format", "type", "text"));
    json_object_set_new(
        e, "reasoning",
        json_pack("{sssn}", "effort", efforts[effort] ? efforts[effort] : "medium", "summary"));
    json_object_set_new(e, "store", json_boolean(stored));
    json_object_set_new(e, "previous_response_id", prev_id ? json_string(prev_id) : json_null());
    json_object_set_new(e, "truncation", json_string("disabled"));
    json_object_set_new(e, "background", json_false());
    return e;
}

static int parse_fields(const json_t *root, const tokenizer *tok, const api_config *cfg,
                        api_call *out, api_conv *c, api_error *err) {
    api_opts *o = api_call_opts(out);
    if (api_parse_model(root, cfg, out, err) < 0) return -1;
    if (api_parse_sampling(root, tok, false, out, o, err) < 0) return -1;
    if (api_get_bool(root, "background", "background", &out->background, err) < 0) return -1;
    /* OpenAI's default: stored. */
    bool store = true;
    if (api_get_bool(root, "store", "store", &store, err) < 0) return -1;
    long long top = 0;
    if (api_get_int(root, "top_logprobs", "top_logprobs", 0, API_MAX_TOP_LOGPROBS, &top, err) < 0)
        return -1;
    if (top > 0) {
        api_error_set(err, 400, NULL, "top_logprobs",
                      "logprobs are not supported on /v1/responses with gpt-oss");
        return -1;
    }
    if (api_get_bool(root, "include_reasoning", "include_reasoning", &o->include_reasoning, err) <
        0)
        return -1;
    const char *instructions = NULL;
    if (api_get_string(root, "instructions", "instructions", &instructions, err) < 0) return -1;
    api_conv_add_instructions(c, instructions);
    json_t *reasoning = NULL;
    const int has_reasoning = api_get_object(root, "reasoning", "reasoning", &reasoning, err);
    if (has_reasoning < 0) return -1;
    if (has_reasoning) {
        if (api_parse_effort(json_object_get(reasoning, "effort"), "reasoning.effort", &c->effort,
                             err) < 0)
            return -1;
    }
    if (parse_tools(root, c, err) < 0) return -1;
    if (parse_text_format(root, c, err) < 0) return -1;
    input_ctx x = {.c = c, .leading = true, .store = cfg->store, .items = json_array()};
    const char *prev_id = NULL;
    int rc = parse_previous(root, &x, &prev_id, err);
    if (rc == 0) rc = parse_input(root, &x, err);
    strmap_free(&x.calls);
    /* The conversation borrows strings of the items (fetched ones too) until it is rendered. */
    o->store_items = x.items;
    if (rc < 0) return -1;
    o->store = store ? cfg->store : NULL;
    if (out->background && !o->store) {
        /* OpenAI's and vLLM's rule: a background response is only ever seen through the store. */
        api_error_set(err, 400, NULL, "background",
                      cfg->store ? "'background' can only be used when 'store' is true"
                                 : "'background' needs the responses store, which this server has "
                                   "turned off (--responses-store-size 0)");
        return -1;
    }
    if (out->background && out->stream) {
        api_error_set(err, 400, NULL, "stream",
                      "'stream' with 'background' is not supported: poll GET /v1/responses/{id}");
        return -1;
    }
    ivec prompt = {0};
    if (api_conv_render(c, tok, &prompt, err) < 0) {
        ivec_free(&prompt);
        return -1;
    }
    out->req.prompt = prompt.v;
    out->req.n_prompt = (int)prompt.len;
    out->req.stop_body_token = HARMONY_TOK_MESSAGE; /* stop strings: message bodies only */
    if (!o->store) { /* rendered: nothing borrows the items any more */
        json_decref(o->store_items);
        o->store_items = NULL;
    }
    static const char *const keys[] = {"max_output_tokens", NULL};
    if (api_finish_lengths(root, keys, "input", cfg, out, err) < 0) return -1;
    o->echo = echo_fields(root, c->effort, o->store != NULL, prev_id);
    json_object_set_new(o->echo, "background", json_boolean(out->background));
    return 0;
}

int api_parse_responses(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                        api_call *out, api_error *err) {
    return api_parse_conversation(body, len, API_RESPONSES, parse_fields, tok, cfg, out, err);
}
