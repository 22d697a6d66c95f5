/*
 * health/internal.h: what the node checks and the GPU performance checks
 * share and nothing outside src/health includes: how a check writes its
 * result.
 */
#ifndef KN_HEALTH_INTERNAL_H
#define KN_HEALTH_INTERNAL_H

#include "health.h"

/* Set r's status and its message, formatted. */
__attribute__((format(printf, 3, 4))) void
check_set(struct kn_check_result *r, enum kn_check_status st,
	  const char *fmt, ...);

/*
 * Append "; text" (or text) to r's message. A failure replaces a pass or
 * skip and its message; once r fails, passes and skips add nothing, so a
 * failing report lists only the failures.
 */
__attribute__((format(printf, 3, 4))) void
check_add(struct kn_check_result *r, enum kn_check_status st,
	  const char *fmt, ...);

#endif
