#include "qmp/qmp_framer.h"

#include <stdlib.h>
#include <string.h>

void qmp_framer_init(qmp_framer *f, size_t max_line)
{
    memset(f, 0, sizeof(*f));
    f->max_line = max_line;
}

void qmp_framer_free(qmp_framer *f)
{
    free(f->buf);
    memset(f, 0, sizeof(*f));
}

size_t qmp_framer_pending(const qmp_framer *f)
{
    return f->len - f->start;
}

/* Drop bytes already handed out so the buffer never grows past what one
 * line plus one read needs. */
static void compact(qmp_framer *f)
{
    if (f->start == 0)
        return;
    memmove(f->buf, f->buf + f->start, f->len - f->start);
    f->len -= f->start;
    f->start = 0;
}

void qmp_framer_skip_line(qmp_framer *f)
{
    size_t avail = f->len - f->start;
    char *nl = avail ? memchr(f->buf + f->start, '\n', avail) : NULL;
    if (nl) {
        f->start = (size_t)(nl - f->buf) + 1;
    } else {
        f->start = f->len;
        f->skipping = 1;
    }
}

int qmp_framer_feed(qmp_framer *f, const char *data, size_t n)
{
    if (f->skipping) {
        const char *nl = memchr(data, '\n', n);
        if (!nl)
            return 0;
        f->skipping = 0;
        n -= (size_t)(nl + 1 - data);
        data = nl + 1;
    }
    compact(f);
    if (f->len + n + 1 > f->cap) {
        size_t ncap = f->cap ? f->cap : 4096;
        while (ncap < f->len + n + 1)
            ncap *= 2;
        char *nbuf = realloc(f->buf, ncap);
        if (!nbuf)
            return -1;
        f->buf = nbuf;
        f->cap = ncap;
    }
    memcpy(f->buf + f->len, data, n);
    f->len += n;
    return 0;
}

int qmp_framer_next_skipping(qmp_framer *f, const char **line, size_t *len, unsigned long *dropped)
{
    qmp_frame_result fr;
    while ((fr = qmp_framer_next(f, line, len)) == QMP_FRAME_TOO_LONG) {
        (*dropped)++;
        qmp_framer_skip_line(f); /* only that line: the ones after it are taken */
    }
    return fr == QMP_FRAME_LINE ? 0 : -1;
}

qmp_frame_result qmp_framer_next(qmp_framer *f, const char **line, size_t *len)
{
    for (;;) {
        size_t avail = f->len - f->start;
        char *begin = f->buf + f->start;
        char *nl = avail ? memchr(begin, '\n', avail) : NULL;
        if (!nl)
            return avail > f->max_line ? QMP_FRAME_TOO_LONG : QMP_FRAME_NEED_MORE;

        size_t n = (size_t)(nl - begin), body = n > 0 && begin[n - 1] == '\r' ? n - 1 : n;
        if (body > f->max_line)
            return QMP_FRAME_TOO_LONG; /* left in place, as an unfinished one */
        f->start += n + 1;
        n = body;
        if (n == 0)
            continue;
        begin[n] = '\0'; /* lets callers treat the line as a C string */
        *line = begin;
        *len = n;
        return QMP_FRAME_LINE;
    }
}
