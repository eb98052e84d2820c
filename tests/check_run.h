/* The one way every check-based test program runs its suite. */
#ifndef MEMBAL_CHECK_RUN_H
#define MEMBAL_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

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

#endif
