/*
 * A connection to one guest agent's port, as the host sees it: a unix
 * socket (QEMU's chardev for virtserialport org.membal.agent.0, bare or
 * libvirt's <channel type='unix'>).  Non-blocking; drained once per tick.
 */
#ifndef MEMBAL_AGENT_CONN_H
#define MEMBAL_AGENT_CONN_H

#include "agent/agent_proto.h"
#include "qmp/qmp_framer.h"

typedef struct {
    char *path;      /* NULL: the guest has no agent port */
    int fd;
    bool warned;     /* a failure to connect was logged (once per connection's life) */
    qmp_framer in;
} agent_conn;

/* What one drain takes at most: a flooding guest cannot make us spin, and a
 * channel read some other way (libvirt's stream) is cut off beyond it. */
#define AGENT_DRAIN_MAX (64 * 1024)

void agent_conn_init(agent_conn *c, const char *path);
void agent_conn_clear(agent_conn *c);
/* Connect if needed and feed every complete line received into st (at
 * most AGENT_DRAIN_MAX per call).  guest_bytes bounds the sizes the guest
 * claims.  A socket that cannot be reached is logged once, as guest
 * `name`'s. */
void agent_conn_drain(agent_conn *c, const char *name, agent_state *st, uint64_t guest_bytes);
/* Feed bytes of the agent's channel that came some other way (libvirt's
 * channel stream), as agent_conn_drain feeds what it reads. */
void agent_conn_feed(agent_conn *c, const char *buf, size_t n, agent_state *st, uint64_t guest_bytes);

#endif
