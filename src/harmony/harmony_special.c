#include "harmony/harmony_special.h"

#include <stddef.h>

const char *harmony_special_name(int32_t id) {
    switch (id) {
    case HARMONY_TOK_RETURN:
        return "<|return|>";
    case HARMONY_TOK_CONSTRAIN:
        return "<|constrain|>";
    case HARMONY_TOK_CHANNEL:
        return "<|channel|>";
    case HARMONY_TOK_START:
        return "<|start|>";
    case HARMONY_TOK_END:
        return "<|end|>";
    case HARMONY_TOK_MESSAGE:
        return "<|message|>";
    case HARMONY_TOK_CALL:
        return "<|call|>";
    default:
        return NULL;
    }
}

bool harmony_is_special(int32_t id) {
    return id >= HARMONY_FIRST_SPECIAL && id < HARMONY_VOCAB_SIZE;
}

bool harmony_is_terminator(int32_t id) {
    return id == HARMONY_TOK_END || id == HARMONY_TOK_RETURN || id == HARMONY_TOK_CALL;
}
