/*
 * What the libvirt backend reads from a domain's live XML
 * (virDomainGetXMLDesc), as pure functions of its text: no connection, no
 * I/O.  The backend asks libvirt for the XML and hands it here, as
 * libvirt's qemu_monitor.c hands QEMU's answers to qemu_monitor_json.c;
 * tests/fuzz/fuzz_libvirt_xml.c fuzzes both functions.
 */
#ifndef MEMBAL_HV_LIBVIRT_XML_H
#define MEMBAL_HV_LIBVIRT_XML_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hv/backend.h"

/* The virtio-serial port of balancerd's in-guest agent:
 * <channel type='unix'><target type='virtio' name='org.membal.agent.0'/> */
#define LIBVIRT_AGENT_PORT "org.membal.agent.0"

typedef struct {
    char *agent_path;          /* the <source path> of the unix <channel> whose target is
                                * LIBVIRT_AGENT_PORT, NULL: none (g_free'd by ..._clear) */
    bool free_page_reporting;  /* the virtio <memballoon> has freePageReporting='on' */
    bool deflate_on_oom;       /* ... and autodeflate='on' */
    vmem_sample vmem;          /* its <memory model='virtio-mem'> devices: how many (0 none, then all
                                * is 0), the first one's sizes (KiB when no unit is given) and
                                * <alias>; only .devices when those are not believed (no block
                                * size, more plugged or requested than its size) */
    uint64_t vmem_max_all;     /* all its virtio-mem devices' <size> together */
    uint64_t vmem_plugged_all; /* ... and their <current> */
} libvirt_xml_facts;

/* Read the facts of a domain XML (len bytes).  0, or -1 with the reason
 * (MEMBAL_ERROR_INVALID: not XML); *out is all zero then. */
int libvirt_xml_facts_parse(const char *xml, size_t len, libvirt_xml_facts *out, GError **error);
void libvirt_xml_facts_clear(libvirt_xml_facts *f);

/* The XML of the domain's first virtio-mem device as it is, but for its
 * <requested unit='KiB'>, requested_bytes / 1024: what virsh
 * update-memory-device --requested-size hands virDomainUpdateDeviceFlags.
 * NULL (g_free it otherwise) with the reason: MEMBAL_ERROR_UNAVAILABLE when
 * there is no such device to change (none, or the XML cannot be read),
 * MEMBAL_ERROR_INVALID when it has no <requested> size. */
char *libvirt_xml_vmem_request(const char *xml, size_t len, uint64_t requested_bytes, GError **error);

#endif
