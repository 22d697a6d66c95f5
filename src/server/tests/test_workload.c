/*
 * Unit tests for the server's workload (workload.c): the shapes of the
 * last jobs, and the same jobs counted by distinct shape, which is what
 * placement reads, so an array of thousands of alike elements is one
 * shape to it, not thousands.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/tests/testmain.h"
#include "server/internal.h"

static void add(struct server *s, int gpu_milli, char **models, size_t n)
{
	struct kn_job_spec spec;

	memset(&spec, 0, sizeof(spec));
	spec.resources.gpu_milli = gpu_milli;
	spec.resources.gpu_models = models;
	spec.resources.n_gpu_models = n;
	workload_add(s, &spec);
}

static size_t count_of(const struct server *s, int gpu_milli)
{
	for (size_t i = 0; i < s->n_shapes; i++)
		if (s->shapes[i].gpu_milli == gpu_milli)
			return s->shapes[i].count;
	return 0;
}

static void test_alike_jobs_are_one_shape(void **state)
{
	struct server s;
	char *h100[] = {"H100", NULL}, *a100[] = {"A100", NULL};
	(void)state;

	memset(&s, 0, sizeof(s));
	for (int i = 0; i < 5000; i++)
		add(&s, 8000, NULL, 0);
	assert_int_equal(s.n_workload, 5000);
	assert_int_equal(s.n_shapes, 1);
	assert_int_equal(count_of(&s, 8000), 5000);
	/* Models tell shapes apart; CPU-only jobs are no shape. */
	add(&s, 1000, h100, 1);
	add(&s, 1000, a100, 1);
	add(&s, 1000, h100, 1);
	add(&s, 0, NULL, 0);
	assert_int_equal(s.n_shapes, 3);
	assert_int_equal(count_of(&s, 1000), 2);
	workload_release(&s);
	assert_int_equal(s.n_shapes, 0);
}

/* The last 10,000 jobs count: the oldest leave both the list and the
   counts, and a shape none of them has any more is gone. */
static void test_counts_follow_the_window(void **state)
{
	struct server s;
	(void)state;

	memset(&s, 0, sizeof(s));
	add(&s, 500, NULL, 0);
	for (int i = 0; i < 10000; i++)
		add(&s, 2000, NULL, 0);
	assert_int_equal(s.n_workload, 10000);
	assert_int_equal(s.n_shapes, 1);
	assert_int_equal(count_of(&s, 500), 0);
	assert_int_equal(count_of(&s, 2000), 10000);
	add(&s, 500, NULL, 0);
	assert_int_equal(count_of(&s, 2000), 9999);
	assert_int_equal(count_of(&s, 500), 1);
	workload_release(&s);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_alike_jobs_are_one_shape),
	cmocka_unit_test(test_counts_follow_the_window))
