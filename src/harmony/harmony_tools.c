/* JSON Schema → the TypeScript-like text gpt-oss reads tools in, and the "# Tools" section around
 * it.
 *
 * The conversion follows the reference renderer's rules exactly, since the model was trained on its
 * output. In short:
 *   - "type": "string" → string, or a union of quoted literals when "enum" is given; "number" and
 *     "integer" → number; "boolean" → boolean; "array" → ITEMS[] (Array<any> without "items"); a
 * type list ["number", "string"] → number | string; anything else → any.
 *   - "type": "object" → "{\n" one line per property "NAME: TYPE," ("NAME?:" when not required)
 * "}", with the property's title, description and examples as "// " comment lines above it and its
 *     default as a trailing "// default: ..." comment.
 *   - "oneOf" → one " | TYPE" line per variant, each with its own trailing comments.
 *   - "nullable": true adds " | null".
 * Descriptions and examples are written raw (not escaped): the model saw them so. */
#include "harmony/harmony_tools.h"

#include "base/strmap.h"

#include <stdlib.h>
#include <string.h>

static const char *get_str(const json_t *obj, const char *key) {
    return json_string_value(json_object_get(obj, key)); /* NULL unless a string */
}

static bool is_enum(const json_t *schema) {
    const json_t *e = json_object_get(schema, "enum");
    return json_is_array(e) && json_array_size(e) > 0;
}

static bool is_nullable(const json_t *schema) {
    return json_is_true(json_object_get(schema, "nullable"));
}

/* "default: ..." for a default value. A string default is shown quoted, except on an enum, whose
 * values are already listed quoted in the type (then `enum_bare` decides whether the reference
 * wrote it bare or as JSON — it differs between its property and top-level oneOf paths). */
static void put_default(hsb *out, const json_t *def, const json_t *schema, bool enum_bare) {
    hsb_add(out, "default: ");
    if (json_is_string(def) && !is_enum(schema)) {
        hsb_addc(out, '"');
        hsb_add(out, json_string_value(def));
        hsb_addc(out, '"');
    } else if (json_is_string(def) && enum_bare) {
        hsb_add(out, json_string_value(def));
    } else {
        harmony_json_compact(out, def);
    }
}

/* The type of one variant of a oneOf, with " | null" when it is nullable and the type does not
 * already mention null. */
static void put_variant_type(hsb *out, const json_t *variant, const char *indent) {
    char *inner = xasprintf("%s   ", indent);
    hsb t = {0};
    harmony_schema_to_ts(&t, variant, inner);
    if (is_nullable(variant) && !strstr(hsb_str(&t), "null")) hsb_add(&t, " | null");
    hsb_add(out, hsb_str(&t));
    hsb_free(&t);
    free(inner);
}

/* A oneOf schema on its own (e.g. an array's items, or the whole parameters object). */
static void put_top_oneof(hsb *out, const json_t *variants, const char *indent) {
    for (size_t i = 0; i < json_array_size(variants); i++) {
        const json_t *v = json_array_get(variants, i);
        hsb_printf(out, "\n%s | ", indent);
        put_variant_type(out, v, indent);
        hsb c = {0};
        const char *desc = get_str(v, "description");
        if (desc) hsb_add(&c, desc);
        const json_t *def = json_object_get(v, "default");
        if (def) {
            if (c.len) hsb_addc(&c, ' ');
            put_default(&c, def, v, false);
        }
        if (c.len) hsb_printf(out, " // %s", hsb_str(&c));
        hsb_free(&c);
    }
}

/* A property whose schema is a oneOf: comments above the name, then one variant per line. The
 * property's description is written once: above the name, or not at all when the first variant
 * carries the same text. */
static void put_oneof_property(hsb *out, const char *key, bool required, const json_t *prop,
                               const json_t *variants, const char *indent) {
    const char *pdesc = get_str(prop, "description");
    const json_t *first = json_array_get(variants, 0);
    const char *first_desc = first ? get_str(first, "description") : NULL;
    bool desc_above = false;
    if (pdesc && !(first_desc && strcmp(first_desc, pdesc) == 0)) {
        hsb_printf(out, "%s// %s\n", indent, pdesc);
        desc_above = true;
    }
    const json_t *def = json_object_get(prop, "default");
    if (def) {
        hsb_printf(out, "%s// ", indent);
        put_default(out, def, prop, true);
        hsb_addc(out, '\n');
    }
    hsb_printf(out, "%s%s%s:\n", indent, key, required ? "" : "?");
    for (size_t i = 0; i < json_array_size(variants); i++) {
        const json_t *v = json_array_get(variants, i);
        hsb_printf(out, "%s | ", indent);
        put_variant_type(out, v, indent);
        hsb c = {0};
        const char *vdesc = get_str(v, "description");
        if (!(i == 0 && desc_above) && vdesc && !(pdesc && strcmp(vdesc, pdesc) == 0))
            hsb_add(&c, vdesc);
        const json_t *vdef = json_object_get(v, "default");
        if (vdef) {
            if (c.len) hsb_addc(&c, ' ');
            put_default(&c, vdef, v, true);
        }
        if (c.len) hsb_printf(out, " // %s", hsb_str(&c));
        hsb_free(&c);
        hsb_addc(out, '\n');
    }
    hsb_printf(out, "%s,\n", indent);
}

/* The schema's `required` names as a set: a schema may list tens of thousands of properties, and
 * scanning the list once per property would make rendering quadratic in the request's size. */
static void required_set(const json_t *schema, strmap *set) {
    const json_t *req = json_object_get(schema, "required");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (r) strmap_put(set, r, (void *)r);
    }
}

static void put_object(hsb *out, const json_t *schema, const char *indent) {
    const char *desc = get_str(schema, "description");
    if (desc) hsb_printf(out, "%s// %s\n", indent, desc);
    hsb_add(out, "{\n");
    const json_t *props = json_object_get(schema, "properties");
    const char *key;
    json_t *prop;
    strmap req = {0};
    if (json_is_object(props)) required_set(schema, &req);
    if (json_is_object(props)) {
        json_object_foreach((json_t *)props, key, prop) {
            bool required = strmap_has(&req, key);
            const json_t *one_of = json_object_get(prop, "oneOf");
            const char *title = get_str(prop, "title");
            if (title) hsb_printf(out, "%s// %s\n%s//\n", indent, title, indent);
            const char *pdesc = get_str(prop, "description");
            if (!one_of && pdesc) hsb_printf(out, "%s// %s\n", indent, pdesc);
            const json_t *examples = json_object_get(prop, "examples");
            if (json_array_size(examples) > 0) {
                hsb_printf(out, "%s// Examples:\n", indent);
                for (size_t i = 0; i < json_array_size(examples); i++) {
                    const char *ex = json_string_value(json_array_get(examples, i));
                    if (ex) hsb_printf(out, "%s// - \"%s\"\n", indent, ex);
                }
            }
            if (json_is_array(one_of)) {
                put_oneof_property(out, key, required, prop, one_of, indent);
                continue;
            }
            hsb_printf(out, "%s%s%s: ", indent, key, required ? "" : "?");
            char *inner = xasprintf("%s    ", indent);
            hsb t = {0};
            harmony_schema_to_ts(&t, prop, inner);
            free(inner);
            if (is_nullable(prop) && !strstr(hsb_str(&t), "null")) hsb_add(&t, " | null");
            hsb_add(out, hsb_str(&t));
            hsb_free(&t);
            hsb_addc(out, ',');
            const json_t *def = json_object_get(prop, "default");
            if (!one_of && def) {
                hsb_add(out, " // ");
                put_default(out, def, prop, true);
            }
            hsb_addc(out, '\n');
        }
    }
    strmap_free(&req);
    hsb_printf(out, "%s}", indent);
}

void harmony_schema_to_ts(hsb *out, const json_t *schema, const char *indent) {
    const json_t *one_of = json_object_get(schema, "oneOf");
    if (json_is_array(one_of)) {
        put_top_oneof(out, one_of, indent);
        return;
    }
    const json_t *type = json_object_get(schema, "type");
    if (json_is_array(type)) {
        size_t written = 0;
        for (size_t i = 0; i < json_array_size(type); i++) {
            const char *t = json_string_value(json_array_get(type, i));
            if (!t) continue;
            if (written++) hsb_add(out, " | ");
            hsb_add(out, strcmp(t, "integer") == 0 ? "number" : t);
        }
        if (written) return;
    }
    const char *t = json_string_value(type);
    if (!t) {
        hsb_add(out, "any");
    } else if (strcmp(t, "object") == 0) {
        put_object(out, schema, indent);
    } else if (strcmp(t, "string") == 0) {
        const json_t *e = json_object_get(schema, "enum");
        size_t written = 0;
        for (size_t i = 0; i < json_array_size(e); i++) {
            const char *s = json_string_value(json_array_get(e, i));
            if (!s) continue;
            hsb_printf(out, "%s\"%s\"", written++ ? " | " : "", s);
        }
        if (!written) hsb_add(out, "string");
    } else if (strcmp(t, "number") == 0 || strcmp(t, "integer") == 0) {
        hsb_add(out, "number");
    } else if (strcmp(t, "boolean") == 0) {
        hsb_add(out, "boolean");
    } else if (strcmp(t, "array") == 0) {
        const json_t *items = json_object_get(schema, "items");
        if (items) {
            harmony_schema_to_ts(out, items, indent);
            hsb_add(out, "[]");
        } else {
            hsb_add(out, "Array<any>");
        }
    } else {
        hsb_add(out, "any");
    }
}

/* Calls fn for each line of s the way Rust's str::lines() splits: on "\n", dropping one "\r" before
 * it, and with no empty last line after a final "\n" ("" has no lines at all). */
static void for_each_line(const char *s, void (*fn)(hsb *, const char *, size_t, const char *),
                          hsb *out, const char *prefix) {
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        size_t m = n && s[n - 1] == '\r' ? n - 1 : n;
        fn(out, s, m, prefix);
        s += nl ? n + 1 : n;
    }
}

static void put_line(hsb *out, const char *line, size_t n, const char *prefix) {
    hsb_addc(out, '\n');
    hsb_add(out, prefix);
    hsb_addn(out, line, n);
}

static int cmp_ns(const void *a, const void *b) {
    const harmony_namespace *x = *(const harmony_namespace *const *)a;
    const harmony_namespace *y = *(const harmony_namespace *const *)b;
    return strcmp(x->name, y->name);
}

/* One "## NAME" part. The reference builds it as lines joined by "\n", where some "lines" end in
 * "\n" themselves — that is where the blank lines come from. A namespace without tools (python)
 * shows its description as plain text; one with tools shows it as comments before the namespace
 * block. */
static void put_namespace(hsb *out, const harmony_namespace *ns) {
    hsb_printf(out, "## %s\n", ns->name);
    if (ns->description) for_each_line(ns->description, put_line, out, ns->n_tools ? "// " : "");
    if (!ns->n_tools) return;
    hsb_printf(out, "\nnamespace %s {\n", ns->name);
    for (size_t i = 0; i < ns->n_tools; i++) {
        const harmony_tool *t = &ns->tools[i];
        if (t->description) for_each_line(t->description, put_line, out, "// ");
        if (t->parameters) {
            hsb_printf(out, "\ntype %s = (_: ", t->name);
            harmony_schema_to_ts(out, t->parameters, "");
            hsb_add(out, ") => any;\n");
        } else {
            hsb_printf(out, "\ntype %s = () => any;\n", t->name);
        }
    }
    hsb_printf(out, "\n} // namespace %s", ns->name);
}

void harmony_tools_section(hsb *out, const harmony_namespace *const *ns, size_t n) {
    const harmony_namespace **sorted = xmalloc((n ? n : 1) * sizeof *sorted);
    memcpy(sorted, ns, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted,
          cmp_ns); /* names are distinct in practice; order of equals moot */
    hsb_add(out, "# Tools");
    for (size_t i = 0; i < n; i++) {
        hsb_add(out, "\n\n");
        put_namespace(out, sorted[i]);
    }
    free(sorted);
}
