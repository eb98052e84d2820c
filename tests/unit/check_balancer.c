/*
 * Unit tests of the daemon's own parsers and state: sizes, the metadata
 * policy element, the config file, host meminfo (with a fake sysfs tree)
 * and the ingestion of untrusted guest stats.
 */
#include <check.h>

#include "check_run.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/balancer_priv.h" /* the stage the reload kept */
#include "core/guest.h"
#include "host/host_cgroup.h"
#include "host/host_meminfo.h"
#include "host/own_reporting.h"
#include "host/qemu_proc.h"
#include "config/metadata_xml.h"
#include "reclaim/qemu_memcg.h"
#include "config/size_parse.h"
#include "util/fd_limit.h"
#include "util/log.h"
#include "util/mono_clock.h"

/* ---- sizes ---- */

START_TEST(sizes)
{
    uint64_t b;
    ck_assert_int_eq(size_parse("4096", &b), 0);
    ck_assert_uint_eq(b, 4096);
    ck_assert_int_eq(size_parse("512MiB", &b), 0);
    ck_assert_uint_eq(b, 512 * MIB);
    ck_assert_int_eq(size_parse(" 2 GiB ", &b), 0);
    ck_assert_uint_eq(b, 2 * GIB);
    ck_assert_int_eq(size_parse("64k", &b), 0);
    ck_assert_uint_eq(b, 65536);
    /* libvirt's decimal units: what `virsh setmem 8GB` means */
    ck_assert_int_eq(size_parse("8GB", &b), 0);
    ck_assert_uint_eq(b, 8000000000ULL);
    ck_assert_int_eq(size_parse("512 MB", &b), 0);
    ck_assert_uint_eq(b, 512000000ULL);
    ck_assert_int_eq(size_parse("1kb", &b), 0);
    ck_assert_uint_eq(b, 1000);
    ck_assert_int_eq(size_parse("1TB", &b), 0);
    ck_assert_uint_eq(b, 1000000000000ULL);
    ck_assert_int_eq(size_parse("4096 bytes", &b), 0);
    ck_assert_uint_eq(b, 4096);
    ck_assert_int_eq(size_parse("18446744073710GB", &b), -1); /* overflows 64 bits */
    ck_assert_int_eq(size_parse("1T", &b), 0);
    ck_assert_uint_eq(b, 1024 * GIB);
    ck_assert_int_eq(size_parse("-1GiB", &b), -1);
    ck_assert_int_eq(size_parse("", &b), -1);
    ck_assert_int_eq(size_parse("GiB", &b), -1);
    ck_assert_int_eq(size_parse("1.5GiB", &b), -1);
    ck_assert_int_eq(size_parse("12 parsecs", &b), -1);
    ck_assert_int_eq(size_parse("99999999999999999999", &b), -1);
    ck_assert_int_eq(size_parse("17179869184TiB", &b), -1); /* overflows 64 bits */
    ck_assert_int_eq(size_or_percent_parse("5%", 1000, &b), 0);
    ck_assert_uint_eq(b, 50);
    ck_assert_int_eq(size_or_percent_parse("2.5%", 1000, &b), 0);
    ck_assert_uint_eq(b, 25);
    ck_assert_int_eq(size_or_percent_parse("101%", 1000, &b), -1);
    ck_assert_int_eq(size_or_percent_parse("-5%", 1000, &b), -1);
    ck_assert_int_eq(size_or_percent_parse("%", 1000, &b), -1);
    ck_assert_int_eq(size_or_percent_parse("1MiB", 1000, &b), 0);
    ck_assert_uint_eq(b, MIB);
    char buf[32];
    ck_assert_str_eq(size_format(384 * MIB, buf, sizeof(buf)), "384 MiB");
    ck_assert_str_eq(size_format(1536 * MIB, buf, sizeof(buf)), "1.5 GiB");
    ck_assert_str_eq(size_format(100, buf, sizeof(buf)), "100 B");
}
END_TEST

/* ---- metadata ---- */

/* err gets the message (256 bytes), "" on success */
static int parse(const char *xml, vm_policy *p, char *err)
{
    g_autoptr(GError) e = NULL;
    int rc = metadata_policy_parse(xml, strlen(xml), p, NULL, &e);
    snprintf(err, 256, "%s", e ? e->message : "");
    return rc;
}

START_TEST(metadata_full_element)
{
    vm_policy p;
    char err[256] = "";
    const char *xml = "<balancer:policy xmlns:balancer=\"https://membal.dev/xmlns/policy/1\" "
                      "priority=\"high\" shares=\"2000\" min=\"1GiB\" max=\"8GiB\" mode=\"auto\" "
                      "protect=\"yes\" promotion_budget=\"0.5%\"/>";
    ck_assert_msg(parse(xml, &p, err) == 0, "%s", err);
    ck_assert_double_eq_tol(p.promotion_budget, 0.5, 1e-9);
    ck_assert_int_eq(p.priority, VM_PRIO_HIGH);
    ck_assert_uint_eq(p.shares, 2000);
    ck_assert_uint_eq(p.min_bytes, GIB);
    ck_assert_uint_eq(p.max_bytes, 8 * GIB);
    ck_assert_int_eq(p.mode, VM_MODE_AUTO);
    ck_assert(p.protect);
}
END_TEST

START_TEST(metadata_defaults_and_priority_shares)
{
    vm_policy p;
    char err[256];
    ck_assert_int_eq(parse("<policy/>", &p, err), 0);
    ck_assert_uint_eq(p.shares, 1000);
    ck_assert_int_eq(p.mode, VM_MODE_AUTO);
    ck_assert_uint_eq(p.min_bytes, 0);
    ck_assert(p.promotion_budget < 0);
    ck_assert_int_eq(parse("<policy priority='low'/>", &p, err), 0);
    ck_assert_uint_eq(p.shares, 500);
    ck_assert_int_eq(parse("<policy priority='low' shares='3000' mode='off'/>", &p, err), 0);
    ck_assert_uint_eq(p.shares, 3000);
    ck_assert_int_eq(p.mode, VM_MODE_OFF);
}
END_TEST

/* An attribute this version does not know (a newer balancerd's, on a VM
 * migrated here) costs the VM nothing of the rest of its policy: it is
 * ignored and named. */
START_TEST(metadata_unknown_attribute_is_ignored_and_named)
{
    vm_policy p;
    g_autoptr(GError) e = NULL;
    g_autofree char *ignored = NULL;
    const char *xml = "<policy min='1GiB' colour='blue' priority='high' buffer='20%'/>";
    ck_assert_int_eq(metadata_policy_parse(xml, strlen(xml), &p, &ignored, &e), 0);
    ck_assert_uint_eq(p.min_bytes, GIB);
    ck_assert_int_eq(p.priority, VM_PRIO_HIGH);
    ck_assert_str_eq(ignored, "'colour', 'buffer'");
    g_free(ignored);
    ignored = NULL;
    xml = "<policy min='1GiB'/>";
    ck_assert_int_eq(metadata_policy_parse(xml, strlen(xml), &p, &ignored, &e), 0);
    ck_assert_ptr_null(ignored);
}
END_TEST

START_TEST(metadata_rejects_with_reasons)
{
    static const struct {
        const char *xml, *msg;
    } bad[] = {
        { "<policy min='lots'/>", "min=\"lots\": expected a size" },
        { "<policy min='2GiB' max='1GiB'/>", "min (2147483648 bytes) is greater than max" },
        { "<policy max='0'/>", "max=\"0\": must be greater than zero" },
        { "<policy shares='0'/>", "shares=\"0\"" },
        { "<policy shares='-5'/>", "shares=\"-5\"" },
        { "<policy shares='12abc'/>", "shares=\"12abc\"" },
        { "<policy priority='urgent'/>", "expected low, normal or high" },
        { "<policy mode='manual'/>", "expected auto or off" },
        { "<policy protect='maybe'/>", "expected yes or no" },
        { "<policy promotion_budget='lots'/>", "promotion_budget=\"lots\": expected a percentage" },
        { "<policy promotion_budget='101'/>", "promotion_budget=\"101\": expected a percentage" },
        { "<limits/>", "root element is <limits>" },
        { "<policy><min>1</min></policy>", "takes no child elements" },
        { "<policy>text</policy>", "takes no text content" },
        { "<policy", "not well-formed" },
        { "<x:policy xmlns:x='urn:other'/>", "is in namespace urn:other" },
        { "<!DOCTYPE policy [<!ENTITY a 'aaaa'>]><policy mode='&a;'/>", "DOCTYPE" },
        { "", "empty" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        vm_policy p;
        vm_policy_default(&p);
        p.shares = 4242;
        char err[256] = "";
        ck_assert_msg(parse(bad[i].xml, &p, err) == -1, "accepted: %s", bad[i].xml);
        ck_assert_msg(strstr(err, bad[i].msg) != NULL, "%s -> '%s', wanted '%s'", bad[i].xml, err,
                      bad[i].msg);
        ck_assert_uint_eq(p.shares, 4242); /* untouched on error */
    }
    char big[METADATA_XML_MAX + 64];
    memset(big, ' ', sizeof(big));
    memcpy(big, "<policy", 7);
    memcpy(big + sizeof(big) - 3, "/>", 3);
    vm_policy p;
    g_autoptr(GError) err = NULL;
    ck_assert_int_eq(metadata_policy_parse(big, sizeof(big) - 1, &p, NULL, &err), -1);
    ck_assert_msg(strstr(err->message, "more than 4096") != NULL, "%s", err->message);
}
END_TEST

/* ---- config ---- */

static char tmpdir[64];

static const char *write_conf(const char *name, const char *text)
{
    static char path[128];
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/membal-unit-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    }
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

START_TEST(config_defaults_and_load)
{
    balancer_config c;
    config_defaults(&c);
    g_autoptr(GError) err = NULL;
    ck_assert_int_eq(config_load(&c, "/nonexistent/balancer.conf", false, &err), 0);
    ck_assert_ptr_null(err);
    ck_assert_str_eq(c.policy, "split-lru");
    ck_assert_int_eq(config_load(&c, "/nonexistent/balancer.conf", true, &err), -1);
    ck_assert_msg(strstr(err->message, "/nonexistent/balancer.conf") != NULL, "%s", err->message);
    g_clear_error(&err);
    const char *path = write_conf("ok.conf",
                                  "# comment\n[balancer]\npolicy = mom\ntick = 3\n"
                                  "[watermarks]\nmin = 256MiB\nlow = 1GiB\nhigh = 3%\n"
                                  "[policy]\nstep_percent = 20\nreserve_min = 16MiB\ntrim_streams = yes\n");
    ck_assert(!c.tun.trim_streams);
    ck_assert_int_eq(config_load(&c, path, true, &err), 0);
    ck_assert(c.tun.trim_streams);
    ck_assert_str_eq(c.policy, "mom");
    ck_assert_uint_eq(c.tick_seconds, 3);
    ck_assert_uint_eq(c.stats_period, 2);
    ck_assert(c.tun.step_percent == 20.0);
    ck_assert_uint_eq(c.tun.reserve_min_bytes, 16 * MIB);
    watermarks wm;
    ck_assert_int_eq(config_watermarks(&c, 64 * GIB, &wm, &err), 0);
    ck_assert_uint_eq(wm.min, 256 * MIB);
    ck_assert_uint_eq(wm.low, GIB);
    ck_assert_uint_eq(wm.high, (uint64_t)(64.0 * GIB * 0.03));
    /* too small a host for these absolute watermarks: order check */
    ck_assert_int_eq(config_watermarks(&c, 16 * GIB, &wm, &err), -1);
    ck_assert_ptr_nonnull(err);
    config_clear(&c);
}
END_TEST

START_TEST(config_errors_name_key_and_line)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        { "[balancer]\n\ntick = 0\n", "bad.conf:3: [balancer] tick = \"0\": expected an integer from 1 to 3600" },
        { "[balancer]\npolicy = fastest\n", "bad.conf:2: [balancer] policy = \"fastest\": unknown policy (known: split-lru, mom, mom-vdsm, proxmox, none)" },
        { "[watermarks]\nlow = lots\n", "bad.conf:2: [watermarks] low = \"lots\"" },
        { "[watermarks]\nmin = 5%\nlow = 4%\nhigh = 6%\n", "need min < low < high" },
        { "[balancer]\ntick = 5\n[policy]\nstep_percnt = 3\n", "bad.conf:4: [policy] step_percnt = \"\": unknown key" },
        { "[balancr]\ntick = 5\n", "bad.conf:1: unknown group [balancr]" },
        { "[policy]\ncomfort_percent = 150\n", "expected a percentage from 0 to 100" },
        { "[policy]\ntrim_streams = sometimes\n", "bad.conf:2: [policy] trim_streams = \"sometimes\": expected true or false" },
        /* a removed key is refused with why */
        { "[policy]\ndrop_idle_cache = true\n", "bad.conf:2: [policy] drop_idle_cache = \"true\": removed (it was never shown to help" },
        { "tick = 5\n", "bad.conf" },
        { "[host_reclaim]\nenabled = maybe\n", "bad.conf:2: [host_reclaim] enabled = \"maybe\": expected true or false" },
        { "[host_reclaim]\nsource = guess\n", "bad.conf:2: [host_reclaim] source = \"guess\": expected auto, damon, probe or memcg" },
        { "[host_reclaim]\nmin_cold_age = 9\nmax_cold_age = 5\n", "bad.conf:2: [host_reclaim] min_cold_age" },
        { "[host_reclaim]\nmin_per_scan = 1GiB\n", "greater than max_per_scan" },
        { "[host_reclaim]\nmax_cpu = 0\n", "bad.conf:2: [host_reclaim] max_cpu = \"0\": must be more than 0%" },
        { "[host_reclaim]\nmax_swap_out = 0\n", "bad.conf:2: [host_reclaim] max_swap_out = \"0\": must be more than 0" },
        { "[host_reclaim]\npromotion_budget = lots\n", "promotion_budget = \"lots\": expected a percentage" },
        { "[host_reclaim]\nproactive_age = 0\n", "proactive_age" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        balancer_config c;
        config_defaults(&c);
        g_autoptr(GError) err = NULL;
        const char *path = write_conf("bad.conf", bad[i].text);
        ck_assert_msg(config_load(&c, path, true, &err) == -1, "accepted: %s", bad[i].text);
        ck_assert_msg(strstr(err->message, bad[i].msg) != NULL, "got '%s', wanted '%s'", err->message, bad[i].msg);
        /* the previous configuration is untouched */
        ck_assert_uint_eq(c.tick_seconds, 1);
        ck_assert_str_eq(c.policy, "split-lru");
        config_clear(&c);
    }
    /* a removed key at the value of what balancerd still does is no error */
    balancer_config c;
    config_defaults(&c);
    g_autoptr(GError) err = NULL;
    ck_assert_msg(config_load(&c, write_conf("old.conf", "[policy]\ndrop_idle_cache = false\n"), true, &err) == 0,
                  "%s", err ? err->message : "");
    config_clear(&c);
}
END_TEST

/* The shipped balancer.conf documents the defaults: with every key
 * uncommented it must load and change nothing. */
START_TEST(shipped_config_states_the_defaults)
{
    char *text = NULL;
    ck_assert(g_file_get_contents("balancer.conf", &text, NULL, NULL));
    GString *un = g_string_new(NULL);
    char **lines = g_strsplit(text, "\n", -1);
    for (char **p = lines; *p; p++) {
        const char *line = *p;
        if (line[0] == '#' && line[1] != ' ' && line[1] != '\0' && strchr(line, '='))
            line++;
        g_string_append_printf(un, "%s\n", line);
    }
    g_strfreev(lines);
    const char *path = write_conf("shipped.conf", un->str);
    g_string_free(un, TRUE);
    g_free(text);
    balancer_config c, d;
    config_defaults(&c);
    config_defaults(&d);
    g_autoptr(GError) err = NULL;
    ck_assert_msg(config_load(&c, path, true, &err) == 0, "%s", err ? err->message : "");
    ck_assert_str_eq(c.connect_uri, d.connect_uri);
    ck_assert_str_eq(c.policy, d.policy);
    ck_assert_uint_eq(c.tick_seconds, d.tick_seconds);
    ck_assert_uint_eq(c.stats_period, d.stats_period);
    ck_assert_str_eq(c.wm_min, d.wm_min);
    ck_assert_str_eq(c.wm_low, d.wm_low);
    ck_assert_str_eq(c.wm_high, d.wm_high);
    ck_assert(c.default_floor_percent == d.default_floor_percent);
    ck_assert_uint_eq(c.default_floor_min, d.default_floor_min);
    ck_assert(memcmp(&c.tun, &d.tun, sizeof(c.tun)) == 0);
    ck_assert_str_eq(c.metrics_listen, d.metrics_listen);
    ck_assert_str_eq(c.control_socket, d.control_socket);
    ck_assert_str_eq(c.memory_cgroup, d.memory_cgroup);
    ck_assert(c.hr_enabled == d.hr_enabled);
    ck_assert_str_eq(c.hr_source, d.hr_source);
    ck_assert_uint_eq(c.hr_scan_interval, d.hr_scan_interval);
    ck_assert_uint_eq(c.hr_min_cold_age, d.hr_min_cold_age);
    ck_assert_uint_eq(c.hr_max_cold_age, d.hr_max_cold_age);
    ck_assert_uint_eq(c.hr_max_per_scan, d.hr_max_per_scan);
    ck_assert_uint_eq(c.hr_min_per_scan, d.hr_min_per_scan);
    ck_assert_uint_eq(c.hr_probes, d.hr_probes);
    ck_assert(c.hr_protect == d.hr_protect);
    config_clear(&c);
    config_clear(&d);
}
END_TEST


/* ---- a QEMU's memory cgroup (host reclaim) ---- */

static uint64_t read_num(const char *dir, const char *file)
{
    char path[300], *text = NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (!g_file_get_contents(path, &text, NULL, NULL))
        return UINT64_MAX;
    uint64_t v = strtoull(text, NULL, 10);
    g_free(text);
    return v;
}

START_TEST(qemu_memcg_find_and_write)
{
    const char *mountinfo =
        "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
        "garbage line\n";
    char v2[128], v1[128];
    memcg_mounts(mountinfo, v2, sizeof(v2), v1, sizeof(v1));
    ck_assert_str_eq(v2, "/sys/fs/cgroup/unified");
    ck_assert_str_eq(v1, "/sys/fs/cgroup/memory");
    memcg_mounts("", v2, sizeof(v2), v1, sizeof(v1));
    ck_assert_str_eq(v2, "");
    ck_assert_str_eq(v1, "");

    /* fake hierarchies: a v2 group with memory files, a v1 memory group */
    write_conf("dummy", "");
    char v2root[128], v1root[128], dir[400];
    snprintf(v2root, sizeof(v2root), "%s/v2", tmpdir);
    snprintf(v1root, sizeof(v1root), "%s/v1", tmpdir);
    snprintf(dir, sizeof(dir), "mkdir -p %s/machine.slice/vm1.scope %s/machine/vm1.libvirt-qemu", v2root, v1root);
    ck_assert_int_eq(system(dir), 0);
    write_conf("v1/machine/vm1.libvirt-qemu/memory.usage_in_bytes", "1000\n");
    write_conf("v1/machine/vm1.libvirt-qemu/cgroup.procs", "4242\n");
    const char *proc_cgroup = "12:pids:/machine/vm1.libvirt-qemu\n"
                              "4:cpu,memory:/machine/vm1.libvirt-qemu\n"
                              "0::/machine.slice/vm1.scope\n";
    qemu_memcg m;
    /* v2 has no memory controller here: v1 is used */
    ck_assert_int_eq(memcg_resolve(proc_cgroup, v2root, v1root, &m), 0);
    ck_assert_int_eq(m.kind, MEMCG_V1);
    ck_assert_ptr_nonnull(strstr(m.dir, "v1/machine/vm1.libvirt-qemu"));
    ck_assert_int_eq(memcg_sole_owner(&m, 4242), 1);
    ck_assert_int_eq(memcg_sole_owner(&m, 1), 0);
    ck_assert_int_eq(memcg_protect(&m, 64 * MIB), 0);
    ck_assert_uint_eq(read_num(m.dir, "memory.soft_limit_in_bytes"), 64 * MIB);
    char none[8];
    ck_assert_uint_eq(memcg_protect_cap(&m, none, sizeof(none)), UINT64_MAX); /* v1: no such cap */
    write_conf("v1/machine/vm1.libvirt-qemu/cgroup.procs", "4242\n4243\n");
    ck_assert_int_eq(memcg_sole_owner(&m, 4242), 0);

    /* with memory on v2 the v2 group wins */
    write_conf("v2/machine.slice/vm1.scope/memory.current", "1000\n");
    ck_assert_int_eq(memcg_resolve(proc_cgroup, v2root, v1root, &m), 0);
    ck_assert_int_eq(m.kind, MEMCG_V2);
    ck_assert_int_eq(memcg_protect(&m, 32 * MIB), 0);
    ck_assert_uint_eq(read_num(m.dir, "memory.low"), 32 * MIB);
    ck_assert_str_eq(m.mount, v2root);
    /* what the ancestors let through: machine.slice's memory.low caps its
     * scopes' (systemd's default there is 0); the mount's root has none */
    char by[400];
    write_conf("v2/memory.low", "1\n"); /* the root: not an ancestor that counts */
    ck_assert_uint_eq(memcg_protect_cap(&m, by, sizeof(by)), UINT64_MAX);
    ck_assert_str_eq(by, "");
    write_conf("v2/machine.slice/memory.low", "0\n");
    ck_assert_uint_eq(memcg_protect_cap(&m, by, sizeof(by)), 0);
    ck_assert(g_str_has_suffix(by, "/v2/machine.slice"));
    write_conf("v2/machine.slice/memory.low", "max\n");
    ck_assert_uint_eq(memcg_protect_cap(&m, by, sizeof(by)), UINT64_MAX);
    write_conf("v2/machine.slice/memory.low", "104857600\n");
    ck_assert_uint_eq(memcg_protect_cap(&m, by, sizeof(by)), 100 * MIB);
    /* deeper: the least of the chain */
    snprintf(dir, sizeof(dir), "mkdir -p %s/machine.slice/tenant.slice/vm2.scope", v2root);
    ck_assert_int_eq(system(dir), 0);
    write_conf("v2/machine.slice/tenant.slice/vm2.scope/memory.current", "1\n");
    write_conf("v2/machine.slice/tenant.slice/memory.low", "8388608\n");
    qemu_memcg deep;
    ck_assert_int_eq(memcg_resolve("0::/machine.slice/tenant.slice/vm2.scope\n", v2root, "", &deep), 0);
    ck_assert_uint_eq(memcg_protect_cap(&deep, by, sizeof(by)), 8 * MIB);
    ck_assert(g_str_has_suffix(by, "/tenant.slice"));

    /* no memory controller anywhere */
    ck_assert_int_eq(memcg_resolve("3:cpu:/x\n0::/\n", "/nonexistent", "", &m), -1);
    ck_assert_int_eq(m.kind, MEMCG_NONE);
    ck_assert_int_eq(memcg_resolve("", v2root, v1root, &m), -1);
    ck_assert_int_eq(memcg_protect(&m, 1), -1);
    /* a live process: ourselves (whatever this machine has, no crash) */
    qemu_memcg_find(getpid(), &m);
}
END_TEST

/* ---- host meminfo ---- */

START_TEST(meminfo_and_fake_numa_tree)
{
    char meminfo[128];
    snprintf(meminfo, sizeof(meminfo), "%s", write_conf("meminfo",
                                     "MemTotal:       16384000 kB\nMemFree:         1000000 kB\n"
                                     "MemAvailable:    3000000 kB\nBuffers:           10000 kB\n"
                                     "Cached:          2000000 kB\nSwapTotal:       4000000 kB\n"
                                     "SwapFree:        3500000 kB\n"));
    char nodes[128];
    snprintf(nodes, sizeof(nodes), "%s/node", tmpdir);
    mkdir(nodes, 0700);
    for (int n = 0; n < 2; n++) {
        char dir[160], file[64];
        snprintf(dir, sizeof(dir), "%s/node%d", nodes, n);
        mkdir(dir, 0700);
        snprintf(file, sizeof(file), "node%d/meminfo", n);
        char text[256];
        snprintf(text, sizeof(text),
                 "Node %d MemTotal:        8192000 kB\nNode %d MemFree:          %d kB\n"
                 "Node %d FilePages:        1000 kB\n", n, n, n ? 700000 : 300000, n);
        char rel[256];
        snprintf(rel, sizeof(rel), "node/%s", file);
        write_conf(rel, text);
    }
    char other[160];
    snprintf(other, sizeof(other), "%s/power", nodes);
    mkdir(other, 0700); /* not a node: ignored */
    host_meminfo h;
    ck_assert_int_eq(host_meminfo_read(meminfo, nodes, &h), 0);
    ck_assert_uint_eq(h.host.total_bytes, 16384000ULL * 1024);
    ck_assert_uint_eq(h.host.available_bytes, 3000000ULL * 1024);
    ck_assert_uint_eq(h.host.cached_bytes, 2010000ULL * 1024);
    ck_assert_uint_eq(h.swap_free_bytes, 3500000ULL * 1024);
    ck_assert_uint_eq(h.n_nodes, 2);
    ck_assert_int_eq(h.nodes[1].node, 1);
    ck_assert_uint_eq(h.nodes[1].free_bytes, 700000ULL * 1024);
    ck_assert_uint_eq(h.nodes[0].file_bytes, 1000ULL * 1024);

    /* an old kernel without MemAvailable */
    host_view v;
    ck_assert_int_eq(meminfo_parse("MemTotal: 1000 kB\nMemFree: 100 kB\nCached: 50 kB\n", &v, NULL, NULL), 0);
    ck_assert_uint_eq(v.available_bytes, 150 * 1024);
    ck_assert_int_eq(meminfo_parse("garbage\n", &v, NULL, NULL), -1);
    ck_assert_int_eq(host_meminfo_read("/nonexistent", nodes, &h), -1);
    /* the real one */
    ck_assert_int_eq(host_meminfo_read("/proc/meminfo", "/sys/devices/system/node", &h), 0);
    ck_assert_uint_gt(h.host.total_bytes, 0);
}
END_TEST

START_TEST(cgroup_v1_and_v2_as_host)
{
    char dir[160];
    host_view v;
    g_autoptr(GError) err = NULL;
    /* v2 with a limit */
    snprintf(dir, sizeof(dir), "%s/cg2", tmpdir);
    mkdir(dir, 0700);
    write_conf("cg2/memory.current", "734003200\n");
    write_conf("cg2/memory.max", "1073741824\n");
    write_conf("cg2/memory.stat", "anon 600000000\nfile 100000000\ninactive_file 52428800\n");
    ck_assert_msg(host_cgroup_read(dir, 32 * GIB, &v, &err) == 0, "%s", err ? err->message : "");
    ck_assert_uint_eq(v.total_bytes, GIB);
    ck_assert_uint_eq(v.free_bytes, GIB - 734003200ULL);
    ck_assert_uint_eq(v.available_bytes, GIB - 734003200ULL + 52428800ULL);
    ck_assert_uint_eq(v.cached_bytes, 100000000ULL);
    /* v2 without a limit: the machine is the bound */
    write_conf("cg2/memory.max", "max\n");
    ck_assert_int_eq(host_cgroup_read(dir, 32 * GIB, &v, &err), 0);
    ck_assert_uint_eq(v.total_bytes, 32 * GIB);
    /* v1, over its limit (usage can exceed a lowered limit) */
    snprintf(dir, sizeof(dir), "%s/cg1", tmpdir);
    mkdir(dir, 0700);
    write_conf("cg1/memory.usage_in_bytes", "900000000\n");
    write_conf("cg1/memory.limit_in_bytes", "891289600\n");
    write_conf("cg1/memory.stat", "cache 5\ntotal_cache 4096\ntotal_inactive_file 0\n");
    ck_assert_int_eq(host_cgroup_read(dir, 32 * GIB, &v, &err), 0);
    ck_assert_uint_eq(v.total_bytes, 891289600ULL);
    ck_assert_uint_eq(v.free_bytes, 0);
    ck_assert_uint_eq(v.available_bytes, 0);
    ck_assert_uint_eq(v.cached_bytes, 4096);
    write_conf("cg1/memory.limit_in_bytes", "9223372036854771712\n");
    ck_assert_int_eq(host_cgroup_read(dir, 32 * GIB, &v, &err), 0);
    ck_assert_uint_eq(v.total_bytes, 32 * GIB);
    /* not a cgroup */
    ck_assert_int_eq(host_cgroup_read(tmpdir, 32 * GIB, &v, &err), -1);
    ck_assert_msg(strstr(err->message, "not a memory cgroup") != NULL, "%s", err->message);
    g_clear_error(&err);
    /* the real v1 root here, if mounted */
    if (access("/sys/fs/cgroup/memory/memory.usage_in_bytes", R_OK) == 0) {
        ck_assert_int_eq(host_cgroup_read("/sys/fs/cgroup/memory", 32 * GIB, &v, &err), 0);
        ck_assert_uint_gt(v.total_bytes, 0);
    }
}
END_TEST

/* ---- guest ingestion ---- */

static guest_limits lim = { .default_floor_percent = 25, .default_floor_min = 256 * MIB,
                            .stale_seconds = 10 };

static guest_sample sample(int64_t t, int64_t swap_in, int64_t majflt)
{
    guest_sample s = {
        .actual_bytes = (int64_t)(2 * GIB), .max_bytes = (int64_t)(4 * GIB), .last_update = t,
        .free_bytes = (int64_t)(512 * MIB), .available_bytes = (int64_t)(1 * GIB),
        .cache_bytes = (int64_t)(400 * MIB), .total_bytes = (int64_t)(2 * GIB),
        .swap_in_bytes = swap_in, .swap_out_bytes = 0, .major_faults = majflt,
        .minor_faults = 0, .rss_bytes = -1, .host_ws_bytes = -1, .disk_read_bytes = -1,
        .qemu_major_faults = -1, .qemu_cpu_ms = -1, .free_page_reporting = -1, .free_page_reporting_used = -1,
    };
    return s;
}

/* Whether this host reports its own free pages to a hypervisor: its
 * virtio-balloon driver's devices, feature bit 5, on a fake sysfs tree. */
START_TEST(own_free_page_reporting_from_sysfs)
{
    write_conf("keep", ""); /* makes tmpdir */
    char root[160], dir[224];
    snprintf(root, sizeof(root), "%s/own-sys", tmpdir);
    /* no balloon driver at all (bare metal): no */
    ck_assert(!own_free_page_reporting(root));
    snprintf(dir, sizeof(dir), "%s/bus/virtio/drivers/virtio_balloon/virtio0", root);
    ck_assert_int_eq(g_mkdir_with_parents(dir, 0700), 0);
    write_conf("own-sys/bus/virtio/drivers/virtio_balloon/uevent", "DRIVER=virtio_balloon\n");
    /* a balloon whose driver took stats, deflate-on-oom and VERSION_1 (bit
     * 32), not reporting; 128 bits as features_show prints them */
    write_conf("own-sys/bus/virtio/drivers/virtio_balloon/virtio0/features",
               "0110000000000000000000000000000010000000000000000000000000000000"
               "0000000000000000000000000000000000000000000000000000000000000000\n");
    ck_assert(!own_free_page_reporting(root));
    /* too short to say */
    write_conf("own-sys/bus/virtio/drivers/virtio_balloon/virtio0/features", "01100\n");
    ck_assert(!own_free_page_reporting(root));
    /* bit 5 set: this host reports (what this machine's own balloon says:
     * bits 1, 2, 5, 7 and 32) */
    write_conf("own-sys/bus/virtio/drivers/virtio_balloon/virtio0/features",
               "0110010100000000000000000000000010000000000000000000000000000000"
               "0000000000000000000000000000000000000000000000000000000000000000\n");
    ck_assert(own_free_page_reporting(root));
    /* a second device that reports, beside one that does not */
    write_conf("own-sys/bus/virtio/drivers/virtio_balloon/virtio0/features", "0110000000\n");
    snprintf(dir, sizeof(dir), "%s/bus/virtio/drivers/virtio_balloon/virtio3", root);
    ck_assert_int_eq(g_mkdir_with_parents(dir, 0700), 0);
    ck_assert(!own_free_page_reporting(root));
    write_conf("own-sys/bus/virtio/drivers/virtio_balloon/virtio3/features", "0000010000\n");
    ck_assert(own_free_page_reporting(root));
    /* the real one answers without failing */
    fprintf(stderr, "this host reports its own free pages: %s\n", own_free_page_reporting("/sys") ? "yes" : "no");
}
END_TEST

/* Whether a guest's balloon offers free page reporting is unknown until
 * its backend says; then it is what the backend says, sample by sample. */
START_TEST(free_page_reporting_unknown_until_reported)
{
    classify_params cp;
    classify_params_default(&cp);
    guest g;
    guest_init(&g, "fpr", "u9");
    ck_assert_int_eq(g.view.free_page_reporting, -1);
    ck_assert_int_eq(g.view.free_page_reporting_used, -1);
    guest_sample s = sample(1000, 0, 0);
    guest_ingest(&g, &s, 1001, 0, &lim, &cp);
    ck_assert_int_eq(g.view.free_page_reporting, -1);
    ck_assert_int_eq(g.view.free_page_reporting_used, -1);
    s = sample(1002, 0, 0);
    s.free_page_reporting = 1;
    s.free_page_reporting_used = 0;
    guest_ingest(&g, &s, 1003, 0, &lim, &cp);
    ck_assert_int_eq(g.view.free_page_reporting, 1);
    ck_assert_int_eq(g.view.free_page_reporting_used, 0);
    s = sample(1004, 0, 0);
    s.free_page_reporting = 0;
    guest_ingest(&g, &s, 1005, 0, &lim, &cp);
    ck_assert_int_eq(g.view.free_page_reporting, 0);
}
END_TEST

START_TEST(guest_rates_and_thrash)
{
    classify_params cp;
    classify_params_default(&cp);
    guest g;
    guest_init(&g, "db", "u1");
    guest_sample s = sample(1000, 0, 0);
    guest_ingest(&g, &s, 1001, 0, &lim, &cp);
    ck_assert(g.view.stats_valid);
    ck_assert_uint_eq(g.view.floor_bytes, GIB); /* 25% of 4 GiB */
    ck_assert_uint_eq(g.view.ceiling_bytes, 4 * GIB);
    s = sample(1002, (int64_t)(20 * MIB), 10);
    guest_ingest(&g, &s, 1003, 0, &lim, &cp);
    ck_assert(g.view.swap_in_bps == 10.0 * MIB);
    ck_assert(g.view.major_faults_ps == 5.0);
    ck_assert(g.view.thrashing);
    /* the same report seen again (polling faster than the guest) changes nothing */
    guest_ingest(&g, &s, 1004, 0, &lim, &cp);
    ck_assert(g.view.swap_in_bps == 10.0 * MIB);
    /* stale stats are not valid */
    guest_ingest(&g, &s, 1100, 0, &lim, &cp);
    ck_assert(!g.view.stats_valid);
}
END_TEST

/* A new guest g, and the classifier's defaults for a 2 s stats period. */
static void reporting_every_2s(guest *g, classify_params *cp, const char *name, const char *uuid)
{
    classify_params_default(cp);
    classify_params_for_period(cp, 2);
    guest_init(g, name, uuid);
}

/* A guest's rates are taken over GUEST_RATE_WINDOW_S of its reports: a
 * few MiB of jitter in its used memory, or a handful of faults, between
 * two reports 2 s apart is neither need nor thrashing (taken report to
 * report, the streamer of bench shmdb-stream, left at its reserve, won
 * its cache back so at a 1 s tick); the same faults kept up are. */
START_TEST(jitter_between_close_reports_is_neither_need_nor_thrashing)
{
    classify_params cp;
    guest g;
    reporting_every_2s(&g, &cp, "stream", "u5");
    int64_t majflt = 0;
    for (int t = 0; t <= 24; t += 2) {
        guest_sample s = sample(1000 + t, 0, majflt);
        s.free_bytes = (int64_t)(100 * MIB);
        s.cache_bytes = (int64_t)(40 * MIB);
        s.available_bytes = (int64_t)(240 * MIB); /* above its 204 MiB reserve, not by much */
        if (t == 6)
            s.available_bytes -= (int64_t)(24 * MIB); /* used memory up 24 MiB for one report */
        guest_ingest(&g, &s, 1000 + t, 0, &lim, &cp);
        ck_assert_msg(!g.view.in_need, "in need at t=%d (used growth %.1f MiB/s)", t, g.view.used_growth_bps / MIB);
        if (t < 16)
            ck_assert_msg(!g.view.thrashing, "thrashing at t=%d (%.0f faults/s)", t, g.view.major_faults_ps);
        /* 300 faults between two reports, then 150 a second from t=12 on */
        majflt += t == 6 ? 300 : t >= 12 ? 300 : 0;
    }
    ck_assert_msg(g.view.thrashing, "150 faults/s kept up: %.0f/s", g.view.major_faults_ps);
}
END_TEST

/* A swap-in claim is checked against the disk reads the host measured
 * over the span it is taken over, not the last tick's alone: the reads
 * that served a burst between two reports may all fall in the tick
 * before the report that counts it (ticks 1 s, reports 2 s). */
START_TEST(swap_ins_backed_by_the_reads_of_their_span)
{
    classify_params cp;
    guest g;
    reporting_every_2s(&g, &cp, "db", "u6");
    int64_t swap_in = 0, disk = 0;
    for (int t = 0; t <= 4; t++) {
        if (t == 3)
            disk += 12 * (int64_t)MIB; /* the reads, within tick 3 */
        if (t == 4)
            swap_in += 12 * (int64_t)MIB; /* counted by the report at t=4 */
        guest_sample s = sample(1000 + t - t % 2, swap_in, 0);
        s.disk_read_bytes = disk;
        guest_ingest(&g, &s, 1000 + t, (double)t, &lim, &cp);
    }
    ck_assert_msg(g.view.swap_in_bps >= 2.0 * MIB, "swap-in %.0f KiB/s (capped?)", g.view.swap_in_bps / 1024);
    ck_assert(g.view.thrashing);
    ck_assert_uint_eq(g.unbacked_claims, 0);
}
END_TEST

/* The balloon size the host knows moves before the guest's report does: a
 * shrinking balloon must not look like the guest's used memory rising (it
 * would be "in need" and given the memory straight back).  Used memory is
 * the guest's own MemTotal - MemAvailable of one report. */
START_TEST(balloon_moving_ahead_of_the_report_is_not_need)
{
    classify_params cp;
    classify_params_default(&cp);
    guest g;
    guest_init(&g, "s", "u3");
    guest_sample s = sample(1000, 0, 0); /* 2 GiB, 1 GiB available */
    guest_ingest(&g, &s, 1000, 0, &lim, &cp);
    /* the balloon inflates by 400 MiB; the next report (t=1001) still has
     * the old MemTotal and MemAvailable */
    s = sample(1001, 0, 0);
    s.actual_bytes -= (int64_t)(400 * MIB);
    guest_ingest(&g, &s, 1001, 0, &lim, &cp);
    /* the one after shows both 400 MiB lower */
    s = sample(1002, 0, 0);
    s.actual_bytes -= (int64_t)(400 * MIB);
    s.total_bytes -= (int64_t)(400 * MIB);
    s.available_bytes -= (int64_t)(400 * MIB);
    guest_ingest(&g, &s, 1002, 0, &lim, &cp);
    ck_assert_msg(g.view.used_growth_bps == 0, "used growth %.0f B/s", g.view.used_growth_bps);
    ck_assert_uint_eq(g.view.used_bytes, 1 * GIB);
    ck_assert(!g.view.in_need);

    /* the guest allocates 200 MiB a second: used rises, its available runs
     * out within the horizon: in need, once, on the report that showed it.
     * Its growth is taken over the reports held, up to GUEST_RATE_WINDOW_S:
     * 400 MiB over the 4 s since the first */
    s.last_update = 1003;
    s.available_bytes -= (int64_t)(200 * MIB);
    guest_ingest(&g, &s, 1003, 0, &lim, &cp);
    ck_assert(g.view.used_growth_bps > 0);
    s.last_update = 1004;
    s.available_bytes -= (int64_t)(200 * MIB);
    guest_ingest(&g, &s, 1004, 0, &lim, &cp);
    ck_assert(g.view.used_growth_bps == 100.0 * MIB);
    ck_assert(g.view.in_need);
    ck_assert_uint_gt(g.view.need_bytes, 512 * MIB); /* a reserve plus 10 s of that growth, less what it has */
    guest_ingest(&g, &s, 1005, 0, &lim, &cp); /* no new report: nothing more to grant */
    ck_assert(g.view.in_need);
    ck_assert_uint_eq(g.view.need_bytes, 0);
}
END_TEST

/* deflate-on-oom: the guest's MemTotal does not follow the balloon, so
 * inflating it looks like used memory rising unless the balloon bounds it. */
START_TEST(deflate_on_oom_guest_inflating_is_not_need)
{
    classify_params cp;
    classify_params_default(&cp);
    guest g;
    guest_init(&g, "doo", "u4");
    int64_t total = (int64_t)(2 * GIB), avail = (int64_t)(1 * GIB), actual = (int64_t)(2 * GIB);
    for (int t = 0; t < 8; t++) {
        guest_sample s = sample(1000 + t, 0, 0);
        s.total_bytes = total;        /* stays */
        s.actual_bytes = actual;      /* inflates 100 MiB a second */
        s.available_bytes = avail;    /* the balloon's pages are used */
        guest_ingest(&g, &s, 1000 + t, 0, &lim, &cp);
        if (t >= 5)
            ck_assert_msg(!g.view.in_need, "in need at t=%d (growth %.0f B/s)", t, g.view.used_growth_bps);
        actual -= (int64_t)(100 * MIB);
        avail -= (int64_t)(100 * MIB);
    }
}
END_TEST

/* Under systemd a balloon action is a journal entry an operator can
 * filter on (journalctl GUEST=db ACTION=balloon).  libsystemd's own
 * sd_journal_send, received on a journal socket this test binds: only
 * where no journald runs (it must not steal a real one's socket). */
#define JOURNAL_DIR "/run/systemd/journal"
#define JOURNAL_SOCKET JOURNAL_DIR "/socket"
START_TEST(balloon_actions_are_journal_entries)
{
    if (geteuid() != 0)
        CHECK_SKIP("needs root to bind %s", JOURNAL_SOCKET);
    if (access(JOURNAL_SOCKET, F_OK) == 0)
        CHECK_SKIP("a journald owns %s here", JOURNAL_SOCKET);
    bool made_dir = mkdir("/run/systemd", 0755) == 0;
    bool made_sub = mkdir(JOURNAL_DIR, 0755) == 0;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", JOURNAL_SOCKET);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setenv("JOURNAL_STREAM", "8:1234", 1);
    log_guest_action(LOG_INFO, "db", "uuid-1", "balloon", "reclaim: guest free memory", 512 * MIB, 480 * MIB,
                     "guest %s: balloon %s -> %s (%s)", "db", "512 MiB", "480 MiB", "reclaim: guest free memory");
    char buf[4096];
    struct timeval tv = { .tv_sec = 2 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    unsetenv("JOURNAL_STREAM");
    close(fd);
    unlink(JOURNAL_SOCKET);
    if (made_sub)
        rmdir(JOURNAL_DIR);
    if (made_dir)
        rmdir("/run/systemd");
    ck_assert_int_gt(n, 0);
    buf[n] = 0;
    ck_assert_msg(strstr(buf, "\nGUEST=db\n") || strncmp(buf, "GUEST=db\n", 9) == 0, "entry: %s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "GUEST_UUID=uuid-1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "ACTION=balloon\n"));
    ck_assert_ptr_nonnull(strstr(buf, "REASON=reclaim: guest free memory\n"));
    ck_assert_ptr_nonnull(strstr(buf, "FROM_BYTES=536870912\n"));
    ck_assert_ptr_nonnull(strstr(buf, "TO_BYTES=503316480\n"));
    ck_assert_ptr_nonnull(strstr(buf, "PRIORITY=6\n"));
    ck_assert_ptr_nonnull(strstr(buf, "MESSAGE=guest db: balloon 512 MiB -> 480 MiB (reclaim: guest free memory)\n"));
}
END_TEST

START_TEST(lying_guest_is_clamped)
{
    classify_params cp;
    classify_params_default(&cp);
    guest g;
    guest_init(&g, "liar", "u2");
    guest_sample s = sample(1000, (int64_t)(100 * GIB), 1000000);
    /* claims more free/available/cache than the balloon gives it */
    s.free_bytes = INT64_MAX;
    s.available_bytes = (int64_t)(64 * GIB);
    s.cache_bytes = (int64_t)(32 * GIB);
    guest_ingest(&g, &s, 1000, 0, &lim, &cp);
    ck_assert_uint_eq(g.view.available_bytes, 2 * GIB);
    ck_assert_uint_le(g.view.free_bytes, g.view.actual_bytes);
    ck_assert_uint_le(g.view.cache_bytes, g.view.actual_bytes);
    ck_assert_uint_ge(g.clamped_values, 3);
    /* counters going backwards are a reset, not a huge rate */
    s = sample(1002, 0, 0);
    guest_ingest(&g, &s, 1002, 0, &lim, &cp);
    ck_assert(g.view.swap_in_bps == 0);
    ck_assert(g.view.major_faults_ps == 0);
    ck_assert_uint_eq(g.counter_resets, 2);
    /* an absurd rate is capped */
    s = sample(1003, INT64_MAX, 0);
    guest_ingest(&g, &s, 1003, 0, &lim, &cp);
    ck_assert(g.view.swap_in_bps <= 64.0 * GIB);
    /* balloon larger than the domain maximum: max follows actual (host data) */
    s = sample(1004, INT64_MAX, 0);
    s.max_bytes = (int64_t)GIB;
    guest_ingest(&g, &s, 1004, 0, &lim, &cp);
    ck_assert_uint_eq(g.view.max_bytes, 2 * GIB);
}
END_TEST

/* The pid a QMP socket names may be a wrapper that created the socket,
 * not the QEMU: a process that does not map as much as the guest's RAM is
 * not measured (its tiny RSS would make a full guest look untouched). */
START_TEST(a_process_not_mapping_the_guest_ram_is_not_its_qemu)
{
    qemu_proc p;
    qemu_proc_init(&p);
    int64_t self = qemu_proc_touched_bytes(&p, getpid(), 1 * MIB);
    ck_assert_int_gt(self, 0);
    ck_assert_int_gt(qemu_proc_touched_bytes(&p, getpid(), 0), 0); /* not checked */
    ck_assert_int_eq(qemu_proc_touched_bytes(&p, getpid(), (int64_t)1 << 50), -1);
    ck_assert_int_eq(qemu_proc_touched_bytes(&p, -1, 0), -1);
    ck_assert_int_eq(p.status_fd, -1); /* no pid, no files */
    qemu_proc_close(&p);
}
END_TEST

static pid_t spawn_sleeper(void)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pause();
        _exit(0);
    }
    return pid;
}

static void end_sleeper(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* A child as the next process under pid (the kernel's last pid set just
 * below it, root only); -1 when another process took it first. */
static pid_t spawn_sleeper_as(pid_t pid)
{
    for (int attempt = 0; attempt < 50; attempt++) {
        int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
        if (fd < 0)
            return -1;
        char buf[16];
        int n = snprintf(buf, sizeof(buf), "%d", (int)pid - 1);
        bool set = write(fd, buf, (size_t)n) == n;
        close(fd);
        if (!set)
            return -1;
        pid_t child = spawn_sleeper();
        if (child == pid)
            return child;
        end_sleeper(child);
    }
    return -1;
}

/* The QEMU's /proc files stay open from tick to tick, read with one pread
 * each; they name the process, not the pid: one that exited is not
 * measured any more (through its old files nor a new one's), another pid
 * is followed, and a new process under the same pid is read through its
 * own files at once. */
START_TEST(a_qemu_that_goes_away_and_comes_back_is_read_through_its_own_files)
{
    qemu_proc p;
    qemu_proc_init(&p);
    proc_stat_counts pc;
    pid_t a = spawn_sleeper();
    ck_assert_int_gt(qemu_proc_touched_bytes(&p, a, 0), 0);
    ck_assert_int_eq(qemu_proc_stat(&p, &pc), 0);
    int status_fd = p.status_fd, stat_fd = p.stat_fd;
    ck_assert_int_ge(status_fd, 0);
    ck_assert_int_ge(stat_fd, 0);
    /* the next tick reads the same files, opened once */
    ck_assert_int_gt(qemu_proc_touched_bytes(&p, a, 0), 0);
    ck_assert_int_eq(qemu_proc_stat(&p, &pc), 0);
    ck_assert_int_eq(p.status_fd, status_fd);
    ck_assert_int_eq(p.stat_fd, stat_fd);
    /* gone */
    end_sleeper(a);
    ck_assert_int_eq(qemu_proc_touched_bytes(&p, a, 0), -1);
    ck_assert_int_eq(qemu_proc_stat(&p, &pc), -1);
    ck_assert_int_eq(p.status_fd, -1);
    /* another QEMU, another pid */
    pid_t b = spawn_sleeper();
    ck_assert_int_gt(qemu_proc_touched_bytes(&p, b, 0), 0);
    ck_assert_int_eq(p.pid, b);
    /* b goes, and a new process comes under b's pid: the old files fail,
     * the pid's are opened again in the same call */
    qemu_proc_stat(&p, &pc);
    end_sleeper(b);
    pid_t again = geteuid() == 0 ? spawn_sleeper_as(b) : -1;
    if (again > 0) {
        ck_assert_int_gt(qemu_proc_touched_bytes(&p, b, 0), 0);
        ck_assert_int_eq(qemu_proc_stat(&p, &pc), 0);
        end_sleeper(again);
    }
    qemu_proc_close(&p);
    ck_assert_int_eq(p.status_fd, -1);
    ck_assert_int_eq(p.stat_fd, -1);
    if (again <= 0)
        CHECK_SKIP("the same pid again needs root and ns_last_pid (or another process took the pid)");
}
END_TEST

/* balancerd starts under systemd with a soft open-file limit of 1024,
 * fewer than 1000 guests' sockets and /proc files: it raises the soft
 * limit to the hard one, and says from what to what. */
START_TEST(the_soft_fd_limit_is_raised_to_the_hard_one)
{
    struct rlimit was;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
    if (was.rlim_max <= 64)
        CHECK_SKIP("the hard open-file limit is %llu", (unsigned long long)was.rlim_max);
    struct rlimit low = { .rlim_cur = 64, .rlim_max = was.rlim_max };
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    uint64_t before = 0, after = 0;
    g_autoptr(GError) err = NULL;
    ck_assert_int_eq(fd_limit_raise(&before, &after, &err), 0);
    ck_assert_uint_eq(before, 64);
    ck_assert_uint_eq(after, was.rlim_max);
    struct rlimit now;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &now), 0);
    ck_assert_uint_eq(now.rlim_cur, was.rlim_max);
    /* at the hard limit already: nothing to raise */
    ck_assert_int_eq(fd_limit_raise(&before, &after, &err), 0);
    ck_assert_uint_eq(before, after);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
}
END_TEST

/* A 2 GiB guest that touched all of its memory, of which host reclaim
 * measured ws in use, claims 50 MiB/s of swap-in: the rate it is
 * credited with. */
static double swap_in_seen_with_ws(const classify_params *cp, const char *name, uint64_t ws)
{
    guest g;
    guest_init(&g, name, name);
    for (int t = 0; t < 2; t++) {
        guest_sample s = t ? sample(1002, (int64_t)(100 * MIB), 25600) : sample(1000, 0, 0);
        s.rss_bytes = (int64_t)(2 * GIB + 80 * MIB);
        s.host_ws_bytes = (int64_t)ws;
        guest_ingest(&g, &s, s.last_update, 0, &lim, cp);
    }
    ck_assert_int_eq(g.view.host_ws_bytes, (int64_t)ws);
    return g.view.swap_in_bps;
}

/* What the host measures bounds what a guest says: memory its QEMU never
 * touched (resident + swapped) is not in use, and a guest with a quarter of
 * its memory untouched is under no pressure, whatever swap-ins it reports.
 * What it says it has free is not raised (zero pages after a migration are
 * untouched and used). */
START_TEST(untouched_memory_is_free_whatever_the_guest_says)
{
    classify_params cp;
    classify_params_default(&cp);
    guest g;
    guest_init(&g, "liar", "u9");
    guest_sample s = sample(1000, 0, 0);
    s.rss_bytes = (int64_t)(600 * MIB); /* of 2 GiB: 1.4 GiB never touched */
    s.free_bytes = s.available_bytes = s.cache_bytes = 0;
    guest_ingest(&g, &s, 1000, 0, &lim, &cp);
    ck_assert_uint_eq(g.view.used_bytes, 600 * MIB);
    ck_assert_uint_eq(g.view.free_bytes, 0);
    ck_assert_uint_ge(g.clamped_values, 1);
    s = sample(1002, (int64_t)(100 * MIB), 25600); /* 50 MiB/s of "swap-in" */
    s.rss_bytes = (int64_t)(600 * MIB);
    guest_ingest(&g, &s, 1002, 0, &lim, &cp);
    ck_assert(g.view.swap_in_bps == 0 && g.view.major_faults_ps == 0);
    ck_assert(!g.view.thrashing);
    /* ignored, not counted as a lie: a cgroup limit inside an honest
     * guest swaps like this (the disk reads, unknown here, would back it) */
    ck_assert_uint_eq(g.unbacked_claims, 0);

    /* an honest guest that touched all of it keeps its word */
    guest h;
    guest_init(&h, "honest", "u10");
    s = sample(1000, 0, 0);
    s.rss_bytes = (int64_t)(2 * GIB + 80 * MIB); /* QEMU's own memory on top */
    guest_ingest(&h, &s, 1000, 0, &lim, &cp);
    ck_assert_uint_eq(h.view.used_bytes, GIB);
    ck_assert_uint_eq(h.clamped_values, 0);
    s = sample(1002, (int64_t)(100 * MIB), 25600);
    s.rss_bytes = (int64_t)(2 * GIB + 80 * MIB);
    guest_ingest(&h, &s, 1002, 0, &lim, &cp);
    ck_assert(h.view.swap_in_bps > 0);

    /* a crashkernel reservation (outside MemTotal, never touched) is not
     * counted as untouched: an honest guest that used the rest keeps its
     * word */
    guest k;
    guest_init(&k, "crash", "u11");
    s = sample(1000, 0, 0);
    s.total_bytes = (int64_t)(2 * GIB - 192 * MIB);
    s.available_bytes = (int64_t)(64 * MIB);
    s.rss_bytes = (int64_t)(2 * GIB - 192 * MIB); /* all of MemTotal touched */
    guest_ingest(&k, &s, 1000, 0, &lim, &cp);
    s = sample(1002, (int64_t)(100 * MIB), 25600);
    s.total_bytes = (int64_t)(2 * GIB - 192 * MIB);
    s.available_bytes = (int64_t)(64 * MIB);
    s.rss_bytes = (int64_t)(2 * GIB - 192 * MIB);
    guest_ingest(&k, &s, 1002, 0, &lim, &cp);
    ck_assert_uint_eq(k.view.used_bytes, 2 * GIB - 192 * MIB - 64 * MIB);
    ck_assert(k.view.swap_in_bps > 0);
    ck_assert_uint_eq(k.unbacked_claims, 0);

    /* host reclaim's working set: all of it touched, but over half of it
     * idle for the cold age (or in host swap) -- swap-ins are not need */
    ck_assert(swap_in_seen_with_ws(&cp, "idle", 900 * MIB) == 0);
    /* with most of it in use the claim stands */
    ck_assert(swap_in_seen_with_ws(&cp, "busy", 1200 * MIB) > 0);
}
END_TEST

/* Its QEMU's major faults (host swap-ins of guest RAM) and its CPU time
 * become rates over the host's clock, whatever the guest reports; unknown
 * stays unknown. */
START_TEST(qemu_major_faults_become_a_host_rate)
{
    classify_params cp;
    classify_params_default(&cp);
    guest g;
    guest_init(&g, "q", "u9");
    guest_sample s = sample(1000, 0, 0);
    guest_ingest(&g, &s, 1000, 10.0, &lim, &cp);
    ck_assert(g.view.host_faults_ps < 0);
    s.qemu_major_faults = 100;
    guest_ingest(&g, &s, 1001, 11.0, &lim, &cp);
    ck_assert(g.view.host_faults_ps < 0); /* one sample: no rate yet */
    s.qemu_major_faults = 1100;
    guest_ingest(&g, &s, 1003, 13.0, &lim, &cp);
    ck_assert_msg(g.view.host_faults_ps == 500.0, "%.1f faults/s, want 500", g.view.host_faults_ps);
    s.qemu_major_faults = 50; /* a new QEMU behind the same guest: no evidence */
    guest_ingest(&g, &s, 1005, 15.0, &lim, &cp);
    ck_assert(g.view.host_faults_ps == 0);
    s.qemu_major_faults = -1;
    guest_ingest(&g, &s, 1007, 17.0, &lim, &cp);
    ck_assert(g.view.host_faults_ps < 0);
    /* CPU: 500 ms in 2 s is a quarter of a CPU */
    ck_assert(g.qemu_cpu < 0);
    s.qemu_cpu_ms = 10000;
    guest_ingest(&g, &s, 1009, 19.0, &lim, &cp);
    ck_assert(g.qemu_cpu < 0); /* one sample: no rate yet */
    s.qemu_cpu_ms = 10500;
    guest_ingest(&g, &s, 1011, 21.0, &lim, &cp);
    ck_assert_msg(g.qemu_cpu == 0.25, "%.3f CPUs, want 0.25", g.qemu_cpu);
    s.qemu_cpu_ms = 100; /* a new QEMU: unknown */
    guest_ingest(&g, &s, 1012, 22.0, &lim, &cp);
    ck_assert(g.qemu_cpu < 0);
    s.qemu_cpu_ms = -1;
    guest_ingest(&g, &s, 1013, 23.0, &lim, &cp);
    ck_assert(g.qemu_cpu < 0);
}
END_TEST

START_TEST(swap_in_claims_need_disk_reads)
{
    classify_params cp;
    classify_params_default(&cp);
    /* a liar: claims 10 MiB/s of swap-in while its disks read nothing */
    guest g;
    guest_init(&g, "liar", "u3");
    guest_sample s = sample(1000, 0, 0);
    s.disk_read_bytes = 5000;
    guest_ingest(&g, &s, 1000, 10.0, &lim, &cp);
    s = sample(1002, (int64_t)(20 * MIB), 10);
    s.disk_read_bytes = 5000;
    guest_ingest(&g, &s, 1002, 12.0, &lim, &cp);
    ck_assert(g.disk_read_bps == 0);
    ck_assert(g.view.swap_in_bps <= 64.0 * 1024);
    ck_assert(!g.view.thrashing);
    ck_assert_uint_ge(g.unbacked_claims, 1);
    /* a real thrasher: its swap disk reads what it swaps in */
    guest h;
    guest_init(&h, "thrasher", "u4");
    s = sample(1000, 0, 0);
    s.disk_read_bytes = 0;
    guest_ingest(&h, &s, 1000, 10.0, &lim, &cp);
    s = sample(1002, (int64_t)(20 * MIB), 10);
    s.disk_read_bytes = (int64_t)(21 * MIB);
    guest_ingest(&h, &s, 1002, 12.0, &lim, &cp);
    ck_assert(h.view.swap_in_bps == 10.0 * MIB);
    ck_assert(h.view.thrashing);
    ck_assert_uint_eq(h.unbacked_claims, 0);
    /* the liar's claims from a guest that is short by the host's account
     * (60 MiB left of 2 GiB, under its reserve): swap-ins no disk serves
     * (zram, zswap, a root the host sees no disk of) are believed */
    guest z;
    guest_init(&z, "zram", "u5");
    s = sample(1000, 0, 0);
    s.available_bytes = (int64_t)(60 * MIB);
    s.free_bytes = (int64_t)(20 * MIB);
    s.cache_bytes = (int64_t)(50 * MIB);
    s.disk_read_bytes = 5000;
    guest_ingest(&z, &s, 1000, 10.0, &lim, &cp);
    guest_sample s2 = s;
    s2.last_update = 1002;
    s2.swap_in_bytes = (int64_t)(20 * MIB);
    s2.major_faults = 10;
    guest_ingest(&z, &s2, 1002, 12.0, &lim, &cp);
    ck_assert(z.view.swap_in_bps == 10.0 * MIB);
    ck_assert(z.view.thrashing);
    ck_assert_uint_eq(z.unbacked_claims, 0);
    ck_assert_uint_ge(z.unbacked_short, 1);
}
END_TEST

/* The guest's own direct signals (QEMU 9.2+ balloon statistics): an OOM
 * kill, or allocations stalling with little reclaimable cache left, make a
 * guest below its ceiling in need of at least its reserve; at its ceiling,
 * or stalls while clean cache remains, do not. */
START_TEST(oom_kills_and_stalls_are_need)
{
    classify_params cp;
    classify_params_default(&cp);
    struct { const char *name; int64_t actual, cache, kills, stalls; bool need; } cases[] = {
        { "killed", (int64_t)(2 * GIB), (int64_t)(400 * MIB), 1, 0, true },
        { "killed at its ceiling", (int64_t)(4 * GIB), (int64_t)(400 * MIB), 1, 0, false },
        { "stalls, no cache left", (int64_t)(2 * GIB), (int64_t)(20 * MIB), 0, 30, true },
        { "stalls, cache to drop", (int64_t)(2 * GIB), (int64_t)(400 * MIB), 0, 30, false },
        { "neither", (int64_t)(2 * GIB), (int64_t)(20 * MIB), 0, 0, false },
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        guest g;
        guest_init(&g, cases[i].name, "u6");
        guest_sample s = sample(1000, 0, 0);
        s.actual_bytes = s.total_bytes = cases[i].actual;
        s.cache_bytes = cases[i].cache;
        s.free_bytes = (int64_t)(600 * MIB);
        s.available_bytes = s.free_bytes + cases[i].cache;
        s.oom_kills = 5;
        s.alloc_stalls = 100;
        guest_ingest(&g, &s, 1000, 10.0, &lim, &cp);
        ck_assert_msg(!g.view.in_need, "%s: in need on its first report", cases[i].name);
        s.last_update = 1002;
        s.oom_kills += cases[i].kills;
        s.alloc_stalls += cases[i].stalls;
        guest_ingest(&g, &s, 1002, 12.0, &lim, &cp);
        ck_assert_msg(g.view.in_need == cases[i].need, "%s: in need %d", cases[i].name, g.view.in_need);
        ck_assert_int_eq(g.view.oom_killed, cases[i].kills > 0);
        if (cases[i].need)
            ck_assert_uint_ge(g.view.need_bytes, guest_reserve(&g.view, cp.need_reserve_percent, cp.need_reserve_min));
    }
}
END_TEST

START_TEST(bounds_from_policy)
{
    vm_policy p;
    vm_policy_default(&p);
    uint64_t f, c;
    guest_bounds(&p, 512 * MIB, &lim, &f, &c);
    ck_assert_uint_eq(f, 256 * MIB); /* default_floor_min beats 25% */
    ck_assert_uint_eq(c, 512 * MIB);
    p.min_bytes = 1 * GIB;
    p.max_bytes = 8 * GIB;
    guest_bounds(&p, 4 * GIB, &lim, &f, &c);
    ck_assert_uint_eq(f, 1 * GIB);
    ck_assert_uint_eq(c, 4 * GIB); /* the domain maximum caps the policy max */
    p.min_bytes = 6 * GIB;
    guest_bounds(&p, 4 * GIB, &lim, &f, &c);
    ck_assert_uint_eq(f, 4 * GIB); /* floor above ceiling: ceiling wins */
}
END_TEST

/* ---- reload ---- */

static balancer_config host_reclaim_config(const char *source)
{
    balancer_config c;
    config_defaults(&c);
    c.hr_enabled = true;
    g_free(c.hr_source);
    c.hr_source = g_strdup(source);
    return c;
}

/* SIGHUP with a [host_reclaim] that cannot start keeps the stage that
 * ran (and its settings); the rest of the file is applied. */
START_TEST(reload_with_bad_host_reclaim_keeps_the_stage)
{
    balancer_config c = host_reclaim_config("probe");
    c.hr_scan_interval = 7;
    char *none[] = { NULL };
    g_autoptr(GError) err = NULL;
    balancer *b = balancer_new(&c, &backend_qmp, none, true, &err);
    ck_assert_msg(b != NULL, "%s", err ? err->message : "");
    ck_assert_ptr_nonnull(b->hswap);
    g_free(b->cfg.damon_admin);
    b->cfg.damon_admin = g_strdup("/nonexistent/damon/admin"); /* a DAMON that is not there */

    balancer_config bad = host_reclaim_config("damon");
    bad.tick_seconds = 3;
    ck_assert_int_eq(balancer_replace_config(b, &bad, &err), -1);
    ck_assert_ptr_nonnull(strstr(err->message, "reload: [host_reclaim] source = damon"));
    ck_assert_ptr_nonnull(b->hswap);
    ck_assert_str_eq(balancer_config_get(b)->hr_source, "probe");
    ck_assert_uint_eq(balancer_config_get(b)->hr_scan_interval, 7);
    ck_assert_uint_eq(balancer_config_get(b)->tick_seconds, 3);
    g_clear_error(&err);

    /* a good change is applied; turning it off stops the stage */
    balancer_config good = host_reclaim_config("probe");
    good.hr_scan_interval = 9;
    ck_assert_int_eq(balancer_replace_config(b, &good, &err), 0);
    ck_assert_uint_eq(balancer_config_get(b)->hr_scan_interval, 9);
    ck_assert_ptr_nonnull(b->hswap);
    balancer_config off;
    config_defaults(&off);
    ck_assert_int_eq(balancer_replace_config(b, &off, &err), 0);
    ck_assert_ptr_null(b->hswap);
    balancer_free(b);
}
END_TEST

/* ---- the core's balloon moves (a backend that records them) ---- */

static uint64_t set_to[8];
static size_t n_set;

static int record_target(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error)
{
    (void)hv;
    (void)g;
    (void)error;
    if (n_set < G_N_ELEMENTS(set_to))
        set_to[n_set] = bytes;
    n_set++;
    return 0;
}

static int no_sync(hv_ctx *hv)
{
    (void)hv;
    return 0;
}

static const backend_ops recording_backend = { .name = "recording", .sync = no_sync, .set_target = record_target };

/* Guest i of b, sampled: its balloon at actual, its ceiling 1 GiB */
static guest *sampled_guest(balancer *b, guint i, uint64_t actual)
{
    guest *g = g_ptr_array_index(b->guests, i);
    g->view.actual_bytes = actual;
    g->view.max_bytes = g->view.ceiling_bytes = 1 * GIB;
    g->view.floor_bytes = 128 * MIB;
    g->view.policy.mode = VM_MODE_AUTO;
    return g;
}

/* balancerctl give-back: every guest not in mode=off gets its ceiling in
 * one move, made though it pauses balancing first; a guest above its
 * ceiling (lowered since) is not shrunk; a dry run moves nothing. */
START_TEST(give_back_gives_every_guest_its_ceiling_and_pauses)
{
    write_conf("give-back.conf", ""); /* the tmpdir: the pause is recorded there */
    balancer_config c;
    config_defaults(&c);
    g_free(c.state_dir);
    c.state_dir = g_strdup_printf("%s/give-back-state", tmpdir);
    g_autoptr(GError) err = NULL;
    balancer *b = balancer_new(&c, &recording_backend, NULL, false, &err);
    ck_assert_msg(b != NULL, "%s", err ? err->message : "");
    b->hv.inv->add(b->hv.inv_ctx, "g1", "uuid-g1");
    b->hv.inv->add(b->hv.inv_ctx, "off", "uuid-off");
    b->hv.inv->add(b->hv.inv_ctx, "above", "uuid-above");
    guest *g1 = sampled_guest(b, 0, 300 * MIB);
    sampled_guest(b, 1, 300 * MIB)->view.policy.mode = VM_MODE_OFF;
    sampled_guest(b, 2, 700 * MIB)->view.ceiling_bytes = 512 * MIB;
    n_set = 0;
    ck_assert_uint_eq(balancer_give_back_all(b), 1);
    ck_assert_uint_eq(n_set, 1);
    ck_assert_uint_eq(set_to[0], 1 * GIB);
    ck_assert_uint_eq(g1->returned_bytes, 1 * GIB - 300 * MIB);
    ck_assert(b->paused);
    g_autofree char *paused = g_build_filename(b->cfg.state_dir, PAUSED_FILE, NULL);
    ck_assert_msg(g_file_test(paused, G_FILE_TEST_EXISTS), "%s: not recorded", paused);

    sampled_guest(b, 0, 300 * MIB)->last_target = 0; /* a dry run moves nothing */
    b->dry_run = true;
    ck_assert_uint_eq(balancer_give_back_all(b), 0);
    ck_assert_uint_eq(n_set, 1);
    balancer_free(b);
}
END_TEST

/* ---- one tick, one moment: a move's REISSUE_S ending mid-tick ---- */

#define RACE_REISSUE_MS 15000 /* REISSUE_S at the default 1 s tick */
static guest *race_g1;

/* Both guests' stats are stale (a dead guest's): the policy holds each
 * where its balloon is going.  g1's balloon was asked down to 400 MiB
 * and stopped at 440 (the guest died on the way); its REISSUE_S ends
 * 100 ms after its sample, while g2's sample takes 300 ms. */
static int race_sample(hv_ctx *hv, hv_guest *g, guest_sample *out, GError **error)
{
    (void)hv;
    (void)error;
    memset(out, 0xff, sizeof(*out)); /* all -1: not reported */
    out->balloon_failures = 0;
    memset(&out->vmem, 0, sizeof(out->vmem));
    out->max_bytes = 512 * MIB;
    out->last_update = time(NULL) - 600;
    if (strcmp(g->name, "g1") == 0) {
        out->actual_bytes = 440 * MIB;
        race_g1->last_target = 400 * MIB;
        race_g1->last_set_ms = mono_ms() - RACE_REISSUE_MS + 100;
    } else {
        out->actual_bytes = 512 * MIB;
        usleep(300000);
    }
    return 0;
}

static const backend_ops race_backend = {
    .name = "race", .sync = no_sync, .sample = race_sample, .set_target = record_target
};

/* What the policy decided is carried out against what it saw: a balloon
 * it saw on its way (held there) is not sent again because the move's
 * REISSUE_S ran out while the tick was sampling the other guests. */
START_TEST(a_tick_moves_by_what_its_policy_saw)
{
    balancer_config c;
    config_defaults(&c);
    ck_assert_uint_eq(c.tick_seconds, 1);
    g_autoptr(GError) err = NULL;
    balancer *b = balancer_new(&c, &race_backend, NULL, false, &err);
    ck_assert_msg(b != NULL, "%s", err ? err->message : "");
    b->hv.inv->add(b->hv.inv_ctx, "g1", "uuid-g1");
    b->hv.inv->add(b->hv.inv_ctx, "g2", "uuid-g2");
    race_g1 = g_ptr_array_index(b->guests, 0);
    ck_assert_str_eq(race_g1->hv.name, "g1");
    n_set = 0;
    balancer_tick(b);
    ck_assert_msg(n_set == 0, "a held balloon sent again: %zu move(s), the first to %llu MiB", n_set,
                  (unsigned long long)(set_to[0] / MIB));
    ck_assert_str_eq(race_g1->last_reason, "no fresh guest stats: holding");
    balancer_free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("balancer");
    TCase *tc = tcase_create("parsers_and_state");
    tcase_add_test(tc, sizes);
    tcase_add_test(tc, metadata_full_element);
    tcase_add_test(tc, metadata_defaults_and_priority_shares);
    tcase_add_test(tc, metadata_rejects_with_reasons);
    tcase_add_test(tc, metadata_unknown_attribute_is_ignored_and_named);
    tcase_add_test(tc, config_defaults_and_load);
    tcase_add_test(tc, config_errors_name_key_and_line);
    tcase_add_test(tc, shipped_config_states_the_defaults);
    tcase_add_test(tc, meminfo_and_fake_numa_tree);
    tcase_add_test(tc, cgroup_v1_and_v2_as_host);
    tcase_add_test(tc, qemu_memcg_find_and_write);
    tcase_add_test(tc, own_free_page_reporting_from_sysfs);
    tcase_add_test(tc, free_page_reporting_unknown_until_reported);
    tcase_add_test(tc, guest_rates_and_thrash);
    tcase_add_test(tc, jitter_between_close_reports_is_neither_need_nor_thrashing);
    tcase_add_test(tc, swap_ins_backed_by_the_reads_of_their_span);
    tcase_add_test(tc, balloon_moving_ahead_of_the_report_is_not_need);
    tcase_add_test(tc, balloon_actions_are_journal_entries);
    tcase_add_test(tc, deflate_on_oom_guest_inflating_is_not_need);
    tcase_add_test(tc, lying_guest_is_clamped);
    tcase_add_test(tc, a_process_not_mapping_the_guest_ram_is_not_its_qemu);
    tcase_add_test(tc, a_qemu_that_goes_away_and_comes_back_is_read_through_its_own_files);
    tcase_add_test(tc, the_soft_fd_limit_is_raised_to_the_hard_one);
    tcase_add_test(tc, untouched_memory_is_free_whatever_the_guest_says);
    tcase_add_test(tc, swap_in_claims_need_disk_reads);
    tcase_add_test(tc, oom_kills_and_stalls_are_need);
    tcase_add_test(tc, qemu_major_faults_become_a_host_rate);
    tcase_add_test(tc, bounds_from_policy);
    tcase_add_test(tc, reload_with_bad_host_reclaim_keeps_the_stage);
    tcase_add_test(tc, give_back_gives_every_guest_its_ceiling_and_pauses);
    tcase_add_test(tc, a_tick_moves_by_what_its_policy_saw);
    suite_add_tcase(s, tc);
    int rc = check_run_suite(s, CK_NOFORK); /* tests share tmpdir */
    if (tmpdir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    return rc;
}
