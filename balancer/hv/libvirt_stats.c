/* The libvirt backend's statistics records; see libvirt_stats.h. */
#include "hv/libvirt_stats.h"

#include <glib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "hv/libvirt_xml.h"
#include "util/error.h"

const char *lv_last_error(void)
{
    const char *m = virGetLastErrorMessage(); /* thread-local */
    return m ? m : "unknown libvirt error";
}

/* How long libvirt has been running a job on the domain that copies or
 * restores its memory (migration in or out, save, restore, dump,
 * snapshot), -1 when none: a backup job (disks only) does not count.
 * Without a job libvirt answers from its own state; with one it asks
 * QEMU under a query job, which these jobs allow.  An incoming migration
 * has no statistics here (libvirt: "migration statistics are available
 * only on the source host"), which says as much. */
int64_t lv_stats_job_ms(virDomainPtr dom)
{
    int type = VIR_DOMAIN_JOB_NONE, nparams = 0, op = VIR_DOMAIN_JOB_OPERATION_UNKNOWN;
    virTypedParameterPtr params = NULL;
    if (virDomainGetJobStats(dom, &type, &params, &nparams, 0) < 0)
        return virGetLastErrorCode() == VIR_ERR_OPERATION_UNSUPPORTED ? 0 : -1;
    unsigned long long elapsed = 0;
    virTypedParamsGetInt(params, nparams, VIR_DOMAIN_JOB_OPERATION, &op);
    virTypedParamsGetULLong(params, nparams, VIR_DOMAIN_JOB_TIME_ELAPSED, &elapsed);
    virTypedParamsFree(params, nparams);
    if (type != VIR_DOMAIN_JOB_BOUNDED && type != VIR_DOMAIN_JOB_UNBOUNDED)
        return -1;
    switch (op) {
    case VIR_DOMAIN_JOB_OPERATION_BACKUP:
    case VIR_DOMAIN_JOB_OPERATION_SNAPSHOT_REVERT: /* the guest is stopped meanwhile */
        return -1;
    default: /* migration, save, restore, dump, snapshot, and what libvirt cannot name */
        return elapsed > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)elapsed;
    }
}

/* What a sample is made of: libvirt's bulk statistics of the balloon
 * (guest memory, KiB) and the disks (bytes read). */
#define STATS_WANTED (VIR_DOMAIN_STATS_BALLOON | VIR_DOMAIN_STATS_BLOCK)

/* A guest-provided counter in KiB as bytes, or a count, within int64:
 * guest_ingest clamps what is left. */
static int64_t kib_bytes(unsigned long long v)
{
    return v > (unsigned long long)INT64_MAX / 1024 ? INT64_MAX : (int64_t)v * 1024;
}

static int64_t count_of(unsigned long long v)
{
    return v > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* Fill out from one domain's statistics record.  true when libvirt asked
 * the guest's QEMU for it: it then adds balloon.rss (also without a balloon
 * driver), and leaves balloon.* but .current and .maximum and the disks'
 * counters out when it could not (another call held the domain's job and
 * this one was not to wait for it). */
static bool sample_from_record(const virDomainStatsRecord *rec, guest_sample *out)
{
    memset(out, 0xff, sizeof(*out)); /* every field -1: not reported */
    out->vmem = (vmem_sample){ 0 }; /* none, unless its domain XML says (lv_stats_vmem) */
    out->last_update = 0;
    out->rss_bytes = -1; /* the core measures it (libvirt's "rss" is resident only) */
    out->job_ms = -1;
    bool asked = false;
    int64_t disks = -1;
    for (int i = 0; i < rec->nparams; i++) {
        const virTypedParameter *p = &rec->params[i];
        if (p->type != VIR_TYPED_PARAM_ULLONG && p->type != VIR_TYPED_PARAM_UINT)
            continue;
        unsigned long long v = p->type == VIR_TYPED_PARAM_ULLONG ? p->value.ul : p->value.ui;
        unsigned idx;
        char tail[16];
        if (strncmp(p->field, "block.", 6) == 0) {
            /* no disks: nothing read; disks without counters: unknown */
            if (strcmp(p->field, "block.count") == 0)
                disks = (int64_t)MIN(v, (unsigned long long)INT64_MAX);
            else if (sscanf(p->field, "block.%u.rd.byte%15s", &idx, tail) == 2 && strcmp(tail, "s") == 0 &&
                     v <= (unsigned long long)(INT64_MAX - MAX(out->disk_read_bytes, 0)))
                out->disk_read_bytes = MAX(out->disk_read_bytes, 0) + (int64_t)v;
            continue;
        }
        const char *f = p->field;
        if (strcmp(f, "balloon.maximum") == 0) out->max_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.current") == 0) out->actual_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.swap_in") == 0) out->swap_in_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.swap_out") == 0) out->swap_out_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.major_fault") == 0) out->major_faults = count_of(v);
        else if (strcmp(f, "balloon.minor_fault") == 0) out->minor_faults = count_of(v);
        else if (strcmp(f, "balloon.unused") == 0) out->free_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.available") == 0) out->total_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.usable") == 0) out->available_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.disk_caches") == 0) out->cache_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.last-update") == 0) out->last_update = count_of(v);
        else if (strcmp(f, "balloon.rss") == 0) asked = true;
    }
    if (disks == 0)
        out->disk_read_bytes = 0;
    return asked;
}

int lv_stats_list(virDomainPtr *doms, guint n, guest_sample *samples, bool *got, const bool *ask_job,
                  GError **error)
{
    virDomainStatsRecordPtr *recs = NULL;
    int nrec = virDomainListGetStats(doms, STATS_WANTED, &recs, VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT);
    if (nrec < 0)
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", lv_last_error());
    guint from = 0; /* the records come in the order of doms: each looked for after the last one found */
    for (int r = 0; r < nrec; r++) {
        unsigned char uuid[VIR_UUID_BUFLEN], want[VIR_UUID_BUFLEN];
        if (virDomainGetUUID(recs[r]->dom, uuid) < 0)
            continue;
        for (guint k = 0; k < n; k++) {
            guint i = (from + k) % n;
            if (got[i] || virDomainGetUUID(doms[i], want) < 0 || memcmp(uuid, want, sizeof(uuid)) != 0)
                continue;
            got[i] = sample_from_record(recs[r], &samples[i]);
            if (got[i] && (!ask_job || ask_job[i]))
                samples[i].job_ms = lv_stats_job_ms(doms[i]);
            from = i + 1;
            break;
        }
    }
    virDomainStatsRecordListFree(recs);
    return nrec;
}

int lv_stats_sample(virDomainPtr dom, guest_sample *out, GError **error)
{
    virDomainPtr doms[2] = { dom, NULL };
    bool got = false;
    int n = lv_stats_list(doms, 1, out, &got, NULL, error);
    if (n < 0)
        return -1;
    if (n != 1) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "libvirt returned no statistics for the domain");
        return -1;
    }
    if (!got) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                    "libvirt could not ask its QEMU: another call holds the domain's job");
        return LV_SAMPLE_NO_JOB;
    }
    return 0;
}

void lv_stats_vmem(virDomainPtr dom, guest_sample *s)
{
    char *xml = virDomainGetXMLDesc(dom, 0);
    libvirt_xml_facts f;
    int rc = xml ? libvirt_xml_facts_parse(xml, strlen(xml), &f, NULL) : -1;
    free(xml); /* libvirt's allocation */
    if (rc < 0)
        return;
    if (f.vmem.devices)
        s->vmem = f.vmem;
    if (s->max_bytes > 0 && (uint64_t)s->max_bytes > f.vmem_max_all)
        s->max_bytes -= (int64_t)f.vmem_max_all;
    if (s->actual_bytes > 0 && (uint64_t)s->actual_bytes > f.vmem_plugged_all)
        s->actual_bytes -= (int64_t)f.vmem_plugged_all;
    libvirt_xml_facts_clear(&f);
}
