/*
 * proxmox: Proxmox VE's auto-ballooning, the baseline for PVE users.
 * Sources, at HEAD: github.com/proxmox/pve-manager PVE/AutoBalloon.pm
 * (compute_alg1) and PVE/Service/pvestatd.pm (auto_ballooning, run) at
 * 14a22df (2026-08); proxmox/pve-common src/PVE/ProcFSTools.pm
 * (read_meminfo) at f665029; proxmox/qemu-server src/PVE/QemuServer.pm
 * (vmstatus) at e6352be; proxmox/pve-qemu debian/patches/pve/
 * 0013-PVE-virtio-balloon-improve-query-balloon.patch.
 *
 * pvestatd, quoted:
 *   my $updatetime = 10;  ... if ($cycle) { ... update_status(); }  $cycle++;
 *     (the first cycle does nothing; then every 10 s)
 *   my $hostfreemem = $hostmeminfo->{memtotal} - $hostmeminfo->{memused};
 *   my $target = int($config->{'ballooning-target'} // 80);
 *   my $goal = int($hostmeminfo->{memtotal} * $target / 100 - $hostmeminfo->{memused});
 *   my $maxchange = 100 * 1024 * 1024;
 *   my $res = PVE::AutoBalloon::compute_alg1($vmstatus, $goal, $maxchange);
 *   for my $vmid (sort keys %$res) { ... next if $target == $current;
 *       mon_cmd($vmid, "balloon", value => int($target)) }
 * read_meminfo: $res->{memused} = $res->{memtotal} - $d->{memavailable};
 * vmstatus: maxmem = query-balloon max_mem (the VM's RAM), balloon = actual,
 *   freemem = free_mem (the pve-qemu patch: stats[VIRTIO_BALLOON_S_MEMFREE],
 *   the guest's MemFree; only when total_mem and free_mem are reported),
 *   balloon_min = conf balloon (MiB), shares = conf shares // 1000.
 *
 * compute_alg1, quoted in full where it decides:
 *   foreach my $vmid (keys %$vmstatus) {
 *       next if !$d->{balloon};       # skip if balloon driver not running
 *       next if !$d->{balloon_min};   # skip if balloon value not set in config
 *       next if defined($d->{shares}) && ($d->{shares} == 0);
 *       push @$idlist, $vmid;
 *       if ($d->{freemem} && ($d->{freemem} > $d->{balloon_min} * 0.25)
 *           && ($d->{balloon} >= $d->{balloon_min})) { push @$idlist2, $vmid; }
 *       else { push @$idlist1, $vmid; } }
 *   if ($goal > 10 * 1024 * 1024) {          # grow: VMs under pressure first
 *       my $rest = &$change_func($res, $idlist1, $goal);
 *       if ($rest >= $goal) { $rest = &$change_func($res, $idlist, $rest); }
 *   } elsif ($goal < -10 * 1024 * 1024) {    # shrink: VMs with free memory first
 *       my $rest = &$change_func($res, $idlist2, $goal);
 *       if ($rest <= $goal) { $rest = &$change_func($res, $idlist, $rest); }
 *   }                                          # else: "do nothing"
 * change_func($res, $idlist, $bytes):
 *   my $rest = $bytes; my $repeat = 1; my $done_hash = {}; my $progress = 1;
 *   while ($rest && $repeat && $progress) {
 *       $repeat = 0; $progress = 0; my $shares_total = 0; my $alloc_old = 0;
 *       foreach my $vmid (@$idlist) { next if defined($done_hash->{$vmid});
 *           my $balloon = defined($res->{$vmid}) ? $res->{$vmid} : $d->{balloon};
 *           $alloc_old += $balloon - $d->{balloon_min};
 *           $shares_total += $d->{shares} || 1000; }
 *       my $changes = 0; my $alloc_new = $alloc_old + $rest;
 *       foreach my $vmid (@$idlist) { next if defined($done_hash->{$vmid});
 *           my $shares = $d->{shares} || 1000;
 *           my $desired = $d->{balloon_min} + int(($alloc_new / $shares_total) * $shares);
 *           if ($desired > $d->{maxmem}) { $desired = $d->{maxmem}; $repeat = 1; }
 *           elsif ($desired < $d->{balloon_min}) { $desired = $d->{balloon_min}; $repeat = 1; }
 *           my ($new, $balloon);
 *           if (($bytes > 0) && ($desired - $d->{balloon}) > 0) { # grow
 *               $new = $d->{balloon} + $maxchange;
 *               $balloon = $new > $desired ? $desired : $new;
 *           } elsif (($desired - $d->{balloon}) < 0) { # shrink
 *               $new = $d->{balloon} - $maxchange;
 *               $balloon = $new > $desired ? $new : $desired;
 *           } else { $done_hash->{$vmid} = 1; next; }
 *           my $diff = $balloon - $d->{balloon};
 *           if ($diff != 0) {
 *               my $oldballoon = defined($res->{$vmid}) ? $res->{$vmid} : $d->{balloon};
 *               $res->{$vmid} = $balloon;
 *               my $change = $balloon - $oldballoon;
 *               if ($change != 0) { $changes += $change;
 *                   my $absdiff = $diff > 0 ? $diff : -$diff;
 *                   $progress += $absdiff; $repeat = 1; } } }
 *       $rest -= $changes; }
 *   return $rest;
 *
 * Mapping: balloon_min is the guest's floor (PVE's "balloon" setting),
 * maxmem the domain maximum, shares the per-VM shares (membal's default is
 * PVE's 1000), mode=off is PVE's shares=0.  The 'lock migrate' skip has no
 * counterpart here.  Hash order does not matter: within one pass each VM's
 * result depends only on sums taken before the pass.
 */
#include <stdio.h>
#include <stdlib.h>

#include "policies/policy.h"

#define PVE_UPDATE_S 10.0               /* pvestatd $updatetime */
#define PVE_TARGET_PERCENT 80           /* ballooning-target default */
#define PVE_MAXCHANGE (100LL * 1024 * 1024)
#define PVE_DEAD_BAND (10LL * 1024 * 1024)

typedef struct {
    bool started;
    double next_update_s;
} pve_state;

/* One VM of vmstatus, in bytes; res is $res->{$vmid} (has_res: defined). */
typedef struct {
    long long balloon, balloon_min, maxmem, freemem;
    unsigned shares;
    long long res;
    bool has_res, done;
} pve_vm;

static long long change_func(pve_vm *vms, const size_t *idlist, size_t n, long long bytes)
{
    long long rest = bytes;
    bool repeat = true;
    long long progress = 1;
    for (size_t k = 0; k < n; k++)
        vms[idlist[k]].done = false; /* a fresh $done_hash per call */

    while (rest && repeat && progress) {
        repeat = false;
        progress = 0;
        long long shares_total = 0, alloc_old = 0;
        for (size_t k = 0; k < n; k++) {
            const pve_vm *d = &vms[idlist[k]];
            if (d->done)
                continue;
            long long balloon = d->has_res ? d->res : d->balloon;
            alloc_old += balloon - d->balloon_min;
            shares_total += d->shares ? d->shares : 1000;
        }
        long long changes = 0;
        long long alloc_new = alloc_old + rest;
        for (size_t k = 0; k < n; k++) {
            pve_vm *d = &vms[idlist[k]];
            if (d->done)
                continue;
            unsigned shares = d->shares ? d->shares : 1000;
            /* Perl: int(($alloc_new / $shares_total) * $shares), a float truncated */
            long long desired = d->balloon_min + (long long)(((double)alloc_new / (double)shares_total) * shares);
            if (desired > d->maxmem) {
                desired = d->maxmem;
                repeat = true;
            } else if (desired < d->balloon_min) {
                desired = d->balloon_min;
                repeat = true;
            }
            long long nw, balloon;
            if (bytes > 0 && desired - d->balloon > 0) { /* grow */
                nw = d->balloon + PVE_MAXCHANGE;
                balloon = nw > desired ? desired : nw;
            } else if (desired - d->balloon < 0) { /* shrink */
                nw = d->balloon - PVE_MAXCHANGE;
                balloon = nw > desired ? nw : desired;
            } else {
                d->done = true;
                continue;
            }
            long long diff = balloon - d->balloon;
            if (diff != 0) {
                long long oldballoon = d->has_res ? d->res : d->balloon;
                d->res = balloon;
                d->has_res = true;
                long long change = balloon - oldballoon;
                if (change != 0) {
                    changes += change;
                    progress += diff > 0 ? diff : -diff;
                    repeat = true;
                }
            }
        }
        rest -= changes;
    }
    return rest;
}

static void *pve_state_new(void)
{
    return calloc(1, sizeof(pve_state));
}

static void pve_state_free(void *p)
{
    free(p);
}

static void pve_decide(const policy_input *in, void *state, policy_output *out)
{
    pve_state *s = state;
    if (!s->started) { /* cycle 0 does no update */
        s->started = true;
        s->next_update_s = in->now_s + PVE_UPDATE_S;
    }
    bool run = cadence_due(&s->next_update_s, PVE_UPDATE_S, in->now_s);

    long long memtotal = (long long)in->host.total_bytes;
    long long memused = memtotal - (long long)in->host.available_bytes;
    long long goal = (long long)((double)memtotal * PVE_TARGET_PERCENT / 100 - (double)memused);

    pve_vm *vms = calloc(in->n_guests ? in->n_guests : 1, sizeof(*vms));
    size_t *idlist = calloc(3 * (in->n_guests ? in->n_guests : 1), sizeof(*idlist));
    size_t n_all = 0, n_pressure = 0, n_free = 0;
    size_t *idlist1 = idlist ? idlist + in->n_guests : NULL, *idlist2 = idlist ? idlist + 2 * in->n_guests : NULL;

    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        decision_set(&out->decisions[i], g->actual_bytes, g->actual_bytes, 1,
                     run ? REASON_PVE_NO_CHANGE : REASON_PVE_BETWEEN_CYCLES);
        if (!vms || !idlist)
            continue;
        pve_vm *d = &vms[i];
        d->balloon = (long long)g->actual_bytes;
        d->balloon_min = (long long)g->floor_bytes;
        d->maxmem = (long long)g->max_bytes;
        d->freemem = g->stats_valid ? (long long)g->free_bytes : 0;
        d->shares = g->policy.shares;
        if (!d->balloon || !d->balloon_min || g->policy.mode == VM_MODE_OFF)
            continue;
        idlist[n_all++] = i;
        if (d->freemem && d->freemem > d->balloon_min * 0.25 && d->balloon >= d->balloon_min)
            idlist2[n_free++] = i;
        else
            idlist1[n_pressure++] = i;
    }

    const char *what = "do nothing";
    if (run && vms && idlist) {
        if (goal > PVE_DEAD_BAND) {
            what = "grow";
            long long rest = change_func(vms, idlist1, n_pressure, goal);
            if (rest >= goal)
                change_func(vms, idlist, n_all, rest);
        } else if (goal < -PVE_DEAD_BAND) {
            what = "shrink";
            long long rest = change_func(vms, idlist2, n_free, goal);
            if (rest <= goal)
                change_func(vms, idlist, n_all, rest);
        }
        for (size_t k = 0; k < n_all; k++) {
            size_t i = idlist[k];
            if (!vms[i].has_res || vms[i].res == vms[i].balloon)
                continue;
            /* what is "grow" or "shrink" here: "do nothing" sets no vm's res */
            decision_set(&out->decisions[i], in->guests[i].actual_bytes, (uint64_t)vms[i].res, 1,
                         goal > 0 ? REASON_PVE_GROW : REASON_PVE_SHRINK);
        }
    }
    out->reclaiming = goal < -PVE_DEAD_BAND;
    snprintf(out->summary, sizeof(out->summary), "proxmox: goal %+lld MiB (%s)", goal / (1024 * 1024),
             run ? what : "between cycles");
    free(vms);
    free(idlist);
}

const policy_ops policy_proxmox = {
    .name = "proxmox",
    .description = "Proxmox VE auto-ballooning (pvestatd + AutoBalloon.pm): 80% host target, shares, 100 MiB steps",
    .state_new = pve_state_new,
    .state_free = pve_state_free,
    .decide = pve_decide,
};
