/* The texts of the decisions' reasons (policies/policy.h): what the log,
 * balancerctl explain and /metrics say; tests compare the enum. */
#include "policies/policy.h"

static const char *const reason_text[REASON_COUNT] = {
    [REASON_NONE] = "",
    [REASON_STEADY] = "steady",
    [REASON_MODE_OFF] = "mode=off: left alone",
    [REASON_NO_STATS] = "no fresh guest stats: holding",
    [REASON_NO_MEMORY] = "out of memory: no decision",
    [REASON_ABOVE_CEILING] = "above ceiling: lowered to max",
    [REASON_BELOW_FLOOR] = "below floor: raised to min",
    [REASON_REBOOTED] = "rebooted: given its size back",
    [REASON_REBOOT_ON_ITS_WAY] = "rebooted: its size on its way back",
    [REASON_FREES_NOTHING] = "its balloon frees nothing on the host (its memory all resident): given back",
    [REASON_SELF_DEFLATED] = "deflated on OOM by itself: not fought",
    [REASON_COST_THRASHING] = "reclaim cost it (thrashing): given back",
    [REASON_COST_NEED] = "reclaim cost it (in need): given back",
    [REASON_TRIM_SLOWED] = "a trim slowed its reads: given back",
    [REASON_CACHE_HOT] = "its cache was its working set: given back",
    [REASON_THRASHING_AT_CEILING] = "thrashing, at ceiling",
    [REASON_NEED_AT_CEILING] = "in need, at ceiling",
    [REASON_NEED_UNUSED] = "in need: what it was given is not in use yet",
    [REASON_THRASHING] = "thrashing: given memory back",
    [REASON_NEED] = "in need (available memory running out): given memory",
    [REASON_RECLAIM_STREAM] = "reclaim: streaming page cache",
    [REASON_RECLAIM_FREE] = "reclaim: guest free memory",
    [REASON_RECLAIM_CACHE] = "reclaim: page cache",
    [REASON_RECLAIM_ALL] = "reclaim: all cache (host critical)",
    [REASON_RECLAIM_STREAM_AT_ONCE] = "reclaim: streaming page cache, at once (the host is swapping)",
    [REASON_RECLAIM_PROBE] = "reclaim: one step of its cache, to see whether it reads it again",
    [REASON_HOST_SWAPS] = "the host swaps its memory: streams give their cache at once",
    [REASON_TRIM] = "proactive: streaming page cache",
    [REASON_COMFORT] = "short of available memory: growing",
    [REASON_OBSERVE_ONLY] = "policy none: observe only",
    [REASON_MOM_NO_CHANGE] = "mom: no change",
    [REASON_MOM_BETWEEN_RUNS] = "mom: between policy runs",
    [REASON_MOM_GROW] = "mom: grow (no host pressure)",
    [REASON_MOM_SHRINK_CRITICAL] = "mom: shrink (critical)",
    [REASON_MOM_SHRINK] = "mom: shrink (host pressure)",
    [REASON_MOM_GUEST_QOS] = "mom: guest_qos (below balloon_min)",
    [REASON_MOM_VDSM_NO_CHANGE] = "mom-vdsm: no change",
    [REASON_MOM_VDSM_BETWEEN_RUNS] = "mom-vdsm: between policy runs",
    [REASON_MOM_VDSM_GROW] = "mom-vdsm: grow (no host pressure)",
    [REASON_MOM_VDSM_SHRINK_CRITICAL] = "mom-vdsm: shrink (critical)",
    [REASON_MOM_VDSM_SHRINK] = "mom-vdsm: shrink (host pressure)",
    [REASON_MOM_VDSM_GUEST_QOS] = "mom-vdsm: guest_qos (below balloon_min)",
    [REASON_PVE_NO_CHANGE] = "proxmox: no change",
    [REASON_PVE_BETWEEN_CYCLES] = "proxmox: between pvestatd cycles",
    [REASON_PVE_GROW] = "proxmox: grow toward 80% host use",
    [REASON_PVE_SHRINK] = "proxmox: shrink toward 80% host use",
    [REASON_GIVE_BACK] = "give-back: its memory given back, balancing paused",
};

const char *decision_reason_text(decision_reason r)
{
    return r >= 0 && r < REASON_COUNT && reason_text[r] ? reason_text[r] : "?";
}

static const char *const verdict_text[CACHE_VERDICT_COUNT] = {
    [CACHE_UNKNOWN] = "not known (a working set until shown otherwise)",
    [CACHE_STREAM] = "a stream (what it read is not read again): gives first",
    [CACHE_REUSED] = "reused (its working set): not a stream",
};

static const char *const evidence_text[EVIDENCE_COUNT] = {
    [EVIDENCE_NONE] = "",
    [EVIDENCE_AGENT] = "its kernel's refaults against its file evictions (agent)",
    [EVIDENCE_REFAULT] = "a take made it read its disks more (its refault)",
    [EVIDENCE_NEED] = "a take put it in need",
    [EVIDENCE_THRASHING] = "a take made it thrash",
    [EVIDENCE_PROBE] = "a take of one step did not raise its disk reads",
};

const char *cache_verdict_text(cache_verdict v)
{
    return v >= 0 && v < CACHE_VERDICT_COUNT ? verdict_text[v] : "?";
}

const char *cache_evidence_text(cache_evidence e)
{
    return e >= 0 && e < EVIDENCE_COUNT ? evidence_text[e] : "?";
}

static const char *const verdict_key[CACHE_VERDICT_COUNT] = {
    [CACHE_UNKNOWN] = "unknown", [CACHE_STREAM] = "stream", [CACHE_REUSED] = "reused",
};

static const char *const evidence_key[EVIDENCE_COUNT] = {
    [EVIDENCE_NONE] = "", [EVIDENCE_AGENT] = "agent", [EVIDENCE_REFAULT] = "refault",
    [EVIDENCE_NEED] = "need", [EVIDENCE_THRASHING] = "thrashing", [EVIDENCE_PROBE] = "probe",
};

const char *cache_verdict_key(cache_verdict v)
{
    return v >= 0 && v < CACHE_VERDICT_COUNT ? verdict_key[v] : "?";
}

const char *cache_evidence_key(cache_evidence e)
{
    return e >= 0 && e < EVIDENCE_COUNT ? evidence_key[e] : "?";
}
