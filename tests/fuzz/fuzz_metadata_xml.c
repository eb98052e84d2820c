/*
 * libFuzzer target for the per-VM policy element read from libvirt
 * metadata: whatever an operator (or a script) put there must give a
 * policy or a clear error, never a crash, a leak or a policy with
 * min > max.
 */
#include <stdint.h>
#include <stdlib.h>

#include "config/metadata_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vm_policy p;
    char err[200];
    if (metadata_policy_parse((const char *)data, size, &p, err, sizeof(err)) == 0) {
        if (p.min_bytes && p.max_bytes && p.min_bytes > p.max_bytes)
            abort();
        if (p.shares < 1 || p.shares > 1000000)
            abort();
    }
    return 0;
}
