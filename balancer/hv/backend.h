/*
 * Where guests come from and how their balloons are set: libvirt
 * (backend_libvirt.c) or QEMU QMP sockets given with --qmp
 * (backend_qmp.c).  The balancer core calls these once per tick.
 */
#ifndef MEMBAL_BACKEND_H
#define MEMBAL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "guest.h"

typedef struct balancer balancer;

typedef struct backend_ops {
    const char *name;
    /* Connect if needed, then bring b's guest list in line with the
     * running guests (balancer_guest_add/_remove).  -1 if unreachable. */
    int (*sync)(balancer *b);
    /* Read one guest's stats.  -1 with err filled on failure. */
    int (*sample)(balancer *b, guest *g, guest_sample *out, char *err, size_t errlen);
    /* Set the balloon target (bytes). */
    int (*set_target)(balancer *b, guest *g, uint64_t bytes, char *err, size_t errlen);
    /* The QEMU process's pid (host-side reclaim), or -1. */
    int (*qemu_pid)(balancer *b, guest *g);
    /* Free what the backend attached to g (g->backend_data). */
    void (*guest_release)(balancer *b, guest *g);
    void (*shutdown)(balancer *b);
} backend_ops;

extern const backend_ops backend_libvirt;
extern const backend_ops backend_qmp;

#endif
