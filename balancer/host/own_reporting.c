/*
 * Does this host report its own free pages to a hypervisor (own_reporting.h).
 */
#include "host/own_reporting.h"

#include <glib.h>
#include <string.h>

#include "util/small_file.h"

#define VIRTIO_BALLOON_F_REPORTING 5

bool own_free_page_reporting(const char *sys_root)
{
    g_autofree char *dir_path = g_build_filename(sys_root, "bus/virtio/drivers/virtio_balloon", NULL);
    g_autoptr(GDir) dir = g_dir_open(dir_path, 0, NULL);
    if (!dir)
        return false;
    const char *name;
    while ((name = g_dir_read_name(dir))) {
        /* the driver's directory links to its devices (virtio0, ...) beside
         * its own attributes (bind, uevent, ...) */
        if (!g_str_has_prefix(name, "virtio"))
            continue;
        g_autofree char *dev = g_build_filename(dir_path, name, NULL);
        /* a '0'/'1' per feature bit, bit 0 first, 128 of them
         * (drivers/virtio/virtio.c, features_show) */
        char bits[256];
        if (small_file_read_at(dev, "features", bits, sizeof(bits)) == 0 &&
            strlen(bits) > VIRTIO_BALLOON_F_REPORTING && bits[VIRTIO_BALLOON_F_REPORTING] == '1')
            return true;
    }
    return false;
}
