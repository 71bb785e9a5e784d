/* A step as bytes: what node 0 sends the other nodes of a tensor-parallel group that spans several
 * machines (--nnodes N > 1; backend/cuda/tp_nodes.h moves the bytes with ncclBroadcast).
 *
 * Why: on one machine every rank's host thread reads the engine's step_batch itself. A headless
 * node (--headless) has no engine: its process receives each step from node 0 and launches it on
 * its own ranks, which then meet node 0's ranks in the step's collectives. So the message carries
 * exactly what a rank other than 0 reads from a step (runner.c's checks, packing and row modes)
 * plus the fix-ups that tp_wait hands those ranks on one machine (runner_tp_follow: the tokens of
 * the last step's rows that rank 0 sampled on the host or at wait, which the other ranks' device
 * copies of the slots' last tokens need before the next step reads them).
 *
 * Not carried, because no rank other than 0 reads them: the penalty history (history,
 * history_len: rank 0 samples penalised rows on the host; decoded as none) and structured output's
 * masks (rank 0 samples constrained rows at wait; decoded as NULL). Every row's sampling
 * parameters are carried whole, logit bias entries included, since they decide a row's mode.
 *
 * Layout: a header of STEP_WIRE_HEADER_BYTES, then the payload. All numbers little-endian, written
 * and read field by field (no struct is copied as it lies in memory):
 *   header   u32 magic "GPTW", u16 version, u16 kind, u32 seq, u32 checksum (FNV-1a 32 of the
 *            payload), u64 payload bytes, u64 reserved (0)
 *   STEP     i32 n_seqs, n_tokens, block_size, full_stride, swa_stride, dp_size,
 *            dp_seq0[STEP_DP_MAX + 1], u8 flags (bit 0: prompt_next present);
 *            per token: token_ids, then positions; per sequence: slot, start_pos, swa_first,
 *            u8 sample, u8 reset_slot, output_len, prompt_len, prompt_next (when flagged), its
 *            sampling parameters (f32 temperature, top_p, i32 top_k, f32 min_p, presence,
 *            frequency, repetition penalties, u64 seed, u8 has_seed, i32 logprobs, prompt_logprobs,
 *            u8 constrained, i32 n_logit_bias, then that many (i32 token, f32 bias)); query_start
 *            (n_seqs + 1); per sequence its full table, then per sequence its sliding table, each
 *            as i32 n and the first n entries (the entries after them are -1: trailing -1s are not
 *            sent);
 *            then i32 n_fixups and that many (i32 slot, i32 token).
 *   SHUTDOWN no payload: the receiver stops.
 *
 * Reading never trusts the bytes: the header's magic, version, kind, reserved field and length
 * bound, the checksum, every count against the bytes left, every index and flag against its range
 * (query_start rising from 0 to n_tokens, table lengths within their strides, booleans 0 or 1),
 * and no byte left over. Each refusal names what was wrong (err_set).
 *
 * seq counts the messages of a run from 0; a receiver expects each one to be the last one + 1, so a
 * lost or repeated message is an error and not a silently different step. */
#ifndef GPTOSS_STEP_STEP_WIRE_H
#define GPTOSS_STEP_STEP_WIRE_H

#include "step/batch.h"

#include <stddef.h>
#include <stdint.h>

enum {
    STEP_WIRE_VERSION = 1,
    STEP_WIRE_HEADER_BYTES = 32,
    STEP_WIRE_MAGIC = 0x57545047, /* "GPTW" as little-endian bytes */
};

/* The largest payload a reader accepts (a step of 8,192 tokens and 256 sequences with 128K-token
 * contexts is about 8 MB), and the most entries a decoded block table may have (n_seqs x stride:
 * the trailing -1s are not sent, so the table's size is not bounded by the payload's). */
#define STEP_WIRE_MAX_PAYLOAD ((uint64_t)1 << 30)
#define STEP_WIRE_MAX_TABLE   ((int64_t)1 << 26)

enum step_wire_kind { STEP_WIRE_STEP = 1, STEP_WIRE_SHUTDOWN = 2 };

typedef struct {
    int kind; /* enum step_wire_kind */
    uint32_t seq;
    uint32_t checksum;
    uint64_t payload_bytes;
} step_wire_header;

/* A growable byte buffer: header then payload. */
typedef struct {
    unsigned char *data;
    size_t len, cap;
} step_wire_buf;

void step_wire_buf_free(step_wire_buf *b);

/* out = the message of step st with its fix-ups (n_fixups pairs of slot, token; may be 0). -1 with
 * err_set when st's counts cannot be sent (negative, or a payload past STEP_WIRE_MAX_PAYLOAD). */
int step_wire_encode_step(step_wire_buf *out, uint32_t seq, const step_batch *st,
                          const int32_t *fixups, int n_fixups);
/* out = the message that ends a headless node's loop. */
void step_wire_encode_shutdown(step_wire_buf *out, uint32_t seq);

/* The header at buf (n bytes, at least STEP_WIRE_HEADER_BYTES): 0, or -1 with err_set when it is
 * short, not ours (magic), of another version, of an unknown kind, has a non-zero reserved field,
 * or announces more than STEP_WIRE_MAX_PAYLOAD bytes (or any for SHUTDOWN). */
int step_wire_header_read(const void *buf, size_t n, step_wire_header *h);

/* A received step: st's arrays (history: NULL entries; masks: NULL) and the fix-ups are its own,
 * freed by step_wire_step_free. */
typedef struct {
    step_batch st;
    int32_t *fixups; /* n_fixups pairs (slot, token) */
    int n_fixups;
    logit_bias_entry *bias; /* every row's logit bias entries, one after the other */
} step_wire_step;

/* The payload (n bytes, after the header h) as a step. 0, or -1 with err_set (see above); out is
 * then empty. */
int step_wire_decode_step(const step_wire_header *h, const void *payload, size_t n,
                          step_wire_step *out);
void step_wire_step_free(step_wire_step *s);

/* FNV-1a, 32 bits: the payload's checksum (catches a payload that is not the one the header was
 * written for; NCCL's transports carry their own integrity checks). */
uint32_t step_wire_checksum(const void *data, size_t n);

#endif
