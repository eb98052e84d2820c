/*
 * balancerctl: ask a running balancerd what it is doing.
 *
 *   balancerctl status            table of guests and the last decision
 *   balancerctl policy DOMAIN     the effective per-VM policy and its source
 *   balancerctl explain DOMAIN    why the last decision was taken
 *   balancerctl pause | resume    stop / restart ballooning (observing goes on); a pause
 *                                 holds across restarts until resume
 *   balancerctl give-back         every guest its whole size back now, and pause
 *
 * --json prints the daemon's reply as is; --socket PATH picks the socket.
 */
#include <errno.h>
#include <glib.h>
#include <json-c/json.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "config/config.h"
#include "config/size_parse.h"
#include "util/error.h"

#define MAX_REPLY (1 << 20)

static const char *str(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && v ? json_object_get_string(v) : "";
}

static uint64_t num(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_uint64(v) : 0;
}

static double dbl(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

static bool flag(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

static const char *sz(uint64_t v, char *buf)
{
    return size_format(v, buf, 24);
}

static char *request(const char *path, const char *line, GError **error)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(addr.sun_path)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "socket path too long: %s", path);
        return NULL;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                    "cannot reach balancerd at %s: %s (is it running? are you root?)", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (send(fd, line, strlen(line), MSG_NOSIGNAL) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "sending to %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    g_autoptr(GString) reply = g_string_new(NULL);
    char buf[4096];
    bool failed = false;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 10000) <= 0) {
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "no reply from balancerd within 10 s");
            failed = true;
            break;
        }
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        g_string_append_len(reply, buf, n);
        if (reply->len > MAX_REPLY) {
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "reply too long");
            failed = true;
            break;
        }
    }
    close(fd);
    return failed ? NULL : g_string_free(g_steal_pointer(&reply), FALSE);
}

static void print_status(json_object *r)
{
    char a[24], b[24], c[24], d[24], e[24], s[24];
    json_object *host;
    json_object_object_get_ex(r, "host", &host);
    printf("policy %s%s%s, %s\n", str(r, "policy"), flag(r, "paused") ? " (PAUSED)" : "",
           flag(r, "dry_run") ? " (dry run)" : "", str(r, "summary"));
    printf("host: available %s of %s; watermarks min %s low %s high %s\n\n",
           sz(num(host, "available_bytes"), a), sz(num(host, "total_bytes"), b),
           sz(num(host, "watermark_min_bytes"), c), sz(num(host, "watermark_low_bytes"), d),
           sz(num(host, "watermark_high_bytes"), e));
    json_object *gs;
    json_object_object_get_ex(r, "guests", &gs);
    size_t n = gs ? json_object_array_length(gs) : 0;
    if (n == 0) {
        printf("no guests\n");
        return;
    }
    printf("%-20s %10s %10s %10s %10s %10s %9s  %-10s %s\n", "GUEST", "ACTUAL", "TARGET", "FLOOR",
           "CACHE", "AVAIL", "SWAPIN/s", "STATE", "LAST DECISION");
    for (size_t i = 0; i < n; i++) {
        json_object *g = json_object_array_get_idx(gs, i);
        printf("%-20.20s %10s %10s %10s %10s %10s %9s  %-10s %s\n", str(g, "domain"),
               sz(num(g, "actual_bytes"), a), sz(num(g, "target_bytes"), b),
               sz(num(g, "floor_bytes"), c), sz(num(g, "cache_bytes"), d),
               sz(num(g, "available_bytes"), e), sz((uint64_t)dbl(g, "swap_in_bytes_per_second"), s),
               str(g, "state"), str(g, "reason"));
    }
}

static void print_policy(json_object *p)
{
    char a[24], b[24];
    printf("source:   %s\n", str(p, "source"));
    printf("mode:     %s\npriority: %s (shares %s)\n", str(p, "mode"), str(p, "priority"), str(p, "shares"));
    printf("floor:    %s%s\n", sz(num(p, "floor_bytes"), a), num(p, "min_bytes") ? "" : " (default)");
    printf("ceiling:  %s%s\n", sz(num(p, "ceiling_bytes"), b), num(p, "max_bytes") ? "" : " (domain maximum)");
    printf("protect:  %s\n", flag(p, "protect") ? "yes" : "no");
    if (*str(p, "last_error"))
        printf("policy metadata: %s (%s rejected in all)\n", str(p, "last_error"), str(p, "errors"));
}

/* explain: what its page cache is, by reuse, and which evidence said so
 * (split-lru; other policies say nothing). */
static void explain_cache_verdict(json_object *g)
{
    if (strcmp(str(g, "cache_verdict"), "stream") == 0 || strcmp(str(g, "cache_verdict"), "reused") == 0)
        printf("  its page cache: %s; by %s, %.0f s ago\n", str(g, "cache_verdict_text"),
               str(g, "cache_evidence_text"), dbl(g, "cache_verdict_age_seconds"));
    else if (flag(g, "streaming"))
        printf("  its page cache: looks like a stream by its reads, not proven one: a working set until a probe "
               "(one step taken) shows its reads do not rise\n");
}

/* explain: what the guest reports, how it is classified, its used memory. */
static void explain_guest_memory(json_object *g)
{
    char a[24], b[24], c[24];
    printf("  guest reports: available %s, free %s, cache %s%s\n", sz(num(g, "available_bytes"), a),
           sz(num(g, "free_bytes"), b), sz(num(g, "cache_bytes"), c),
           flag(g, "stats_valid") ? "" : " (STALE: not used)");
    printf("  swap-in %.0f B/s, major faults %.1f/s -> %s%s\n", dbl(g, "swap_in_bytes_per_second"),
           dbl(g, "major_faults_per_second"),
           flag(g, "thrashing") ? "thrashing (protected, grows first)"
           : flag(g, "in_need")  ? "in need (available memory running out: never a donor, given memory first)"
           : flag(g, "streaming") ? "streaming by its reads"
                                  : "normal",
           "");
    explain_cache_verdict(g);
    if (flag(g, "oom_killed") || dbl(g, "alloc_stalls_per_second") > 0)
        printf("  the guest says: %s%s%.1f allocations/s stalled in direct reclaim (its balloon statistics or its agent)\n",
               flag(g, "oom_killed") ? "its OOM killer ran since its last report" : "",
               flag(g, "oom_killed") ? "; " : "", dbl(g, "alloc_stalls_per_second"));
    printf("  used memory rising %.0f B/s; decaying peak of used %s (reclaim leaves it plus its headroom)%s%s\n",
           dbl(g, "used_growth_bytes_per_second"), sz(num(g, "peak_used_bytes"), a),
           flag(g, "in_need") ? ", needs " : "", flag(g, "in_need") ? sz(num(g, "need_bytes"), b) : "");
    if (num(g, "headroom_bytes") > 0)
        printf("  headroom its balloon leaves it above its used memory: %s (its reserve, or the most its used memory "
               "rose within 5 s in the last hour; twice that after an OOM kill below its size)\n",
               sz(num(g, "headroom_bytes"), a));
}

/* explain: its balloon's counters, what the host measures of it and its balloon device. */
static void explain_host_side(json_object *g)
{
    printf("  balloon operations %s, errors %s; clamped guest values %s, counter resets %s\n",
           str(g, "balloon_operations"), str(g, "balloon_errors"), str(g, "clamped_values"),
           str(g, "counter_resets"));
    if (dbl(g, "disk_read_bytes_per_second") >= 0)
        printf("  host-measured disk reads %.0f B/s; swap-in/fault claims they could not explain: %s capped, %s "
               "believed (the guest was short: zram, zswap, a root that is no disk here)\n",
               dbl(g, "disk_read_bytes_per_second"), str(g, "unbacked_claims"), str(g, "unbacked_claims_believed"));
    if (dbl(g, "qemu_major_faults_per_second") >= 0)
        printf("  its QEMU's major faults (waits for host swap) %.0f/s\n", dbl(g, "qemu_major_faults_per_second"));
    if (dbl(g, "qemu_cpu_seconds_per_second") >= 0)
        printf("  its QEMU's CPU %.1f%% of a CPU\n", 100.0 * dbl(g, "qemu_cpu_seconds_per_second"));
    json_object *fpr, *used = NULL;
    if (json_object_object_get_ex(g, "free_page_reporting", &fpr)) {
        json_object_object_get_ex(g, "free_page_reporting_used", &used);
        printf("  free page reporting on its balloon: %s%s\n",
               !fpr ? "unknown" : json_object_get_boolean(fpr) ? "on" : "off",
               !fpr || !json_object_get_boolean(fpr) || !used ? ""
               : json_object_get_boolean(used) ? ", taken by the guest's driver"
                                                : ", not taken by the guest's driver");
    }
    json_object *doo;
    if (json_object_object_get_ex(g, "deflate_on_oom", &doo))
        printf("  deflate-on-oom on its balloon: %s\n",
               !doo ? "unknown"
               : json_object_get_boolean(doo) ? "on (the guest deflates it rather than kill)"
                                              : "off (a balloon that took too much ends in its OOM killer)");
}

/* explain: its virtio-mem device. */
static void explain_virtio_mem(json_object *vm)
{
    char pl[24], rq[24], mx[24], bl[24], bs[24];
    if (!flag(vm, "resized"))
        printf("  virtio-mem: %s plugged of %s, not resized by balancerd (its device has no id, or the "
               "backend cannot): its balloon alone is\n", sz(num(vm, "plugged_bytes"), pl), sz(num(vm, "max_bytes"), mx));
    else
        printf("  resized by: virtio-mem above its boot memory (%s plugged, %s requested, of %s), its balloon "
               "below it (%s of %s)%s\n", sz(num(vm, "plugged_bytes"), pl), sz(num(vm, "requested_bytes"), rq),
               sz(num(vm, "max_bytes"), mx), sz(num(vm, "balloon_bytes"), bl), sz(num(vm, "base_bytes"), bs),
               num(vm, "devices") > 1 ? "; only its first virtio-mem device is resized" : "");
    if (flag(vm, "held"))
        printf("  virtio-mem held for another %.0f s: the guest did not %s (%s); its balloon does the rest\n",
               dbl(vm, "held_seconds"), str(vm, "held_for"),
               !strcmp(str(vm, "held_for"), "plug") ? "no virtio_mem driver loaded?"
                                                    : "its memory there in use with nowhere to go, not "
                                                      "movable, or its driver told not to?");
}

/* explain: what host reclaim did through its memory cgroup (the memcg
 * source: no scan, the kernel's LRU chose). */
static void explain_host_reclaim_memcg(json_object *h)
{
    char a[24], b[24], d[24], pr[24];
    uint64_t charge = num(h, "resident_bytes");
    double budget = dbl(h, "promotion_budget_percent");
    printf("  host reclaim through its memory cgroup (the kernel's LRU chooses): charged %s, in host swap %s; "
           "reclaimed %s in all, %s of it proactively\n",
           sz(charge, a), sz(num(h, "swapped_bytes"), b), sz(num(h, "paged_out_bytes"), d),
           sz(num(h, "proactive_bytes"), pr));
    printf("  SLO %s: swap-ins %.1f KiB/s of a budget of %.2f%%/min of its charge (%.1f KiB/s)\n", str(h, "slo"),
           dbl(h, "promotion_bytes_per_second") / 1024, budget, budget / 100 * (double)charge / 60 / 1024);
}

/* explain: what host reclaim found and did in it. */
static void explain_host_reclaim(json_object *h)
{
    if (flag(h, "through_cgroup")) {
        explain_host_reclaim_memcg(h);
        return;
    }
    char a[24], b[24], c[24], d[24], e[24], f[24];
    printf("  host reclaim: resident %s, in host swap %s, cold %s; paged out %s in all, %s refaults (%s back); "
           "cold after %s scans, up to %s per scan%s\n",
           sz(num(h, "resident_bytes"), a), sz(num(h, "swapped_bytes"), b), sz(num(h, "cold_bytes"), c),
           sz(num(h, "paged_out_bytes"), d), str(h, "refaults"), sz(num(h, "refault_bytes"), f),
           str(h, "cold_age_scans"), sz(num(h, "budget_bytes"), e), num(h, "protected_bytes") > 0 ? ", working set protected in its cgroup" : "");
    if (num(h, "protected_bytes") > num(h, "protected_effective_bytes")) {
        char pe[24], pw[24];
        printf("  its protection (%s) is held to %s by %s's memory.low: a group's protection never exceeds "
               "its parent's\n", sz(num(h, "protected_bytes"), pw), sz(num(h, "protected_effective_bytes"), pe),
               str(h, "protect_capped_by"));
    }
    char w[24], pr[24];
    uint64_t ws = num(h, "working_set_bytes");
    double budget = dbl(h, "promotion_budget_percent");
    printf("  host-measured working set %s; SLO %s: promotions %.1f KiB/s of a budget of %.2f%%/min "
           "(%.1f KiB/s), %s paged out proactively\n",
           sz(ws, w), str(h, "slo"), dbl(h, "promotion_bytes_per_second") / 1024, budget,
           budget / 100 * (double)ws / 60 / 1024, sz(num(h, "proactive_bytes"), pr));
}

static void print_explain(json_object *r)
{
    char a[24], b[24], c[24];
    json_object *g, *p, *vm, *h;
    json_object_object_get_ex(r, "guest", &g);
    json_object_object_get_ex(g, "policy", &p);
    printf("%s: %s\n", str(r, "domain"), str(g, "reason"));
    printf("  policy %s; host: %s\n", str(r, "policy_name"), str(r, "host_summary"));
    printf("  %s %s, chosen target %s, floor %s\n", json_object_object_get_ex(g, "virtio_mem", NULL) ? "size" : "balloon",
           sz(num(g, "actual_bytes"), a), sz(num(g, "target_bytes"), b), sz(num(g, "floor_bytes"), c));
    explain_guest_memory(g);
    explain_host_side(g);
    if (json_object_object_get_ex(g, "virtio_mem", &vm))
        explain_virtio_mem(vm);
    printf("  policy: mode %s, priority %s, shares %s, protect %s, source %s\n", str(p, "mode"),
           str(p, "priority"), str(p, "shares"), flag(p, "protect") ? "yes" : "no", str(p, "source"));
    if (json_object_object_get_ex(g, "host_reclaim", &h))
        explain_host_reclaim(h);
}

static int usage(FILE *to)
{
    fprintf(to, "usage: balancerctl [--json] [--socket PATH] status | policy DOMAIN | explain DOMAIN | pause | resume | give-back\n");
    return to == stdout ? 0 : 2;
}

typedef struct {
    const char *sock;   /* --socket */
    bool json;          /* --json: the reply as is */
    const char *cmd;
    const char *dom;    /* policy's and explain's DOMAIN, NULL for the others */
} ctl_args;

/* The command line into a: -1 when it asks for a request, otherwise the
 * exit code (usage said what is wrong, or --help). */
static int parse_args(int argc, char **argv, ctl_args *a)
{
    *a = (ctl_args){ .sock = CONTROL_DEFAULT_SOCKET };
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--json") == 0)
            a->json = true;
        else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            a->sock = argv[++i];
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return usage(stdout);
        else
            return usage(stderr);
    }
    if (i >= argc)
        return usage(stderr);
    a->cmd = argv[i];
    a->dom = i + 1 < argc ? argv[i + 1] : NULL;
    bool needs_dom = strcmp(a->cmd, "policy") == 0 || strcmp(a->cmd, "explain") == 0;
    bool known = needs_dom || strcmp(a->cmd, "status") == 0 || strcmp(a->cmd, "pause") == 0 ||
                 strcmp(a->cmd, "resume") == 0 || strcmp(a->cmd, "give-back") == 0;
    if (!known || (needs_dom && !a->dom) || argc > i + (needs_dom ? 2 : 1)) {
        if (!known)
            fprintf(stderr, "balancerctl: unknown command '%s'\n", a->cmd);
        return usage(stderr);
    }
    return -1;
}

/* The request's line for the control socket; g_free it. */
static char *request_line(const ctl_args *a)
{
    json_object *req = json_object_new_object();
    json_object_object_add(req, "cmd", json_object_new_string(a->cmd));
    if (a->dom)
        json_object_object_add(req, "domain", json_object_new_string(a->dom));
    char *line = g_strdup_printf("%s\n", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
    json_object_put(req);
    return line;
}

/* A reply that says ok, as the command shows it. */
static void print_reply(const ctl_args *a, json_object *r)
{
    if (a->json) {
        printf("%s\n", json_object_to_json_string_ext(r, JSON_C_TO_STRING_PRETTY));
    } else if (strcmp(a->cmd, "status") == 0) {
        print_status(r);
    } else if (strcmp(a->cmd, "policy") == 0) {
        json_object *p;
        json_object_object_get_ex(r, "policy", &p);
        printf("%s\n", str(r, "domain"));
        print_policy(p);
    } else if (strcmp(a->cmd, "explain") == 0) {
        print_explain(r);
    } else if (strcmp(a->cmd, "give-back") == 0) {
        printf("%s guest(s) given their memory back; balancing paused (balancerctl resume balances again)\n",
               str(r, "guests"));
    } else {
        printf("balancing %s\n", flag(r, "paused") ? "paused" : "resumed");
    }
}

int main(int argc, char **argv)
{
    ctl_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    char *line = request_line(&a);
    g_autoptr(GError) err = NULL;
    char *reply = request(a.sock, line, &err);
    g_free(line);
    if (!reply) {
        fprintf(stderr, "balancerctl: %s\n", err->message);
        return 1;
    }
    json_object *r = json_tokener_parse(reply);
    if (!r) {
        fprintf(stderr, "balancerctl: unreadable reply from balancerd\n");
        g_free(reply);
        return 1;
    }
    rc = 0;
    if (!flag(r, "ok")) {
        fprintf(stderr, "balancerctl: %s\n", str(r, "error"));
        rc = 1;
    } else {
        print_reply(&a, r);
    }
    json_object_put(r);
    g_free(reply);
    return rc;
}
