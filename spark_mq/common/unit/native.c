/* The append path's per-message work in C, the other half of spark_mq/common/unit/native.py: a batch
 * of messages to commitlog units in one pass, and what the dispatch takes from their property strings;
 * a lone message's unit encoded and pwritten into its commitlog file in one call (a network send's put).
 *
 * Why C: the pure-Python/numpy encoder (encode.py) spends ~0.4 us a message on numpy record fields,
 * a four-piece join per message and a CRC call per body; this writes each unit's header, body, topic
 * and properties straight into the output buffer. The dispatch's numpy scan of property strings
 * (store/dispatch.py packed_dispatch_info) costs another ~0.45 us a message; this, one pass. No Python.h: loaded with ctypes, so it builds
 * wherever a C compiler exists (`python -m spark_mq.common.unit.native`).
 *
 * The byte layout is spark_mq/common/unit/layout.py's (RocketMQ 4.x, big-endian, IPv4 hosts); the
 * offsets below must match it, and tests/unit/common/test_unit_native.py (test_append_one_native.py for a
 * lone message) checks every byte against the pure-Python encoder (and the dispatch info against the numpy
 * scan's). Thread-safety: pure functions of their arguments (the CRC table and the CPU's PCLMULQDQ check are
 * set up when the library is loaded), but for the index insert and the lone message's append, which write the
 * index file and the commitlog file they are given (their callers serialise them).
 */
#define _POSIX_C_SOURCE 200809L  /* pwrite under -std=c99 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#ifndef SPARK_MQ_SOURCE_SHA256
#define SPARK_MQ_SOURCE_SHA256 "unknown"
#endif

enum {
    TOTAL_SIZE = 0, MAGIC = 4, BODY_CRC = 8, QUEUE_ID = 12, FLAG = 16, QUEUE_OFFSET = 20, PHYSICAL_OFFSET = 28,
    SYS_FLAG = 36, BORN_TIMESTAMP = 40, BORN_HOST = 48, STORE_TIMESTAMP = 56, STORE_HOST = 64, RECONSUME_TIMES = 72,
    PREPARED_OFFSET = 76, BODY_LENGTH = 84, HEADER_SIZE = 88, HOST_SIZE = 8,
};

static uint32_t crc_table[8][256];

__attribute__((constructor)) static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

/* zlib's CRC-32 (IEEE, reflected) register c continued over n bytes, slicing by 8 */
static uint32_t crc32_update(uint32_t c, const uint8_t *p, int64_t n) {
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF]
            ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]]
            ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

static uint32_t crc32_ieee(const uint8_t *p, int64_t n);  /* in the append block below */

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* SHA-256 of the source this library was built from (native.py loads only a library of its native.c) */
const char *spark_mq_units_source(void) {
    return SPARK_MQ_SOURCE_SHA256;
}

/* Java's String.hashCode of ASCII bytes, continued from h, four bytes a step (h*31^4 + ...: the steps'
 * multiplications overlap, where one byte a step waits on the last);
 * *ascii is cleared when a byte is not ASCII (Java hashes UTF-16 units: the caller decodes those) */
static uint32_t java_hash(uint32_t h, const uint8_t *p, const uint8_t *end, int *ascii) {
    uint32_t seen = 0;
    for (; end - p >= 4; p += 4) {
        seen |= (uint32_t)(p[0] | p[1] | p[2] | p[3]);
        h = h * 923521u + p[0] * 29791u + p[1] * 961u + p[2] * 31u + p[3];
    }
    for (; p < end; p++) {
        seen |= *p;
        h = 31u * h + *p;
    }
    if (seen & 0x80) *ascii = 0;
    return h;
}

/* RocketMQ's indexKeyHashMethod: abs(hashCode), Integer.MIN_VALUE as 0 */
static int32_t positive_hash(uint32_t h) {
    int64_t v = (int32_t)h;
    v = v < 0 ? -v : v;
    return v > 0x7FFFFFFF ? 0 : (int32_t)v;
}

static int is_name(const uint8_t *p, const uint8_t *end, const char *name, size_t size) {
    return (size_t)(end - p) == size && memcmp(p, name, size) == 0;
}

/* key number i of a pass: its row, and its hash into key_hashes (int32) or else wide_hashes (int64) */
static void put_key(int64_t *key_rows, int32_t *key_hashes, int64_t *wide_hashes, int64_t i, int64_t row, int32_t hash) {
    key_rows[i] = row;
    if (key_hashes) key_hashes[i] = hash;
    else wide_hashes[i] = hash;
}

/* One property string [p, end) (name\x01value pairs, each ended by \x02 or the string's end) as the
 * store's dispatch takes it: *tag_code the hashCode of TAGS (0 without), and its index keys (UNIQ_KEY
 * when not empty, then each non-empty KEYS token split on spaces) appended at [*keys] (put_key) as row
 * and the positive hash of "topic#key", continued from prefix (the hash of "topic#"). A name
 * given twice takes its last value; *ascii is cleared when a hashed value is not ASCII. Returns 0, or -2
 * when the keys would pass key_capacity. */
static int scan_row(const uint8_t *p, const uint8_t *end, int64_t row, uint32_t prefix, int64_t *tag_code,
                    int64_t *key_rows, int32_t *key_hashes, int64_t *wide_hashes, int64_t *keys, int64_t key_capacity,
                    int *ascii) {
    const uint8_t *tag = NULL, *tag_end = NULL, *uniq = NULL, *uniq_end = NULL, *kv = NULL, *kv_end = NULL;
    while (p < end) {
        const uint8_t *pair_end = memchr(p, 0x02, (size_t)(end - p));
        if (!pair_end) pair_end = end;
        const uint8_t *nv = memchr(p, 0x01, (size_t)(pair_end - p));
        if (nv && nv > p) {
            if (is_name(p, nv, "TAGS", 4)) { tag = nv + 1; tag_end = pair_end; }
            else if (is_name(p, nv, "KEYS", 4)) { kv = nv + 1; kv_end = pair_end; }
            else if (is_name(p, nv, "UNIQ_KEY", 8)) { uniq = nv + 1; uniq_end = pair_end; }
        }
        if (pair_end == end) break;
        p = pair_end + 1;
    }
    *tag_code = tag ? (int32_t)java_hash(0, tag, tag_end, ascii) : 0;
    if (uniq && uniq_end > uniq) {
        if (*keys >= key_capacity) return -2;
        put_key(key_rows, key_hashes, wide_hashes, (*keys)++, row, positive_hash(java_hash(prefix, uniq, uniq_end, ascii)));
    }
    for (const uint8_t *k = kv; k && k < kv_end;) {
        const uint8_t *k_end = memchr(k, ' ', (size_t)(kv_end - k));
        if (!k_end) k_end = kv_end;
        if (k_end > k) {
            if (*keys >= key_capacity) return -2;
            put_key(key_rows, key_hashes, wide_hashes, (*keys)++, row, positive_hash(java_hash(prefix, k, k_end, ascii)));
        }
        if (k_end == kv_end) break;
        k = k_end + 1;
    }
    return 0;
}

/* What the store's dispatch takes from rows property strings back to back in props, lengths in
 * props_lengths (scan_row of each): tag_codes[row], and the index keys in message order as key_rows and
 * key_hashes, each continued from prefixes[row * prefix_step]. Returns the number of keys; -1 when a
 * hashed value is not ASCII (the caller's path decodes it), -2 when the keys outnumber key_capacity or
 * the lengths do not add up to props_size. */
int64_t spark_mq_dispatch_info(
    const uint8_t *props, int64_t props_size, const int64_t *props_lengths, int64_t rows, const int64_t *prefixes,
    int64_t prefix_step, int64_t *tag_codes, int64_t *key_rows, int32_t *key_hashes, int64_t key_capacity) {
    int64_t keys = 0, pos = 0;
    int ascii = 1;
    for (int64_t row = 0; row < rows; row++) {
        if (props_lengths[row] < 0 || pos + props_lengths[row] > props_size) return -2;
        const uint8_t *p = props + pos;
        pos += props_lengths[row];
        if (scan_row(p, p + props_lengths[row], row, (uint32_t)prefixes[row * prefix_step], tag_codes + row,
                     key_rows, key_hashes, NULL, &keys, key_capacity, &ascii))
            return -2;
    }
    if (pos != props_size) return -2;
    return ascii ? keys : -1;
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

enum { SLOT_SIZE = 4, ENTRY_SIZE = 20, ENTRY_PHYS = 4, ENTRY_TIME_DIFF = 12, ENTRY_PREV = 16, PREFETCH_AHEAD = 8 };

/* hash modulo slot_num, never negative (numpy's %) */
static int64_t slot_of(int32_t hash, int64_t slot_num) {
    int64_t slot = (int64_t)hash % slot_num;
    return slot < 0 ? slot + slot_num : slot;
}

/* The store's index file insert (spark_mq/store/index_file.py IndexFile.put_batch, whose numpy path
 * writes the same bytes): k keys as entries count..count+k-1 into entries (the file's entry 0), each
 * chained to the slot's previous entry; slots[hash % slot_num] set to the newest. A slot's old head
 * is kept only when 0 < head < count (a truncated file leaves stale ones), or when it is an entry
 * of this batch of the same slot. hashes are positive, time_diff is (ts - begin) / 1000 s clipped
 * to [0, 2^31-1] (0 when begin <= 0). Returns how many slots were empty before (slot_count's growth).
 * Why C: one pass, the slot of a key a few ahead prefetched; numpy sorts the keys by slot first. */
int64_t spark_mq_index_put(
    uint8_t *slots, int64_t slot_num, uint8_t *entries, int64_t count, int64_t k, const int32_t *hashes,
    const int64_t *phys, const int64_t *timestamps, int64_t begin) {
    int64_t newly_used = 0;
    for (int64_t i = 0; i < k; i++) {
        if (i + PREFETCH_AHEAD < k)
            __builtin_prefetch(slots + slot_of(hashes[i + PREFETCH_AHEAD], slot_num) * SLOT_SIZE, 1);
        int64_t slot = slot_of(hashes[i], slot_num), number = count + i;
        uint8_t *s = slots + slot * SLOT_SIZE, *e = entries + number * ENTRY_SIZE;
        int64_t head = (int32_t)get32(s);
        if (head >= count && head < number)  /* this batch's, unless a stale head of another slot */
            head = slot_of((int32_t)get32(entries + head * ENTRY_SIZE), slot_num) == slot ? head : 0;
        else if (head <= 0 || head >= count)
            head = 0;
        if (head == 0) newly_used++;
        int64_t diff = 0;
        if (begin > 0 && timestamps[i] > begin) {
            diff = (timestamps[i] - begin) / 1000;
            if (diff > 0x7FFFFFFF) diff = 0x7FFFFFFF;
        }
        put32(e, (uint32_t)hashes[i]);
        put64(e + ENTRY_PHYS, (uint64_t)phys[i]);
        put32(e + ENTRY_TIME_DIFF, (uint32_t)diff);
        put32(e + ENTRY_PREV, (uint32_t)head);
        put32(s, (uint32_t)number);
    }
    return newly_used;
}

/* BODYCRC of n ranges [starts[i], ends[i]) of buf (buf_size bytes) into crcs, ANDed with crc_mask:
 * what a slave's and recovery's unit checks compute for every body (meant for small bodies, as the
 * encoder's). Returns 0, or -1 (nothing written) when a range is not inside buf. */
int64_t spark_mq_body_crcs(
    const uint8_t *buf, int64_t buf_size, const int64_t *starts, const int64_t *ends, int64_t n, int64_t *crcs,
    uint32_t crc_mask) {
    for (int64_t i = 0; i < n; i++)
        if (starts[i] < 0 || ends[i] < starts[i] || ends[i] > buf_size) return -1;
    for (int64_t i = 0; i < n; i++) crcs[i] = crc32_ieee(buf + starts[i], ends[i] - starts[i]) & crc_mask;
    return 0;
}

/* ---- append (issue 27): a batch's units and what its dispatch takes from them, in one call ----
 *
 * Why one call: a ctypes call costs ~0.1 us an argument, and a put of 64 messages used two passes
 * over its property strings (the encoder's copy, then the dispatch's join of a whole pass's strings
 * and scan): here the scalars come packed in one argument and each property string is scanned as it
 * is copied. */

/* BODYCRC by carry-less multiplication (PCLMULQDQ), where the CPU has it: zlib's CRC-32 of a 100-byte
 * body in about half the slicing-by-8 table's time (~40 -> ~20 ns; the largest C part of encoding small bodies).
 * The folding of Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" with the
 * reflected IEEE constants (as Linux's crc32-pclmul and Chromium's zlib use), 16 bytes a step; the
 * bytes past the last whole 16 by the table. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SPARK_MQ_CLMUL 1
static int has_clmul;

__attribute__((constructor)) static void clmul_init(void) {
    __builtin_cpu_init();
    has_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

/* the CRC register c continued over n bytes, n >= 64 and a multiple of 16 */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(uint32_t c, const uint8_t *p, int64_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32)), x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64) {  /* four lanes of 16 bytes folded 64 bytes ahead */
        __m128i y1 = _mm_clmulepi64_si128(x1, k1k2, 0x00), y2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i y3 = _mm_clmulepi64_si128(x3, k1k2, 0x00), y4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k1k2, 0x11), y1), _mm_loadu_si128((const __m128i *)p));
        x2 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x2, k1k2, 0x11), y2),
                           _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x3, k1k2, 0x11), y3),
                           _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x4, k1k2, 0x11), y4),
                           _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    /* the four lanes into one, then 16 bytes a step */
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_clmulepi64_si128(x1, k3k4, 0x00)), x2);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_clmulepi64_si128(x1, k3k4, 0x00)), x3);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_clmulepi64_si128(x1, k3k4, 0x00)), x4);
    for (; n >= 16; p += 16, n -= 16)
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_clmulepi64_si128(x1, k3k4, 0x00)),
                           _mm_loadu_si128((const __m128i *)p));
    /* 128 bits to 64, then Barrett's reduction to 32 */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
    x2 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10), low32);
    x1 = _mm_xor_si128(x1, _mm_clmulepi64_si128(x2, poly, 0x00));
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* zlib's CRC-32 of n bytes: by PCLMULQDQ from 64 bytes on where the CPU has it, else the table */
static uint32_t crc32_ieee(const uint8_t *p, int64_t n) {
    uint32_t c = 0xFFFFFFFFu;
#ifdef SPARK_MQ_CLMUL
    if (has_clmul && n >= 64) {
        int64_t whole = n & ~(int64_t)15;
        c = crc32_clmul(c, p, whole);
        p += whole;
        n -= whole;
    }
#endif
    return crc32_update(c, p, n) ^ 0xFFFFFFFFu;
}

enum {  /* the int64 scalars of spark_mq_encode_batch, in this order (encode.py's _BATCH_SCALARS) */
    ENC_N, ENC_UNITS_SIZE, ENC_BODIES_SIZE, ENC_PROPS_SIZE, ENC_TOPIC_TAIL_LENGTH, ENC_PHYSICAL_OFFSET,
    ENC_QUEUE_OFFSET, ENC_SYS_FLAG_CLEAR, ENC_CRC_MASK, ENC_KEY_PREFIX, ENC_KEY_CAPACITY,
};

/* Encode n units back to back into out (exactly units_size bytes): bodies/props are every message's
 * body/properties bytes back to back, their lengths in body_lengths/props_lengths. header: the 88
 * header bytes with the batch-wide fields set (magic, queue id, hosts, store timestamp; the rest zero);
 * topic_tail: the TOPIC length byte and the TOPIC bytes; sys_flag_clear: bits cleared from every
 * SYSFLAG; crc_mask: ANDed into every BODYCRC (computed here: meant for small bodies).
 * Into meta (int64s): meta[0] the number of index keys, or -1 when they are not given (key_capacity 0,
 * more keys than it, or a hashed value not ASCII: the dispatch then scans the strings itself);
 * meta[1..n] each unit's commitlog offset; meta[n+1..2n] each message's tag code; then key_capacity
 * key rows and key_capacity key hashes, as scan_row with key_prefix gives them.
 * Returns units_size, or -1 (nothing written) when the lengths do not add up to bodies_size, props_size
 * and units_size: no write goes past a buffer. */
int64_t spark_mq_encode_batch(
    const int64_t *scalars, const int64_t *body_lengths, const int64_t *props_lengths, const uint8_t *bodies,
    const uint8_t *props, const int32_t *flags, const int64_t *born_timestamps, const int32_t *sys_flags,
    const int32_t *reconsume_times, const uint8_t *header, const uint8_t *topic_tail, uint8_t *out, int64_t *meta) {
    int64_t n = scalars[ENC_N], topic_tail_length = scalars[ENC_TOPIC_TAIL_LENGTH];
    int64_t physical_offset = scalars[ENC_PHYSICAL_OFFSET], queue_offset = scalars[ENC_QUEUE_OFFSET];
    int64_t key_capacity = scalars[ENC_KEY_CAPACITY], body_sum = 0, props_sum = 0;
    int32_t sys_flag_clear = (int32_t)scalars[ENC_SYS_FLAG_CLEAR];
    uint32_t crc_mask = (uint32_t)scalars[ENC_CRC_MASK], prefix = (uint32_t)scalars[ENC_KEY_PREFIX];
    if (n < 0 || topic_tail_length < 0 || key_capacity < 0) return -1;
    for (int64_t i = 0; i < n; i++) {
        if (body_lengths[i] < 0 || props_lengths[i] < 0) return -1;
        body_sum += body_lengths[i];
        props_sum += props_lengths[i];
    }
    if (body_sum != scalars[ENC_BODIES_SIZE] || props_sum != scalars[ENC_PROPS_SIZE]
        || scalars[ENC_UNITS_SIZE] != n * (HEADER_SIZE + topic_tail_length + 2) + body_sum + props_sum)
        return -1;
    int64_t *phys = meta + 1, *tag_codes = meta + 1 + n, *key_rows = meta + 1 + 2 * n, keys = 0;
    int64_t *key_hashes = key_rows + key_capacity;
    int with_keys = key_capacity > 0, ascii = 1;
    uint8_t *p = out;
    for (int64_t i = 0; i < n; i++) {
        int64_t body_length = body_lengths[i], props_length = props_lengths[i];
        int64_t size = HEADER_SIZE + body_length + topic_tail_length + 2 + props_length;
        uint32_t crc = crc32_ieee(bodies, body_length);
        memcpy(p, header, HEADER_SIZE);
        put32(p + TOTAL_SIZE, (uint32_t)size);
        put32(p + BODY_CRC, crc & crc_mask);
        put32(p + FLAG, (uint32_t)flags[i]);
        put64(p + QUEUE_OFFSET, (uint64_t)(queue_offset + i));
        put64(p + PHYSICAL_OFFSET, (uint64_t)physical_offset);
        put32(p + SYS_FLAG, (uint32_t)(sys_flags[i] & ~sys_flag_clear));
        put64(p + BORN_TIMESTAMP, (uint64_t)born_timestamps[i]);
        put32(p + RECONSUME_TIMES, (uint32_t)reconsume_times[i]);
        put32(p + BODY_LENGTH, (uint32_t)body_length);
        p += HEADER_SIZE;
        memcpy(p, bodies, (size_t)body_length);
        p += body_length;
        bodies += body_length;
        memcpy(p, topic_tail, (size_t)topic_tail_length);
        p += topic_tail_length;
        *p++ = (uint8_t)(props_length >> 8);
        *p++ = (uint8_t)props_length;
        memcpy(p, props, (size_t)props_length);
        if (with_keys && scan_row(props, props + props_length, i, prefix, tag_codes + i, key_rows, NULL, key_hashes,
                                  &keys, key_capacity, &ascii))
            with_keys = 0;
        p += props_length;
        props += props_length;
        phys[i] = physical_offset;
        physical_offset += size;
    }
    meta[0] = with_keys && ascii ? keys : -1;
    return p - out;
}

/* ---- one message's unit, encoded and written in one call (a network send's usual put) ---- */

enum {  /* the int64 scalars of spark_mq_append_one, in this order (encode.py's _ONE_SCALARS) */
    ONE_BODY_LENGTH, ONE_PROPS_LENGTH, ONE_TOPIC_TAIL_LENGTH, ONE_QUEUE_ID, ONE_FLAG, ONE_QUEUE_OFFSET,
    ONE_PHYSICAL_OFFSET, ONE_SYS_FLAG, ONE_BORN_TIMESTAMP, ONE_STORE_TIMESTAMP, ONE_RECONSUME_TIMES,
    ONE_SYS_FLAG_CLEAR, ONE_CRC_MASK, ONE_MAGIC, ONE_FD, ONE_FILE_POSITION,
};

/* One unit into out (exactly out_size bytes: HEADER_SIZE + body + topic tail + 2 + properties; the caller's
 * scratch buffer), then pwritten at the file position of the commitlog file open as fd: the header from the
 * scalars (SYSFLAG with sys_flag_clear's bits cleared, BODYCRC computed and ANDed with crc_mask,
 * PREPAREDTRANSACTIONOFFSET 0), hosts the born host's 8 bytes then the store host's, topic_tail the TOPIC
 * length byte and bytes: the same bytes as encode.py's struct encoder of a lone message, where a Python
 * append costs ~20 calls (struct packs, a CRC call, a join, the pwrite's layers). pwrite as MappedFile._pwrite
 * (again after a short write, stopping at an error; none for an fd < 0). Returns the bytes pwritten (the
 * caller copies the rest into its mapping), or -1 (nothing written) when out is NULL or the lengths do not add
 * up to out_size. */
int64_t spark_mq_append_one(const int64_t *scalars, const uint8_t *body, const uint8_t *props, const uint8_t *topic_tail,
                            const uint8_t *hosts, uint8_t *out, int64_t out_size) {
    int64_t body_length = scalars[ONE_BODY_LENGTH], props_length = scalars[ONE_PROPS_LENGTH];
    int64_t topic_tail_length = scalars[ONE_TOPIC_TAIL_LENGTH];
    if (out == NULL || body_length < 0 || props_length < 0 || topic_tail_length < 0
        || out_size != HEADER_SIZE + body_length + topic_tail_length + 2 + props_length)
        return -1;
    uint8_t *p = out;
    put32(p + TOTAL_SIZE, (uint32_t)out_size);
    put32(p + MAGIC, (uint32_t)scalars[ONE_MAGIC]);
    put32(p + BODY_CRC, crc32_ieee(body, body_length) & (uint32_t)scalars[ONE_CRC_MASK]);
    put32(p + QUEUE_ID, (uint32_t)scalars[ONE_QUEUE_ID]);
    put32(p + FLAG, (uint32_t)scalars[ONE_FLAG]);
    put64(p + QUEUE_OFFSET, (uint64_t)scalars[ONE_QUEUE_OFFSET]);
    put64(p + PHYSICAL_OFFSET, (uint64_t)scalars[ONE_PHYSICAL_OFFSET]);
    put32(p + SYS_FLAG, (uint32_t)(scalars[ONE_SYS_FLAG] & ~scalars[ONE_SYS_FLAG_CLEAR]));
    put64(p + BORN_TIMESTAMP, (uint64_t)scalars[ONE_BORN_TIMESTAMP]);
    memcpy(p + BORN_HOST, hosts, HOST_SIZE);
    put64(p + STORE_TIMESTAMP, (uint64_t)scalars[ONE_STORE_TIMESTAMP]);
    memcpy(p + STORE_HOST, hosts + HOST_SIZE, HOST_SIZE);
    put32(p + RECONSUME_TIMES, (uint32_t)scalars[ONE_RECONSUME_TIMES]);
    put64(p + PREPARED_OFFSET, 0);
    put32(p + BODY_LENGTH, (uint32_t)body_length);
    p += HEADER_SIZE;
    memcpy(p, body, (size_t)body_length);
    p += body_length;
    memcpy(p, topic_tail, (size_t)topic_tail_length);
    p += topic_tail_length;
    *p++ = (uint8_t)(props_length >> 8);
    *p++ = (uint8_t)props_length;
    memcpy(p, props, (size_t)props_length);
    int64_t done = 0, fd = scalars[ONE_FD], at = scalars[ONE_FILE_POSITION];
    while (fd >= 0 && done < out_size) {
        ssize_t wrote = pwrite((int)fd, out + done, (size_t)(out_size - done), (off_t)(at + done));
        if (wrote <= 0) break;
        done += wrote;
    }
    return done;
}

/* ---- the Arrow decoder's sequential steps (spark_mq/arrow/decoder.py) ---- */

enum { UNIT_MAGIC_AT = 4, UNIT_MIN_SIZE = 91 };  /* layout.py's MAGIC_OFFSET and MIN_UNIT_SIZE */
#define UNIT_MESSAGE_MAGIC ((int32_t)0xDAA320A7)  /* layout.py's MESSAGE_MAGIC */

enum { UNIT_HEADER_SIZE = 88, UNIT_RANGES = 7 };  /* layout.py's HEADER_SIZE (BODY's length its last 4 bytes) */

/* One pass over the units of a pull body (units back to back), for the Arrow decoder: each unit's bytes are
 * read once, while its cache lines are in, rather than a gather of a few bytes per unit per step. Per unit
 * i < capacity: its fixed header copied to headers + 88 i; where it and its variable parts lie in
 * ranges[k * capacity + i], k = 0 start, 1 BODY start, 2 BODY end, 3 TOPIC start, 4 TOPIC end, 5 PROPERTIES
 * start, 6 PROPERTIES end (each after its length prefix, as layout.py's unit_ranges); *same_topic = 1 when every
 * unit's TOPIC holds the first's bytes, else 0. Returns the count, or -1 when the TOTALSIZE chain does not tile
 * the buffer exactly (a size below a unit's minimum, a unit without the message magic or running past the end,
 * more than `capacity` units) or a unit's BODY, TOPIC and PROPERTIES lengths do not add up to its size: the
 * caller's numpy walk then says what is wrong. */
int64_t spark_mq_pull_units(const uint8_t *buf, int64_t size, int64_t *ranges, uint8_t *headers, int64_t capacity,
                            int64_t *same_topic) {
    int64_t n = 0, pos = 0, topic_at = 0, topic_size = 0;
    int same = 1;
    while (pos < size) {
        if (size - pos < UNIT_MIN_SIZE || n >= capacity) return -1;
        const uint8_t *unit = buf + pos;
        int64_t total = (int32_t)get32(unit);
        if (total < UNIT_MIN_SIZE || total > size - pos || (int32_t)get32(unit + UNIT_MAGIC_AT) != UNIT_MESSAGE_MAGIC)
            return -1;
        int64_t end = pos + total;
        int64_t body_length = (int32_t)get32(unit + UNIT_HEADER_SIZE - 4);
        int64_t body_end = pos + UNIT_HEADER_SIZE + body_length;
        if (body_length < 0 || body_end + 1 > end) return -1;
        int64_t topic_end = body_end + 1 + buf[body_end];
        if (topic_end + 2 > end) return -1;
        int64_t props_end = topic_end + 2 + ((int64_t)buf[topic_end] << 8 | buf[topic_end + 1]);
        if (props_end != end) return -1;
        memcpy(headers + n * UNIT_HEADER_SIZE, unit, UNIT_HEADER_SIZE);
        int64_t at[UNIT_RANGES] = {pos, pos + UNIT_HEADER_SIZE, body_end, body_end + 1, topic_end, topic_end + 2,
                                   props_end};
        for (int k = 0; k < UNIT_RANGES; k++) ranges[k * capacity + n] = at[k];
        if (n == 0) {
            topic_at = body_end + 1;
            topic_size = topic_end - topic_at;
        } else if (same && (topic_end - body_end - 1 != topic_size || memcmp(buf + body_end + 1, buf + topic_at,
                                                                               (size_t)topic_size) != 0)) {
            same = 0;
        }
        n++;
        pos = end;
    }
    *same_topic = same;
    return n;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SPARK_MQ_SWAR 1  /* 8 bytes a step: a byte's place in a word is its place in memory */
#else
#define SPARK_MQ_SWAR 0
#endif
#define BYTES_OF(b) (0x0101010101010101ULL * (b))

/* the 0x80 bit of each zero byte of x, and maybe of bytes above the lowest zero (the lowest is exact) */
static uint64_t zero_bytes(uint64_t x) {
    return (x - BYTES_OF(1)) & ~x & BYTES_OF(0x80);
}

/* Copy [p, the first PROPERTY_SEPARATOR, or NAME_VALUE_SEPARATOR too unless `value`, or end) to out and return
 * where it stopped; 8 bytes a step (out needs 8 bytes of room past what it copies): property names and values
 * are a few to tens of bytes, where a memchr and a memcpy call each cost more than the bytes. */
static const uint8_t *copy_to_separator(const uint8_t *p, const uint8_t *end, uint8_t *out, int value) {
    while (SPARK_MQ_SWAR && end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        memcpy(out, &x, 8);
        uint64_t hit = zero_bytes(x ^ BYTES_OF(2)) | (value ? 0 : zero_bytes(x ^ BYTES_OF(1)));
        if (hit) return p + (__builtin_ctzll(hit) >> 3);
        p += 8;
        out += 8;
    }
    while (p < end && *p != '\x02' && (value || *p != '\x01')) *out++ = *p++;
    return p;
}

/* Every property pair of the property strings buf[props_start[i], props_end[i]) of rows i < rows, as
 * decode_properties splits them: a pair runs to the next PROPERTY_SEPARATOR (\x02) or the string's end, its
 * name to the first NAME_VALUE_SEPARATOR (\x01); pieces without one or with an empty name are dropped. Out, as
 * Arrow's string arrays: the names' bytes back to back in names (offsets in name_offsets, pairs + 1 int32), the
 * values' in values (value_offsets); the pairs' offsets per row (row_offsets, rows + 1 int32); per row the index
 * of its last TAGS, KEYS and UNIQ_KEY pair (-1: none) in picks[3 * row + 0, 1, 2]. names and values need room
 * for every property byte and 8 more (copy_to_separator), the offsets for `capacity` pairs. Unless pick_values
 * is NULL, the picked values themselves too, as three Arrow string columns (TAGS, KEYS, UNIQ_KEY; a row without one gets an empty slot, its
 * validity is picks' -1): column k's bytes at pick_values + k * pick_room (pick_room: every property byte),
 * its offsets at pick_offsets + k * (rows + 1): the decoder's tags/keys/uniq_key columns with no take of the
 * values. Returns the number of pairs, or -1 when more. */
int64_t spark_mq_property_pairs(const uint8_t *buf, const int64_t *props_start, const int64_t *props_end,
                                int64_t rows, uint8_t *names, int32_t *name_offsets, uint8_t *values,
                                int32_t *value_offsets, int32_t *row_offsets, int64_t *picks, int64_t capacity,
                                uint8_t *pick_values, int32_t *pick_offsets, int64_t pick_room) {
    int64_t pairs = 0;
    int32_t name_at = 0, value_at = 0, pick_at[3] = {0, 0, 0};
    name_offsets[0] = value_offsets[0] = 0;
    if (pick_values)
        for (int k = 0; k < 3; k++) pick_offsets[k * (rows + 1)] = 0;
    for (int64_t row = 0; row < rows; row++) {
        row_offsets[row] = (int32_t)pairs;
        int64_t last[3] = {-1, -1, -1};
        const uint8_t *p = buf + props_start[row], *end = buf + props_end[row];
        while (p < end) {
            const uint8_t *name = p, *nv = copy_to_separator(p, end, names + name_at, 0);
            if (nv == end || *nv == '\x02' || nv == name) {  /* no NAME_VALUE_SEPARATOR, or an empty name */
                const uint8_t *pair_end = nv < end && *nv == '\x02' ? nv : memchr(nv, '\x02', (size_t)(end - nv));
                p = pair_end ? pair_end + 1 : end;
                continue;
            }
            if (pairs >= capacity) return -1;
            if (is_name(name, nv, "TAGS", 4)) last[0] = pairs;
            else if (is_name(name, nv, "KEYS", 4)) last[1] = pairs;
            else if (is_name(name, nv, "UNIQ_KEY", 8)) last[2] = pairs;
            const uint8_t *pair_end = copy_to_separator(nv + 1, end, values + value_at, 1);
            name_at += (int32_t)(nv - name);
            value_at += (int32_t)(pair_end - nv - 1);
            name_offsets[++pairs] = name_at;
            value_offsets[pairs] = value_at;
            p = pair_end < end ? pair_end + 1 : end;
        }
        for (int k = 0; k < 3; k++) {
            picks[3 * row + k] = last[k];
            if (!pick_values) continue;
            if (last[k] >= 0) {
                int32_t from = value_offsets[last[k]], length = value_offsets[last[k] + 1] - from;
                memcpy(pick_values + k * pick_room + pick_at[k], values + from, (size_t)length);
                pick_at[k] += length;
            }
            pick_offsets[k * (rows + 1) + row + 1] = pick_at[k];
        }
    }
    row_offsets[rows] = (int32_t)pairs;
    return pairs;
}

enum { MSG_ID_SIZE = 32 };

/* "a.b.c.d:port" of an 8-byte host (IPv4, big-endian signed int port) at out, as message.py's unpack_host;
 * returns its length (at most 27) */
static int format_host(const uint8_t *host, uint8_t *out) {
    uint8_t *p = out;
    for (int j = 0; j < 4; j++) {
        unsigned v = host[j];
        if (v >= 100) *p++ = (uint8_t)('0' + v / 100);
        if (v >= 10) *p++ = (uint8_t)('0' + v / 10 % 10);
        *p++ = (uint8_t)('0' + v % 10);
        *p++ = j < 3 ? '.' : ':';
    }
    int64_t port = (int32_t)get32(host + 4);
    if (port < 0) {
        *p++ = '-';
        port = -port;
    }
    uint8_t digits[10];
    int k = 0;
    do digits[k++] = (uint8_t)('0' + port % 10); while ((port /= 10) > 0);
    while (k > 0) *p++ = digits[--k];
    return (int)(p - out);
}

/* One host column of n headers (88-byte records) as an Arrow string column: host at `at` of each header
 * formatted into out (room for 27 bytes a row), offsets (n + 1 int32); a host equal to the row before's is
 * copied, not formatted again (a pull body's store host is one, its born hosts a few producers). */
static void host_column(const uint8_t *headers, int64_t n, int at, uint8_t *out, int32_t *offsets) {
    int32_t pos = 0, length = 0;
    const uint8_t *last = NULL;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *host = headers + i * UNIT_HEADER_SIZE + at;
        if (last && memcmp(host, last, HOST_SIZE) == 0) {
            memcpy(out + pos, out + pos - length, (size_t)length);
        } else {
            length = format_host(host, out + pos);
            last = host;
        }
        pos += length;
        offsets[i + 1] = pos;
    }
}

/* The string columns of n unit headers (88-byte records back to back, as spark_mq_pull_units copies them out)
 * for the Arrow decoder, each skipped when its output is NULL: msg_ids (32 bytes a row: the offsetMsgId, store
 * host then commitlog offset as upper-case hex, message_id.py's offset_msg_ids), born and store hosts as
 * host_column writes them (27 bytes of room a row; offsets n + 1 int32 each). Returns n. */
int64_t spark_mq_header_strings(const uint8_t *headers, int64_t n, uint8_t *msg_ids, uint8_t *born,
                                int32_t *born_offsets, uint8_t *store, int32_t *store_offsets) {
    static const char hex[] = "0123456789ABCDEF";
    if (msg_ids)
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *h = headers + i * UNIT_HEADER_SIZE;
            uint8_t *out = msg_ids + i * MSG_ID_SIZE;
            for (int j = 0; j < HOST_SIZE; j++) {
                out[2 * j] = (uint8_t)hex[h[STORE_HOST + j] >> 4];
                out[2 * j + 1] = (uint8_t)hex[h[STORE_HOST + j] & 15];
                out[16 + 2 * j] = (uint8_t)hex[h[PHYSICAL_OFFSET + j] >> 4];
                out[16 + 2 * j + 1] = (uint8_t)hex[h[PHYSICAL_OFFSET + j] & 15];
            }
        }
    if (born) host_column(headers, n, BORN_HOST, born, born_offsets);
    if (store) host_column(headers, n, STORE_HOST, store, store_offsets);
    return n;
}

/* Ranges [starts[i], ends[i]) of buf, i < n, copied back to back into out as an Arrow binary column (offsets:
 * n + 1 int32; the caller checks that the ranges lie in buf, do not run backwards and add up below 2 GiB):
 * the decoder's bodies and other variable fields, one memcpy a row. Returns the bytes copied. */
int64_t spark_mq_gather_ranges(const uint8_t *buf, const int64_t *starts, const int64_t *ends, int64_t n,
                               uint8_t *out, int32_t *offsets) {
    int32_t pos = 0;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t length = (int32_t)(ends[i] - starts[i]);
        memcpy(out + pos, buf + starts[i], (size_t)length);
        pos += length;
        offsets[i + 1] = pos;
    }
    return pos;
}

/* Where the first non-zero byte of p[0, n) is, -1 when all are zero: a mapped file's stale tail is looked for
 * after recovery's end (MappedFile.zero_from) without numpy, eight bytes a step. */
int64_t spark_mq_first_nonzero(const uint8_t *p, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        if (word) break;
    }
    for (; i < n; i++)
        if (p[i]) return i;
    return -1;
}
