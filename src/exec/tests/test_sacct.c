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
#include <stdio.h>
#include <string.h>

#include "base/tests/testmain.h"
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

/* -D: the run Slurm preempted and requeued, then the requeued one kiln
   cancelled before it started. */
static const char preempted[] =
	"60|PREEMPTED|0:15|1796407000|1796407031|31|billing=2,cpu=2,"
	"gres/gpu=2,mem=128M,node=2\n"
	"60|CANCELLED by 0|0:0|None|1796407040|0|\n";
static const char only_queued[] =
	"61|REQUEUED|0:0|Unknown|Unknown|0|\n"
	"61|PENDING|0:0|Unknown|Unknown|0|\n";

/*
 * Each text and the whole record of the job asked for: id, state, exit
 * code, signal, start, end, elapsed, cpus, gpus, shards, nodes, MB.
 */
static const struct {
	const char *text;
	struct kn_sacct_job want;
} records[] = {
	{recorded, {43, "FAILED", 3, 0, 1796406840, 1796406842, 2, 1, 1, 0,
		    1, 0}},
	{recorded, {44, "COMPLETED", 0, 0, 1796406840, 1796406842, 2, 1, 0,
		    25, 1, 0}},
	{recorded, {45, "COMPLETED", 0, 0, 1796406852, 1796406854, 2, 2, 2,
		    0, 2, 0}},
	{recorded, {46, "RUNNING", 0, 0, 1796406855, 0, 5, 1, 0, 0, 1, 0}},
	{recorded, {47, "CANCELLED", 0, 0, 0, 1796406858, 0, 0, 0, 0, 0, 0}},
	{recorded, {48, "PENDING", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	/* The run that started counts, not the requeue after it. */
	{preempted, {60, "PREEMPTED", 0, 15, 1796407000, 1796407031, 31, 2,
		     2, 0, 2, 128}},
	/* None started: the last word on it. */
	{only_queued, {61, "PENDING", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	/* Memory in each unit sacct writes, in MB. */
	{"1|COMPLETED|0:0|1|2|1|mem=2G,node=1\n",
	 {1, "COMPLETED", 0, 0, 1, 2, 1, 0, 0, 0, 1, 2048}},
	{"1|COMPLETED|0:0|1|2|1|mem=1T\n",
	 {1, "COMPLETED", 0, 0, 1, 2, 1, 0, 0, 0, 0, 1 << 20}},
	{"1|COMPLETED|0:0|1|2|1|mem=4096K\n",
	 {1, "COMPLETED", 0, 0, 1, 2, 1, 0, 0, 0, 0, 4}},
};

/* A record as one line, so that a mismatch reads as text. */
static void describe(const struct kn_sacct_job *j, char *buf, size_t len)
{
	snprintf(buf, len,
		 "%lld %s %d:%d start %lld end %lld elapsed %lld cpus %lld "
		 "gpus %lld shards %lld nodes %lld mem %lldM",
		 j->job_id, j->state, j->exit_code, j->signal,
		 (long long)j->start_s, (long long)j->end_s,
		 (long long)j->elapsed_s, (long long)j->cpus,
		 (long long)j->gpus, (long long)j->shards, (long long)j->nodes,
		 (long long)j->mem_mb);
}

static void test_records(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(records) / sizeof(records[0]); i++) {
		const struct kn_sacct_job *want = &records[i].want;
		struct kn_sacct_job j;
		struct kn_error err;
		char got_text[256], want_text[256];

		memset(&j, 0xab, sizeof(j));
		assert_int_equal(kn_sacct_parse(records[i].text, want->job_id,
						&j, &err),
				 1);
		describe(&j, got_text, sizeof(got_text));
		describe(want, want_text, sizeof(want_text));
		assert_string_equal(got_text, want_text);
	}
}

static void test_jobs_not_there(void **state)
{
	struct kn_sacct_job j;
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_sacct_parse(recorded, 49, &j, &err), 0);
	assert_int_equal(kn_sacct_parse("", 49, &j, &err), 0);
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

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_records),
	cmocka_unit_test(test_jobs_not_there),
	cmocka_unit_test(test_lines_that_are_not_sacct))
