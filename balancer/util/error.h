/*
 * The daemon's one error convention: a function that can fail returns -1
 * (or NULL, or a failure value) and sets a GError in MEMBAL_ERROR whose
 * message says what failed and why, in words an operator can act on.
 * Callers log error->message or prefix it (g_prefix_error) and pass it
 * up; g_autoptr(GError) frees it.
 */
#ifndef MEMBAL_UTIL_ERROR_H
#define MEMBAL_UTIL_ERROR_H

#include <glib.h>

#define MEMBAL_ERROR membal_error_quark()
GQuark membal_error_quark(void);

typedef enum {
    MEMBAL_ERROR_FAILED,       /* an operation failed (I/O, a call to libvirt or QEMU) */
    MEMBAL_ERROR_INVALID,      /* bad input: a config key, a metadata document, a guest's message */
    MEMBAL_ERROR_UNAVAILABLE,  /* a facility this host does not have, or not for us */
} membal_error_code;

#endif
