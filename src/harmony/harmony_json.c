/* Compact JSON printing that matches serde_json's Display (see harmony_tools.h for why). jansson's
 * own json_dumps differs in how it prints reals (17 significant digits: 0.1 → 0.10000000000000001).
 */
#include "harmony/harmony_tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_string(hsb *out, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    hsb_addc(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"':
            hsb_add(out, "\\\"");
            break;
        case '\\':
            hsb_add(out, "\\\\");
            break;
        case '\n':
            hsb_add(out, "\\n");
            break;
        case '\r':
            hsb_add(out, "\\r");
            break;
        case '\t':
            hsb_add(out, "\\t");
            break;
        case '\b':
            hsb_add(out, "\\b");
            break;
        case '\f':
            hsb_add(out, "\\f");
            break;
        default:
            if (c < 0x20) {
                char u[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
                hsb_add(out, u);
            } else {
                hsb_addc(out, (char)c);
            }
        }
    }
    hsb_addc(out, '"');
}

/* Shortest decimal digits that read back as x: digits[] (no leading/trailing zeros, "0" for zero)
 * and the exponent kk with x = 0.DIGITS × 10^kk. */
static void shortest_digits(double x, char *digits, int *kk) {
    char buf[40];
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf is "d[.ddd]e[+-]XX" */
    size_t n = 0;
    const char *p = buf;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[n++] = *p;
    while (n > 1 && digits[n - 1] == '0') n--;
    digits[n] = 0;
    *kk = atoi(p + 1) + 1;
    if (digits[0] == '0') *kk = 1; /* zero */
}

/* Layout rules of the ryu crate (serde_json's float printer). */
static void put_real(hsb *out, double x) {
    if (!isfinite(x)) {
        hsb_add(out, "null");
        return;
    }
    if (signbit(x)) {
        hsb_addc(out, '-');
        x = -x;
    }
    char d[32];
    int kk;
    shortest_digits(x, d, &kk);
    int len = (int)strlen(d), k = kk - len; /* x = DIGITS × 10^k */
    if (k >= 0 && kk <= 16) {
        hsb_add(out, d);
        for (int i = 0; i < k; i++) hsb_addc(out, '0');
        hsb_add(out, ".0");
    } else if (kk > 0 && kk <= 16) {
        hsb_addn(out, d, (size_t)kk);
        hsb_addc(out, '.');
        hsb_add(out, d + kk);
    } else if (kk > -5 && kk <= 0) {
        hsb_add(out, "0.");
        for (int i = 0; i < -kk; i++) hsb_addc(out, '0');
        hsb_add(out, d);
    } else {
        hsb_addc(out, d[0]);
        if (len > 1) {
            hsb_addc(out, '.');
            hsb_add(out, d + 1);
        }
        hsb_printf(out, "e%d", kk - 1);
    }
}

void harmony_json_compact(hsb *out, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        bool first = true;
        hsb_addc(out, '{');
        json_object_foreach((json_t *)v, key, val) {
            if (!first) hsb_addc(out, ',');
            first = false;
            put_string(out, key, strlen(key));
            hsb_addc(out, ':');
            harmony_json_compact(out, val);
        }
        hsb_addc(out, '}');
        break;
    }
    case JSON_ARRAY:
        hsb_addc(out, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) hsb_addc(out, ',');
            harmony_json_compact(out, json_array_get(v, i));
        }
        hsb_addc(out, ']');
        break;
    case JSON_STRING:
        put_string(out, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        hsb_printf(out, "%lld", (long long)json_integer_value(v));
        break;
    case JSON_REAL:
        put_real(out, json_real_value(v));
        break;
    case JSON_TRUE:
        hsb_add(out, "true");
        break;
    case JSON_FALSE:
        hsb_add(out, "false");
        break;
    case JSON_NULL:
        hsb_add(out, "null");
        break;
    }
}
