/*
 * sim's unit tests: one temporary directory per test program for the
 * trace files they write, made by setup and removed by teardown. The
 * includer defines dir[] as a mkdtemp template.
 */
#ifndef KILN_SIM_TESTS_TMPDIR_H
#define KILN_SIM_TESTS_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
