/* The special tokens of o200k_harmony that the harmony format is built from, and their names.
 *
 * The renderer writes these ids between text runs; the parser switches state on them. Every other
 * id at or above HARMONY_FIRST_SPECIAL (<|startoftext|>, <|endoftext|>, the <|reserved_N|> block)
 * is a special token that harmony never emits, so the parser ignores it rather than treating its
 * name as text. */
#ifndef GPTOSS_HARMONY_SPECIAL_H
#define GPTOSS_HARMONY_SPECIAL_H

#include <stdbool.h>
#include <stdint.h>

enum {
    HARMONY_FIRST_SPECIAL = 199998, /* <|startoftext|>; ids below are ordinary BPE tokens */
    HARMONY_TOK_ENDOFTEXT = 199999,
    HARMONY_TOK_RETURN = 200002,    /* end of a final answer: stop sampling */
    HARMONY_TOK_CONSTRAIN = 200003, /* header: a constrained content type follows ("json") */
    HARMONY_TOK_CHANNEL = 200005,   /* header: the channel name follows */
    HARMONY_TOK_START = 200006,     /* a message begins; the header (role ...) follows */
    HARMONY_TOK_END = 200007,       /* a message ends; more messages may follow */
    HARMONY_TOK_MESSAGE = 200008,   /* header → content */
    HARMONY_TOK_CALL = 200012, /* end of an assistant message addressed to a tool: stop sampling */
    HARMONY_VOCAB_SIZE = 201088, /* embedding rows; ids at or above are never valid */
};

/* "<|start|>" etc. for the seven harmony tokens; NULL for any other id. */
const char *harmony_special_name(int32_t id);
/* True for ids in [HARMONY_FIRST_SPECIAL, HARMONY_VOCAB_SIZE): every special or reserved token. */
bool harmony_is_special(int32_t id);
/* True for the three message terminators <|end|>, <|return|>, <|call|>. */
bool harmony_is_terminator(int32_t id);

#endif
