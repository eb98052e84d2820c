#include "agent/agent_proto.h"

#include <glib.h>

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"

#define MAX_COUNTER (1LL << 62)
#define MAX_KB (1LL << 40) /* 1 EiB in kB: anything above is nonsense */

const char *const agent_reject_names[AGENT_REJ_COUNT] = {
    "too_long", "json", "version", "field", "rate",
};
const char *const agent_vmstat_names[AV_COUNT] = {
    "workingset_refault_anon", "workingset_refault_file", "workingset_activate_anon",
    "workingset_activate_file", "pgscan_anon", "pgscan_file", "pgsteal_anon", "pgsteal_file",
    "pswpin", "pswpout", "pgmajfault", "oom_kill", "allocstall_dma", "allocstall_dma32", "allocstall_normal",
    "allocstall_movable",
};
const char *const agent_meminfo_names[AM_COUNT] = {
    "memtotal_kb", "memavailable_kb", "active_anon_kb", "inactive_anon_kb", "active_file_kb",
    "inactive_file_kb", "cached_kb", "dirty_kb", "writeback_kb", "swapcached_kb",
};

static int reject(agent_reject *why, agent_reject r, GError **error, const char *msg, const char *key)
{
    *why = r;
    g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "%s%s%.48s", msg, key ? ": " : "", key ? key : "");
    return -1;
}

/* Read a group of non-negative integer counters; unknown keys are skipped. */
static int int_group(json_object *obj, const char *const *names, int n, int64_t *out, int64_t max,
                     agent_reject *why, GError **error)
{
    for (int i = 0; i < n; i++)
        out[i] = -1;
    if (!obj)
        return 0;
    if (!json_object_is_type(obj, json_type_object))
        return reject(why, AGENT_REJ_FIELD, error, "not an object", NULL);
    for (int i = 0; i < n; i++) {
        json_object *v;
        if (!json_object_object_get_ex(obj, names[i], &v))
            continue;
        if (!json_object_is_type(v, json_type_int))
            return reject(why, AGENT_REJ_FIELD, error, "not an integer", names[i]);
        int64_t x = json_object_get_int64(v);
        if (x < 0 || x > max)
            return reject(why, AGENT_REJ_FIELD, error, "out of range", names[i]);
        out[i] = x;
    }
    return 0;
}

static int psi_value(json_object *psi, const char *key, double *out, agent_reject *why, GError **error)
{
    json_object *v;
    *out = -1;
    if (!json_object_object_get_ex(psi, key, &v))
        return 0;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return reject(why, AGENT_REJ_FIELD, error, "not a number", key);
    double d = json_object_get_double(v);
    if (!isfinite(d) || d < 0 || d > 100)
        return reject(why, AGENT_REJ_FIELD, error, "out of range", key);
    *out = d;
    return 0;
}

int agent_parse(const char *line, size_t len, agent_report *out, agent_reject *why, GError **error)
{
    if (len > AGENT_LINE_MAX)
        return reject(why, AGENT_REJ_TOO_LONG, error, "line too long", NULL);
    json_tokener *tok = json_tokener_new_ex(4);
    json_object *msg = json_tokener_parse_ex(tok, line, (int)len);
    bool ok = msg && json_tokener_get_error(tok) == json_tokener_success &&
              json_tokener_get_parse_end(tok) == len && json_object_is_type(msg, json_type_object);
    json_tokener_free(tok);
    int rc = -1;
    if (!ok) {
        reject(why, AGENT_REJ_JSON, error, "not one JSON object", NULL);
        goto out;
    }
    json_object *v, *vm = NULL, *mi = NULL, *psi = NULL, *hint = NULL;
    if (!json_object_object_get_ex(msg, "v", &v) || !json_object_is_type(v, json_type_int) ||
        json_object_get_int64(v) != 1) {
        reject(why, AGENT_REJ_VERSION, error, "missing or unsupported \"v\"", NULL);
        goto out;
    }
    agent_report r;
    memset(&r, 0, sizeof(r));
    if (!json_object_object_get_ex(msg, "seq", &v) || !json_object_is_type(v, json_type_int) ||
        json_object_get_int64(v) < 0) {
        reject(why, AGENT_REJ_FIELD, error, "missing or bad", "seq");
        goto out;
    }
    r.seq = (uint64_t)json_object_get_int64(v);
    json_object_object_get_ex(msg, "vmstat", &vm);
    json_object_object_get_ex(msg, "meminfo", &mi);
    if (int_group(vm, agent_vmstat_names, AV_COUNT, r.vmstat, MAX_COUNTER, why, error) < 0 ||
        int_group(mi, agent_meminfo_names, AM_COUNT, r.meminfo_kb, MAX_KB, why, error) < 0)
        goto out;
    r.psi_some_avg10 = r.psi_full_avg10 = -1;
    if (json_object_object_get_ex(msg, "psi", &psi)) {
        if (!json_object_is_type(psi, json_type_object)) {
            reject(why, AGENT_REJ_FIELD, error, "not an object", "psi");
            goto out;
        }
        if (psi_value(psi, "some_avg10", &r.psi_some_avg10, why, error) < 0 ||
            psi_value(psi, "full_avg10", &r.psi_full_avg10, why, error) < 0)
            goto out;
    }
    if (json_object_object_get_ex(msg, "hint", &hint)) {
        if (!json_object_is_type(hint, json_type_string)) {
            reject(why, AGENT_REJ_FIELD, error, "not a string", "hint");
            goto out;
        }
        r.hint_streaming = strcmp(json_object_get_string(hint), "streaming") == 0;
    }
    *out = r;
    rc = 0;
out:
    json_object_put(msg);
    return rc;
}

bool agent_admit(agent_state *st, double now)
{
    if (st->tokens_at == 0) {
        st->tokens = AGENT_BURST;
        st->tokens_at = now;
    }
    st->tokens += (now - st->tokens_at) * AGENT_RATE_PER_S;
    if (st->tokens > AGENT_BURST)
        st->tokens = AGENT_BURST;
    st->tokens_at = now;
    if (st->tokens < 1.0)
        return false;
    st->tokens -= 1.0;
    return true;
}

static double rate(const agent_state *st, int idx, bool *reset)
{
    int64_t a = st->prev.vmstat[idx], b = st->cur.vmstat[idx];
    double dt = st->cur_at - st->prev_at;
    if (a < 0 || b < 0 || dt <= 0)
        return 0;
    if (b < a) {
        *reset = true;
        return 0;
    }
    return (double)(b - a) / dt;
}

void agent_accept(agent_state *st, const agent_report *r, double now, uint64_t guest_bytes)
{
    agent_report c = *r;
    /* a guest cannot have more memory than its balloon gives it */
    int64_t cap_kb = (int64_t)(guest_bytes / 1024);
    for (int i = 0; i < AM_COUNT; i++) {
        if (guest_bytes && c.meminfo_kb[i] > cap_kb) {
            c.meminfo_kb[i] = cap_kb;
            st->clamped++;
        }
    }
    bool restarted = st->have && c.seq < st->cur.seq;
    /* Lines are drained once a tick and all carry the drain's time: rates
     * are taken between drains (the last line of this one against the last
     * of the previous one), not between lines of one drain (dt 0). */
    bool same_drain = st->have && now <= st->cur_at;
    if (st->have && !same_drain) {
        st->prev = st->cur;
        st->prev_at = st->cur_at;
        st->have_prev = !restarted;
    } else if (restarted) {
        st->have_prev = false;
    }
    st->cur = c;
    st->cur_at = now;
    st->have = true;
    st->messages++;
    st->refault_anon_ps = st->refault_file_ps = st->pgsteal_file_ps = st->oom_kill_ps = st->alloc_stall_ps = 0;
    if (!st->have_prev)
        return;
    bool reset = false;
    st->refault_anon_ps = rate(st, AV_REFAULT_ANON, &reset);
    st->refault_file_ps = rate(st, AV_REFAULT_FILE, &reset);
    st->pgsteal_file_ps = rate(st, AV_PGSTEAL_FILE, &reset);
    st->oom_kill_ps = rate(st, AV_OOM_KILL, &reset);
    for (int z = AV_ALLOCSTALL_DMA; z <= AV_ALLOCSTALL_MOVABLE; z++)
        st->alloc_stall_ps += rate(st, z, &reset);
    if (reset) {
        /* counters went backwards with no restart: no evidence this time */
        st->resets++;
        st->refault_anon_ps = st->refault_file_ps = st->pgsteal_file_ps = st->oom_kill_ps = st->alloc_stall_ps = 0;
        st->have_prev = false;
    }
}

void agent_feed_line(agent_state *st, const char *line, size_t len, double now, uint64_t guest_bytes)
{
    if (!agent_admit(st, now)) {
        st->rejected[AGENT_REJ_RATE]++;
        return;
    }
    agent_report r;
    agent_reject why;
    g_autoptr(GError) err = NULL;
    if (agent_parse(line, len, &r, &why, &err) < 0) {
        st->rejected[why]++;
        snprintf(st->last_error, sizeof(st->last_error), "%s", err->message);
        return;
    }
    agent_accept(st, &r, now, guest_bytes);
}

bool agent_fresh(const agent_state *st, double now, double max_age)
{
    return st->have && now - st->cur_at <= max_age;
}
