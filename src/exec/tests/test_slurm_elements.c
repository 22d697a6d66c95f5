/*
 * A Slurm job array's elements as the executor reads them from
 * `squeue -h -r -t all -j ID -o KN_SQUEUE_ELEMENTS_FORMAT` (recorded from
 * Slurm 22.05 on scripts/slurm-up.sh's cluster), the ways a line can be
 * wrong, and the --array lists sbatch gets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "exec/exec.h"

/* sbatch --array=0-5%2 of `sleep 20`, a moment after, as recorded: the
   pending elements have no job id of their own yet, only the array's. */
static const char recorded[] =
	"2|1|PENDING|JobArrayTaskLimit\n"
	"3|1|PENDING|JobArrayTaskLimit\n"
	"4|1|PENDING|JobArrayTaskLimit\n"
	"5|1|PENDING|JobArrayTaskLimit\n"
	"1|3|RUNNING|None\n"
	"0|2|RUNNING|None\n";

static void test_recorded_elements(void **state)
{
	struct kn_slurm_elements e;
	const struct kn_slurm_element *el;
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_slurm_elements_parse(recorded, strlen(recorded), &e,
						 &err),
			 0);
	assert_int_equal(e.n, 6);
	assert_false(e.gone);
	for (size_t i = 0; i < e.n; i++)
		assert_int_equal(e.v[i].index, (int)i);
	el = kn_slurm_elements_find(&e, 5);
	assert_non_null(el);
	assert_int_equal(el->job_id, 1);
	assert_string_equal(el->state, "PENDING");
	assert_string_equal(el->reason, "JobArrayTaskLimit");
	el = kn_slurm_elements_find(&e, 0);
	assert_string_equal(el->state, "RUNNING");
	assert_null(kn_slurm_elements_find(&e, 6));
	kn_slurm_elements_release(&e);
}

static void test_gone_and_empty(void **state)
{
	static const char gone[] =
		"slurm_load_jobs error: Invalid job id specified\n";
	struct kn_slurm_elements e;
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_slurm_elements_parse(gone, strlen(gone), &e, &err),
			 0);
	assert_true(e.gone);
	assert_int_equal(e.n, 0);
	assert_null(kn_slurm_elements_find(&e, 0));
	assert_int_equal(kn_slurm_elements_parse("", 0, &e, &err), 0);
	assert_false(e.gone);
	assert_int_equal(e.n, 0);
	/* A job that is no array's element has no index: passed over. */
	assert_int_equal(kn_slurm_elements_parse("N/A|9|RUNNING|None\n", 19,
						 &e, &err),
			 0);
	assert_int_equal(e.n, 0);
}

static void test_reason_is_cut_and_cleaned(void **state)
{
	char line[400];
	struct kn_slurm_elements e;
	struct kn_error err;
	size_t n;

	(void)state;
	n = (size_t)snprintf(line, sizeof(line), "7|70|FAILED|a\tb|%0300d", 0);
	assert_int_equal(kn_slurm_elements_parse(line, n, &e, &err), 0);
	assert_int_equal(e.n, 1);
	assert_int_equal(strlen(e.v[0].reason), sizeof(e.v[0].reason) - 1);
	assert_int_equal(strncmp(e.v[0].reason, "a?b|000", 7), 0);
	kn_slurm_elements_release(&e);
}

static void test_lines_that_are_not_squeue(void **state)
{
	/* The text, and what the message must name. */
	static const char *const cases[][2] = {
		{"1|2|RUNNING\n", "line 1: 3 fields"},
		{"0|1|RUNNING|None\n1 2 RUNNING None\n", "line 2: 1 fields"},
		{"-1|2|RUNNING|None\n", "line 1 column 1"},
		{"4000001|2|RUNNING|None\n", "line 1 column 1"},
		{"99999999999999999999|2|RUNNING|None\n", "line 1 column 1"},
		{"|2|RUNNING|None\n", "line 1 column 1"},
		{"1|0|RUNNING|None\n", "line 1 column 3"},
		{"1|x|RUNNING|None\n", "is no job id"},
		{"1|99999999999999999999|RUNNING|None\n", "column 3"},
		{"1|2|running|None\n", "line 1 column 5"},
		{"1|2||None\n", "is no job state"},
		{"1|2|RUNNINGRUNNINGRUNNINGRUNNINGRUNNING|None\n", "job state"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_slurm_elements e = {(void *)1, 99, true};
		struct kn_error err;

		memset(&err, 0, sizeof(err));
		assert_int_equal(kn_slurm_elements_parse(cases[i][0],
							 strlen(cases[i][0]),
							 &e, &err),
				 -EINVAL);
		assert_string_equal(err.field, "squeue");
		assert_non_null(strstr(err.message, cases[i][1]));
		/* Untouched on failure. */
		assert_int_equal(e.n, 99);
	}
}

static void test_array_lists(void **state)
{
	static const int some[] = {0, 1, 2, 5, 7, 8};
	static const int one[] = {7};
	char *l;

	(void)state;
	l = kn_slurm_array_list(some, 6, 0);
	assert_string_equal(l, "0-2,5,7-8");
	free(l);
	l = kn_slurm_array_list(some, 6, 2);
	assert_string_equal(l, "0-2,5,7-8%2");
	free(l);
	l = kn_slurm_array_list(one, 1, 50);
	assert_string_equal(l, "7%50");
	free(l);
}

static void test_sbatch_args_of_an_array(void **state)
{
	struct kn_slurm_task t = {.ntasks = 1, .job_name = "sweep",
				  .array = "0-9999%50"};
	char **a = kn_slurm_sbatch_args(&t, 0, "/k/tasks/7/slurm-array-7-1");
	bool array = false, output = false, chdir = false;
	size_t n = 0;

	(void)state;
	for (; a[n]; n++) {
		array |= !strcmp(a[n], "--array=0-9999%50");
		output |= !strcmp(a[n], "--output=/k/tasks/7/slurm-array-7-1/"
					"out/slurm-%A_%a.out");
		chdir |= !strcmp(a[n], "--chdir=/k/tasks/7/slurm-array-7-1/out");
	}
	assert_true(array && output && chdir);
	assert_string_equal(a[n - 1], "/k/tasks/7/slurm-array-7-1/slurm.sh");
	kn_strv_free(a);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_recorded_elements),
	cmocka_unit_test(test_gone_and_empty),
	cmocka_unit_test(test_reason_is_cut_and_cleaned),
	cmocka_unit_test(test_lines_that_are_not_squeue),
	cmocka_unit_test(test_array_lists),
	cmocka_unit_test(test_sbatch_args_of_an_array))
