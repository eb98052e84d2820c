#include "config/size_parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* libvirt's units (its domain XML and virsh): KB, MB, GB, TB are powers of
 * 1000, K/KiB, M/MiB, G/GiB, T/TiB powers of 1024 */
static const struct {
    const char *suffix;
    uint64_t unit;
} suffixes[] = {
    { "", 1 },
    { "b", 1 },
    { "bytes", 1 },
    { "k", 1ULL << 10 },
    { "kib", 1ULL << 10 },
    { "kb", 1000ULL },
    { "m", 1ULL << 20 },
    { "mib", 1ULL << 20 },
    { "mb", 1000000ULL },
    { "g", 1ULL << 30 },
    { "gib", 1ULL << 30 },
    { "gb", 1000000000ULL },
    { "t", 1ULL << 40 },
    { "tib", 1ULL << 40 },
    { "tb", 1000000000000ULL },
};

int size_parse(const char *text, uint64_t *bytes)
{
    if (!text)
        return -1;
    while (isspace((unsigned char)*text))
        text++;
    if (!isdigit((unsigned char)*text))
        return -1; /* also rejects "-1" and "" */
    errno = 0;
    char *end;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    char suffix[8];
    size_t len = strlen(end);
    while (len > 0 && isspace((unsigned char)end[len - 1]))
        len--;
    if (len >= sizeof(suffix))
        return -1;
    memcpy(suffix, end, len);
    suffix[len] = '\0';
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (strcasecmp(suffix, suffixes[i].suffix) != 0)
            continue;
        uint64_t unit = suffixes[i].unit;
        if (n > UINT64_MAX / unit)
            return -1;
        *bytes = (uint64_t)n * unit;
        return 0;
    }
    return -1;
}

int size_or_percent_parse(const char *text, uint64_t total, uint64_t *bytes)
{
    if (!text)
        return -1;
    size_t len = strlen(text);
    while (len > 0 && isspace((unsigned char)text[len - 1]))
        len--;
    if (len > 0 && text[len - 1] == '%') {
        char buf[32];
        if (len - 1 >= sizeof(buf))
            return -1;
        memcpy(buf, text, len - 1);
        buf[len - 1] = '\0';
        char *end;
        errno = 0;
        double pct = strtod(buf, &end);
        while (isspace((unsigned char)*end))
            end++;
        if (errno || end == buf || *end || !isfinite(pct) || pct < 0 || pct > 100 ||
            !isdigit((unsigned char)buf[strspn(buf, " \t")]))
            return -1;
        *bytes = (uint64_t)((double)total * pct / 100.0);
        return 0;
    }
    return size_parse(text, bytes);
}

const char *size_format(uint64_t bytes, char *buf, unsigned len)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v >= 100 || v == floor(v))
        snprintf(buf, len, "%.0f %s", v, unit[u]);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}
