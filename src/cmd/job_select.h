/*
 * job_select: which jobs `kiln cancel` and `kiln evict` act on, the way
 * scancel picks them: the ids named on the command line, or the jobs the
 * filters match (--state, --name, --owner), or every job with --all once
 * confirmed (--yes, or "y" typed at a terminal). Then the action runs on
 * each, one request per job, a line per job; one that fails does not stop
 * the others.
 */
#ifndef KILN_CMD_JOB_SELECT_H
#define KILN_CMD_JOB_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmd/cli.h"
#include "cmd/cli_client.h"

struct job_select {
	const char *state, *name, *owner; /* filters, or NULL */
	bool all, yes;
	/* The states a matched job may be in when --state is not given
	   (NULL-terminated): those where the action means something. */
	const char *const *acting_states;
	const char *verb; /* "cancel": in messages and the prompt */
};

/* The selection flags, to copy into a command's table (NULL-ended). */
#define JOB_SELECT_FLAGS(sel)                                      \
	{"state", 0, CLI_FLAG_STRING, &(sel)->state},              \
	{"name", 0, CLI_FLAG_STRING, &(sel)->name},                \
	{"owner", 0, CLI_FLAG_STRING, &(sel)->owner},              \
	{"all", 0, CLI_FLAG_BOOL, &(sel)->all},                    \
	{"yes", 'y', CLI_FLAG_BOOL, &(sel)->yes}

/*
 * Before anything is asked of the server: argv parsed with flags (which
 * hold JOB_SELECT_FLAGS(sel)), the ids into args (room for argc) and
 * *n_args. CLI_GO, or an exit status after printing why: CLI_EXIT_USAGE
 * when there are neither ids nor filters, or both.
 */
int job_select_parse(struct cli_ctx *ctx, int argc, char **argv,
		     const struct cli_flag *flags, const struct job_select *sel,
		     const char **args, size_t *n_args);

/* A job to act on: a job or a whole array, or one element of an array. */
struct job_ref {
	int64_t id;
	bool element; /* id is one element (named ID[K]): the verb is for
			 it alone, not for the array its id may name */
};

/*
 * The jobs to act on (after job_select_check): the n_args ids in args
 * (ID, or ID[K] for an array's element K, whose id the server gives),
 * or else those sel matches (asked of the server through c). Returns
 * CLI_GO with *ids (malloc'd) and *n set (*n may be 0: nothing matched,
 * said on stderr), or an exit status after printing why.
 */
int job_select(struct cli_ctx *ctx, struct cli_client *c,
	       const struct job_select *sel, const char *const *args,
	       size_t n_args, struct job_ref **ids, size_t *n);

/*
 * Act on each job: POST /v1/jobs/ID/<action><query> (with array=1 unless
 * the ref is one element, so an array's id reaches every element) and
 * print "job ID: <done> (state S)". Returns CLI_EXIT_OK when every
 * request succeeded, else the last failure's exit status.
 */
int job_select_act(struct cli_client *c, const struct job_ref *ids, size_t n,
		   const char *action, const char *query, const char *done);
/*
 * After job_select_parse: open the client, pick the jobs (job_select)
 * and act on each (job_select_act). Returns as job_select_act, or an exit
 * status after printing why.
 */
int job_select_run(struct cli_ctx *ctx, const struct job_select *sel,
		   const char *const *args, size_t n_args, const char *action,
		   const char *query, const char *done);

#endif
