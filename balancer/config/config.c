#include "config/config.h"

#include <errno.h>
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/size_parse.h"
#include "util/error.h"

void config_defaults(balancer_config *c)
{
    memset(c, 0, sizeof(*c));
    c->connect_uri = g_strdup("qemu:///system");
    c->policy = g_strdup("split-lru");
    /* a guest in need is answered at the first decision after the report
     * that shows it: a decision a second (Hyper-V rebalances every second;
     * bench/scale.sh: 200 guests at a 1 s tick cost under 1 % of a core), a
     * report every 2 s -- the period the classifier's rate thresholds were
     * set for (at 1 s a streamer's second-long jitter read as need or
     * thrashing and won its cache back in 3 of 6 runs,
     * bench/results/2026-12-06-one-second-tcg.md) */
    c->tick_seconds = 1;
    c->stats_period = 2;
    c->wm_min = g_strdup("2%");
    c->wm_low = g_strdup("5%");
    c->wm_high = g_strdup("8%");
    /* the floor follows what a guest uses (split-lru's reclaim bound: used
     * memory and its decaying peak plus the reserve); the default floor is
     * only what a guest's kernel needs to stay up whatever its reports say */
    c->default_floor_percent = 0.0;
    c->default_floor_min = 128 * MIB;
    policy_tunables_default(&c->tun);
    c->metrics_listen = g_strdup("127.0.0.1:9640");
    c->control_socket = g_strdup(CONTROL_DEFAULT_SOCKET);
    c->memory_cgroup = g_strdup("");
    c->state_dir = g_strdup(STATE_DEFAULT_DIR);
    c->damon_admin = g_strdup(DAMON_DEFAULT_ADMIN);
    c->hr_enabled = false;
    c->hr_source = g_strdup("auto");
    c->hr_scan_interval = 10;
    c->hr_min_cold_age = 3;
    c->hr_max_cold_age = 60;
    c->hr_max_per_scan = 256 * MIB;
    c->hr_min_per_scan = 4 * MIB;
    c->hr_probes = 2;
    c->hr_protect = true;
    c->hr_proactive = true;
    c->hr_proactive_age = 120;
    c->hr_promotion_budget = 0.2;
    c->hr_max_cpu = 10;
    c->hr_max_swap_out = 64 * MIB;
}

void config_clear(balancer_config *c)
{
    g_free(c->connect_uri);
    g_free(c->policy);
    g_free(c->wm_min);
    g_free(c->wm_low);
    g_free(c->wm_high);
    g_free(c->metrics_listen);
    g_free(c->control_socket);
    g_free(c->memory_cgroup);
    g_free(c->state_dir);
    g_free(c->damon_admin);
    g_free(c->hr_source);
    memset(c, 0, sizeof(*c));
}

/* Line number of "key =" inside [group] of text; 0 if not found. */
static int key_line(const char *text, const char *group, const char *key)
{
    int line = 1;
    bool in_group = false;
    size_t klen = strlen(key);
    for (const char *p = text; *p; line++) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        while (n && (*p == ' ' || *p == '\t')) {
            p++;
            n--;
        }
        if (n && *p == '[') {
            const char *close = memchr(p, ']', n);
            in_group = close && (size_t)(close - p - 1) == strlen(group) &&
                       strncmp(p + 1, group, strlen(group)) == 0;
        } else if (in_group && n > klen && strncmp(p, key, klen) == 0) {
            const char *q = p + klen;
            while (*q == ' ' || *q == '\t')
                q++;
            if (*q == '=')
                return line;
        }
        if (!eol)
            break;
        p = eol + 1;
    }
    return 0;
}

/* Line number of the "[group]" header; 0 if not found. */
static int group_line(const char *text, const char *group)
{
    char *hdr = g_strdup_printf("[%s]", group);
    int line = 1, found = 0;
    for (const char *p = text; *p && !found; line++) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, hdr, strlen(hdr)) == 0)
            found = line;
        const char *eol = strchr(p, '\n');
        if (!eol)
            break;
        p = eol + 1;
    }
    g_free(hdr);
    return found;
}

typedef struct {
    GKeyFile *kf;
    const char *text;
    const char *path;
    GError **error;
} loader;

static int bad(loader *l, const char *group, const char *key, const char *why, const char *value)
{
    int line = key_line(l->text, group, key);
    g_set_error(l->error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "%s:%d: [%s] %s = \"%s\": %s", l->path, line, group,
                key, value ? value : "", why);
    return -1;
}

/* Fetch a trimmed string value; NULL if absent. */
static char *get(loader *l, const char *group, const char *key)
{
    char *v = g_key_file_get_string(l->kf, group, key, NULL);
    return v ? g_strstrip(v) : NULL;
}

static int get_str(loader *l, const char *group, const char *key, char **dst)
{
    char *v = get(l, group, key);
    if (v) {
        g_free(*dst);
        *dst = v;
    }
    return 0;
}

static int get_uint(loader *l, const char *group, const char *key, unsigned lo, unsigned hi,
                    unsigned *dst)
{
    char *v = get(l, group, key);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    int rc = 0;
    if (errno || end == v || *end || v[0] == '-' || n < lo || n > hi) {
        char why[64];
        snprintf(why, sizeof(why), "expected an integer from %u to %u", lo, hi);
        rc = bad(l, group, key, why, v);
    } else {
        *dst = (unsigned)n;
    }
    g_free(v);
    return rc;
}

static int get_percent(loader *l, const char *group, const char *key, double *dst)
{
    char *v = get(l, group, key);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end != v && *end == '%')
        end++;
    int rc = 0;
    if (errno || end == v || *end || !isfinite(d) || d < 0 || d > 100)
        rc = bad(l, group, key, "expected a percentage from 0 to 100", v);
    else
        *dst = d;
    g_free(v);
    return rc;
}

static int get_size(loader *l, const char *group, const char *key, uint64_t *dst)
{
    char *v = get(l, group, key);
    if (!v)
        return 0;
    int rc = 0;
    if (size_parse(v, dst) < 0)
        rc = bad(l, group, key, "expected a size such as 64MiB", v);
    g_free(v);
    return rc;
}

static int get_size_or_percent(loader *l, const char *group, const char *key, char **dst)
{
    char *v = get(l, group, key);
    if (!v)
        return 0;
    uint64_t ignored;
    if (size_or_percent_parse(v, 1ULL << 40, &ignored) < 0) {
        int rc = bad(l, group, key, "expected a size (512MiB) or a percentage of RAM (5%)", v);
        g_free(v);
        return rc;
    }
    g_free(*dst);
    *dst = v;
    return 0;
}

static int get_bool(loader *l, const char *group, const char *key, bool *dst)
{
    char *v = get(l, group, key);
    if (!v)
        return 0;
    int rc = 0;
    if (!g_ascii_strcasecmp(v, "true") || !g_ascii_strcasecmp(v, "yes") || !strcmp(v, "1"))
        *dst = true;
    else if (!g_ascii_strcasecmp(v, "false") || !g_ascii_strcasecmp(v, "no") || !strcmp(v, "0"))
        *dst = false;
    else
        rc = bad(l, group, key, "expected true or false", v);
    g_free(v);
    return rc;
}

static const char *const known_keys[][18] = {
    { "balancer", "connect", "policy", "tick", "stats_period", "control_socket", NULL },
    { "watermarks", "min", "low", "high", NULL },
    { "guests", "default_floor_percent", "default_floor_min", NULL },
    { "policy", "step_percent", "step_min", "reserve_percent", "reserve_min", "comfort_percent",
      "min_change", "trim_streams", NULL },
    { "metrics", "listen", NULL },
    { "host", "memory_cgroup", NULL },
    { "host_reclaim", "enabled", "source", "scan_interval", "min_cold_age", "max_cold_age", "max_per_scan",
      "min_per_scan", "probes_per_chunk", "protect_working_set", "proactive", "proactive_age", "promotion_budget",
      "max_cpu", "max_swap_out", NULL },
};

/* Keys a release removed: the value that asks for what this balancerd
 * still does (the old default) is accepted; any other was written for a
 * feature it does not have, and is refused with why rather than run
 * without it. */
static const char *const removed_keys[][4] = {
    { "policy", "drop_idle_cache", "false",
      "removed (it was never shown to help: bench/README.md); delete the line" },
};

static const char *const *removed_key(const char *group, const char *key)
{
    for (size_t i = 0; i < G_N_ELEMENTS(removed_keys); i++)
        if (strcmp(removed_keys[i][0], group) == 0 && strcmp(removed_keys[i][1], key) == 0)
            return removed_keys[i];
    return NULL;
}

static int check_unknown(loader *l)
{
    gsize ngroups;
    char **groups = g_key_file_get_groups(l->kf, &ngroups);
    int rc = 0;
    for (gsize g = 0; g < ngroups && rc == 0; g++) {
        const char *const *known = NULL;
        for (size_t k = 0; k < G_N_ELEMENTS(known_keys); k++)
            if (strcmp(known_keys[k][0], groups[g]) == 0)
                known = &known_keys[k][1];
        if (!known) {
            g_set_error(l->error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "%s:%d: unknown group [%s]", l->path,
                        group_line(l->text, groups[g]), groups[g]);
            rc = -1;
            break;
        }
        gsize nkeys;
        char **keys = g_key_file_get_keys(l->kf, groups[g], &nkeys, NULL);
        for (gsize k = 0; k < nkeys && rc == 0; k++) {
            bool ok = false;
            for (const char *const *kn = known; *kn; kn++)
                ok = ok || strcmp(*kn, keys[k]) == 0;
            const char *const *removed = ok ? NULL : removed_key(groups[g], keys[k]);
            g_autofree char *value = removed ? get(l, groups[g], keys[k]) : NULL;
            if (removed && value && strcmp(value, removed[2]) == 0)
                continue;
            if (!ok)
                rc = bad(l, groups[g], keys[k], removed ? removed[3] : "unknown key", value);
        }
        g_strfreev(keys);
    }
    g_strfreev(groups);
    return rc;
}

int config_load(balancer_config *c, const char *path, bool must_exist, GError **error)
{
    g_autofree char *text = NULL;
    gsize len = 0;
    g_autoptr(GError) ferr = NULL;
    if (!g_file_get_contents(path, &text, &len, &ferr)) {
        if (g_error_matches(ferr, G_FILE_ERROR, G_FILE_ERROR_NOENT) && !must_exist)
            return 0;
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "%s: %s", path, ferr->message);
        return -1;
    }
    return config_load_text(c, text, len, path, error);
}

/* n: c with strings of its own (replaced, not freed, until the load succeeds). */
static void config_copy(balancer_config *n, const balancer_config *c)
{
    *n = *c;
    n->connect_uri = g_strdup(c->connect_uri);
    n->policy = g_strdup(c->policy);
    n->wm_min = g_strdup(c->wm_min);
    n->wm_low = g_strdup(c->wm_low);
    n->wm_high = g_strdup(c->wm_high);
    n->metrics_listen = g_strdup(c->metrics_listen);
    n->control_socket = g_strdup(c->control_socket);
    n->memory_cgroup = g_strdup(c->memory_cgroup);
    n->state_dir = g_strdup(c->state_dir);
    n->damon_admin = g_strdup(c->damon_admin);
    n->hr_source = g_strdup(c->hr_source);
}

/* Every key of the file into n, once no group or key is unknown, in this
 * order: 0, or -1 at the first bad one. */
static int read_keys(loader *l, balancer_config *n)
{
    int rc = check_unknown(l);
    rc = rc ? rc : get_str(l, "balancer", "connect", &n->connect_uri);
    rc = rc ? rc : get_str(l, "balancer", "policy", &n->policy);
    rc = rc ? rc : get_uint(l, "balancer", "tick", 1, 3600, &n->tick_seconds);
    rc = rc ? rc : get_uint(l, "balancer", "stats_period", 1, 3600, &n->stats_period);
    rc = rc ? rc : get_size_or_percent(l, "watermarks", "min", &n->wm_min);
    rc = rc ? rc : get_size_or_percent(l, "watermarks", "low", &n->wm_low);
    rc = rc ? rc : get_size_or_percent(l, "watermarks", "high", &n->wm_high);
    rc = rc ? rc : get_percent(l, "guests", "default_floor_percent", &n->default_floor_percent);
    rc = rc ? rc : get_size(l, "guests", "default_floor_min", &n->default_floor_min);
    rc = rc ? rc : get_percent(l, "policy", "step_percent", &n->tun.step_percent);
    rc = rc ? rc : get_size(l, "policy", "step_min", &n->tun.step_min_bytes);
    rc = rc ? rc : get_percent(l, "policy", "reserve_percent", &n->tun.reserve_percent);
    rc = rc ? rc : get_size(l, "policy", "reserve_min", &n->tun.reserve_min_bytes);
    rc = rc ? rc : get_percent(l, "policy", "comfort_percent", &n->tun.comfort_percent);
    rc = rc ? rc : get_size(l, "policy", "min_change", &n->tun.min_change_bytes);
    rc = rc ? rc : get_bool(l, "policy", "trim_streams", &n->tun.trim_streams);
    rc = rc ? rc : get_str(l, "metrics", "listen", &n->metrics_listen);
    rc = rc ? rc : get_str(l, "balancer", "control_socket", &n->control_socket);
    rc = rc ? rc : get_str(l, "host", "memory_cgroup", &n->memory_cgroup);
    rc = rc ? rc : get_bool(l, "host_reclaim", "enabled", &n->hr_enabled);
    rc = rc ? rc : get_str(l, "host_reclaim", "source", &n->hr_source);
    rc = rc ? rc : get_uint(l, "host_reclaim", "scan_interval", 1, 3600, &n->hr_scan_interval);
    rc = rc ? rc : get_uint(l, "host_reclaim", "min_cold_age", 1, 10000, &n->hr_min_cold_age);
    rc = rc ? rc : get_uint(l, "host_reclaim", "max_cold_age", 1, 10000, &n->hr_max_cold_age);
    rc = rc ? rc : get_size(l, "host_reclaim", "max_per_scan", &n->hr_max_per_scan);
    rc = rc ? rc : get_size(l, "host_reclaim", "min_per_scan", &n->hr_min_per_scan);
    rc = rc ? rc : get_uint(l, "host_reclaim", "probes_per_chunk", 1, 64, &n->hr_probes);
    rc = rc ? rc : get_bool(l, "host_reclaim", "protect_working_set", &n->hr_protect);
    rc = rc ? rc : get_bool(l, "host_reclaim", "proactive", &n->hr_proactive);
    rc = rc ? rc : get_uint(l, "host_reclaim", "proactive_age", 1, 86400, &n->hr_proactive_age);
    rc = rc ? rc : get_percent(l, "host_reclaim", "promotion_budget", &n->hr_promotion_budget);
    rc = rc ? rc : get_percent(l, "host_reclaim", "max_cpu", &n->hr_max_cpu);
    rc = rc ? rc : get_size(l, "host_reclaim", "max_swap_out", &n->hr_max_swap_out);
    return rc;
}

/* What no single key says: values that contradict each other, the
 * policy's name, the watermarks' order.  0, or -1 at the first wrong. */
static int check_values(loader *l, const balancer_config *n)
{
    if (n->hr_max_cpu <= 0)
        return bad(l, "host_reclaim", "max_cpu", "must be more than 0%", "0");
    if (n->hr_max_swap_out == 0)
        return bad(l, "host_reclaim", "max_swap_out", "must be more than 0 (it bounds every pageout)", "0");
    if (strcmp(n->hr_source, "auto") && strcmp(n->hr_source, "damon") && strcmp(n->hr_source, "probe") &&
        strcmp(n->hr_source, "memcg"))
        return bad(l, "host_reclaim", "source", "expected auto, damon, probe or memcg", n->hr_source);
    if (n->hr_min_cold_age > n->hr_max_cold_age)
        return bad(l, "host_reclaim", "min_cold_age", "greater than max_cold_age", "");
    if (n->hr_min_per_scan > n->hr_max_per_scan)
        return bad(l, "host_reclaim", "min_per_scan", "greater than max_per_scan", "");
    if (!policy_lookup(n->policy)) {
        char why[96];
        snprintf(why, sizeof(why), "unknown policy (known: %s)", policy_names());
        return bad(l, "balancer", "policy", why, n->policy);
    }
    watermarks wm;
    /* checked against a nominal 64 GiB host: order errors show up here */
    if (config_watermarks(n, 64 * GIB, &wm, l->error) < 0) {
        g_prefix_error(l->error, "%s: ", l->path);
        return -1;
    }
    return 0;
}

int config_load_text(balancer_config *c, const char *data, size_t len, const char *path, GError **error)
{
    if (memchr(data, '\0', len)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "%s: contains a NUL byte", path);
        return -1;
    }
    g_autofree char *text = g_strndup(data, len); /* key_line() wants a C string */
    g_autoptr(GError) kerr = NULL;
    g_autoptr(GKeyFile) kf = g_key_file_new();
    if (!g_key_file_load_from_data(kf, text, (gsize)-1, G_KEY_FILE_NONE, &kerr)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "%s: %s", path, kerr->message);
        return -1;
    }
    loader l = { .kf = kf, .text = text, .path = path, .error = error };
    balancer_config n;
    config_copy(&n, c);
    int rc = read_keys(&l, &n);
    rc = rc ? rc : check_values(&l, &n);
    if (rc == 0) {
        config_clear(c);
        *c = n;
    } else {
        config_clear(&n);
    }
    return rc;
}

int config_watermarks(const balancer_config *c, uint64_t host_total, watermarks *wm, GError **error)
{
    if (size_or_percent_parse(c->wm_min, host_total, &wm->min) < 0 ||
        size_or_percent_parse(c->wm_low, host_total, &wm->low) < 0 ||
        size_or_percent_parse(c->wm_high, host_total, &wm->high) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "[watermarks]: unparsable watermark");
        return -1;
    }
    if (!(wm->min < wm->low && wm->low < wm->high)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID,
                    "[watermarks]: need min < low < high, got min=%s low=%s high=%s", c->wm_min, c->wm_low,
                    c->wm_high);
        return -1;
    }
    return 0;
}
