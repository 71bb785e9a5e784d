/* The constraints test_grammar.c generates from: JSON Schemas (validated by ajv), regular
 * expressions (checked by PCRE2) and choices. */
#ifndef GPTOSS_TESTS_GRAMMAR_CASES_H
#define GPTOSS_TESTS_GRAMMAR_CASES_H

static const char *const schema_cases[] = {
    /* flat objects */
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
    "\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},\"score\":{\"type\":"
    "\"number\"},\"note\":{\"type\":\"null\"}},\"required\":[\"ok\",\"score\",\"note\"],"
    "\"additionalProperties\":false}",
    /* optional properties (only some required) */
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
    "\"boolean\"},\"c\":{\"type\":\"integer\"},\"d\":{\"type\":\"null\"}},\"required\":[\"c\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},\"y\":{\"type\":"
    "\"integer\"}},\"additionalProperties\":false}",
    /* nested objects */
    "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"id\":{"
    "\"type\":\"integer\"},\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\","
    "\"zip\"],\"additionalProperties\":false}},\"required\":[\"id\",\"address\"],"
    "\"additionalProperties\":false}},\"required\":[\"user\"],\"additionalProperties\":false}",
    /* arrays */
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":4}",
    "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":3}",
    "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\","
    "\"b\"]},\"v\":{\"type\":\"integer\"}},\"required\":[\"k\",\"v\"],\"additionalProperties\":"
    "false},\"maxItems\":3}",
    "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{"
    "\"type\":\"integer\"},\"maxItems\":2},\"maxItems\":2},\"maxItems\":2}",
    "{\"type\":\"array\",\"maxItems\":0}",
    /* enums and consts, with escapes and non-ASCII */
    "{\"enum\":[\"red\",\"green\",\"blue\",\"re\",\"r\\\"ed\",\"gr\\u00fcn\",\"\\u7eff\"]}",
    "{\"enum\":[1,2.5,null,true,\"x\",{\"a\":[1,2]},[\"y\"]]}",
    "{\"type\":[\"string\",\"integer\"],\"enum\":[\"a\",1,2.0,2.5,null,\"b\",[1]]}",
    "{\"const\":{\"version\":3,\"tags\":[\"a\\\\b\",\"\\u00e9\"]}}",
    "{\"type\":\"object\",\"properties\":{\"unit\":{\"const\":\"celsius\"},\"t\":{\"type\":"
    "\"number\"}},\"required\":[\"unit\",\"t\"],\"additionalProperties\":false}",
    /* anyOf and type lists */
    "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"type\":\"null\"}]}",
    "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":[\"string\",\"null\"]}},\"required\":"
    "[\"v\"],\"additionalProperties\":false}",
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"n\":{\"type\":"
    "\"integer\"}},\"required\":[\"kind\",\"n\"],\"additionalProperties\":false},{\"type\":"
    "\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"s\":{\"type\":\"boolean\"}},"
    "\"required\":[\"kind\",\"s\"],\"additionalProperties\":false}]}",
    /* recursion through $ref */
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
    "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},"
    "\"required\":[\"value\",\"children\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/"
    "node\"}",
    "{\"$defs\":{\"list\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"object\",\"properties\":{"
    "\"head\":{\"type\":\"number\"},\"tail\":{\"$ref\":\"#/$defs/list\"}},\"required\":[\"head\","
    "\"tail\"],\"additionalProperties\":false}]}},\"$ref\":\"#/$defs/list\"}",
    "{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":"
    "\"null\"}]}},\"required\":[\"next\"],\"additionalProperties\":false}",
    "{\"definitions\":{\"id\":{\"type\":\"integer\"}},\"type\":\"object\",\"properties\":{\"a\":"
    "{\"$ref\":\"#/definitions/id\"},\"b\":{\"$ref\":\"#/definitions/id\"}},\"required\":[\"a\","
    "\"b\"],\"additionalProperties\":false}",
    /* strings: patterns and formats */
    "{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{2,4}$\"}",
    "{\"type\":\"string\",\"pattern\":\"^[\\u03b1-\\u03c9]+( [\\u03b1-\\u03c9]+)?$\"}",
    "{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\c[\\\\n\\\\t]$\"}",
    "{\"type\":\"string\",\"pattern\":\"^ab+c\"}",
    "{\"type\":\"string\",\"format\":\"date-time\"}",
    "{\"type\":\"string\",\"format\":\"date\"}",
    "{\"type\":\"string\",\"format\":\"time\"}",
    "{\"type\":\"string\",\"format\":\"email\"}",
    "{\"type\":\"string\",\"format\":\"uuid\"}",
    "{\"type\":\"object\",\"properties\":{\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"},"
    "\"host\":{\"type\":\"string\",\"format\":\"hostname\"}},\"required\":[\"ip\",\"host\"],"
    "\"additionalProperties\":false}",
    /* property names with escapes and non-ASCII */
    "{\"type\":\"object\",\"properties\":{\"na\\u00efve\":{\"type\":\"string\"},\"quo\\\"te\":{"
    "\"type\":\"integer\"},\"\\u6f22\\u5b57\":{\"type\":\"boolean\"}},\"required\":[\"na\\u00efve\""
    ",\"quo\\\"te\",\"\\u6f22\\u5b57\"],\"additionalProperties\":false}",
    /* free-form parts */
    "{\"type\":\"object\",\"properties\":{\"meta\":{\"type\":\"object\"},\"list\":{\"type\":"
    "\"array\",\"maxItems\":2}},\"required\":[\"meta\",\"list\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
    "{\"type\":\"string\"}",
    "{\"type\":\"number\"}",
    "{\"type\":\"object\",\"title\":\"t\",\"description\":\"d\",\"properties\":{\"s\":{\"type\":"
    "\"string\",\"description\":\"free text\"},\"e\":{\"type\":\"string\",\"enum\":[\"x\",\"y\"]}},"
    "\"required\":[\"s\",\"e\"],\"additionalProperties\":false}",
};

static const char *const regex_cases[] = {
    "[a-z]{1,8}@[a-z]{1,8}\\.(com|org)",
    "(ab|cd){2,5}x?",
    "\\d{3}-\\d{4}",
    "[^\\n\"]{1,20}!",
    "[\\x{3b1}-\\x{3c9}]{2,6}",
    "(a|b)*c",
    "-?(0|[1-9][0-9]*)(\\.[0-9]+)?",
    "(yes|no|maybe)( (yes|no|maybe)){0,3}",
    "\\w{1,12}: ?[A-F0-9]{2}",
};

/* PCRE2 spells \u{...} as \x{...}; the grammar compiler reads the ECMAScript form. */
static const char *const regex_cases_ecma[] = {
    "[a-z]{1,8}@[a-z]{1,8}\\.(com|org)",
    "(ab|cd){2,5}x?",
    "\\d{3}-\\d{4}",
    "[^\\n\"]{1,20}!",
    "[\\u03b1-\\u03c9]{2,6}",
    "(a|b)*c",
    "-?(0|[1-9][0-9]*)(\\.[0-9]+)?",
    "(yes|no|maybe)( (yes|no|maybe)){0,3}",
    "\\w{1,12}: ?[A-F0-9]{2}",
};

#endif
