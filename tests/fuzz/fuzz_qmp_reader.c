/*
 * libFuzzer target for everything libqmp does with bytes from QEMU:
 * framing (any chunking), JSON parsing, reply matching, events and the
 * typed reply parsers.  The first input byte picks the chunk size.
 */
#include <stddef.h>
#include <stdint.h>

#include "qmp/qmp.h"
#include "qmp/qmp_internal.h"

static void on_reply(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    (void)err;
    (void)opaque;
    if (!ret)
        return;
    qmp_guest_stats st;
    qmp_memory_devices md;
    uint64_t a, b;
    qmp_parse_guest_stats(ret, &st, NULL);
    qmp_parse_query_balloon(ret, &a, NULL);
    qmp_parse_memory_size_summary(ret, &a, &b, NULL);
    qmp_parse_blockstats_read(ret, &a, NULL);
    qmp_parse_memory_devices(ret, &md, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)data[0] + 1;
    data++;
    size--;
    qmp_conn *c = qmp_conn_new_detached();
    qmp_set_max_message(c, 4096); /* small cap so the fuzzer reaches it */
    for (uint64_t id = 0; id < 4; id++)
        qmp_conn_add_pending(c, id, 60000, on_reply, NULL);
    for (size_t off = 0; off < size; off += chunk)
        qmp_conn_feed(c, (const char *)data + off, size - off < chunk ? size - off : chunk);
    qmp_event *ev;
    while ((ev = qmp_next_event(c)))
        qmp_event_free(ev);
    qmp_close(c);
    return 0;
}
