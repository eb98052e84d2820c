/*
 * The facts the libvirt backend reads from a domain's live XML
 * (hv/libvirt_xml.h), on domain XMLs as libvirt 9.0 writes them: the
 * agent's channel, the balloon's free page reporting and autodeflate, the
 * virtio-mem devices' sizes (believed or not), and the device XML that
 * resizes the first one.
 */
#include <check.h>

#include "check_run.h"
#include <glib.h>
#include <string.h>

#include "hv/libvirt_xml.h"
#include "util/error.h"

#define MiB (1024ull * 1024)

/* What libvirt's live XML of the test guest holds (cut to what matters
 * around it): the agent's channel, a balloon with free page reporting. */
static const char *const GUEST =
    "<domain type='qemu' id='1'><name>membal-test</name>"
    "<memory unit='KiB'>524288</memory><currentMemory unit='KiB'>524288</currentMemory>"
    "<devices>"
    "<channel type='unix'>"
    "<source mode='bind' path='/var/lib/libvirt/qemu/channel/target/domain-1-membal-test/org.membal.agent.0'/>"
    "<target type='virtio' name='org.membal.agent.0' state='connected'/><alias name='channel0'/></channel>"
    "<memballoon model='virtio' freePageReporting='on'><stats period='1'/><alias name='balloon0'/></memballoon>"
    "</devices></domain>";

/* A virtio-mem device as libvirt's live XML has it, sizes in the units
 * given; "" leaves an element out. */
static char *vmem_device(const char *size, const char *block, const char *requested, const char *current,
                         const char *alias)
{
    return g_strdup_printf("<memory model='virtio-mem'><target>%s<node>0</node>%s%s%s</target>%s"
                           "<address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/></memory>",
                           size, block, requested, current, alias);
}

static char *domain_with(const char *devices)
{
    return g_strdup_printf("<domain type='kvm'><name>vm</name><devices>"
                           "<memballoon model='virtio' autodeflate='on'/>%s</devices></domain>",
                           devices);
}

static int parse(const char *xml, libvirt_xml_facts *f, GError **error)
{
    return libvirt_xml_facts_parse(xml, strlen(xml), f, error);
}

START_TEST(agent_channel_and_balloon)
{
    libvirt_xml_facts f;
    g_autoptr(GError) err = NULL;
    ck_assert_int_eq(parse(GUEST, &f, &err), 0);
    ck_assert_str_eq(f.agent_path, "/var/lib/libvirt/qemu/channel/target/domain-1-membal-test/org.membal.agent.0");
    ck_assert(f.free_page_reporting);
    ck_assert(!f.deflate_on_oom);
    ck_assert_uint_eq(f.vmem.devices, 0);
    ck_assert_uint_eq(f.vmem_max_all + f.vmem_plugged_all, 0);
    libvirt_xml_facts_clear(&f);
    ck_assert_ptr_null(f.agent_path);
}
END_TEST

/* Only a virtio balloon's options count (model virtio, virtio-transitional
 * ...); only a unix channel whose target is the agent's port is its. */
START_TEST(only_virtio_balloons_and_the_agents_port)
{
    libvirt_xml_facts f;
    ck_assert_int_eq(parse("<domain><devices>"
                           "<channel type='pty'><source path='/dev/pts/3'/><target name='org.membal.agent.0'/></channel>"
                           "<channel type='unix'><source path='/run/qga'/><target name='org.qemu.guest_agent.0'/></channel>"
                           "<memballoon model='none' freePageReporting='on' autodeflate='on'/>"
                           "</devices></domain>", &f, NULL), 0);
    ck_assert_ptr_null(f.agent_path);
    ck_assert(!f.free_page_reporting && !f.deflate_on_oom);
    ck_assert_int_eq(parse("<domain><devices><memballoon model='virtio-transitional' autodeflate='on' "
                           "freePageReporting='off'/></devices></domain>", &f, NULL), 0);
    ck_assert(f.deflate_on_oom && !f.free_page_reporting);
    /* no devices at all: nothing, and no error */
    ck_assert_int_eq(parse("<domain/>", &f, NULL), 0);
    ck_assert(!f.agent_path && !f.free_page_reporting && !f.deflate_on_oom && !f.vmem.devices);
}
END_TEST

/* Sizes as libvirt reads them: KiB without a unit; the alias names the
 * device. */
START_TEST(virtio_mem_sizes)
{
    g_autofree char *dev = vmem_device("<size unit='MiB'>512</size>", "<block unit='KiB'>2048</block>",
                                       "<requested>262144</requested>", "<current unit='KiB'>131072</current>",
                                       "<alias name='virtiomem0'/>");
    g_autofree char *xml = domain_with(dev);
    libvirt_xml_facts f;
    ck_assert_int_eq(parse(xml, &f, NULL), 0);
    ck_assert(f.deflate_on_oom);
    ck_assert_uint_eq(f.vmem.devices, 1);
    ck_assert_str_eq(f.vmem.id, "virtiomem0");
    ck_assert_uint_eq(f.vmem.block_bytes, 2 * MiB);
    ck_assert_uint_eq(f.vmem.max_bytes, 512 * MiB);
    ck_assert_uint_eq(f.vmem.requested_bytes, 256 * MiB);
    ck_assert_uint_eq(f.vmem.plugged_bytes, 128 * MiB);
    ck_assert_uint_eq(f.vmem_max_all, 512 * MiB);
    ck_assert_uint_eq(f.vmem_plugged_all, 128 * MiB);
}
END_TEST

/* A first device without a block size, or with more plugged or requested
 * than its size, is counted but not believed: it is not resized. */
START_TEST(virtio_mem_not_believed)
{
    const char *bad[][3] = {
        { "", "<requested>0</requested>", "<current>0</current>" },
        { "<block>2048</block>", "<requested>0</requested>", "<current unit='MiB'>513</current>" },
        { "<block>2048</block>", "<requested unit='GiB'>1</requested>", "<current>0</current>" },
        { "<block>lots</block>", "<requested>0</requested>", "<current>0</current>" },
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autofree char *dev =
            vmem_device("<size unit='MiB'>512</size>", bad[i][0], bad[i][1], bad[i][2], "<alias name='vm0'/>");
        g_autofree char *xml = domain_with(dev);
        libvirt_xml_facts f;
        ck_assert_int_eq(parse(xml, &f, NULL), 0);
        ck_assert_msg(f.vmem.devices == 1 && !f.vmem.id[0] && !f.vmem.block_bytes && !f.vmem.max_bytes &&
                          !f.vmem.requested_bytes && !f.vmem.plugged_bytes,
                      "case %zu believed", i);
        ck_assert_uint_eq(f.vmem_max_all, 512 * MiB);
    }
}
END_TEST

/* Two devices (one per NUMA node): the first is the one described, both
 * are in the totals. */
START_TEST(virtio_mem_two_devices)
{
    g_autofree char *a = vmem_device("<size unit='MiB'>512</size>", "<block>2048</block>", "<requested>0</requested>",
                                     "<current>0</current>", "<alias name='a'/>");
    g_autofree char *b = vmem_device("<size unit='GiB'>1</size>", "<block>2048</block>",
                                     "<requested unit='MiB'>256</requested>", "<current unit='MiB'>256</current>",
                                     "<alias name='b'/>");
    g_autofree char *both = g_strconcat(a, b, NULL);
    g_autofree char *xml = domain_with(both);
    libvirt_xml_facts f;
    ck_assert_int_eq(parse(xml, &f, NULL), 0);
    ck_assert_uint_eq(f.vmem.devices, 2);
    ck_assert_str_eq(f.vmem.id, "a");
    ck_assert_uint_eq(f.vmem.max_bytes, 512 * MiB);
    ck_assert_uint_eq(f.vmem.plugged_bytes, 0);
    ck_assert_uint_eq(f.vmem_max_all, 1536 * MiB);
    ck_assert_uint_eq(f.vmem_plugged_all, 256 * MiB);
}
END_TEST

START_TEST(not_xml_is_an_error)
{
    const char *bad[] = { "", "<domain>", "not xml at all", "<domain><devices></domain>" };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        libvirt_xml_facts f;
        g_autoptr(GError) err = NULL;
        ck_assert_int_eq(parse(bad[i], &f, &err), -1);
        ck_assert(g_error_matches(err, MEMBAL_ERROR, MEMBAL_ERROR_INVALID));
        ck_assert_msg(g_str_has_prefix(err->message, "the domain XML is not well-formed XML"), "%s", err->message);
        ck_assert(!f.agent_path && !f.vmem.devices && !f.free_page_reporting);
    }
}
END_TEST

/* The device as the XML has it, with its new <requested> in KiB. */
START_TEST(vmem_request_changes_only_requested)
{
    g_autofree char *dev = vmem_device("<size unit='KiB'>524288</size>", "<block unit='KiB'>2048</block>",
                                       "<requested unit='MiB'>256</requested>", "<current unit='KiB'>262144</current>",
                                       "<alias name='virtiomem0'/>");
    g_autofree char *xml = domain_with(dev);
    g_autoptr(GError) err = NULL;
    g_autofree char *out = libvirt_xml_vmem_request(xml, strlen(xml), 128 * MiB + 1023, &err);
    ck_assert_msg(out, "%s", err ? err->message : "");
    ck_assert_msg(g_str_has_prefix(out, "<memory model=\"virtio-mem\">"), "%s", out);
    ck_assert_msg(strstr(out, "<requested unit=\"KiB\">131072</requested>"), "%s", out);
    ck_assert_msg(strstr(out, "<size unit=\"KiB\">524288</size>"), "%s", out);
    ck_assert_msg(strstr(out, "<current unit=\"KiB\">262144</current>"), "%s", out);
    ck_assert_msg(strstr(out, "<alias name=\"virtiomem0\"/>"), "%s", out);
    ck_assert(!strstr(out, "memballoon"));
    /* and it reads back as the facts of a domain with that device */
    g_autofree char *again = domain_with(out);
    libvirt_xml_facts f;
    ck_assert_int_eq(parse(again, &f, NULL), 0);
    ck_assert_uint_eq(f.vmem.requested_bytes, 128 * MiB);
}
END_TEST

START_TEST(vmem_request_refusals)
{
    g_autoptr(GError) err = NULL;
    ck_assert_ptr_null(libvirt_xml_vmem_request(GUEST, strlen(GUEST), MiB, &err));
    ck_assert(g_error_matches(err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE));
    ck_assert_str_eq(err->message, "the domain XML has no virtio-mem device");
    g_clear_error(&err);
    ck_assert_ptr_null(libvirt_xml_vmem_request("<domain", 7, MiB, &err));
    ck_assert(g_error_matches(err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE));
    g_clear_error(&err);
    g_autofree char *dev = vmem_device("<size unit='MiB'>512</size>", "<block>2048</block>", "", "",
                                       "<alias name='vm0'/>");
    g_autofree char *xml = domain_with(dev);
    ck_assert_ptr_null(libvirt_xml_vmem_request(xml, strlen(xml), MiB, &err));
    ck_assert(g_error_matches(err, MEMBAL_ERROR, MEMBAL_ERROR_INVALID));
    ck_assert_str_eq(err->message, "its device has no <requested> size");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("libvirt_xml");
    TCase *tc = tcase_create("facts");
    tcase_add_test(tc, agent_channel_and_balloon);
    tcase_add_test(tc, only_virtio_balloons_and_the_agents_port);
    tcase_add_test(tc, virtio_mem_sizes);
    tcase_add_test(tc, virtio_mem_not_believed);
    tcase_add_test(tc, virtio_mem_two_devices);
    tcase_add_test(tc, not_xml_is_an_error);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("vmem_request");
    tcase_add_test(tr, vmem_request_changes_only_requested);
    tcase_add_test(tr, vmem_request_refusals);
    suite_add_tcase(s, tr);
    return check_run_suite(s, CK_FORK);
}
