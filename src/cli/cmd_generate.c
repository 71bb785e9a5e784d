/* gptoss generate: run one prompt through the CPU reference backend and print the tokens, optionally as
 * JSON with top-K logprobs of every generated token and of every prompt position (vLLM's convention:
 * a prompt position's entry is the distribution of that position given the tokens before it, so the
 * first is null). */
#include "backend/cpu/cpu_model.h"
#include "base/error.h"
#include "base/xalloc.h"
#include "cli/args.h"
#include "cli/engine_args.h"
#include "cli/commands.h"
#include "cli/offline.h"
#include "step/sampler.h"
#include "model/weights.h"
#include "tokenizer/bpe.h"
#include "harmony/harmony_render.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char USAGE[] =
    "usage: gptoss generate --model DIR|synthetic:tiny (--prompt-ids 12,34,56 | --prompt TEXT | "
    "--chat TEXT)\n"
    "                       [--max-tokens N] [--temperature T]\n"
    "                       [--seed S] [--logprobs K] [--prompt-logprobs K] [--ignore-eos] "
    "[--json]\n"
    "                       [--backend cpu|cuda] [engine options]\n"
    "       gptoss generate --model DIR --prompts-file FILE.jsonl [--backend cpu|cuda] [engine "
    "options]\n"
    "--prompt encodes raw text; --chat renders one user message with harmony (system message with\n"
    "today's date and reasoning medium) and appends <|start|>assistant. Both need the tokenizer\n"
    "(DIR/tokenizer.json or the cache that scripts/setup.sh fills); the output then includes the "
    "text.\n"
    "Runs the CPU reference backend, or with --backend cuda the GPU (through the engine; the model "
    "may\n"
    "then also be synthetic:20b or synthetic:120b[:layers=N], random weights made on the GPU).\n"
    "Temperature 0 (the default) is greedy. Generation stops at\n"
    "max-tokens or at a stop token (<|return|>, <|call|> and the config's eos_token_id) unless\n"
    "--ignore-eos is given.\n"
    "With --prompts-file, every line is a request ({\"prompt_ids\":[…], \"max_tokens\":N, "
    "\"temperature\",\n"
    "\"seed\", \"top_p\", \"top_k\", \"min_p\", \"presence_penalty\", \"frequency_penalty\",\n"
    "\"repetition_penalty\", \"logprobs\", \"prompt_logprobs\", \"stop_token_ids\", "
    "\"ignore_eos\", \"n\",\n"
    "\"priority\"}); all run concurrently through the engine and one JSON object per request is "
    "printed\n"
    "in input order. The engine options are serve's (one prompt on the CPU reference backend runs\n"
    "without the engine and checks them only):\n" ENGINE_ARGS_HELP;

typedef struct {
    const char *model;
    int32_t *prompt;
    int n_prompt;
    long max_tokens, logprobs, prompt_logprobs, seed;
    double temperature;
    int json, ignore_eos;
    const char *prompt_text, *chat_text;
    tokenizer *tok; /* when text was given (or the model has one): to print the output as text */
} gen_opts;

/* Renders one user message as a harmony conversation ready for the assistant's reply. */
static int render_chat(const tokenizer *tok, const char *text, ivec *out) {
    char date[16];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%d", gmtime_r(&now, &tm));
    harmony_system sys = harmony_system_defaults();
    sys.current_date = date;
    harmony_message msgs[2] = {{.role = HARMONY_ROLE_SYSTEM, .system = &sys},
                               {.role = HARMONY_ROLE_USER, .text = text}};
    harmony_conversation conv = {msgs, 2};
    harmony_pieces p = {0};
    int rc = harmony_render_conversation(&conv, true, true, &p);
    if (rc == 0) rc = harmony_pieces_to_tokens(&p, tokenizer_encode_ordinary_cb, (void *)tok, out);
    harmony_pieces_free(&p);
    return rc;
}

/* Turns --prompt / --chat into prompt ids. */
static int text_prompt(gen_opts *o) {
    o->tok = tokenizer_load_for_model(o->model);
    if (!o->tok) return err_prefix("--prompt/--chat need a tokenizer");
    ivec ids = {0};
    int rc = o->chat_text
                 ? render_chat(o->tok, o->chat_text, &ids)
                 : tokenizer_encode_ordinary(o->tok, o->prompt_text, strlen(o->prompt_text), &ids);
    if (rc == 0 && ids.len == 0) rc = err_set("--prompt: the text encodes to no tokens");
    if (rc == 0) {
        free(o->prompt);
        o->prompt = ids.v;
        o->n_prompt = (int)ids.len;
    } else {
        ivec_free(&ids);
    }
    return rc;
}

static json_t *top_json(const float *logits, int vocab, float temperature, int k) {
    int32_t *ids = xmalloc((size_t)k * sizeof *ids);
    float *lp = xmalloc((size_t)k * sizeof *lp);
    sampler_top_logprobs(logits, vocab, temperature, k, ids, lp);
    json_t *arr = json_array();
    for (int j = 0; j < k && j < vocab; j++)
        json_array_append_new(arr, json_pack("[if]", ids[j], (double)lp[j]));
    free(ids), free(lp);
    return arr;
}

/* The generated text (special tokens by name); a static buffer, valid until the next call. */
static const char *decoded_text(const tokenizer *tok, json_t *tokens) {
    static char *text;
    free(text);
    text = NULL;
    size_t n = json_array_size(tokens), len;
    int32_t *ids = xmalloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(tokens, i));
    if (tokenizer_decode(tok, ids, n, &text, &len) != 0) text = xstrdup("");
    free(ids);
    return text;
}

static int is_stop(const model_config *c, int32_t tok) {
    if (tok == 200002 || tok == 200012) return 1; /* <|return|>, <|call|> */
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] == tok) return 1;
    return 0;
}

static int run(const gen_opts *o) {
    model_weights w;
    if (weights_load(o->model, &w) != 0) return -1;
    const model_config *c = &w.cfg;
    const int V = c->vocab;
    cpu_model m;
    cpu_model_init(&m, &w);
    cpu_kv_cache kv;
    cpu_kv_init(&kv, c);
    json_t *tokens = json_array(), *lps = o->logprobs ? json_array() : json_null(),
           *plps = o->prompt_logprobs ? json_array() : json_null();
    const char *finish = "length";
    int want_all = o->prompt_logprobs > 0;
    float *logits = xmalloc((size_t)(want_all ? o->n_prompt : 1) * V * sizeof *logits);
    int rc = cpu_forward(&m, &kv, o->prompt, o->n_prompt,
                         want_all ? CPU_LOGITS_ALL : CPU_LOGITS_LAST, logits);
    if (rc == 0 && want_all) {
        json_array_append_new(plps, json_null());
        for (int t = 0; t + 1 < o->n_prompt; t++)
            json_array_append_new(plps,
                                  top_json(logits + (size_t)t * V, V, 0, (int)o->prompt_logprobs));
    }
    const float *last = logits + (size_t)(want_all ? o->n_prompt - 1 : 0) * V;
    for (long i = 0; rc == 0 && i < o->max_tokens; i++) {
        int32_t tok = sampler_pick(last, V, (float)o->temperature, (uint64_t)o->seed, (uint64_t)i);
        json_array_append_new(tokens, json_integer(tok));
        if (o->logprobs)
            json_array_append_new(lps, top_json(last, V, (float)o->temperature, (int)o->logprobs));
        if (!o->ignore_eos && is_stop(c, tok)) {
            finish = "stop";
            break;
        }
        if (i + 1 == o->max_tokens) break;
        rc = cpu_forward(&m, &kv, &tok, 1, CPU_LOGITS_LAST, logits);
        last = logits;
    }
    if (rc == 0) {
        if (o->json) {
            json_t *out = json_pack("{sOsOsOss}", "tokens", tokens, "logprobs", lps,
                                    "prompt_logprobs", plps, "finish_reason", finish);
            if (o->tok) json_object_set_new(out, "text", json_string(decoded_text(o->tok, tokens)));
            char *s = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9));
            printf("%s\n", s);
            free(s);
            json_decref(out);
        } else {
            if (o->tok) {
                printf("%s\n", decoded_text(o->tok, tokens));
            } else {
                for (size_t i = 0; i < json_array_size(tokens); i++)
                    printf("%s%lld", i ? "," : "",
                           (long long)json_integer_value(json_array_get(tokens, i)));
                printf("\n");
            }
        }
    }
    json_decref(tokens), json_decref(lps), json_decref(plps);
    free(logits);
    cpu_kv_free(&kv);
    weights_free(&w);
    return rc;
}

/* One prompt through the engine on another backend: the request as a JSON line for run_offline,
 * which prints it the way run() does. */
static int run_engine_single(const gen_opts *o, offline_opts *off) {
    json_t *ids = json_array();
    for (int i = 0; i < o->n_prompt; i++) json_array_append_new(ids, json_integer(o->prompt[i]));
    json_t *req =
        json_pack("{sosIsfsIsIsIsb}", "prompt_ids", ids, "max_tokens", (json_int_t)o->max_tokens,
                  "temperature", o->temperature, "seed", (json_int_t)o->seed, "logprobs",
                  (json_int_t)o->logprobs, "prompt_logprobs", (json_int_t)o->prompt_logprobs,
                  "ignore_eos", o->ignore_eos);
    char *line = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    off->model_dir = o->model;
    off->prompts_text = line;
    off->print_as_generate = o->json ? 2 : 1;
    off->print_text = o->tok != NULL;
    int rc = run_offline(off);
    free(line);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    args_t a;
    args_init(&a, argc, argv);
    gen_opts o = {.max_tokens = 16};
    offline_opts off = {0};
    runtime_args_default(&off.rt);
    const char *v = NULL;
    int n_prompt_flags = 0;
    while (a.i < argc) {
        const int em = engine_args_parse(&a, &off.rt);
        if (em < 0) {
            free(o.prompt);
            return args_fail(&a);
        }
        if (em > 0) continue;
        if (args_flag(&a, "--help") || args_flag(&a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (args_flag(&a, "--json")) {
            o.json = 1;
        } else if (args_flag(&a, "--ignore-eos")) {
            o.ignore_eos = 1;
        } else if (args_opt(&a, "--prompt-ids", &v)) {
            free(o.prompt);
            o.prompt = NULL;
            n_prompt_flags++;
            if (args_int_list("--prompt-ids", v, &o.prompt, &o.n_prompt)) return args_fail(&a);
        } else if (args_opt(&a, "--prompt", &o.prompt_text)) {
            n_prompt_flags++;
            if (!o.prompt_text) goto fail;
        } else if (args_opt(&a, "--chat", &o.chat_text)) {
            n_prompt_flags++;
            if (!o.chat_text) goto fail;
        } else if (args_opt(&a, "--max-tokens", &v)) {
            /* At least one: what the server and --prompts-file require (max_tokens >= 1). */
            if (args_int("--max-tokens", v, 1, 1 << 20, &o.max_tokens)) goto fail;
        } else if (args_opt(&a, "--logprobs", &v)) {
            /* The --prompts-file and vLLM limit (max_logprobs 20). */
            if (args_int("--logprobs", v, 0, 20, &o.logprobs)) goto fail;
        } else if (args_opt(&a, "--prompt-logprobs", &v)) {
            if (args_int("--prompt-logprobs", v, 0, 20, &o.prompt_logprobs)) goto fail;
        } else if (args_opt(&a, "--seed", &v)) {
            if (args_int("--seed", v, 0, INT64_MAX, &o.seed)) goto fail;
        } else if (args_opt(&a, "--temperature", &v)) {
            if (args_double("--temperature", v, 0, 100, &o.temperature)) goto fail;
        } else if (args_opt(&a, "--prompts-file", &off.prompts_file)) {
            n_prompt_flags++;
            if (!off.prompts_file) goto fail;
        } else {
            free(o.prompt);
            return args_unknown(&a, USAGE);
        }
    }
    if (n_prompt_flags > 1) {
        free(o.prompt);
        return args_usage_error(
            &a, "give one prompt: --prompt-ids, --prompt, --chat or --prompts-file (not several)",
            USAGE);
    }
    if (!off.rt.model || (!o.prompt && !o.prompt_text && !o.chat_text && !off.prompts_file)) {
        free(o.prompt);
        return args_usage_error(
            &a, "--model and a prompt (--prompt-ids, --prompt or --chat) are required", USAGE);
    }
    /* The engine and backend options are checked even where the CPU reference path ignores them,
     * so that generate refuses what serve refuses. */
    if (runtime_check(&off.rt) != 0) {
        free(o.prompt);
        return args_fail(&a);
    }
    /* synthetic:NAME → the checkpoint on disk where the backend reads one, as `serve` does. */
    char *model = runtime_resolve_model(&off.rt);
    int rc = 0;
    if (!model) {
        rc = -1;
    } else if (off.prompts_file) {
        off.model_dir = model;
        rc = run_offline(&off);
    } else {
        o.model = model;
        if ((o.prompt_text || o.chat_text) && text_prompt(&o) != 0) {
            rc = -1;
        } else if (!o.prompt || o.n_prompt == 0) {
            rc = err_set("the prompt is empty");
        } else {
            const bool other_backend = strcmp(off.rt.backend, "cpu") != 0;
            rc = other_backend ? run_engine_single(&o, &off) : run(&o);
        }
    }
    free(o.prompt);
    tokenizer_free(o.tok);
    free(model);
    return rc != 0 ? args_error_exit(&a, 1) : 0;
fail:
    free(o.prompt);
    return args_fail(&a);
}
