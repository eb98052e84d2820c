#include "policies/vm_policy.h"

unsigned vm_priority_shares(vm_priority prio)
{
    switch (prio) {
    case VM_PRIO_LOW: return 500;
    case VM_PRIO_HIGH: return 2000;
    case VM_PRIO_NORMAL: break;
    }
    return 1000;
}

void vm_policy_default(vm_policy *p)
{
    p->priority = VM_PRIO_NORMAL;
    p->shares = vm_priority_shares(VM_PRIO_NORMAL);
    p->min_bytes = 0;
    p->max_bytes = 0;
    p->mode = VM_MODE_AUTO;
    p->protect = false;
    p->promotion_budget = -1;
}

const char *vm_priority_name(vm_priority prio)
{
    return prio == VM_PRIO_LOW ? "low" : prio == VM_PRIO_HIGH ? "high" : "normal";
}

const char *vm_mode_name(vm_mode mode)
{
    return mode == VM_MODE_OFF ? "off" : "auto";
}
