/*
 * balancerd: the guest memory balancer daemon.
 *
 * Reads /etc/balancer/balancer.conf, connects to libvirt (or to QEMU QMP
 * sockets with --qmp), and every tick balances host memory between the
 * running guests with the configured policy.  SIGHUP reloads the
 * configuration; SIGTERM/SIGINT stop it.
 */
#include <glib-unix.h>
#include <glib.h>
#include <libvirt-glib/libvirt-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "core/balancer.h"
#include "report/control.h"
#include "report/metrics.h"
#include "util/fd_limit.h"
#include "util/log.h"

typedef struct {
    balancer *b;
    GMainLoop *loop;
    char *config_path;
    bool config_explicit;
    guint tick_source;
    metrics_server *metrics;
    control_server *control;
    /* command-line overrides, re-applied after a reload */
    char *opt_connect, *opt_policy, *opt_metrics, *opt_control, *opt_state_dir, *opt_damon_admin;
    int opt_tick;
} daemon_ctx;

/* One round, then publish what it saw. */
static void tick(daemon_ctx *d)
{
    balancer_tick(d->b);
    if (d->metrics)
        metrics_publish(d->metrics, metrics_render(balancer_snapshot(d->b)));
}

/* What the control socket may see and do. */
static const snapshot *ctl_snapshot(void *ctx)
{
    return balancer_snapshot(ctx);
}

static void ctl_set_paused(void *ctx, bool paused)
{
    balancer_set_paused(ctx, paused);
}

static unsigned ctl_give_back(void *ctx)
{
    return balancer_give_back_all(ctx);
}

static const control_ops control = {
    .snapshot = ctl_snapshot,
    .set_paused = ctl_set_paused,
    .give_back = ctl_give_back,
};

/* systemd's watchdog (WatchdogSec): fed from the main loop, so a wedged
 * loop stops feeding it and systemd restarts balancerd. */
static gboolean on_watchdog(gpointer data)
{
    (void)data;
    sd_notify(0, "WATCHDOG=1");
    return G_SOURCE_CONTINUE;
}

static gboolean on_tick(gpointer data)
{
    tick(data);
    return G_SOURCE_CONTINUE;
}

static void apply_overrides(daemon_ctx *d, balancer_config *c)
{
    if (d->opt_connect) {
        g_free(c->connect_uri);
        c->connect_uri = g_strdup(d->opt_connect);
    }
    if (d->opt_policy) {
        g_free(c->policy);
        c->policy = g_strdup(d->opt_policy);
    }
    if (d->opt_tick > 0)
        c->tick_seconds = (unsigned)d->opt_tick;
    if (d->opt_metrics) {
        g_free(c->metrics_listen);
        c->metrics_listen = g_strdup(d->opt_metrics);
    }
    if (d->opt_control) {
        g_free(c->control_socket);
        c->control_socket = g_strdup(d->opt_control);
    }
    if (d->opt_state_dir) {
        g_free(c->state_dir);
        c->state_dir = g_strdup(d->opt_state_dir);
    }
    if (d->opt_damon_admin) {
        g_free(c->damon_admin);
        c->damon_admin = g_strdup(d->opt_damon_admin);
    }
}

static void schedule_ticks(daemon_ctx *d)
{
    if (d->tick_source)
        g_source_remove(d->tick_source);
    d->tick_source = g_timeout_add_seconds(balancer_config_get(d->b)->tick_seconds, on_tick, d);
}

static gboolean on_quit(gpointer data)
{
    daemon_ctx *d = data;
    log_info("stopping");
    sd_notify(0, "STOPPING=1");
    g_main_loop_quit(d->loop);
    return G_SOURCE_CONTINUE;
}

static gboolean reload(daemon_ctx *d);

/* ", trim_streams" for the start-up and reload lines when it is in effect
 * (split-lru is the only policy that trims) */
static const char *trim_note(const balancer_config *c)
{
    return c->tun.trim_streams && !strcmp(c->policy, "split-lru") ? ", trim_streams" : "";
}

/* SIGHUP: re-read the config; on any error keep the running one. */
static gboolean on_reload(gpointer data)
{
    daemon_ctx *d = data;
    sd_notify(0, "RELOADING=1");
    gboolean r = reload(d);
    sd_notify(0, "READY=1");
    return r;
}

static gboolean reload(daemon_ctx *d)
{
    balancer_config c;
    config_defaults(&c);
    g_autoptr(GError) err = NULL;
    if (config_load(&c, d->config_path, d->config_explicit, &err) < 0) {
        log_err("reload: %s; keeping the running configuration", err->message);
        config_clear(&c);
        return G_SOURCE_CONTINUE;
    }
    apply_overrides(d, &c);
    const balancer_config *now = balancer_config_get(d->b);
    if (strcmp(c.connect_uri, now->connect_uri) != 0)
        log_warn("reload: connect URI changes take effect on restart");
    /* the sockets are bound once: a new address is refused, said, and the
     * running one kept (in the configuration shown too) */
    if (strcmp(c.metrics_listen, now->metrics_listen) != 0) {
        log_warn("reload: [metrics] listen = \"%s\" takes effect on restart; still serving on \"%s\"",
                 c.metrics_listen, now->metrics_listen);
        g_free(c.metrics_listen);
        c.metrics_listen = g_strdup(now->metrics_listen);
    }
    if (strcmp(c.control_socket, now->control_socket) != 0) {
        log_warn("reload: [balancer] control_socket = \"%s\" takes effect on restart; still listening on \"%s\"",
                 c.control_socket, now->control_socket);
        g_free(c.control_socket);
        c.control_socket = g_strdup(now->control_socket);
    }
    if (strcmp(c.policy, now->policy) != 0 && balancer_set_policy(d->b, c.policy, &err) < 0) {
        log_err("reload: %s; keeping the running configuration", err->message);
        config_clear(&c);
        return G_SOURCE_CONTINUE;
    }
    g_free(c.connect_uri);
    c.connect_uri = g_strdup(now->connect_uri);
    bool retick = c.tick_seconds != now->tick_seconds;
    if (balancer_replace_config(d->b, &c, &err) < 0)
        log_err("%s; keeping the running host reclaim", err->message);
    if (retick)
        schedule_ticks(d);
    now = balancer_config_get(d->b);
    log_info("configuration reloaded from %s (policy %s, tick %u s%s)", d->config_path, now->policy,
             now->tick_seconds, trim_note(now));
    return G_SOURCE_CONTINUE;
}

/* What the command line asks of this run; the overrides a reload applies
 * again are daemon_ctx's opt_ fields. */
typedef struct {
    char *config;       /* --config, NULL for the default */
    char **qmp;         /* --qmp sockets, NULL for libvirt */
    gboolean dry_run, once, verbose, version, release;
    int ticks;          /* --ticks, 0 to run until stopped */
} run_opts;

/* The command line into d's overrides and o: -1 to go on, otherwise the
 * exit code (--version, or what is wrong said on stderr). */
static int parse_options(int argc, char **argv, daemon_ctx *d, run_opts *o)
{
    GOptionEntry entries[] = {
        { "config", 'c', 0, G_OPTION_ARG_FILENAME, &o->config,
          "Configuration file (default " CONFIG_DEFAULT_PATH ")", "FILE" },
        { "connect", 0, 0, G_OPTION_ARG_STRING, &d->opt_connect,
          "libvirt URI (default qemu:///system)", "URI" },
        { "qmp", 0, 0, G_OPTION_ARG_FILENAME_ARRAY, &o->qmp,
          "Balance the QEMU process behind this QMP socket instead of libvirt's guests (repeatable); "
          "SOCKET,agent=PATH also reads its guest agent's port", "SOCKET" },
        { "policy", 'p', 0, G_OPTION_ARG_STRING, &d->opt_policy,
          "Policy: split-lru (default), mom, mom-vdsm, proxmox or none", "NAME" },
        { "tick", 't', 0, G_OPTION_ARG_INT, &d->opt_tick, "Seconds between balancing rounds", "S" },
        { "metrics-listen", 0, 0, G_OPTION_ARG_STRING, &d->opt_metrics,
          "Serve Prometheus /metrics on HOST:PORT (default 127.0.0.1:9640; \"\" disables)", "ADDR" },
        { "control-socket", 0, 0, G_OPTION_ARG_FILENAME, &d->opt_control,
          "balancerctl socket (default " CONTROL_DEFAULT_SOCKET "; \"\" disables)", "PATH" },
        { "state-dir", 0, 0, G_OPTION_ARG_FILENAME, &d->opt_state_dir,
          "Where balancerd records what it creates outside itself, e.g. a kdamond (default " STATE_DEFAULT_DIR ")",
          "DIR" },
        { "damon-admin", 0, 0, G_OPTION_ARG_FILENAME, &d->opt_damon_admin,
          "DAMON's sysfs admin directory (default " DAMON_DEFAULT_ADMIN ")", "DIR" },
        { "release-leftovers", 0, 0, G_OPTION_ARG_NONE, &o->release,
          "Turn off what a balancerd that is no longer running left behind (its kdamond, as recorded in the "
          "state directory), then exit; the unit's ExecStopPost", NULL },
        { "dry-run", 'n', 0, G_OPTION_ARG_NONE, &o->dry_run, "Decide and log, but never balloon", NULL },
        { "once", 0, 0, G_OPTION_ARG_NONE, &o->once, "Run one round and exit", NULL },
        { "ticks", 0, 0, G_OPTION_ARG_INT, &o->ticks, "Run N rounds and exit", "N" },
        { "verbose", 'v', 0, G_OPTION_ARG_NONE, &o->verbose, "Log every round (debug level)", NULL },
        { "version", 'V', 0, G_OPTION_ARG_NONE, &o->version, "Print the version and exit", NULL },
        { NULL, 0, 0, 0, NULL, NULL, NULL },
    };
    GOptionContext *octx = g_option_context_new("- balance host memory between KVM guests");
    g_option_context_set_summary(octx,
        "Watches every guest through virtio-balloon stats and balances host memory like\n"
        "Linux's split LRU: streaming page cache goes first, working sets are protected.");
    g_option_context_set_description(octx,
        "Per-guest policy comes from libvirt metadata, e.g.\n"
        "  virsh metadata DOM --uri " VM_POLICY_NS_URI " --key " VM_POLICY_NS_PREFIX " \\\n"
        "    --set '<policy priority=\"high\" min=\"1GiB\" max=\"8GiB\" mode=\"auto\"/>'\n"
        "See balancerd(8) / README.md.");
    g_option_context_add_main_entries(octx, entries, NULL);
    g_autoptr(GError) err = NULL;
    if (!g_option_context_parse(octx, &argc, &argv, &err)) {
        fprintf(stderr, "balancerd: %s (try --help)\n", err->message);
        return 2;
    }
    g_option_context_free(octx);
    if (o->version) {
        printf("balancerd " MEMBAL_VERSION "\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "balancerd: unexpected argument '%s' (try --help)\n", argv[1]);
        return 2;
    }
    if (d->opt_tick < 0 || o->ticks < 0) {
        fprintf(stderr, "balancerd: --tick and --ticks must be positive\n");
        return 2;
    }
    return -1;
}

/* --release-leftovers: needs no configuration, what to undo is in the
 * ledger.  The exit code. */
static int release_leftovers(daemon_ctx *d, run_opts *o)
{
    int rc = balancer_release_leftovers(d->opt_state_dir ? d->opt_state_dir : STATE_DEFAULT_DIR);
    g_free(d->opt_state_dir);
    g_free(d->opt_damon_admin);
    g_free(o->config);
    return rc < 0 ? 1 : 0;
}

/* Load the configuration, apply the command line over it and make the
 * balancer: 0, or -1 with what failed said on stderr. */
static int start_balancer(daemon_ctx *d, const run_opts *o)
{
    d->config_explicit = o->config != NULL;
    d->config_path = o->config ? o->config : g_strdup(CONFIG_DEFAULT_PATH);
    balancer_config cfg;
    config_defaults(&cfg);
    g_autoptr(GError) err = NULL;
    if (config_load(&cfg, d->config_path, d->config_explicit, &err) < 0) {
        fprintf(stderr, "balancerd: %s\n", err->message);
        return -1;
    }
    apply_overrides(d, &cfg);

    gvir_init(NULL, NULL);
    gvir_event_register();
    d->b = balancer_new(&cfg, o->qmp ? &backend_qmp : &backend_libvirt, o->qmp, o->dry_run, &err);
    if (!d->b) {
        fprintf(stderr, "balancerd: %s\n", err->message);
        return -1;
    }
    const balancer_config *c = balancer_config_get(d->b);
    log_info("starting: policy %s, tick %u s, %s%s%s", c->policy, c->tick_seconds,
             o->qmp ? "QMP sockets" : c->connect_uri, trim_note(c),
             o->dry_run ? ", dry run" : "");
    return 0;
}

/* The main loop's signals.  First: a SIGHUP or SIGTERM while the
 * listeners start (a unit reloading right after start) must not find the
 * default action, which kills the process. */
static void catch_signals(daemon_ctx *d)
{
    d->loop = g_main_loop_new(NULL, FALSE);
    g_unix_signal_add(SIGTERM, on_quit, d);
    g_unix_signal_add(SIGINT, on_quit, d);
    g_unix_signal_add(SIGHUP, on_reload, d);
}

/* /metrics and the control socket, those the configuration asks for: 0,
 * or -1 with what failed said on stderr. */
static int open_outputs(daemon_ctx *d)
{
    const balancer_config *c = balancer_config_get(d->b);
    g_autoptr(GError) err = NULL;
    if (c->metrics_listen[0]) {
        d->metrics = metrics_start(c->metrics_listen, &err);
        if (!d->metrics) {
            fprintf(stderr, "balancerd: %s\n", err->message);
            return -1;
        }
        log_info("metrics on http://%s/metrics", c->metrics_listen);
    }
    if (c->control_socket[0]) {
        d->control = control_start(c->control_socket, &control, d->b, &err);
        if (!d->control) {
            fprintf(stderr, "balancerd: %s\n", err->message);
            return -1;
        }
    }
    return 0;
}

/* --once, --ticks N: N rounds a tick apart, libvirt's event loop running
 * between them. */
static void run_ticks(daemon_ctx *d, int ticks)
{
    GMainContext *ctx = g_main_context_default();
    for (int i = 0; i < ticks; i++) {
        if (i > 0) {
            gint64 until = g_get_monotonic_time() +
                           (gint64)balancer_config_get(d->b)->tick_seconds * G_USEC_PER_SEC;
            while (g_get_monotonic_time() < until)
                if (!g_main_context_iteration(ctx, FALSE))
                    g_usleep(20000);
        }
        tick(d);
    }
}

/* The daemon: a round now, then every tick until SIGTERM or SIGINT. */
static void run_loop(daemon_ctx *d)
{
    tick(d);
    schedule_ticks(d);
    sd_notify(0, "READY=1"); /* Type=notify: started and balancing */
    uint64_t wd_usec = 0;
    if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec >= 2000)
        g_timeout_add((guint)(wd_usec / 2000), on_watchdog, NULL); /* twice per period */
    g_main_loop_run(d->loop);
    g_main_loop_unref(d->loop);
}

static void tear_down(daemon_ctx *d, run_opts *o)
{
    control_stop(d->control);
    metrics_stop(d->metrics);
    balancer_free(d->b);
    g_strfreev(o->qmp);
    g_free(d->opt_metrics);
    g_free(d->opt_control);
    g_free(d->opt_state_dir);
    g_free(d->opt_damon_admin);
    g_free(d->config_path);
    g_free(d->opt_connect);
    g_free(d->opt_policy);
}

/* A socket and two /proc files a guest: more than the soft limit systemd
 * starts services with (1024), long before 1000 guests. */
static void raise_fd_limit(void)
{
    uint64_t before, after;
    g_autoptr(GError) err = NULL;
    if (fd_limit_raise(&before, &after, &err) < 0)
        log_warn("%s: with many guests, sockets and /proc files may run out", err->message);
    else if (after != before)
        log_info("open files: soft limit raised from %llu to %llu (the hard limit)", (unsigned long long)before,
                 (unsigned long long)after);
    else
        log_debug("open files: limit %llu", (unsigned long long)after);
}

int main(int argc, char **argv)
{
    daemon_ctx d;
    memset(&d, 0, sizeof(d));
    run_opts o = { 0 };
    int rc = parse_options(argc, argv, &d, &o);
    if (rc >= 0)
        return rc;
    if (o.verbose)
        log_set_level(LOG_DEBUG);
    if (o.release)
        return release_leftovers(&d, &o);
    raise_fd_limit();
    if (start_balancer(&d, &o) < 0)
        return 1;
    if (o.once)
        o.ticks = 1;
    if (o.ticks <= 0)
        catch_signals(&d);
    if (open_outputs(&d) < 0)
        return 1;
    if (o.ticks > 0)
        run_ticks(&d, o.ticks);
    else
        run_loop(&d);
    tear_down(&d, &o);
    return 0;
}
