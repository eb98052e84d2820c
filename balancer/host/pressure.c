/* Memory PSI and major faults; see pressure.h. */
#include "host/pressure.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>

#include "util/small_file.h"

int psi_some_avg10(const char *path, double *out)
{
    g_autofree char *text = small_file_read(path, 4096);
    if (!text)
        return -1;
    /* "some avg10=0.12 avg60=0.05 avg300=0.01 total=12345" */
    const char *p = strstr(text, "some avg10=");
    return p && sscanf(p + 11, "%lf", out) == 1 ? 0 : -1;
}

int proc_major_faults(int pid, uint64_t *out)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    g_autofree char *text = small_file_read(path, 4096);
    /* the command name may hold spaces and parentheses: fields count from
     * the last ')' */
    const char *p = text ? strrchr(text, ')') : NULL;
    unsigned long long majflt;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %llu", &majflt) != 1)
        return -1;
    *out = majflt;
    return 0;
}
