/*
 * Line framing for QMP: QEMU ends every message with "\r\n".  The framer
 * accumulates bytes from however many reads, hands out complete lines and
 * refuses to hold more than max_line bytes of one unfinished line.
 */
#ifndef MEMBAL_QMP_FRAMER_H
#define MEMBAL_QMP_FRAMER_H

#include <stddef.h>

typedef struct {
    char *buf;
    size_t len;      /* bytes held */
    size_t start;    /* first byte not yet handed out */
    size_t cap;      /* allocated */
    size_t max_line; /* longest line accepted, without the terminator */
    int skipping;    /* dropping input up to the next newline */
} qmp_framer;

typedef enum {
    QMP_FRAME_LINE,     /* line and len set, valid until the next framer call */
    QMP_FRAME_NEED_MORE,
    QMP_FRAME_TOO_LONG, /* the next line, finished or not, exceeds max_line */
} qmp_frame_result;

void qmp_framer_init(qmp_framer *f, size_t max_line);
void qmp_framer_free(qmp_framer *f);
/* Append bytes; returns -1 only on allocation failure. */
int qmp_framer_feed(qmp_framer *f, const char *data, size_t n);
/* Next complete line, without "\n" or "\r\n"; blank lines are skipped.
 * QMP_FRAME_TOO_LONG leaves the line where it is, finished or not. */
qmp_frame_result qmp_framer_next(qmp_framer *f, const char **line, size_t *len);
/* After QMP_FRAME_TOO_LONG, for callers that go on: drop the over-long
 * line, including what of it is still to come. */
void qmp_framer_skip_line(qmp_framer *f);
/* For callers that go on past over-long lines (the guest agent's port):
 * the next complete line as qmp_framer_next, over-long ones dropped on the
 * way and counted in *dropped.  0 with a line, -1 when more input is
 * needed. */
int qmp_framer_next_skipping(qmp_framer *f, const char **line, size_t *len, unsigned long *dropped);
/* Bytes held of an unfinished line. */
size_t qmp_framer_pending(const qmp_framer *f);

#endif
