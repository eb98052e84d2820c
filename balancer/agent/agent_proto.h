/*
 * Host side of the guest agent protocol (guest-agent/PROTOCOL.md): parse
 * and validate one line, then fold it into per-guest agent state with
 * clamps and counter-reset handling.  Everything here is pure: the socket
 * handling lives in the backends.
 */
#ifndef MEMBAL_AGENT_PROTO_H
#define MEMBAL_AGENT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <glib.h>
#include <stdint.h>

#define AGENT_LINE_MAX 4096
#define AGENT_RATE_PER_S 4.0   /* sustained messages per second accepted */
#define AGENT_BURST 8.0

typedef enum {
    AGENT_REJ_TOO_LONG,
    AGENT_REJ_JSON,
    AGENT_REJ_VERSION,
    AGENT_REJ_FIELD,
    AGENT_REJ_RATE,
    AGENT_REJ_COUNT,
} agent_reject;

extern const char *const agent_reject_names[AGENT_REJ_COUNT];

enum { AV_REFAULT_ANON, AV_REFAULT_FILE, AV_ACTIVATE_ANON, AV_ACTIVATE_FILE, AV_PGSCAN_ANON,
       AV_PGSCAN_FILE, AV_PGSTEAL_ANON, AV_PGSTEAL_FILE, AV_PSWPIN, AV_PSWPOUT, AV_PGMAJFAULT,
       AV_OOM_KILL, AV_ALLOCSTALL_DMA, AV_ALLOCSTALL_DMA32, AV_ALLOCSTALL_NORMAL, AV_ALLOCSTALL_MOVABLE,
       AV_COUNT };
enum { AM_TOTAL, AM_AVAILABLE, AM_ACTIVE_ANON, AM_INACTIVE_ANON, AM_ACTIVE_FILE,
       AM_INACTIVE_FILE, AM_CACHED, AM_DIRTY, AM_WRITEBACK, AM_SWAPCACHED, AM_COUNT };

extern const char *const agent_vmstat_names[AV_COUNT];
extern const char *const agent_meminfo_names[AM_COUNT];

typedef struct {
    uint64_t seq;
    int64_t vmstat[AV_COUNT];   /* -1: not sent */
    int64_t meminfo_kb[AM_COUNT];
    double psi_some_avg10, psi_full_avg10; /* -1: not sent */
    bool hint_streaming;
} agent_report;

/* Parse one line (without its newline).  0, or -1 with *why set. */
int agent_parse(const char *line, size_t len, agent_report *out, agent_reject *why, GError **error);

typedef struct {
    bool have, have_prev;
    agent_report cur, prev;
    double cur_at, prev_at;       /* host monotonic seconds */
    double tokens, tokens_at;     /* rate limiter */
    uint64_t messages, resets, clamped;
    uint64_t rejected[AGENT_REJ_COUNT];
    /* derived from the last two accepted reports */
    double refault_anon_ps, refault_file_ps, pgsteal_file_ps;
    double oom_kill_ps, alloc_stall_ps; /* its OOM kills; allocations stalled in direct reclaim, all zones */
    char last_error[160];
} agent_state;

/* Rate limit: true if a message arriving at host time now may be taken. */
bool agent_admit(agent_state *st, double now);
/* Fold a parsed report received at now into st, clamping sizes to
 * guest_bytes (the balloon size the host knows). */
void agent_accept(agent_state *st, const agent_report *r, double now, uint64_t guest_bytes);
/* Parse + admit + accept one line, counting rejections. */
void agent_feed_line(agent_state *st, const char *line, size_t len, double now, uint64_t guest_bytes);
/* Reports older than max_age seconds are not evidence any more. */
bool agent_fresh(const agent_state *st, double now, double max_age);

#endif
