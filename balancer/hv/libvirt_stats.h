/*
 * The libvirt backend's statistics: libvirt's typed-parameter records
 * (virDomainListGetStats, virDomainGetJobStats) and the domain XML's
 * virtio-mem devices made into the backend's guest_sample.  Run on a
 * worker thread (backend_libvirt.c): each call here is one RPC to
 * libvirtd or more, and none waits for a domain's job.
 */
#ifndef MEMBAL_HV_LIBVIRT_STATS_H
#define MEMBAL_HV_LIBVIRT_STATS_H

#include <glib.h>
#include <stdbool.h>

#include <libvirt/libvirt.h>

#include "hv/backend.h"

/* libvirt's last error in this thread (its message is thread-local). */
const char *lv_last_error(void);

/* Statistics of doms (NULL-terminated, one connection) in one call that
 * waits for no domain's job: got[i] when libvirt asked doms[i]'s QEMU, and
 * then samples[i] is its sample, with its job when ask_job is NULL or
 * ask_job[i] (else job_ms -1).  The number of records libvirt returned,
 * or -1 with its error. */
int lv_stats_list(virDomainPtr *doms, guint n, guest_sample *samples, bool *got, const bool *ask_job,
                  GError **error);

/* How long libvirt has run a job on the domain that copies or restores
 * its memory (migration, save, restore, dump, snapshot), -1 none. */
int64_t lv_stats_job_ms(virDomainPtr dom);

#define LV_SAMPLE_NO_JOB (-2)

/* One guest's sample, straight from libvirt, without waiting for the
 * domain's job: 0, -1 on an error, LV_SAMPLE_NO_JOB when another call
 * holds the job (a balloon change, a job of the operator's, or a call
 * stuck in its stopped QEMU); the reason with both. */
int lv_stats_sample(virDomainPtr dom, guest_sample *out, GError **error);

/* A sample's virtio-mem part, from the live domain XML.  libvirt counts
 * its devices in the balloon's figures (balloon.maximum: their maximum,
 * balloon.current: what they plugged); the core wants the balloon's own,
 * within the boot memory, as QMP gives it: they are taken out again.  An
 * XML that cannot be read leaves s as it is. */
void lv_stats_vmem(virDomainPtr dom, guest_sample *s);

#endif
