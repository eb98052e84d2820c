/*
 * libFuzzer target for balancer.conf: any file gives a configuration or an
 * error naming what is wrong, never a crash, a leak, or a configuration
 * whose watermarks are out of order.
 */
#include <glib.h>
#include <stdint.h>
#include <stdlib.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    balancer_config c;
    config_defaults(&c);
    g_autoptr(GError) err = NULL;
    if (config_load_text(&c, (const char *)data, size, "fuzz.conf", &err) == 0) {
        watermarks wm;
        g_autoptr(GError) werr = NULL;
        /* accepted files were checked on a 64 GiB host */
        if (config_watermarks(&c, 64ULL << 30, &wm, &werr) < 0 || !policy_lookup(c.policy))
            abort();
    } else if (!err || !err->message[0]) {
        abort(); /* a refusal always says why */
    }
    config_clear(&c);
    return 0;
}
