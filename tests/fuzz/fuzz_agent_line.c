/*
 * libFuzzer target for the host side of the guest agent protocol: line
 * framing with the 4 KiB cap (including skipping over-long lines), JSON
 * validation, rate limiting, clamps and counter handling.
 */
#include <stddef.h>
#include <stdint.h>

#include "agent/agent_proto.h"
#include "qmp/qmp_framer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)data[0] * 16 + 1;
    data++;
    size--;
    agent_state st = { 0 };
    qmp_framer f;
    qmp_framer_init(&f, AGENT_LINE_MAX);
    double now = 1000.0;
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        qmp_framer_feed(&f, (const char *)data + off, n);
        const char *line;
        size_t len;
        unsigned long too_long = 0;
        while (qmp_framer_next_skipping(&f, &line, &len, &too_long) == 0) {
            agent_feed_line(&st, line, len, now, 512ULL << 20);
            now += 0.3;
        }
    }
    qmp_framer_free(&f);
    return 0;
}
