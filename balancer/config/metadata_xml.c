#include "config/metadata_xml.h"

#include <errno.h>
#include <math.h>
#include <glib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "config/size_parse.h"
#include "util/error.h"

static int fail(GError **error, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, msg);
    return -1;
}

/* libxml2 would print parse errors to stderr by default; we report our own. */
static void quiet(void *ctx, const char *msg, ...)
{
    (void)ctx;
    (void)msg;
}

static int parse_attr(xmlAttrPtr a, const char *val, vm_policy *p, bool *shares_set,
                      bool *min_set, bool *max_set, GString *ignored, GError **error)
{
    const char *name = (const char *)a->name;
    if (a->ns)
        return fail(error, "attribute '%s' must not have a namespace", name);
    if (strcmp(name, "priority") == 0) {
        if (strcmp(val, "low") == 0)
            p->priority = VM_PRIO_LOW;
        else if (strcmp(val, "normal") == 0)
            p->priority = VM_PRIO_NORMAL;
        else if (strcmp(val, "high") == 0)
            p->priority = VM_PRIO_HIGH;
        else
            return fail(error, "priority=\"%.32s\": expected low, normal or high", val);
    } else if (strcmp(name, "shares") == 0) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(val, &end, 10);
        if (errno || end == val || *end || val[0] == '-' || v < 1 || v > 1000000)
            return fail(error, "shares=\"%.32s\": expected an integer from 1 to 1000000", val);
        p->shares = (unsigned)v;
        *shares_set = true;
    } else if (strcmp(name, "min") == 0 || strcmp(name, "max") == 0) {
        uint64_t bytes;
        if (size_parse(val, &bytes) < 0)
            return fail(error, "%s=\"%.32s\": expected a size such as 512MiB or 2GiB", name, val);
        if (name[1] == 'i') {
            p->min_bytes = bytes;
            *min_set = true;
        } else {
            if (bytes == 0)
                return fail(error, "max=\"%.32s\": must be greater than zero", val);
            p->max_bytes = bytes;
            *max_set = true;
        }
    } else if (strcmp(name, "mode") == 0) {
        if (strcmp(val, "auto") == 0)
            p->mode = VM_MODE_AUTO;
        else if (strcmp(val, "off") == 0)
            p->mode = VM_MODE_OFF;
        else
            return fail(error, "mode=\"%.32s\": expected auto or off", val);
    } else if (strcmp(name, "protect") == 0) {
        if (strcmp(val, "yes") == 0 || strcmp(val, "true") == 0)
            p->protect = true;
        else if (strcmp(val, "no") == 0 || strcmp(val, "false") == 0)
            p->protect = false;
        else
            return fail(error, "protect=\"%.32s\": expected yes or no", val);
    } else if (strcmp(name, "promotion_budget") == 0) {
        char *end;
        errno = 0;
        double d = strtod(val, &end);
        if (end != val && *end == '%')
            end++;
        if (errno || end == val || *end || !isfinite(d) || d < 0 || d > 100)
            return fail(error, "promotion_budget=\"%.32s\": expected a percentage from 0 to 100, such as 0.2%%", val);
        p->promotion_budget = d;
    } else {
        /* forward compatible: a VM whose policy a newer balancerd wrote
         * (migrated here, say) keeps the rest of it; the caller says what
         * was ignored */
        g_string_append_printf(ignored, "%s'%.32s'", ignored->len ? ", " : "", name);
    }
    return 0;
}

int metadata_policy_parse(const char *xml, size_t len, vm_policy *out, char **ignored_out, GError **error)
{
    if (ignored_out)
        *ignored_out = NULL;
    if (!xml || len == 0)
        return fail(error, "empty policy metadata");
    if (len > METADATA_XML_MAX)
        return fail(error, "policy metadata is %zu bytes, more than %d", len, METADATA_XML_MAX);

    xmlSetGenericErrorFunc(NULL, quiet);
    /* No network, no entity substitution, no DTD loading. */
    xmlDocPtr doc = xmlReadMemory(xml, (int)len, "policy.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    if (!doc) {
        const xmlError *e = xmlGetLastError();
        return fail(error, "policy metadata is not well-formed XML%s%.120s",
                    e && e->message ? ": " : "", e && e->message ? e->message : "");
    }
    int rc = -1;
    xmlNodePtr root = xmlDocGetRootElement(doc);
    vm_policy p;
    vm_policy_default(&p);
    bool shares_set = false, min_set = false, max_set = false;
    g_autoptr(GString) ignored = g_string_new(NULL);
    if (doc->intSubset || doc->extSubset) {
        fail(error, "policy metadata must not contain a DOCTYPE");
        goto out;
    }
    if (!root || strcmp((const char *)root->name, "policy") != 0) {
        fail(error, "root element is <%.32s>, expected <policy>",
             root ? (const char *)root->name : "(none)");
        goto out;
    }
    if (root->ns && root->ns->href && strcmp((const char *)root->ns->href, VM_POLICY_NS_URI) != 0) {
        fail(error, "<policy> is in namespace %.80s, expected %s",
             (const char *)root->ns->href, VM_POLICY_NS_URI);
        goto out;
    }
    for (xmlNodePtr c = root->children; c; c = c->next) {
        if (c->type == XML_ELEMENT_NODE) {
            fail(error, "<policy> takes no child elements (found <%.32s>)",
                 (const char *)c->name);
            goto out;
        }
        if (c->type == XML_TEXT_NODE && !xmlIsBlankNode(c)) {
            fail(error, "<policy> takes no text content");
            goto out;
        }
    }
    for (xmlAttrPtr a = root->properties; a; a = a->next) {
        xmlChar *val = xmlNodeGetContent((xmlNodePtr)a);
        int r = parse_attr(a, val ? (const char *)val : "", &p, &shares_set, &min_set, &max_set, ignored,
                           error);
        xmlFree(val);
        if (r < 0)
            goto out;
    }
    if (!shares_set)
        p.shares = vm_priority_shares(p.priority);
    if (min_set && max_set && p.min_bytes > p.max_bytes) {
        fail(error, "min (%llu bytes) is greater than max (%llu bytes)",
             (unsigned long long)p.min_bytes, (unsigned long long)p.max_bytes);
        goto out;
    }
    *out = p;
    if (ignored_out && ignored->len)
        *ignored_out = g_strdup(ignored->str);
    rc = 0;
out:
    xmlFreeDoc(doc);
    return rc;
}
