/* The open-file limit; see fd_limit.h. */
#include "util/fd_limit.h"

#include <errno.h>
#include <sys/resource.h>

#include "util/error.h"

int fd_limit_raise(uint64_t *before, uint64_t *after, GError **error)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "getrlimit(RLIMIT_NOFILE): %s", g_strerror(errno));
        return -1;
    }
    *before = *after = rl.rlim_cur;
    if (rl.rlim_cur >= rl.rlim_max)
        return 0;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "raising the open-file limit from %llu to %llu: %s",
                    (unsigned long long)*before, (unsigned long long)rl.rlim_max, g_strerror(errno));
        return -1;
    }
    *after = rl.rlim_cur;
    return 0;
}
