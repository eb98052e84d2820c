/* Unit tests of QMP line framing, including recorded QEMU transcripts. */
#include <check.h>

#include "check_run.h"
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmp/qmp_framer.h"

static int drain(qmp_framer *f, char out[][256], int max)
{
    int n = 0;
    const char *line;
    size_t len;
    while (qmp_framer_next(f, &line, &len) == QMP_FRAME_LINE) {
        ck_assert_int_lt(n, max);
        ck_assert_uint_lt(len, 256);
        memcpy(out[n], line, len);
        out[n][len] = '\0';
        n++;
    }
    return n;
}

START_TEST(one_line_crlf)
{
    qmp_framer f;
    qmp_framer_init(&f, 1024);
    char out[4][256];
    ck_assert_int_eq(qmp_framer_feed(&f, "{\"return\": {}}\r\n", 16), 0);
    ck_assert_int_eq(drain(&f, out, 4), 1);
    ck_assert_str_eq(out[0], "{\"return\": {}}");
    ck_assert_uint_eq(qmp_framer_pending(&f), 0);
    qmp_framer_free(&f);
}
END_TEST

START_TEST(several_in_one_read_and_blank_lines)
{
    qmp_framer f;
    qmp_framer_init(&f, 1024);
    const char *in = "{\"a\":1}\r\n\r\n{\"b\":2}\n{\"c\":3}\r\n{\"d\"";
    char out[8][256];
    qmp_framer_feed(&f, in, strlen(in));
    ck_assert_int_eq(drain(&f, out, 8), 3);
    ck_assert_str_eq(out[0], "{\"a\":1}");
    ck_assert_str_eq(out[1], "{\"b\":2}");
    ck_assert_str_eq(out[2], "{\"c\":3}");
    ck_assert_uint_eq(qmp_framer_pending(&f), 4);
    qmp_framer_feed(&f, ":4}\r\n", 5);
    ck_assert_int_eq(drain(&f, out, 8), 1);
    ck_assert_str_eq(out[0], "{\"d\":4}");
    qmp_framer_free(&f);
}
END_TEST

START_TEST(split_byte_by_byte)
{
    qmp_framer f;
    qmp_framer_init(&f, 1024);
    const char *in = "{\"event\": \"BALLOON_CHANGE\"}\r\n{\"return\": 1}\r\n";
    char out[4][256];
    int got = 0;
    for (size_t i = 0; in[i]; i++) {
        qmp_framer_feed(&f, in + i, 1);
        got += drain(&f, out + got, 4 - got);
    }
    ck_assert_int_eq(got, 2);
    ck_assert_str_eq(out[0], "{\"event\": \"BALLOON_CHANGE\"}");
    ck_assert_str_eq(out[1], "{\"return\": 1}");
    qmp_framer_free(&f);
}
END_TEST

START_TEST(cr_split_from_lf)
{
    qmp_framer f;
    qmp_framer_init(&f, 1024);
    char out[2][256];
    qmp_framer_feed(&f, "{}\r", 3);
    ck_assert_int_eq(drain(&f, out, 2), 0);
    qmp_framer_feed(&f, "\n", 1);
    ck_assert_int_eq(drain(&f, out, 2), 1);
    ck_assert_str_eq(out[0], "{}");
    qmp_framer_free(&f);
}
END_TEST

START_TEST(unterminated_over_cap)
{
    qmp_framer f;
    qmp_framer_init(&f, 100);
    char big[101];
    memset(big, 'x', sizeof(big));
    const char *line;
    size_t len;
    qmp_framer_feed(&f, big, 100);
    ck_assert_int_eq(qmp_framer_next(&f, &line, &len), QMP_FRAME_NEED_MORE);
    qmp_framer_feed(&f, big, 1);
    ck_assert_int_eq(qmp_framer_next(&f, &line, &len), QMP_FRAME_TOO_LONG);
    qmp_framer_free(&f);
}
END_TEST

START_TEST(terminated_over_cap)
{
    qmp_framer f;
    qmp_framer_init(&f, 10);
    const char *line;
    size_t len;
    qmp_framer_feed(&f, "0123456789\r\n", 12); /* exactly the cap: fine */
    ck_assert_int_eq(qmp_framer_next(&f, &line, &len), QMP_FRAME_LINE);
    ck_assert_uint_eq(len, 10);
    /* an over-long line and a good one in one read: skipping the first
     * keeps the second */
    qmp_framer_feed(&f, "0123456789A\nok\n", 15);
    ck_assert_int_eq(qmp_framer_next(&f, &line, &len), QMP_FRAME_TOO_LONG);
    ck_assert_int_eq(qmp_framer_next(&f, &line, &len), QMP_FRAME_TOO_LONG); /* still there */
    qmp_framer_skip_line(&f);
    ck_assert_int_eq(qmp_framer_next(&f, &line, &len), QMP_FRAME_LINE);
    ck_assert_str_eq(line, "ok");
    ck_assert_int_eq(qmp_framer_next(&f, &line, &len), QMP_FRAME_NEED_MORE);
    qmp_framer_free(&f);
}
END_TEST

/* Feed a transcript recorded from QEMU 7.2 (server side only, as sent)
 * in chunks of the given size; every line must be one JSON object and
 * the count must not depend on the chunking. */
static int replay_transcript(const char *path, size_t chunk)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "missing transcript %s", path);
    char *data = malloc(1 << 20);
    size_t n = fread(data, 1, 1 << 20, fp);
    fclose(fp);
    qmp_framer f;
    qmp_framer_init(&f, 65536);
    int count = 0;
    for (size_t off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        qmp_framer_feed(&f, data + off, len);
        const char *line;
        size_t ll;
        while (qmp_framer_next(&f, &line, &ll) == QMP_FRAME_LINE) {
            json_object *o = json_tokener_parse(line);
            ck_assert_msg(json_object_is_type(o, json_type_object), "not an object: %s", line);
            json_object_put(o);
            count++;
        }
    }
    ck_assert_uint_eq(qmp_framer_pending(&f), 0);
    qmp_framer_free(&f);
    free(data);
    return count;
}

START_TEST(recorded_transcript_any_chunking)
{
    const char *path = "tests/unit/transcripts/qemu-7.2-balloon.qmp";
    int whole = replay_transcript(path, 1 << 20);
    ck_assert_int_ge(whole, 8);
    ck_assert_int_eq(replay_transcript(path, 1), whole);
    ck_assert_int_eq(replay_transcript(path, 7), whole);
    ck_assert_int_eq(replay_transcript(path, 4096), whole);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qmp_framer");
    TCase *tc = tcase_create("framing");
    tcase_add_test(tc, one_line_crlf);
    tcase_add_test(tc, several_in_one_read_and_blank_lines);
    tcase_add_test(tc, split_byte_by_byte);
    tcase_add_test(tc, cr_split_from_lf);
    tcase_add_test(tc, unterminated_over_cap);
    tcase_add_test(tc, terminated_over_cap);
    tcase_add_test(tc, recorded_transcript_any_chunking);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}
