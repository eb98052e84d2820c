/*
 * Cleanup that survives a failed test.  check runs each test in a forked
 * child and ends it with _exit() when an assertion fails, so neither
 * atexit() nor teardown code runs there.  Tests register shell commands
 * (kill this QEMU, stop the libvirtd we started) in a file shared with the
 * parent, which runs them after the suite.
 */
#ifndef MEMBAL_CLEANUP_H
#define MEMBAL_CLEANUP_H

/* Call once in main() before running the suite. */
void cleanup_init(void);
void cleanup_register(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Run every registered command, newest first, and forget them. */
void cleanup_run_all(void);

#endif
