/* The one way every check-based test program runs its suite, and the one
 * way a test that cannot run on this machine says so. */
#ifndef MEMBAL_CHECK_RUN_H
#define MEMBAL_CHECK_RUN_H

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run s, print check's summary, return the process exit status. */
static inline int check_run_suite(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    if (fork == CK_NOFORK)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* Print "SKIPPED: <test>: <reason>" on a line of its own; fn is the
 * test's function (check names it <test>_fn). */
static inline void __attribute__((format(printf, 2, 3))) check_skip_print(const char *fn, const char *fmt, ...)
{
    size_t n = strlen(fn);
    if (n > 3 && strcmp(fn + n - 3, "_fn") == 0)
        n -= 3;
    printf("SKIPPED: %.*s: ", (int)n, fn);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* End the current test as skipped, with the reason.  check counts it as
 * passed; tests/run-suite.sh moves it to the skipped column and make
 * check lists the reason under its final line. */
#define CHECK_SKIP(...)                                                                                                \
    do {                                                                                                               \
        check_skip_print(__func__, __VA_ARGS__);                                                                       \
        return;                                                                                                        \
    } while (0)

/* A whole program that cannot run here: exit with this after printing
 * "*** SKIPPED: <reason> ***" (run-suite.sh reads the reason from it). */
#define CHECK_SKIP_ALL 77

#endif
