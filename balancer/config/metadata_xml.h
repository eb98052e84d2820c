/*
 * Strict parser for our per-VM policy element in libvirt domain metadata:
 *   <policy priority="high" shares="2000" min="1GiB" max="8GiB" mode="auto" protect="yes"/>
 * in namespace VM_POLICY_NS_URI.  A bad value, child element, namespace or
 * document is an error with a message naming it; the caller keeps the
 * previous policy in force.  An attribute this version does not know (one
 * a newer balancerd wrote) is ignored and named, the rest applied.
 */
#ifndef MEMBAL_METADATA_XML_H
#define MEMBAL_METADATA_XML_H

#include <glib.h>
#include <stddef.h>

#include "policies/vm_policy.h"

/* Documents longer than this are rejected unread. */
#define METADATA_XML_MAX 4096

/* Parse xml (len bytes) into *out (untouched on error).  Returns 0, or -1
 * with the reason.  *ignored_out (may be NULL; g_free it) names the
 * attributes ignored as unknown ("'colour', 'speed'"), NULL when none. */
int metadata_policy_parse(const char *xml, size_t len, vm_policy *out, char **ignored_out, GError **error);

#endif
