/* The compiled Pulsar framing stage (see frames.h). */
#include "frames.h"

#include "crc32c.h"
#include "fields.h"
#include "pbscan.h"

#define NO_COUNT INT64_MIN /* no SEND count (an int32 never is) */

typedef int64_t row_t[PD_FC_NCOLS];

/* The command [at, end): 1 when taken, with the type and body columns set in `row`. */
/* *send_count: SEND's num_messages when set, else NO_COUNT. */
static int command(const pd_cursor *c, int64_t at, int64_t end, row_t row, int64_t *send_count) {
    uint32_t numbers[2] = {PD_F_COMMAND_TYPE, 0};
    pd_pb_hit hits[2];
    const pd_body *b;
    uint64_t type;
    if (!pd_pb_check(c, at, end, PD_MSG_BASE_COMMAND, 0, 1))
        return 0;
    if (!pd_pb_find(c, at, end, numbers, 1, hits) || !hits[0].count)
        return 0; /* no type: Python reports it */
    type = hits[0].value; /* a known enum value (pd_pb_check) */
    if (type > PD_MAX_BODY_TYPE || pd_bodies[type].msg < 0)
        return 0; /* a command without a sub-message type: Python reports it */
    b = &pd_bodies[type];
    numbers[0] = (uint32_t)type;
    if (!pd_pb_find(c, at, end, numbers, 1, hits) || hits[0].count != 1)
        return 0; /* no body (an anomaly), or two merged by upb: Python */
    row[PD_FC_COMMAND_TYPE] = (int64_t)type;
    {
        int64_t bat = hits[0].at, bend = hits[0].at + hits[0].len;
        uint32_t want[8] = {b->request_id, b->producer_id, b->consumer_id, b->sequence_id,
                            b->topic,      b->message_id,  b->num_messages, 0};
        static const int bits[5] = {PD_HAS_REQUEST_ID, PD_HAS_PRODUCER_ID, PD_HAS_CONSUMER_ID,
                                    PD_HAS_SEQUENCE_ID, PD_HAS_TOPIC};
        pd_pb_hit h[7];
        if (!pd_pb_find(c, bat, bend, want, 7, h))
            return 0;
        for (int i = 0; i < 4; i++)
            if (want[i] && h[i].count) {
                row[PD_FC_PRESENT] |= bits[i];
                row[PD_FC_REQUEST_ID + i] = (int64_t)h[i].value;
            }
        if (want[4] && h[4].count) {
            row[PD_FC_PRESENT] |= PD_HAS_TOPIC;
            row[PD_FC_TOPIC_AT] = h[4].at;
            row[PD_FC_TOPIC_LEN] = h[4].len;
        }
        if (want[5]) {
            int64_t mat = h[5].first_at, mlen = h[5].first_len;
            if (b->message_id_repeated) {
                row[PD_FC_PRESENT] |= PD_HAS_NUM_MESSAGES;
                row[PD_FC_NUM_MESSAGES] = h[5].count;
            } else if (h[5].count > 1)
                return 0; /* upb merges repeated singular sub-messages: Python */
            if (h[5].count) {
                uint32_t ids[2] = {PD_F_LEDGER_ID, PD_F_ENTRY_ID};
                pd_pb_hit m[2];
                if (!pd_pb_find(c, mat, mat + mlen, ids, 2, m))
                    return 0;
                row[PD_FC_PRESENT] |= PD_HAS_MESSAGE_ID;
                row[PD_FC_LEDGER_ID] = (int64_t)m[0].value; /* proto2 default 0 */
                row[PD_FC_ENTRY_ID] = (int64_t)m[1].value;
            }
        }
        if (type == PD_CMD_ACK) { /* what a frame run's ACK rule reads (frames.h) */
            uint32_t an[1] = {PD_F_ACK_TYPE};
            pd_pb_hit ah[1];
            if (!pd_pb_find(c, bat, bend, an, 1, ah))
                return 0;
            if (ah[0].count && ah[0].value == PD_ACK_CUMULATIVE)
                row[PD_FC_PRESENT] |= PD_HAS_CUMULATIVE;
            if (h[5].count) {
                uint32_t sn[1] = {PD_F_ACK_SET};
                pd_pb_hit sh[1];
                if (!pd_pb_find(c, h[5].first_at, h[5].first_at + h[5].first_len, sn, 1, sh))
                    return 0;
                if (sh[0].count)
                    row[PD_FC_PRESENT] |= PD_HAS_ACK_SET;
            }
        }
        if (want[6] && h[6].count) /* SEND's own count (int32) */
            *send_count = (int64_t)(int32_t)(uint32_t)h[6].value;
        else
            *send_count = NO_COUNT;
    }
    return 1;
}

/* The payload section [p, end) of a SEND/MESSAGE frame (sections.decode_payload_section):
 * 1 when every part is right but perhaps the checksum, with its columns set. */
static int payload(const pd_cursor *c, int64_t p, int64_t end, row_t row, int64_t send_count) {
    uint32_t numbers[2] = {PD_F_BROKER_TIMESTAMP, PD_F_BROKER_INDEX};
    pd_pb_hit h[2];
    int64_t size, mstart;
    row[PD_FC_CHECKSUM] = PD_CHECKSUM_ABSENT;
    if (end - p >= 2 && pd_be16(c, p) == PD_MAGIC_BROKER_ENTRY) {
        int64_t bsize;
        if (end - p < 6)
            return 0;
        bsize = pd_be32(c, p + 2);
        if (p + 6 + bsize > end || !pd_pb_check(c, p + 6, p + 6 + bsize, PD_MSG_BROKER_ENTRY, 0, 0))
            return 0;
        if (!pd_pb_find(c, p + 6, p + 6 + bsize, numbers, 2, h))
            return 0;
        if (h[0].count) {
            row[PD_FC_PRESENT] |= PD_HAS_ENTRY_TS;
            row[PD_FC_ENTRY_TS] = (int64_t)h[0].value;
        }
        if (h[1].count) {
            row[PD_FC_PRESENT] |= PD_HAS_ENTRY_INDEX;
            row[PD_FC_ENTRY_INDEX] = (int64_t)h[1].value;
        }
        p += 6 + bsize;
    }
    if (end - p >= 6 && pd_be16(c, p) == PD_MAGIC_CHECKSUM) {
        int ok;
        uint32_t expected = pd_be32(c, p + 2), computed;
        p += 6;
        computed = pd_crc32c(c, p, end - p, &ok);
        if (!ok)
            return 0;
        row[PD_FC_CRC_EXPECTED] = expected;
        row[PD_FC_CRC_COMPUTED] = computed;
        row[PD_FC_CHECKSUM] = computed == expected ? PD_CHECKSUM_VALID : PD_CHECKSUM_INVALID;
    }
    if (end - p < 4)
        return 0; /* pulsar.payload_missing */
    size = pd_be32(c, p);
    mstart = p + 4;
    if (mstart + size > end)
        return 0; /* bad magic or metadata size */
    if (!pd_pb_check(c, mstart, mstart + size, PD_MSG_MESSAGE_METADATA, 0, 0))
        return 0;
    numbers[0] = PD_F_NUM_IN_BATCH;
    if (!pd_pb_find(c, mstart, mstart + size, numbers, 1, h))
        return 0;
    row[PD_FC_PRESENT] |= PD_HAS_PAYLOAD | PD_HAS_NUM_MESSAGES;
    row[PD_FC_META_AT] = mstart;
    row[PD_FC_META_LEN] = size;
    row[PD_FC_PAYLOAD_AT] = mstart + size;
    row[PD_FC_PAYLOAD_LEN] = end - mstart - size;
    if (row[PD_FC_COMMAND_TYPE] == PD_CMD_SEND && send_count != NO_COUNT) {
        row[PD_FC_NUM_MESSAGES] = send_count;
        row[PD_FC_PRESENT] |= PD_HAS_SEND_COUNT;
    }
    else
        row[PD_FC_NUM_MESSAGES] =
            h[0].count ? (int64_t)(int32_t)(uint32_t)h[0].value : PD_DEFAULT_NUM_IN_BATCH;
    return 1;
}

/* Whether a frame run takes this frame (dissector/pulsar/frame_runs.py): its type is in the
 * mask, its checksum is not bad, and an ACK acknowledges one message id, with no request
 * id, and (individually) no ack set: the acks whose effect the run's state rule applies. */
static int run_frame(const row_t row, uint64_t only_types) {
    int64_t type = row[PD_FC_COMMAND_TYPE], present = row[PD_FC_PRESENT];
    if (type >= 64 || !(only_types >> type & 1) || row[PD_FC_CHECKSUM] == PD_CHECKSUM_INVALID)
        return 0;
    if (type == PD_CMD_ACK)
        return !(present & PD_HAS_REQUEST_ID) && row[PD_FC_NUM_MESSAGES] == 1 &&
               (present & PD_HAS_CUMULATIVE || !(present & PD_HAS_ACK_SET));
    return 1;
}

int64_t pd_scan_frames(const pd_cursor *buf, int64_t pos, int64_t max_size, uint64_t only_types,
                       pd_frames *out, int *stop) {
    if (max_size > PD_MAX_FRAME_LIMIT) {
        *stop = PD_STOP_PYTHON;
        return pos;
    }
    for (;;) {
        row_t row = {0};
        int64_t total, csize, end, send_count = NO_COUNT;
        if (pos == buf->len) {
            *stop = PD_STOP_END;
            return pos;
        }
        if (!pd_need(buf, pos, 8)) {
            *stop = PD_STOP_MORE;
            return pos;
        }
        if (out->n >= out->cap) {
            *stop = PD_STOP_FULL;
            return pos;
        }
        total = pd_be32(buf, pos);
        csize = pd_be32(buf, pos + 4);
        if (total > max_size || total < 4 + PD_MIN_COMMAND_SIZE || csize < PD_MIN_COMMAND_SIZE ||
            csize + 4 > total) {
            *stop = PD_STOP_PYTHON; /* header anomaly and resync */
            return pos;
        }
        end = pos + 4 + total;
        if (!pd_need(buf, pos, 4 + total)) {
            *stop = PD_STOP_MORE;
            return pos;
        }
        row[PD_FC_OFFSET] = pos;
        row[PD_FC_TOTAL_SIZE] = total;
        row[PD_FC_COMMAND_SIZE] = csize;
        if (!command(buf, pos + 8, pos + 8 + csize, row, &send_count)) {
            *stop = PD_STOP_PYTHON;
            return pos;
        }
        if (row[PD_FC_COMMAND_TYPE] == PD_CMD_SEND || row[PD_FC_COMMAND_TYPE] == PD_CMD_MESSAGE) {
            if (!payload(buf, pos + 8 + csize, end, row, send_count)) {
                *stop = PD_STOP_PYTHON;
                return pos;
            }
        } else if (end != pos + 8 + csize) {
            *stop = PD_STOP_PYTHON; /* pulsar.trailing_bytes */
            return pos;
        }
        if (only_types != PD_ANY_TYPE && !run_frame(row, only_types)) {
            *stop = PD_STOP_PYTHON; /* a frame the run's rules leave to Python */
            return pos;
        }
        for (int k = 0; k < PD_FC_NCOLS; k++)
            out->col[k][out->n] = row[k];
        out->n++;
        pos = end;
    }
}
