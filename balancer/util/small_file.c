/* Whole small files; see small_file.h. */
#include "util/small_file.h"

#include <glib.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *small_file_read(const char *path, size_t max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 16384, len = 0;
    char *buf = g_malloc(cap);
    for (;;) {
        size_t want = cap - len - 1;
        size_t n = fread(buf + len, 1, want, f);
        len += n;
        if (n < want || cap >= max)
            break; /* end of file, or as much as the caller allows */
        cap *= 2;
        buf = g_realloc(buf, cap);
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

static void join(char *path, size_t len, const char *dir, const char *file)
{
    snprintf(path, len, "%s/%s", dir, file);
}

int small_file_read_at(const char *dir, const char *file, char *buf, size_t len)
{
    char path[1024];
    join(path, sizeof(path), dir, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    int rc = ferror(f) ? -1 : 0;
    fclose(f);
    buf[n] = '\0';
    return rc;
}

int small_file_read_u64(const char *dir, const char *file, uint64_t *out, bool *is_max)
{
    char buf[64];
    if (small_file_read_at(dir, file, buf, sizeof(buf)) < 0)
        return -1;
    if (is_max)
        *is_max = strncmp(buf, "max", 3) == 0;
    if (is_max && *is_max)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf)
        return -1;
    *out = v;
    return 0;
}

int small_file_write_at(const char *dir, const char *file, const char *text)
{
    char path[1024];
    join(path, sizeof(path), dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    int saved = errno;
    if (fclose(f) != 0)
        rc = -1; /* sysfs reports a refused value at the flush */
    else
        errno = saved;
    return rc;
}
