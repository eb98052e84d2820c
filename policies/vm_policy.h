/*
 * Per-VM policy, as an operator sets it with
 *   virsh metadata DOM --uri https://membal.dev/xmlns/policy/1 --key balancer \
 *     --set '<policy priority="high" shares="2000" min="1GiB" max="8GiB" mode="auto" protect="yes"/>'
 */
#ifndef MEMBAL_VM_POLICY_H
#define MEMBAL_VM_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define VM_POLICY_NS_URI "https://membal.dev/xmlns/policy/1"
#define VM_POLICY_NS_PREFIX "balancer"

typedef enum { VM_MODE_AUTO = 0, VM_MODE_OFF } vm_mode;
typedef enum { VM_PRIO_LOW = 0, VM_PRIO_NORMAL, VM_PRIO_HIGH } vm_priority;

typedef struct {
    vm_priority priority;
    unsigned shares;    /* relative weight: a guest with more shares gives less */
    uint64_t min_bytes; /* floor; 0 = daemon default */
    uint64_t max_bytes; /* ceiling; 0 = domain maximum */
    vm_mode mode;       /* off: observe only, never balloon */
    bool protect;       /* never force this guest below its available memory */
    double promotion_budget; /* host reclaim's SLO, % of its working set per minute; < 0: the daemon's */
} vm_policy;

/* Defaults: normal priority, 1000 shares, no floor/ceiling, auto. */
void vm_policy_default(vm_policy *p);
/* Shares implied by a priority when shares= is not given. */
unsigned vm_priority_shares(vm_priority prio);
const char *vm_priority_name(vm_priority prio);
const char *vm_mode_name(vm_mode mode);

#endif
