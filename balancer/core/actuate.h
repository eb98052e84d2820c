/* The balloon actuator (actuate.c); for core's files only. */
#ifndef MEMBAL_CORE_ACTUATE_H
#define MEMBAL_CORE_ACTUATE_H

#include "core/balancer_priv.h"

/* How long a balloon asked to move counts as on its way (REISSUE_S). */
int64_t reissue_ms(const balancer *b);
/* Where the guest's balloon is going at now_ms: the target asked for
 * last, while it may still be on its way, else where it is. */
uint64_t balloon_heading(const balancer *b, const guest *g, int64_t now_ms);
/* What a virtio-mem device's sample said (a device that stopped following
 * is held, and asked to stay where it is). */
void note_vmem(balancer *b, guest *g, vmem_state st);
/* Carry out d for g, as seen at now_ms (the tick's moment).  give_back:
 * balancerctl give-back's move, made while paused too (it pauses first),
 * and never shrinking a guest. */
void actuate(balancer *b, guest *g, const guest_decision *d, int64_t now_ms, bool give_back);

#endif
