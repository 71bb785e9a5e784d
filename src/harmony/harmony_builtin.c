/* The built-in tools gpt-oss was trained with, as the system message describes them. The texts are
 * the model's training-time prompt and must stay byte-exact (see the golden test_browser_*.txt). */
#include "base/error.h"
#include "harmony/harmony_tools.h"

#include <string.h>

static const char BROWSER_DESCRIPTION[] =
    "Tool for browsing.\n"
    "The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
    "Cite information from the tool using the following format:\n"
    "`\xE3\x80\x90{cursor}\xE2\x80\xA0L{line_start}(-L{line_end})?\xE3\x80\x91`, for example: "
    "`\xE3\x80\x90"
    "6\xE2\x80\xA0L9-L11\xE3\x80\x91` or `\xE3\x80\x90"
    "8\xE2\x80\xA0L3\xE3\x80\x91`.\n"
    "Do not quote more than 10 words directly from the tool output.\n"
    "sources=web (default: web)";

static const char SEARCH_DESCRIPTION[] =
    "Searches for information related to `query` and displays `topn` results.";
static const char SEARCH_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"},"
    "\"topn\":{\"type\":\"number\",\"default\":10},\"source\":{\"type\":\"string\"}},"
    "\"required\":[\"query\"]}";

static const char OPEN_DESCRIPTION[] =
    "Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, "
    "showing "
    "`num_lines` lines.\n"
    "Valid link ids are displayed with the formatting: "
    "`\xE3\x80\x90{id}\xE2\x80\xA0.*\xE3\x80\x91`.\n"
    "If `cursor` is not provided, the most recent page is implied.\n"
    "If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
    "If `loc` is not provided, the viewport will be positioned at the beginning of the document or "
    "centered on the most relevant passage, if available.\n"
    "Use this function without `id` to scroll to a new location of an opened page.";
static const char OPEN_SCHEMA[] = "{\"type\":\"object\",\"properties\":{"
                                  "\"id\":{\"type\":[\"number\",\"string\"],\"default\":-1},"
                                  "\"cursor\":{\"type\":\"number\",\"default\":-1},"
                                  "\"loc\":{\"type\":\"number\",\"default\":-1},"
                                  "\"num_lines\":{\"type\":\"number\",\"default\":-1},"
                                  "\"view_source\":{\"type\":\"boolean\",\"default\":false},"
                                  "\"source\":{\"type\":\"string\"}}}";

static const char FIND_DESCRIPTION[] =
    "Finds exact matches of `pattern` in the current page, or the page given by `cursor`.";
static const char FIND_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\"},"
    "\"cursor\":{\"type\":\"number\",\"default\":-1}},\"required\":[\"pattern\"]}";

static const char PYTHON_DESCRIPTION[] =
    "Use this tool to execute Python code in your chain of thought. The code will not be shown to "
    "the "
    "user. This tool should be used for internal reasoning, but not for code that is intended to "
    "be "
    "visible to the user (e.g. when creating plots, tables, or files).\n"
    "\n"
    "When you send a message containing Python code to python, it will be executed in a stateful "
    "Jupyter notebook environment. python will respond with the output of the execution or time "
    "out "
    "after 120.0 seconds. The drive at '/mnt/data' can be used to save and persist user files. "
    "Internet access for this session is UNKNOWN. Depends on the cluster.";

int harmony_builtin_browser(harmony_builtin *b) {
    static const char *const names[3] = {"search", "open", "find"};
    static const char *const descs[3] = {SEARCH_DESCRIPTION, OPEN_DESCRIPTION, FIND_DESCRIPTION};
    static const char *const schemas[3] = {SEARCH_SCHEMA, OPEN_SCHEMA, FIND_SCHEMA};
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 3; i++) {
        json_error_t jerr;
        b->schemas[i] = json_loads(schemas[i], 0, &jerr);
        if (!b->schemas[i]) {
            harmony_builtin_free(b);
            return err_set("harmony: built-in browser.%s schema: %s", names[i], jerr.text);
        }
        b->tools[i] = (harmony_tool){names[i], descs[i], b->schemas[i]};
    }
    b->ns = (harmony_namespace){"browser", BROWSER_DESCRIPTION, b->tools, 3};
    return 0;
}

void harmony_builtin_python(harmony_builtin *b) {
    memset(b, 0, sizeof *b);
    b->ns = (harmony_namespace){"python", PYTHON_DESCRIPTION, NULL, 0};
}

void harmony_builtin_free(harmony_builtin *b) {
    for (int i = 0; i < 3; i++) json_decref(b->schemas[i]);
    memset(b, 0, sizeof *b);
}
