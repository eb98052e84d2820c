/*
 * The control socket: a root-only unix socket speaking JSON lines, one
 * request and one reply per connection (balancerctl is the client).
 *
 *   {"cmd":"status"}                   guests, host, watermarks, last decisions
 *   {"cmd":"policy","domain":"NAME"}   effective per-VM policy and its source
 *   {"cmd":"explain","domain":"NAME"}  why the last decision was taken
 *   {"cmd":"pause"} / {"cmd":"resume"} stop / restart actuating (still observing)
 *   {"cmd":"give-back"}               every guest its whole size back, and pause
 *
 * Requests are read from the main loop without blocking and are capped
 * at CONTROL_MAX_REQUEST bytes.
 */
#include "report/control.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/log.h"
#include "util/error.h"

#define CONTROL_MAX_REQUEST 4096
#define CONTROL_MAX_CLIENTS 16

struct control_server {
    const control_ops *ops;
    void *ctx;
    char *path;
    int fd;
    guint watch;
    unsigned clients;
};

typedef struct {
    control_server *srv;
    int fd;
    guint watch, timeout;
    char buf[CONTROL_MAX_REQUEST + 1];
    size_t len;
} client;

static json_object *u64(uint64_t v)
{
    return json_object_new_uint64(v);
}

static json_object *policy_json(const snapshot_guest *g)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "mode", json_object_new_string(vm_mode_name(g->policy.mode)));
    json_object_object_add(p, "priority", json_object_new_string(vm_priority_name(g->policy.priority)));
    json_object_object_add(p, "shares", json_object_new_int((int)g->policy.shares));
    json_object_object_add(p, "min_bytes", u64(g->policy.min_bytes));
    json_object_object_add(p, "max_bytes", u64(g->policy.max_bytes));
    json_object_object_add(p, "protect", json_object_new_boolean(g->policy.protect));
    json_object_object_add(p, "floor_bytes", u64(g->view.floor_bytes));
    json_object_object_add(p, "ceiling_bytes", u64(g->view.ceiling_bytes));
    json_object_object_add(p, "source", json_object_new_string(g->policy_from_metadata ? "metadata" : "default"));
    json_object_object_add(p, "last_error", g->policy_error[0] ? json_object_new_string(g->policy_error) : NULL);
    json_object_object_add(p, "errors", u64(g->policy_errors));
    return p;
}

/* A guest's virtio-mem device (explain). */
static json_object *vmem_json(const snapshot_guest *g)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "devices", json_object_new_int((int)g->vmem_devices));
    json_object_object_add(m, "resized", json_object_new_boolean(g->vmem_resized));
    json_object_object_add(m, "block_bytes", u64(g->vmem_block_bytes));
    json_object_object_add(m, "max_bytes", u64(g->vmem_max_bytes));
    json_object_object_add(m, "requested_bytes", u64(g->vmem_requested_bytes));
    json_object_object_add(m, "plugged_bytes", u64(g->vmem_plugged_bytes));
    json_object_object_add(m, "base_bytes", u64(g->base_bytes));
    json_object_object_add(m, "balloon_bytes", u64(g->balloon_bytes));
    json_object_object_add(m, "held", json_object_new_boolean(g->vmem_held));
    json_object_object_add(m, "held_seconds", json_object_new_double(g->vmem_held_s));
    json_object_object_add(m, "held_for", !g->vmem_held ? NULL
                           : json_object_new_string(g->vmem_plug_refused ? "plug" : "unplug"));
    return m;
}

/* What host reclaim found and did in a guest it scans (explain). */
static json_object *host_reclaim_json(const host_swap_guest_stats *hs)
{
    json_object *h = json_object_new_object();
    json_object_object_add(h, "through_cgroup", json_object_new_boolean(hs->by_memcg));
    json_object_object_add(h, "resident_bytes", u64(hs->resident_bytes));
    json_object_object_add(h, "swapped_bytes", u64(hs->swapped_bytes));
    json_object_object_add(h, "cold_bytes", u64(hs->cold_bytes));
    json_object_object_add(h, "paged_out_bytes", u64(hs->paged_out_bytes));
    json_object_object_add(h, "refaults", u64(hs->refaults));
    json_object_object_add(h, "refault_bytes", u64(hs->refault_bytes));
    json_object_object_add(h, "cold_age_scans", u64(hs->cold_age_scans));
    json_object_object_add(h, "budget_bytes", u64(hs->budget_bytes));
    json_object_object_add(h, "protected_bytes", u64(hs->protected_bytes));
    json_object_object_add(h, "protected_effective_bytes", u64(hs->protected_effective_bytes));
    json_object_object_add(h, "protect_capped_by", json_object_new_string(hs->protect_capped_by));
    json_object_object_add(h, "working_set_bytes", u64(hs->ws_bytes));
    json_object_object_add(h, "proactive_bytes", u64(hs->proactive_bytes));
    json_object_object_add(h, "promotion_bytes_per_second", json_object_new_double(hs->promoted_bps));
    json_object_object_add(h, "promotion_budget_percent", json_object_new_double(hs->budget_percent));
    json_object_object_add(h, "foreign_fault_bytes_per_second", json_object_new_double(hs->foreign_fault_bps));
    json_object_object_add(h, "slo", json_object_new_string(hs->slo ? hs->slo : "within"));
    return h;
}

/* What explain says of a guest beyond its status line. */
static void guest_detail_json(json_object *o, const snapshot_guest *g)
{
    const guest_view *v = &g->view;
    json_object_object_add(o, "stats_valid", json_object_new_boolean(v->stats_valid));
    json_object_object_add(o, "thrashing", json_object_new_boolean(v->thrashing));
    json_object_object_add(o, "streaming", json_object_new_boolean(v->streaming));
    json_object_object_add(o, "in_need", json_object_new_boolean(v->in_need));
    json_object_object_add(o, "need_bytes", u64(v->need_bytes));
    json_object_object_add(o, "peak_used_bytes", u64(v->peak_used_bytes));
    json_object_object_add(o, "used_growth_bytes_per_second", json_object_new_double(v->used_growth_bps));
    json_object_object_add(o, "quiet_samples", json_object_new_int((int)g->quiet_samples));
    json_object_object_add(o, "last_set_bytes", u64(g->last_set_bytes));
    json_object_object_add(o, "balloon_operations", u64(g->balloon_ops));
    json_object_object_add(o, "balloon_errors", u64(g->balloon_errors));
    json_object_object_add(o, "clamped_values", u64(g->clamped_values));
    json_object_object_add(o, "counter_resets", u64(g->counter_resets));
    json_object_object_add(o, "unbacked_claims", u64(g->unbacked_claims));
    json_object_object_add(o, "unbacked_claims_believed", u64(g->unbacked_short));
    json_object_object_add(o, "disk_read_bytes_per_second", json_object_new_double(g->disk_read_bps));
    json_object_object_add(o, "qemu_major_faults_per_second", json_object_new_double(g->qemu_faults_ps));
    json_object_object_add(o, "qemu_cpu_seconds_per_second", json_object_new_double(g->qemu_cpu));
    json_object_object_add(o, "free_page_reporting", g->free_page_reporting < 0 ? NULL
                           : json_object_new_boolean(g->free_page_reporting));
    json_object_object_add(o, "free_page_reporting_used", g->free_page_reporting_used < 0 ? NULL
                           : json_object_new_boolean(g->free_page_reporting_used));
    json_object_object_add(o, "deflate_on_oom", v->deflate_on_oom < 0 ? NULL
                           : json_object_new_boolean(v->deflate_on_oom));
    json_object_object_add(o, "policy", policy_json(g));
    if (g->vmem_devices)
        json_object_object_add(o, "virtio_mem", vmem_json(g));
    if (g->reclaim.active)
        json_object_object_add(o, "host_reclaim", host_reclaim_json(&g->reclaim));
}

/* A guest as status lists it; with detail, as explain shows it. */
static json_object *guest_json(const snapshot_guest *g, bool detail)
{
    const guest_view *v = &g->view;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "domain", json_object_new_string(g->name));
    json_object_object_add(o, "uuid", json_object_new_string(g->uuid));
    json_object_object_add(o, "actual_bytes", u64(v->actual_bytes));
    json_object_object_add(o, "target_bytes", u64(g->target_bytes));
    json_object_object_add(o, "headroom_bytes", u64(g->headroom_bytes));
    json_object_object_add(o, "cache_verdict", json_object_new_string(cache_verdict_key(g->cache_verdict)));
    json_object_object_add(o, "cache_verdict_text", json_object_new_string(cache_verdict_text(g->cache_verdict)));
    json_object_object_add(o, "cache_evidence", json_object_new_string(cache_evidence_key(g->cache_by)));
    json_object_object_add(o, "cache_evidence_text", json_object_new_string(cache_evidence_text(g->cache_by)));
    json_object_object_add(o, "cache_verdict_age_seconds", json_object_new_double(g->cache_verdict_age_s));
    json_object_object_add(o, "floor_bytes", u64(v->floor_bytes));
    json_object_object_add(o, "ceiling_bytes", u64(v->ceiling_bytes));
    json_object_object_add(o, "cache_bytes", u64(v->cache_bytes));
    json_object_object_add(o, "reclaimable_cache_bytes", u64(v->reclaimable_cache_bytes));
    json_object_object_add(o, "available_bytes", u64(v->available_bytes));
    json_object_object_add(o, "free_bytes", u64(v->free_bytes));
    json_object_object_add(o, "swap_in_bytes_per_second", json_object_new_double(v->swap_in_bps));
    json_object_object_add(o, "major_faults_per_second", json_object_new_double(v->major_faults_ps));
    json_object_object_add(o, "oom_killed", json_object_new_boolean(v->oom_killed));
    json_object_object_add(o, "alloc_stalls_per_second", json_object_new_double(v->alloc_stalls_ps));
    json_object_object_add(o, "state", json_object_new_string(snapshot_guest_state(g)));
    json_object_object_add(o, "reason", json_object_new_string(g->reason));
    if (detail)
        guest_detail_json(o, g);
    return o;
}

static json_object *error_reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_object *error_reply(const char *fmt, ...)
{
    json_object *r = json_object_new_object();
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_object_object_add(r, "ok", json_object_new_boolean(0));
    json_object_object_add(r, "error", json_object_new_string(msg));
    return r;
}

static json_object *status_reply(const snapshot *b)
{
    json_object *r = json_object_new_object();
    json_object_object_add(r, "ok", json_object_new_boolean(1));
    json_object_object_add(r, "policy", json_object_new_string(b->policy_name));
    json_object_object_add(r, "paused", json_object_new_boolean(b->paused));
    json_object_object_add(r, "dry_run", json_object_new_boolean(b->dry_run));
    json_object_object_add(r, "reclaiming", json_object_new_boolean(b->reclaiming));
    json_object_object_add(r, "summary", json_object_new_string(b->summary));
    json_object_object_add(r, "ticks", u64(b->ticks));
    json_object *h = json_object_new_object();
    json_object_object_add(h, "total_bytes", u64(b->host.host.total_bytes));
    json_object_object_add(h, "available_bytes", u64(b->host.host.available_bytes));
    json_object_object_add(h, "watermark_min_bytes", u64(b->wm.min));
    json_object_object_add(h, "watermark_low_bytes", u64(b->wm.low));
    json_object_object_add(h, "watermark_high_bytes", u64(b->wm.high));
    json_object_object_add(h, "reports_own_free_pages", json_object_new_boolean(b->own_reporting));
    json_object_object_add(r, "host", h);
    json_object *gs = json_object_new_array();
    for (size_t i = 0; i < b->n_guests; i++)
        json_object_array_add(gs, guest_json(&b->guests[i], false));
    json_object_object_add(r, "guests", gs);
    return r;
}

static char *control_handle(const control_server *srv, const char *line)
{
    json_tokener *tok = json_tokener_new_ex(8);
    json_object *req = json_tokener_parse_ex(tok, line, (int)strlen(line));
    bool ok = req && json_tokener_get_error(tok) == json_tokener_success &&
              json_object_is_type(req, json_type_object);
    json_tokener_free(tok);
    json_object *cmdv = NULL, *domv = NULL, *r;
    if (!ok || !json_object_object_get_ex(req, "cmd", &cmdv) ||
        !json_object_is_type(cmdv, json_type_string)) {
        r = error_reply("%s", "request must be a JSON object with a \"cmd\" string");
        goto out;
    }
    const char *cmd = json_object_get_string(cmdv);
    const char *dom = json_object_object_get_ex(req, "domain", &domv) ? json_object_get_string(domv) : NULL;
    if (strcmp(cmd, "status") == 0) {
        r = status_reply(srv->ops->snapshot(srv->ctx));
    } else if (strcmp(cmd, "pause") == 0 || strcmp(cmd, "resume") == 0) {
        bool paused = cmd[0] == 'p';
        srv->ops->set_paused(srv->ctx, paused);
        log_info("balancing %s by balancerctl", paused ? "paused" : "resumed");
        r = json_object_new_object();
        json_object_object_add(r, "ok", json_object_new_boolean(1));
        json_object_object_add(r, "paused", json_object_new_boolean(paused));
    } else if (strcmp(cmd, "give-back") == 0) {
        unsigned moved = srv->ops->give_back(srv->ctx);
        r = json_object_new_object();
        json_object_object_add(r, "ok", json_object_new_boolean(1));
        json_object_object_add(r, "paused", json_object_new_boolean(1));
        json_object_object_add(r, "guests", json_object_new_int64(moved));
    } else if (strcmp(cmd, "policy") == 0 || strcmp(cmd, "explain") == 0) {
        const snapshot *b = srv->ops->snapshot(srv->ctx);
        const snapshot_guest *g = snapshot_find(b, dom);
        if (!dom) {
            r = error_reply("%s needs a \"domain\"", cmd);
        } else if (!g) {
            r = error_reply("no managed guest named '%.200s'", dom);
        } else {
            r = json_object_new_object();
            json_object_object_add(r, "ok", json_object_new_boolean(1));
            json_object_object_add(r, "domain", json_object_new_string(g->name));
            if (cmd[0] == 'p') {
                json_object_object_add(r, "policy", policy_json(g));
            } else {
                json_object_object_add(r, "guest", guest_json(g, true));
                json_object_object_add(r, "host_summary", json_object_new_string(b->summary));
                json_object_object_add(r, "policy_name", json_object_new_string(b->policy_name));
            }
        }
    } else {
        r = error_reply("unknown command '%.64s' (status, policy, explain, pause, resume, give-back)", cmd);
    }
out:
    json_object_put(req);
    char *text = g_strdup_printf("%s\n", json_object_to_json_string_ext(r, JSON_C_TO_STRING_PLAIN));
    json_object_put(r);
    return text;
}

static void client_free(client *c)
{
    if (c->watch)
        g_source_remove(c->watch);
    if (c->timeout)
        g_source_remove(c->timeout);
    close(c->fd);
    c->srv->clients--;
    g_free(c);
}

static void client_reply(client *c, const char *text)
{
    size_t len = strlen(text), off = 0;
    /* replies are small; the socket buffer takes them, but do not hang on
     * a client that does not read */
    int tries = 0;
    while (off < len && tries < 100) {
        ssize_t n = send(c->fd, text + off, len - off, MSG_NOSIGNAL);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && (errno == EAGAIN || errno == EINTR))
            g_usleep(10000), tries++;
        else
            break;
    }
}

static gboolean client_timeout(gpointer data)
{
    client *c = data;
    c->timeout = 0;
    client_free(c);
    return G_SOURCE_REMOVE;
}

static gboolean client_readable(gint fd, GIOCondition cond, gpointer data)
{
    (void)cond;
    client *c = data;
    ssize_t n = read(fd, c->buf + c->len, CONTROL_MAX_REQUEST - c->len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return G_SOURCE_CONTINUE;
    if (n > 0)
        c->len += (size_t)n;
    c->buf[c->len] = '\0';
    char *nl = strchr(c->buf, '\n');
    if (!nl && n > 0 && c->len < CONTROL_MAX_REQUEST)
        return G_SOURCE_CONTINUE;
    if (nl)
        *nl = '\0';
    c->watch = 0;
    if (!nl && c->len >= CONTROL_MAX_REQUEST) {
        client_reply(c, "{\"ok\":false,\"error\":\"request too long\"}\n");
    } else if (c->len > 0) {
        char *reply = control_handle(c->srv, c->buf);
        client_reply(c, reply);
        g_free(reply);
    }
    client_free(c);
    return G_SOURCE_REMOVE;
}

static gboolean accept_ready(gint fd, GIOCondition cond, gpointer data)
{
    (void)cond;
    control_server *s = data;
    int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd < 0)
        return G_SOURCE_CONTINUE;
    if (s->clients >= CONTROL_MAX_CLIENTS) {
        close(cfd);
        return G_SOURCE_CONTINUE;
    }
    client *c = g_new0(client, 1);
    c->srv = s;
    c->fd = cfd;
    s->clients++;
    c->watch = g_unix_fd_add(cfd, G_IO_IN | G_IO_HUP | G_IO_ERR, client_readable, c);
    c->timeout = g_timeout_add_seconds(5, client_timeout, c);
    return G_SOURCE_CONTINUE;
}

control_server *control_start(const char *path, const control_ops *ops, void *ctx, GError **error)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(addr.sun_path)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "control socket path too long: %s", path);
        return NULL;
    }
    char *dir = g_path_get_dirname(path);
    if (g_mkdir_with_parents(dir, 0700) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "cannot create %s: %s", dir, strerror(errno));
        g_free(dir);
        return NULL;
    }
    g_free(dir);
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    unlink(path); /* a stale socket from a previous run */
    mode_t old = umask(0077); /* root only: the socket can pause balancing */
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (rc < 0 || listen(fd, 8) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "cannot listen on %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    control_server *s = g_new0(control_server, 1);
    s->ops = ops;
    s->ctx = ctx;
    s->fd = fd;
    s->path = g_strdup(path);
    s->watch = g_unix_fd_add(fd, G_IO_IN, accept_ready, s);
    return s;
}

void control_stop(control_server *s)
{
    if (!s)
        return;
    g_source_remove(s->watch);
    close(s->fd);
    unlink(s->path);
    g_free(s->path);
    g_free(s);
}
