/*
 * Helpers shared by the tests that drive real processes
 * (tests/integration/, tests/faults/): shell commands, small files, the
 * balancerd under test and its log.
 */
#ifndef MEMBAL_TEST_UTIL_H
#define MEMBAL_TEST_UTIL_H

#include <stdbool.h>
#include <sys/types.h>

/* The source tree ($MEMBAL_TOP, else "."). */
const char *test_top(void);
/* system() of a formatted command; its exit status, -1 if it died. */
int test_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One plain write (works on cgroupfs and sysfs too). */
bool test_put(const char *path, const char *text);
/* Lines of path that contain needle (0 if unreadable). */
int test_count_lines(const char *path, const char *needle);
/* The longest tick balancerd --verbose logged ("tick N: ... (S s)") from
 * line `from` of log on, in seconds, and how many ticks there were. */
double test_longest_tick(const char *log, int from, int *ticks);
/* Ticks of log from line from whose lines name needle (a guest's "no
 * stats this tick"), and the longest run of such ticks in a row. */
int test_missed_ticks(const char *log, int from, const char *needle, int *longest_run);
/* Poll path until a line contains needle. */
bool test_wait_line(const char *path, const char *needle, int seconds);

/* A process's AnonHugePages in bytes: all of it (/proc/PID/smaps_rollup)
 * when mapping_size is 0, else only in mappings of exactly that size (a
 * guest's RAM, not QEMU's TCG translation cache); -1 if unreadable. */
long long test_anon_huge_bytes(pid_t pid, unsigned long long mapping_size);

/* A stand-in for DAMON's sysfs admin directory at admin, with no
 * kdamond: the directories one kdamond with one context, target and
 * scheme needs (writing nr_kdamonds to a plain file makes none), room for
 * 500 target regions, and paddr among the operations.  false on error. */
bool test_fake_damon(const char *admin);

/* The machine has swap on (/proc/swaps lists a device or file). */
bool test_have_swap(void);
/* Without swap: create and enable a 1 GiB swapfile at path, undone by
 * cleanup.h if the test fails.  1 if it did (call test_swap_off(path)
 * when done), 0 if the machine already had swap, -1 if it could not. */
int test_swap_on(const char *path);
/* swapoff and remove path; the exit status. */
int test_swap_off(const char *path);

/* Start build/balancerd --config conf ARGS with output to log, under
 * $MEMBAL_DAEMON_WRAPPER (valgrind in make check) unless bare; a kill is
 * registered with cleanup.h for a failed test.  Returns the pid. */
pid_t test_start_daemon(const char *conf, const char *args, const char *log, bool bare);
/* A command test_start_daemon puts before the daemon (and its wrapper),
 * e.g. setpriv with the unit's restrictions; NULL: none. */
extern const char *test_daemon_prefix;
/* SIGTERM, then wait up to 10 s (SIGKILL after): the exit status, 128+N
 * for a signal, -1 if it had to be killed. */
int test_stop_daemon(pid_t pid);

#endif
