/*
 * The workflow service's own header: its engine (workflows.c) and its
 * HTTP handlers (workflows_http.c). Nothing outside these two files
 * includes it.
 */
#ifndef KILN_SERVER_WFSVC_H
#define KILN_SERVER_WFSVC_H

#include "ckpt/ckpt.h"
#include "exec/exec.h"
#include "server/access.h"
#include "server/core.h"
#include "server/costsvc.h"
#include "server/feed.h"
#include "server/idempotency.h"
#include "server/peers.h"
#include "server/service.h"
#include "server/wfplan.h"

/* A run read from the store, with its parsed workflow. */
struct wf_run {
	struct kn_wf_run_row row;
	struct kn_wf_step_row *steps; /* as spec->steps */
	size_t n;
	struct kn_workflow_spec *spec;
	json_t *files;           /* {relative path: text} */
	struct wf_step_view *v;  /* the steps' states for wfplan */
	struct kn_wf_attempt_row *att; /* every step's, oldest first */
	size_t n_att;
};

/* workflows.c */
/* The engine's job hooks: a step's job ended; a step's task env. */
extern const struct job_hook_ops workflows_job_hooks;
int workflows_start(struct server *s, struct kn_error *err);
void workflows_stop(struct server *s);
/* Whether a run in state has ended (not queued, not running). */
bool wf_run_ended(const char *state);
/* Read run id, its steps and attempts, and parse its workflow. */
int wf_run_load(struct server *s, int64_t id, struct wf_run *r,
		struct kn_error *err);
void wf_run_release(struct wf_run *r);
/* Free *field and keep value (owned) there. */
void wf_set_str(char **field, char *value);
/* Write step i with state. */
int wf_step_save(struct server *s, struct wf_run *r, size_t i,
		 const char *state, struct kn_error *err);
/* Step i's newest attempt, when still open, ends with outcome. */
int wf_attempt_close(struct server *s, struct wf_run *r, size_t i,
		     const char *outcome, int64_t ended_at,
		     struct kn_error *err);
/* Tell the event feed of step i, or of the run when i is r->n. */
void wf_publish(struct server *s, const struct wf_run *r, size_t i);
/* Write the run with state, audited by a (NULL: not audited). */
int wf_run_save(struct server *s, struct wf_run *r, const char *state,
		const struct kn_audit *a, struct kn_error *err);
/* A job file's name as messages give it, beside the workflow's file. */
char *wf_job_file_name(const char *workflow_file, const char *job_file);
/* Whether a deployment named name exists. */
bool wf_deployment_exists(struct server *s, const char *name);
/*
 * Move run id forward as far as its steps allow: judge ended jobs, skip
 * or start pending steps, and end the run when nothing is left to run.
 */
int wf_advance(struct server *s, int64_t id, struct kn_error *err);
/* wf_advance, its failure logged. */
void wf_advance_logged(struct server *s, int64_t id);

#endif
