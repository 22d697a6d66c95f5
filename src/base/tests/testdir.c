/* A fresh temporary directory for a unit test (testdir.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "base/tests/testdir.h"

char *kn_test_dir(const char *name)
{
	char *tmpl = kn_asprintf("/tmp/kn-%s-XXXXXX", name);

	if (!mkdtemp(tmpl))
		fail_msg("no temporary directory %s", tmpl);
	return tmpl;
}
