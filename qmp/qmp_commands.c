/*
 * Typed wrappers for the QMP commands the balancer uses, and the pure
 * parsers behind them.  Field names follow QEMU 7.2's qapi/machine.json
 * and hw/virtio/virtio-balloon.c.
 */
#include "qmp/qmp.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(qmp_error *err, qmp_err_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(qmp_error *err, qmp_err_code code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A required non-negative integer member. */
static int get_u64(json_object *obj, const char *key, uint64_t *out, qmp_error *err)
{
    json_object *v;
    if (!json_object_is_type(obj, json_type_object) ||
        !json_object_object_get_ex(obj, key, &v) ||
        !json_object_is_type(v, json_type_int))
        return fail(err, QMP_ERR_PROTOCOL, "reply lacks integer member '%s'", key);
    /* json-c keeps values above INT64_MAX as unsigned; negative are bad. */
    if (json_object_get_int64(v) < 0)
        return fail(err, QMP_ERR_PROTOCOL, "member '%s' is negative", key);
    *out = json_object_get_uint64(v);
    return 0;
}

int qmp_parse_query_balloon(json_object *ret, uint64_t *actual, qmp_error *err)
{
    return get_u64(ret, "actual", actual, err);
}

/* Is name (a string beginning "NAME:", as QEMU describes a feature or
 * status bit) in obj's array member key? */
static int named_in(json_object *obj, const char *key, const char *name, qmp_error *err)
{
    json_object *a;
    if (!json_object_is_type(obj, json_type_object) || !json_object_object_get_ex(obj, key, &a) ||
        !json_object_is_type(a, json_type_array))
        return fail(err, QMP_ERR_PROTOCOL, "reply lacks array member '%s'", key);
    size_t len = strlen(name);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *v = json_object_array_get_idx(a, i);
        const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
        if (!strncmp(s, name, len) && s[len] == ':')
            return 1;
    }
    return 0;
}

int qmp_parse_virtio_guest_feature(json_object *ret, const char *feature, int *taken, qmp_error *err)
{
    json_object *status, *features;
    if (!json_object_is_type(ret, json_type_object) || !json_object_object_get_ex(ret, "status", &status) ||
        !json_object_object_get_ex(ret, "guest-features", &features))
        return fail(err, QMP_ERR_PROTOCOL, "reply lacks member 'status' or 'guest-features'");
    int ok = named_in(status, "statuses", "VIRTIO_CONFIG_S_DRIVER_OK", err);
    int has = ok < 0 ? -1 : named_in(features, "dev-features", feature, err);
    if (has < 0)
        return -1;
    *taken = ok ? has : -1;
    return 0;
}

int qmp_parse_memory_size_summary(json_object *ret, uint64_t *base, uint64_t *plugged,
                                  qmp_error *err)
{
    if (get_u64(ret, "base-memory", base, err) < 0)
        return -1;
    /* plugged-memory is absent on machines without memory hotplug. */
    if (plugged) {
        *plugged = 0;
        json_object *v;
        if (json_object_object_get_ex(ret, "plugged-memory", &v) &&
            get_u64(ret, "plugged-memory", plugged, err) < 0)
            return -1;
    }
    return 0;
}

int qmp_parse_memory_devices(json_object *ret, qmp_memory_devices *out, qmp_error *err)
{
    memset(out, 0, sizeof(*out));
    if (!json_object_is_type(ret, json_type_array))
        return fail(err, QMP_ERR_PROTOCOL, "query-memory-devices reply is not an array");
    for (size_t i = 0; i < json_object_array_length(ret); i++) {
        json_object *dev = json_object_array_get_idx(ret, i), *type, *data, *id;
        uint64_t size;
        if (!json_object_object_get_ex(dev, "type", &type) || !json_object_is_type(type, json_type_string) ||
            !json_object_object_get_ex(dev, "data", &data))
            return fail(err, QMP_ERR_PROTOCOL, "memory device without type or data");
        const char *kind = json_object_get_string(type);
        if (!strcmp(kind, "dimm") || !strcmp(kind, "nvdimm")) {
            if (get_u64(data, "size", &size, err) < 0)
                return -1;
            out->dimm_bytes += size;
        }
        if (strcmp(kind, "virtio-mem") != 0 || out->vmem_devices++)
            continue; /* virtio-pmem, SGX EPC; of virtio-mem devices the first is described */
        if (get_u64(data, "size", &out->vmem_plugged_bytes, err) < 0 ||
            get_u64(data, "max-size", &out->vmem_max_bytes, err) < 0 ||
            get_u64(data, "block-size", &out->vmem_block_bytes, err) < 0 ||
            get_u64(data, "requested-size", &out->vmem_requested_bytes, err) < 0)
            return -1;
        if (!out->vmem_block_bytes || out->vmem_plugged_bytes > out->vmem_max_bytes ||
            out->vmem_requested_bytes > out->vmem_max_bytes)
            return fail(err, QMP_ERR_PROTOCOL, "virtio-mem device sizes out of range");
        if (json_object_object_get_ex(data, "id", &id) && json_object_is_type(id, json_type_string) &&
            json_object_get_string_len(id) < (int)sizeof(out->vmem_id))
            snprintf(out->vmem_id, sizeof(out->vmem_id), "%s", json_object_get_string(id));
    }
    return 0;
}

/* Guest-reported stat: -1 when absent, not an integer, or negative
 * (QEMU itself uses -1 for "not reported"). */
static int64_t guest_stat(json_object *stats, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(stats, key, &v) ||
        !json_object_is_type(v, json_type_int))
        return -1;
    int64_t n = json_object_get_int64(v);
    return n < 0 ? -1 : n;
}

int qmp_parse_guest_stats(json_object *ret, qmp_guest_stats *out, qmp_error *err)
{
    json_object *stats;
    if (!json_object_is_type(ret, json_type_object) ||
        !json_object_object_get_ex(ret, "stats", &stats) ||
        !json_object_is_type(stats, json_type_object))
        return fail(err, QMP_ERR_PROTOCOL, "guest-stats reply lacks a 'stats' object");
    uint64_t last;
    if (get_u64(ret, "last-update", &last, err) < 0)
        return -1;
    out->last_update = (int64_t)(last > INT64_MAX ? INT64_MAX : last);
    out->swap_in = guest_stat(stats, "stat-swap-in");
    out->swap_out = guest_stat(stats, "stat-swap-out");
    out->major_faults = guest_stat(stats, "stat-major-faults");
    out->minor_faults = guest_stat(stats, "stat-minor-faults");
    out->free_memory = guest_stat(stats, "stat-free-memory");
    out->total_memory = guest_stat(stats, "stat-total-memory");
    out->available_memory = guest_stat(stats, "stat-available-memory");
    out->disk_caches = guest_stat(stats, "stat-disk-caches");
    out->htlb_pgalloc = guest_stat(stats, "stat-htlb-pgalloc");
    out->htlb_pgfail = guest_stat(stats, "stat-htlb-pgfail");
    out->oom_kills = guest_stat(stats, "stat-oom-kills");
    out->alloc_stalls = guest_stat(stats, "stat-alloc-stalls");
    out->async_scans = guest_stat(stats, "stat-async-scans");
    out->direct_scans = guest_stat(stats, "stat-direct-scans");
    out->async_reclaims = guest_stat(stats, "stat-async-reclaims");
    out->direct_reclaims = guest_stat(stats, "stat-direct-reclaims");
    return 0;
}

int qmp_query_balloon(qmp_conn *conn, uint64_t *actual, int timeout_ms, qmp_error *err)
{
    json_object *ret;
    if (qmp_execute(conn, "query-balloon", NULL, &ret, timeout_ms, err) < 0)
        return -1;
    int rc = qmp_parse_query_balloon(ret, actual, err);
    json_object_put(ret);
    return rc;
}

int qmp_balloon(qmp_conn *conn, uint64_t target, int timeout_ms, qmp_error *err)
{
    if (target == 0 || target > INT64_MAX)
        return fail(err, QMP_ERR_ARG, "balloon target %llu bytes is out of range",
                    (unsigned long long)target);
    json_object *args = json_object_new_object();
    json_object_object_add(args, "value", json_object_new_int64((int64_t)target));
    return qmp_execute(conn, "balloon", args, NULL, timeout_ms, err);
}

static json_object *stats_polling_args(const char *path, int seconds)
{
    json_object *args = json_object_new_object();
    json_object_object_add(args, "path", json_object_new_string(path));
    json_object_object_add(args, "property",
                           json_object_new_string("guest-stats-polling-interval"));
    json_object_object_add(args, "value", json_object_new_int(seconds));
    return args;
}

int qmp_set_stats_polling(qmp_conn *conn, const char *path, int seconds, int timeout_ms,
                          qmp_error *err)
{
    if (!path || seconds < 0)
        return fail(err, QMP_ERR_ARG, "stats polling needs a QOM path and seconds >= 0");
    return qmp_execute(conn, "qom-set", stats_polling_args(path, seconds), NULL, timeout_ms, err);
}

int qmp_set_stats_polling_async(qmp_conn *conn, const char *path, int seconds, int timeout_ms,
                                qmp_reply_cb cb, void *opaque, qmp_error *err)
{
    if (!path || seconds < 0)
        return fail(err, QMP_ERR_ARG, "stats polling needs a QOM path and seconds >= 0");
    return qmp_execute_async(conn, "qom-set", stats_polling_args(path, seconds), timeout_ms, cb, opaque, err);
}

int qmp_get_guest_stats(qmp_conn *conn, const char *path, qmp_guest_stats *out,
                        int timeout_ms, qmp_error *err)
{
    if (!path || !out)
        return fail(err, QMP_ERR_ARG, "guest stats need a QOM path and an output");
    json_object *args = json_object_new_object();
    json_object_object_add(args, "path", json_object_new_string(path));
    json_object_object_add(args, "property", json_object_new_string("guest-stats"));
    json_object *ret;
    if (qmp_execute(conn, "qom-get", args, &ret, timeout_ms, err) < 0)
        return -1;
    int rc = qmp_parse_guest_stats(ret, out, err);
    json_object_put(ret);
    return rc;
}

int qmp_query_memory_size_summary(qmp_conn *conn, uint64_t *base, uint64_t *plugged,
                                  int timeout_ms, qmp_error *err)
{
    json_object *ret;
    if (qmp_execute(conn, "query-memory-size-summary", NULL, &ret, timeout_ms, err) < 0)
        return -1;
    int rc = qmp_parse_memory_size_summary(ret, base, plugged, err);
    json_object_put(ret);
    return rc;
}

int qmp_parse_blockstats_read(json_object *ret, uint64_t *rd_bytes, qmp_error *err)
{
    if (!json_object_is_type(ret, json_type_array))
        return fail(err, QMP_ERR_PROTOCOL, "query-blockstats reply is not an array");
    uint64_t sum = 0;
    size_t n = json_object_array_length(ret);
    for (size_t i = 0; i < n; i++) {
        json_object *dev = json_object_array_get_idx(ret, i), *stats;
        uint64_t rd;
        if (!json_object_is_type(dev, json_type_object) ||
            !json_object_object_get_ex(dev, "stats", &stats))
            continue; /* an empty drive: nothing read */
        if (get_u64(stats, "rd_bytes", &rd, err) < 0)
            return -1;
        sum += rd;
    }
    *rd_bytes = sum;
    return 0;
}

int qmp_query_blockstats_read(qmp_conn *conn, uint64_t *rd_bytes, int timeout_ms, qmp_error *err)
{
    json_object *ret;
    if (qmp_execute(conn, "query-blockstats", NULL, &ret, timeout_ms, err) < 0)
        return -1;
    int rc = qmp_parse_blockstats_read(ret, rd_bytes, err);
    json_object_put(ret);
    return rc;
}
