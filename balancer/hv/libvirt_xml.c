#include "hv/libvirt_xml.h"

#include <glib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>

#include "config/size_parse.h"
#include "util/error.h"

#define AGENT_SOCKET "/domain/devices/channel[@type='unix'][target/@name='" LIBVIRT_AGENT_PORT "']/source/@path"
#define VIRTIO_BALLOON "/domain/devices/memballoon[starts-with(@model, 'virtio')]"
#define VMEM_DEVICES "/domain/devices/memory[@model='virtio-mem']"

/* A domain XML read, with an XPath context on it. */
typedef struct {
    xmlDocPtr doc;
    xmlXPathContextPtr ctx;
} domain_doc;

/* Read xml (len bytes) into d: 0, or -1 with the reason, in code. */
static int doc_open(domain_doc *d, const char *xml, size_t len, membal_error_code code, GError **error)
{
    *d = (domain_doc){ NULL, NULL };
    if (len > INT_MAX) {
        g_set_error(error, MEMBAL_ERROR, code, "the domain XML is %zu bytes, too long to read", len);
        return -1;
    }
    xmlResetLastError();
    /* no network, no entity substitution, nothing printed */
    d->doc = xmlReadMemory(xml, (int)len, "domain.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    d->ctx = d->doc ? xmlXPathNewContext(d->doc) : NULL;
    if (d->ctx)
        return 0;
    const xmlError *e = xmlGetLastError();
    g_autofree char *why = g_strchomp(g_strdup(e && e->message ? e->message : ""));
    g_set_error(error, MEMBAL_ERROR, code, "the domain XML is not well-formed XML%s%.120s", why[0] ? ": " : "", why);
    xmlFreeDoc(d->doc);
    d->doc = NULL;
    return -1;
}

static void doc_close(domain_doc *d)
{
    xmlXPathFreeContext(d->ctx);
    xmlFreeDoc(d->doc);
}

/* The string an XPath expression finds first; NULL if none. */
static char *xpath_string(xmlXPathContextPtr ctx, const char *expr)
{
    char *out = NULL;
    xmlXPathObjectPtr res = xmlXPathEvalExpression((const xmlChar *)expr, ctx);
    if (res && res->nodesetval && res->nodesetval->nodeNr > 0) {
        xmlChar *v = xmlNodeGetContent(res->nodesetval->nodeTab[0]);
        out = v ? g_strdup((const char *)v) : NULL;
        xmlFree(v);
    }
    xmlXPathFreeObject(res);
    return out;
}

/* The virtio-mem devices; NULL when there are none (else free it with
 * xmlXPathFreeObject: its nodesetval has at least one). */
static xmlXPathObjectPtr vmem_devices(xmlXPathContextPtr ctx)
{
    xmlXPathObjectPtr devs = xmlXPathEvalExpression((const xmlChar *)VMEM_DEVICES, ctx);
    if (devs && devs->nodesetval && devs->nodesetval->nodeNr > 0)
        return devs;
    xmlXPathFreeObject(devs);
    return NULL;
}

/* A child element of a <memory> device's <target> (size, block,
 * requested, current), NULL when absent. */
static xmlNodePtr target_child(xmlNodePtr dev, const char *name)
{
    for (xmlNodePtr t = dev->children; t; t = t->next)
        if (t->type == XML_ELEMENT_NODE && !xmlStrcmp(t->name, (const xmlChar *)"target"))
            for (xmlNodePtr c = t->children; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE && !xmlStrcmp(c->name, (const xmlChar *)name))
                    return c;
    return NULL;
}

/* Its value in bytes, read as libvirt reads sizes (its unit, KiB when
 * none is given); 0 when absent or unreadable. */
static uint64_t target_bytes(xmlNodePtr dev, const char *name)
{
    xmlNodePtr c = target_child(dev, name);
    if (!c)
        return 0;
    xmlChar *v = xmlNodeGetContent(c), *unit = xmlGetProp(c, (const xmlChar *)"unit");
    g_autofree char *text = g_strdup_printf("%s%s", v ? (const char *)v : "", unit ? (const char *)unit : "KiB");
    xmlFree(v);
    xmlFree(unit);
    uint64_t bytes;
    return size_parse(text, &bytes) == 0 ? bytes : 0;
}

/* The first of a domain's `devices` virtio-mem devices, dev (its size max,
 * plugged its current). */
static vmem_sample first_vmem(xmlNodePtr dev, unsigned devices, uint64_t max, uint64_t plugged)
{
    vmem_sample v = { .devices = devices, .block_bytes = target_bytes(dev, "block"), .max_bytes = max,
                      .requested_bytes = target_bytes(dev, "requested"), .plugged_bytes = plugged };
    for (xmlNodePtr c = dev->children; c; c = c->next)
        if (c->type == XML_ELEMENT_NODE && !xmlStrcmp(c->name, (const xmlChar *)"alias")) {
            xmlChar *alias = xmlGetProp(c, (const xmlChar *)"name");
            snprintf(v.id, sizeof(v.id), "%s", alias ? (const char *)alias : "");
            xmlFree(alias);
        }
    if (!v.block_bytes || plugged > max || v.requested_bytes > max)
        return (vmem_sample){ .devices = devices }; /* not believed: not resized */
    return v;
}

static void vmem_facts(xmlXPathContextPtr ctx, libvirt_xml_facts *out)
{
    xmlXPathObjectPtr devs = vmem_devices(ctx);
    if (!devs)
        return;
    xmlNodeSetPtr set = devs->nodesetval;
    for (int i = 0; i < set->nodeNr; i++) {
        xmlNodePtr dev = set->nodeTab[i];
        uint64_t max = target_bytes(dev, "size"), plugged = target_bytes(dev, "current");
        out->vmem_max_all += max;
        out->vmem_plugged_all += plugged;
        if (i == 0)
            out->vmem = first_vmem(dev, (unsigned)set->nodeNr, max, plugged);
    }
    xmlXPathFreeObject(devs);
}

int libvirt_xml_facts_parse(const char *xml, size_t len, libvirt_xml_facts *out, GError **error)
{
    *out = (libvirt_xml_facts){ 0 };
    domain_doc d;
    if (doc_open(&d, xml, len, MEMBAL_ERROR_INVALID, error) < 0)
        return -1;
    out->agent_path = xpath_string(d.ctx, AGENT_SOCKET);
    g_autofree char *fpr = xpath_string(d.ctx, VIRTIO_BALLOON "/@freePageReporting");
    out->free_page_reporting = fpr && strcmp(fpr, "on") == 0;
    g_autofree char *doo = xpath_string(d.ctx, VIRTIO_BALLOON "/@autodeflate");
    out->deflate_on_oom = doo && strcmp(doo, "on") == 0;
    vmem_facts(d.ctx, out);
    doc_close(&d);
    return 0;
}

void libvirt_xml_facts_clear(libvirt_xml_facts *f)
{
    g_clear_pointer(&f->agent_path, g_free);
}

/* dev with its <requested> set, as XML; NULL with the reason. */
static char *vmem_with_requested(xmlDocPtr doc, xmlNodePtr dev, uint64_t bytes, GError **error)
{
    xmlNodePtr req = target_child(dev, "requested");
    if (!req) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "its device has no <requested> size");
        return NULL;
    }
    char kib[32];
    snprintf(kib, sizeof(kib), "%llu", (unsigned long long)(bytes / 1024));
    xmlNodeSetContent(req, (const xmlChar *)kib);
    xmlSetProp(req, (const xmlChar *)"unit", (const xmlChar *)"KiB");
    xmlBufferPtr buf = xmlBufferCreate();
    char *out = xmlNodeDump(buf, doc, dev, 0, 0) >= 0 ? g_strdup((const char *)xmlBufferContent(buf)) : NULL;
    xmlBufferFree(buf);
    if (!out)
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "its device cannot be written as XML");
    return out;
}

char *libvirt_xml_vmem_request(const char *xml, size_t len, uint64_t requested_bytes, GError **error)
{
    domain_doc d;
    if (doc_open(&d, xml, len, MEMBAL_ERROR_UNAVAILABLE, error) < 0)
        return NULL;
    char *out = NULL;
    xmlXPathObjectPtr devs = vmem_devices(d.ctx);
    if (devs)
        out = vmem_with_requested(d.doc, devs->nodesetval->nodeTab[0], requested_bytes, error);
    else
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "the domain XML has no virtio-mem device");
    xmlXPathFreeObject(devs);
    doc_close(&d);
    return out;
}
