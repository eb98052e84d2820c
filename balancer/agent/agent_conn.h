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
    qmp_framer in;
} agent_conn;

void agent_conn_init(agent_conn *c, const char *path);
void agent_conn_clear(agent_conn *c);
/* Connect if needed and feed every complete line received into st (at
 * most 64 KiB per call).  guest_bytes bounds the sizes the guest claims. */
void agent_conn_drain(agent_conn *c, agent_state *st, uint64_t guest_bytes);

#endif
