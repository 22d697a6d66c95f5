/* Shared between shimrt's files; not a public header. */
#ifndef KILN_SHIMRT_INTERNAL_H
#define KILN_SHIMRT_INTERNAL_H

#include "shimrt/shimrt.h"

/* A line for the task's log. */
void shimrt_say(int fd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
