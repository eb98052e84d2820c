#include "qmp/qmp_glib.h"

#include <glib-unix.h>

/* Deadlines of async commands are checked this often. */
#define EXPIRE_INTERVAL_MS 200

struct qmp_glib_watch {
    qmp_conn *conn;
    GSource *io, *timer;
    qmp_broken_cb on_broken;
    void *opaque;
    gboolean reported;
};

static void destroy_sources(qmp_glib_watch *w)
{
    if (w->io) {
        g_source_destroy(w->io);
        g_source_unref(w->io);
        w->io = NULL;
    }
    if (w->timer) {
        g_source_destroy(w->timer);
        g_source_unref(w->timer);
        w->timer = NULL;
    }
}

static void check_broken(qmp_glib_watch *w)
{
    if (w->reported || !qmp_is_broken(w->conn))
        return;
    w->reported = TRUE;
    destroy_sources(w);
    if (w->on_broken)
        w->on_broken(w->conn, qmp_broken_reason(w->conn), w->opaque);
}

static gboolean on_io(gint fd, GIOCondition cond, gpointer data)
{
    (void)fd;
    (void)cond;
    qmp_glib_watch *w = data;
    qmp_pump(w->conn, 0, NULL);
    check_broken(w);
    return G_SOURCE_CONTINUE; /* a destroyed source is not dispatched again */
}

static gboolean on_timer(gpointer data)
{
    qmp_glib_watch *w = data;
    qmp_expire(w->conn);
    check_broken(w);
    return G_SOURCE_CONTINUE;
}

qmp_glib_watch *qmp_glib_attach(qmp_conn *conn, GMainContext *ctx,
                                qmp_broken_cb on_broken, void *opaque)
{
    qmp_glib_watch *w = g_new0(qmp_glib_watch, 1);
    w->conn = conn;
    w->on_broken = on_broken;
    w->opaque = opaque;
    w->io = g_unix_fd_source_new(qmp_fd(conn), G_IO_IN | G_IO_HUP | G_IO_ERR);
    g_source_set_callback(w->io, G_SOURCE_FUNC(on_io), w, NULL);
    g_source_attach(w->io, ctx);
    w->timer = g_timeout_source_new(EXPIRE_INTERVAL_MS);
    g_source_set_callback(w->timer, on_timer, w, NULL);
    g_source_attach(w->timer, ctx);
    return w;
}

void qmp_glib_detach(qmp_glib_watch *w)
{
    if (!w)
        return;
    destroy_sources(w);
    g_free(w);
}
