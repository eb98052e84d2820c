#include "util/journal.h"

#include <systemd/sd-journal.h>

int journal_guest_action(int prio, const char *message, const char *guest, const char *uuid, const char *action,
                         const char *reason, uint64_t from_bytes, uint64_t to_bytes)
{
    return sd_journal_send("MESSAGE=%s", message, "PRIORITY=%d", prio, "SYSLOG_IDENTIFIER=balancerd",
                           "GUEST=%s", guest ? guest : "", "GUEST_UUID=%s", uuid ? uuid : "", "ACTION=%s", action,
                           "REASON=%s", reason ? reason : "", "FROM_BYTES=%llu", (unsigned long long)from_bytes,
                           "TO_BYTES=%llu", (unsigned long long)to_bytes, NULL);
}
