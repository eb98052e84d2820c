/*
 * libFuzzer target for the per-VM policy element read from libvirt
 * metadata: whatever an operator (or a script) put there must give a
 * policy or a clear error, never a crash, a leak or a policy with
 * min > max.
 */
#include <glib.h>
#include <stdint.h>
#include <stdlib.h>

#include "config/metadata_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vm_policy p;
    g_autoptr(GError) err = NULL;
    g_autofree char *ignored = NULL;
    if (metadata_policy_parse((const char *)data, size, &p, &ignored, &err) == 0) {
        if (p.min_bytes && p.max_bytes && p.min_bytes > p.max_bytes)
            abort();
        if (p.shares < 1 || p.shares > 1000000)
            abort();
    } else if (!err || !err->message[0]) {
        abort(); /* a refusal always says why */
    }
    return 0;
}
