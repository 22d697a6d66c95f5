/*
 * sacct's parsable output as kiln reads it: recorded from Slurm 22.05.8
 * with slurmdbd on MariaDB (the test cluster of scripts/slurm-2node.sh
 * with KILN_SLURM2_ACCT_PORT), then the ways a line can be wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "exec/exec.h"

/* SLURM_TIME_FORMAT=%s sacct -n -P -X -o KN_SACCT_FORMAT, as recorded. */
static const char recorded[] =
	"43|FAILED|3:0|1796406840|1796406842|2|billing=1,cpu=1,gres/gpu=1,"
	"node=1\n"
	"44|COMPLETED|0:0|1796406840|1796406842|2|billing=1,cpu=1,"
	"gres/shard=25,node=1\n"
	"45|COMPLETED|0:0|1796406852|1796406854|2|billing=2,cpu=2,gres/gpu=2,"
	"node=2\n"
	"46|RUNNING|0:0|1796406855|Unknown|5|billing=1,cpu=1,node=1\n"
	"47|CANCELLED by 0|0:0|None|1796406858|0|\n"
	"48|PENDING|0:0|Unknown|Unknown|0|\n";

static void parse_ok(const char *text, long long id, struct kn_sacct_job *j)
{
	struct kn_error err;

	memset(&err, 0, sizeof(err));
	assert_int_equal(kn_sacct_parse(text, id, j, &err), 1);
}

static void test_recorded_jobs(void **state)
{
	struct kn_sacct_job j;
	struct kn_error err;

	(void)state;
	parse_ok(recorded, 43, &j);
	assert_string_equal(j.state, "FAILED");
	assert_int_equal(j.exit_code, 3);
	assert_int_equal(j.signal, 0);
	assert_int_equal(j.start_s, 1796406840);
	assert_int_equal(j.end_s, 1796406842);
	assert_int_equal(j.elapsed_s, 2);
	assert_int_equal(j.gpus, 1);
	assert_int_equal(j.cpus, 1);
	assert_int_equal(j.nodes, 1);

	parse_ok(recorded, 44, &j);
	assert_int_equal(j.shards, 25);
	assert_int_equal(j.gpus, 0);

	parse_ok(recorded, 45, &j);
	assert_int_equal(j.gpus, 2);
	assert_int_equal(j.nodes, 2);

	parse_ok(recorded, 46, &j);
	assert_string_equal(j.state, "RUNNING");
	assert_int_equal(j.end_s, 0);

	parse_ok(recorded, 47, &j);
	assert_string_equal(j.state, "CANCELLED");
	assert_int_equal(j.start_s, 0);
	assert_int_equal(j.end_s, 1796406858);
	assert_int_equal(j.cpus, 0);

	parse_ok(recorded, 48, &j);
	assert_string_equal(j.state, "PENDING");

	assert_int_equal(kn_sacct_parse(recorded, 49, &j, &err), 0);
	assert_int_equal(kn_sacct_parse("", 49, &j, &err), 0);
}

static void test_the_run_that_started_counts(void **state)
{
	/* -D: the run Slurm preempted and requeued, then the requeued one
	   kiln cancelled before it started. */
	static const char runs[] =
		"60|PREEMPTED|0:15|1796407000|1796407031|31|billing=2,cpu=2,"
		"gres/gpu=2,mem=128M,node=2\n"
		"60|CANCELLED by 0|0:0|None|1796407040|0|\n";
	static const char only_queued[] =
		"61|REQUEUED|0:0|Unknown|Unknown|0|\n"
		"61|PENDING|0:0|Unknown|Unknown|0|\n";
	struct kn_sacct_job j;

	(void)state;
	parse_ok(runs, 60, &j);
	assert_string_equal(j.state, "PREEMPTED");
	assert_int_equal(j.signal, 15);
	assert_int_equal(j.elapsed_s, 31);
	assert_int_equal(j.mem_mb, 128);
	parse_ok(only_queued, 61, &j);
	assert_string_equal(j.state, "PENDING");
}

static void test_memory_units(void **state)
{
	struct kn_sacct_job j;

	(void)state;
	parse_ok("1|COMPLETED|0:0|1|2|1|mem=2G,node=1\n", 1, &j);
	assert_int_equal(j.mem_mb, 2048);
	parse_ok("1|COMPLETED|0:0|1|2|1|mem=1T\n", 1, &j);
	assert_int_equal(j.mem_mb, 1 << 20);
	parse_ok("1|COMPLETED|0:0|1|2|1|mem=4096K\n", 1, &j);
	assert_int_equal(j.mem_mb, 4);
}

static void test_lines_that_are_not_sacct(void **state)
{
	/* Each text, the field its error names, and words of its message. */
	static const char *const cases[][3] = {
		{"sacct: error: Slurm accounting storage is disabled\n",
		 "sacct", "sacct:1: 1 fields, not the 7 of JobIDRaw,State,"},
		{"1|COMPLETED|0:0|1|2|1|\nx|COMPLETED|0:0|1|2|1|\n",
		 "JobIDRaw", "sacct:2: JobIDRaw"},
		{"1|COMPLETED|0:0|1|2|1\n", "sacct", "sacct:1: 6 fields"},
		{"1|COMPLETED|0:0|1|2|1||\n", "sacct",
		 "sacct:1: more than 7 fields"},
		{"1|completed|0:0|1|2|1|\n", "State", "State"},
		{"1||0:0|1|2|1|\n", "State", "State"},
		{"1|A_STATE_NAME_LONGER_THAN_THIRTY_ONE|0:0|1|2|1|\n", "State",
		 "State"},
		{"1|COMPLETED|0|1|2|1|\n", "ExitCode", "ExitCode"},
		{"1|COMPLETED|0:999|1|2|1|\n", "ExitCode", "ExitCode"},
		{"1|COMPLETED|0:0|2026-12-04T17:00:00|2|1|\n", "Start", "Start"},
		{"1|COMPLETED|0:0|1|-2|1|\n", "End", "End"},
		{"1|COMPLETED|0:0|1|2|99999999999999999999|\n", "ElapsedRaw",
		 "ElapsedRaw"},
		/* 19 digits: past int64 while it is read, not only after. */
		{"1|COMPLETED|0:0|1|2|9999999999999999991|\n", "ElapsedRaw",
		 "ElapsedRaw"},
		{"1|COMPLETED|0:0|1|2|1|cpu\n", "AllocTRES", "AllocTRES"},
		{"1|COMPLETED|0:0|1|2|1|gres/gpu=two\n", "AllocTRES",
		 "AllocTRES"},
		{"1|COMPLETED|0:0|1|2|1|mem=12\n", "AllocTRES", "AllocTRES"},
		{"1|COMPLETED|0:0|1|2|1|mem=M\n", "AllocTRES", "AllocTRES"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_sacct_job j;
		struct kn_error err;

		memset(&err, 0, sizeof(err));
		assert_int_equal(kn_sacct_parse(cases[i][0], 1, &j, &err),
				 -EINVAL);
		assert_string_equal(err.field, cases[i][1]);
		assert_non_null(strstr(err.message, cases[i][2]));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recorded_jobs),
		cmocka_unit_test(test_the_run_that_started_counts),
		cmocka_unit_test(test_memory_units),
		cmocka_unit_test(test_lines_that_are_not_sacct),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
