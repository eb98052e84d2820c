/*
 * libFuzzer target for the kernel text host reclaim parses: a QEMU's
 * /proc/PID/maps (finding the guest RAM mapping), /proc/self/mountinfo
 * and /proc/PID/cgroup (finding its memory cgroup).  The first byte picks
 * the parser.  Any text gives an answer or a refusal, never a crash, and
 * a found RAM mapping is always at least the size asked for.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reclaim/guest_ram.h"
#include "reclaim/qemu_memcg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    switch (data[0] % 3) {
    case 0: {
        uintptr_t start = 0;
        uint64_t len = 0;
        g_autoptr(GError) err = NULL;
        uint64_t want = 1ULL << (12 + data[0] % 20);
        if (guest_ram_find(text, want, &start, &len, &err) == 0) {
            if (len < want || len - want > want / 8)
                abort();
        } else if (!err || !err->message[0]) {
            abort();
        }
        break;
    }
    case 1: {
        char v2[64], v1[64];
        memcg_mounts(text, v2, sizeof(v2), v1, sizeof(v1));
        if (strlen(v2) >= sizeof(v2) || strlen(v1) >= sizeof(v1))
            abort();
        break;
    }
    default: {
        qemu_memcg m;
        /* roots that do not exist: parsing only, never a file touched */
        if (memcg_resolve(text, "/nonexistent-v2", "/nonexistent-v1", &m) == 0 || m.kind != MEMCG_NONE)
            abort();
        break;
    }
    }
    free(text);
    return 0;
}
