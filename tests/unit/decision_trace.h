/*
 * Every decision a policy test makes, written to the file named by
 * MEMBAL_DECISION_TRACE (nothing when it is not set): a refactoring that
 * must not change behaviour is checked by running the trace tests before
 * and after it and comparing the two files (tests/decision-trace.sh).
 */
#ifndef MEMBAL_DECISION_TRACE_H
#define MEMBAL_DECISION_TRACE_H

#include "policies/policy.h"

void decision_trace(const char *policy, const policy_input *in, const policy_output *out);

#endif
