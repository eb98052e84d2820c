/*
 * libFuzzer target for the facts the libvirt backend reads from a domain's
 * live XML (hv/libvirt_xml.h): whatever libvirt (or an operator's domain
 * definition) puts there must give facts or a clear error, never a crash
 * or a leak; a virtio-mem device that is believed is one whose plugged
 * and requested sizes fit in it; and the device to resize is there exactly
 * when the facts counted one.
 */
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hv/libvirt_xml.h"
#include "util/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *xml = (const char *)data;
    libvirt_xml_facts f;
    g_autoptr(GError) err = NULL;
    if (libvirt_xml_facts_parse(xml, size, &f, &err) < 0) {
        if (!err || !err->message[0] || f.agent_path || f.vmem.devices)
            abort(); /* a refusal says why, and leaves nothing */
        return 0;
    }
    const vmem_sample *v = &f.vmem;
    if (!v->devices && (v->block_bytes || v->max_bytes || v->id[0] || f.vmem_max_all || f.vmem_plugged_all))
        abort();
    if (v->block_bytes && (v->plugged_bytes > v->max_bytes || v->requested_bytes > v->max_bytes))
        abort();
    if (!memchr(v->id, '\0', sizeof(v->id)))
        abort();
    g_autoptr(GError) req_err = NULL;
    g_autofree char *dev = libvirt_xml_vmem_request(xml, size, 256ull << 20, &req_err);
    if (!dev && (!req_err || !req_err->message[0]))
        abort();
    /* none counted: nothing to resize; one counted: it is there to resize */
    bool none = v->devices == 0;
    if (none != g_error_matches(req_err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE))
        abort();
    libvirt_xml_facts_clear(&f);
    return 0;
}
