/* The control socket balancerctl talks to (see control.c for the protocol). */
#ifndef MEMBAL_CONTROL_H
#define MEMBAL_CONTROL_H

typedef struct balancer balancer;
typedef struct control_server control_server;

control_server *control_start(balancer *b, const char *path, char **err);
void control_stop(control_server *s);
/* Answer one request line; returns a newline-terminated JSON reply (g_free it). */
char *control_handle(balancer *b, const char *line);

#endif
