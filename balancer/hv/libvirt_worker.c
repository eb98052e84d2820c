/*
 * The libvirt backend's worker pool: the calls that reach a guest's QEMU,
 * one at a time per guest (its statistics, its balloon and virtio-mem
 * changes: the actuator), and the one statistics call for all guests.
 * Each posts its outcome into the guest's lv_guest and wakes the gather
 * (backend_libvirt.c), which reads it on the main loop.
 */
#include <glib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libvirt/libvirt.h>

#include "hv/libvirt_priv.h"
#include "hv/libvirt_stats.h"
#include "hv/libvirt_xml.h"
#include "util/error.h"
#include "util/mono_clock.h"

typedef struct {
    lv_guest *lg;           /* a reference; NULL for CALL_BULK */
    lv_call_kind kind;
    uint64_t bytes;         /* CALL_BALLOON, CALL_VMEM */
    GPtrArray *guests;      /* CALL_BULK: lv_guest references */
} lv_call;

lv_guest *lv_guest_ref(lv_guest *lg)
{
    g_atomic_int_inc(&lg->refs);
    return lg;
}

void lv_guest_unref(lv_guest *lg)
{
    if (!g_atomic_int_dec_and_test(&lg->refs))
        return;
    virDomainFree(lg->dom);
    g_free(lg);
}

/* ---- the actuator ---- */

#define JOB_RECHECK_MS 5000   /* a guest's job asked at least this often (every tick while one runs) */

/* A change waits for the domain's job, up to 30 s in libvirt and a worker
 * with it: asked first, as the bulk call asks a guest's job every few
 * seconds only.  0, or -1 when a job runs. */
static int job_guard(virDomainPtr dom, GError **error)
{
    int64_t job = lv_stats_job_ms(dom);
    if (job < 0)
        return 0;
    g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                "a libvirt job (migration, save or dump) has run for %.0f s: left alone", (double)job / 1000.0);
    return -1;
}

/* Set the first virtio-mem device's requested size (a worker), as virsh
 * update-memory-device --requested-size does: the device as the live XML
 * has it, with the new <requested>.  0, or -1 with the reason. */
static int set_vmem(lv_guest *lg, uint64_t bytes, GError **error)
{
    if (job_guard(lg->dom, error) < 0)
        return -1;
    char *xml = virDomainGetXMLDesc(lg->dom, 0);
    g_autoptr(GError) err = NULL;
    g_autofree char *dev = xml ? libvirt_xml_vmem_request(xml, strlen(xml), bytes, &err) : NULL;
    free(xml); /* libvirt's allocation */
    if (!dev && (!err || err->code == MEMBAL_ERROR_UNAVAILABLE)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                    "virtio-mem change failed: its device is not in the domain XML: %s", lv_last_error());
        return -1;
    }
    if (!dev) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "virtio-mem change failed: %s", err->message);
        return -1;
    }
    if (virDomainUpdateDeviceFlags(lg->dom, dev, VIR_DOMAIN_AFFECT_LIVE) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "virtio-mem change failed: %s", lv_last_error());
        return -1;
    }
    return 0;
}

/* Set the balloon (a worker).  0, or -1 with the reason. */
static int set_balloon(lv_guest *lg, uint64_t bytes, GError **error)
{
    if (job_guard(lg->dom, error) < 0)
        return -1;
    if (virDomainSetMemoryFlags(lg->dom, (unsigned long)(bytes / 1024), VIR_DOMAIN_AFFECT_LIVE) == 0)
        return 0;
    g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "balloon change failed: %s", lv_last_error());
    return -1;
}

/* ---- the calls ---- */

/* A call for lg returned (locked).  no_job: libvirt could not ask its
 * QEMU, as the job was held by another call, since since_ms: the guest is
 * not answering; anything else is an answer, which ends a logged stall. */
static void note_answer(lv_guest *lg, int64_t since_ms, bool no_job)
{
    if (no_job) {
        if (!lg->jobless_ms)
            lg->jobless_ms = since_ms;
        return;
    }
    if (lg->warned) {
        lg->back = true;
        lg->stalled_ms = mono_ms() - (lg->jobless_ms ? MIN(lg->jobless_ms, since_ms) : since_ms);
    }
    lg->warned = false;
    lg->jobless_ms = 0;
}

/* A worker: one statistics call for all of c's guests, without waiting
 * for any guest's job.  A guest it could not answer is asked on its own
 * (queued here, so a gather still running waits for it too).  An answer
 * that comes after its gather serves the next tick. */
static void bulk_work(lv_state *st, lv_call *c)
{
    GPtrArray *gs = c->guests;
    g_autofree virDomainPtr *doms = g_new0(virDomainPtr, gs->len + 1);
    g_autofree guest_sample *samples = g_new(guest_sample, gs->len);
    g_autofree bool *got = g_new0(bool, gs->len);
    g_autofree bool *ask_job = g_new0(bool, gs->len);
    int64_t now = mono_ms();
    for (guint i = 0; i < gs->len; i++) {
        lv_guest *lg = g_ptr_array_index(gs, i);
        doms[i] = lg->dom;
        /* a call to libvirtd a guest a tick otherwise (some 30 system calls
         * here, libvirt-glib's wakeups most of them): every few seconds,
         * spread, and every tick while one runs */
        ask_job[i] = lg->job_last >= 0 || now >= lg->job_next_ms;
    }
    g_autoptr(GError) failed = NULL;
    lv_stats_list(doms, gs->len, samples, got, ask_job, &failed);
    for (guint i = 0; i < gs->len; i++) {
        lv_guest *lg = g_ptr_array_index(gs, i);
        if (got[i] && ask_job[i]) {
            lg->job_last = samples[i].job_ms;
            lg->job_next_ms = now + JOB_RECHECK_MS / 2 + g_random_int_range(0, JOB_RECHECK_MS / 2);
        } else if (got[i]) {
            samples[i].job_ms = lg->job_last;
        }
    }
    for (guint i = 0; i < gs->len; i++)
        if (got[i] && ((lv_guest *)g_ptr_array_index(gs, i))->has_vmem)
            lv_stats_vmem(doms[i], &samples[i]);
    g_mutex_lock(&st->lock);
    snprintf(st->bulk_failed, sizeof(st->bulk_failed), "%s", failed ? failed->message : "");
    int64_t took = mono_ms() - st->bulk_asked_ms;
    if (st->bulk_warned)
        st->bulk_back_ms = took;
    else if (!st->bulk_stuck)
        st->bulk_took_ms = st->bulk_took_ms < 0 ? took : (3 * st->bulk_took_ms + took) / 4;
    for (guint i = 0; i < gs->len; i++) {
        lv_guest *lg = g_ptr_array_index(gs, i);
        if (!got[i]) {
            lv_queue_call(st, lg, CALL_SAMPLE, 0); /* what keeps it from the bulk call is said there */
            continue;
        }
        lg->sample = samples[i];
        lg->have = true;
        lg->error[0] = '\0';
        note_answer(lg, st->bulk_asked_ms, false);
    }
    st->bulk_busy = st->bulk_stuck = st->bulk_warned = false;
    st->running--;
    g_cond_broadcast(&st->done);
    g_mutex_unlock(&st->lock);
    g_ptr_array_unref(gs);
    g_free(c);
}

/* The call's own work (a worker, unlocked): a sample into *s, its failure
 * in *error, or a change; what is to be logged goes in *note.  The call's
 * outcome: 0, -1, or LV_SAMPLE_NO_JOB. */
static int run_call(const lv_call *c, guest_sample *s, GError **error, GError **note)
{
    lv_guest *lg = c->lg;
    if (c->kind == CALL_VMEM)
        return set_vmem(lg, c->bytes, note);
    if (c->kind == CALL_BALLOON)
        return set_balloon(lg, c->bytes, note);
    if (!lg->period_set) {
        lg->period_set = true;
        if (virDomainSetMemoryStatsPeriod(lg->dom, (int)lg->stats_period, VIR_DOMAIN_AFFECT_LIVE) < 0)
            g_set_error(note, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "cannot enable balloon stats (period %u s): %s",
                        lg->stats_period, lv_last_error());
    }
    int rc = lv_stats_sample(lg->dom, s, error);
    if (rc == 0 && lg->has_vmem)
        lv_stats_vmem(lg->dom, s);
    return rc;
}

/* The changes decided for lg while its call ran, right after it (locked;
 * unlocked around each): the virtio-mem size, then the balloon.  A refused
 * one is counted, and its reason replaces *note.  One decided before the
 * call stalled is stale by now: dropped. */
static void run_wanted(lv_state *st, lv_guest *lg, GError **note)
{
    if (lg->stuck) {
        lg->want_bytes = 0;
        lg->want_vmem = UINT64_MAX;
    }
    while (lg->want_bytes || lg->want_vmem != UINT64_MAX) {
        uint64_t want = lg->want_bytes, want_vmem = lg->want_vmem;
        lg->want_bytes = 0;
        lg->want_vmem = UINT64_MAX;
        g_mutex_unlock(&st->lock);
        g_autoptr(GError) err = NULL;
        bool ok = (want_vmem == UINT64_MAX || set_vmem(lg, want_vmem, &err) == 0) &&
                  (!want || set_balloon(lg, want, &err) == 0);
        g_mutex_lock(&st->lock);
        if (!ok) {
            lg->set_failures++;
            g_clear_error(note);
            *note = g_steal_pointer(&err);
        }
    }
}

void lv_work(gpointer data, gpointer user_data)
{
    lv_call *c = data;
    lv_state *st = user_data;
    if (c->kind == CALL_BULK) {
        bulk_work(st, c);
        return;
    }
    lv_guest *lg = c->lg;
    g_autoptr(GError) err = NULL;
    g_autoptr(GError) note = NULL;
    guest_sample s;
    int rc = run_call(c, &s, &err, &note);
    g_mutex_lock(&st->lock);
    run_wanted(st, lg, &note);
    if ((c->kind == CALL_BALLOON || c->kind == CALL_VMEM) && rc < 0)
        lg->set_failures++;
    if (c->kind == CALL_SAMPLE) {
        if (rc == 0) {
            lg->sample = s;
            lg->have = true;
            lg->error[0] = '\0';
        } else {
            snprintf(lg->error, sizeof(lg->error), "%s", err->message);
        }
    }
    if (note)
        snprintf(lg->note, sizeof(lg->note), "%s", note->message);
    /* nothing was queued for it while this call ran: asked_ms is its.  A
     * balloon change waits for the job: its return says nothing of a QEMU
     * whose job another call holds */
    if (c->kind == CALL_SAMPLE || !lg->jobless_ms)
        note_answer(lg, lg->asked_ms, c->kind == CALL_SAMPLE && rc == LV_SAMPLE_NO_JOB);
    lg->stuck = false;
    lg->busy = false;
    st->running--;
    g_cond_broadcast(&st->done);
    g_mutex_unlock(&st->lock);
    lv_guest_unref(lg);
    g_free(c);
}

/* ---- queueing them (locked; from the main loop, or a worker) ---- */

bool lv_queue_call(lv_state *st, lv_guest *lg, lv_call_kind kind, uint64_t bytes)
{
    if (lg->busy)
        return false;
    lv_call *c = g_new0(lv_call, 1);
    c->lg = lv_guest_ref(lg);
    c->kind = kind;
    c->bytes = bytes;
    lg->busy = true;
    lg->asked_ms = mono_ms();
    if (kind == CALL_SAMPLE)
        st->calls_one++;
    st->running++;
    g_thread_pool_push(st->pool, c, NULL);
    return true;
}

void lv_queue_bulk(lv_state *st, GPtrArray *gs)
{
    lv_call *c = g_new0(lv_call, 1);
    c->kind = CALL_BULK;
    c->guests = gs;
    st->bulk_busy = true;
    st->bulk_stuck = st->bulk_warned = false;
    st->bulk_asked_ms = mono_ms();
    st->calls_all++;
    st->running++;
    g_thread_pool_push(st->pool, c, NULL);
}

