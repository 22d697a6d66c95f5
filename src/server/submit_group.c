/*
 * Group commit of job submits. Each accepted submit used to cost one
 * fsync, the bound on how many jobs a second the server could accept.
 * Now the submits that reach the loop in one turn (and the next)
 * write into one store transaction, each as a member with a savepoint of
 * its own (kn_store_group_begin), and one COMMIT makes them all durable.
 * The promise is unchanged: no submit is answered before its job is on
 * disk. The answers wait here, the jobs wait outside the queue (so the
 * scheduler cannot start one the disk may yet lose), and a timer armed
 * for the loop's next turn commits, then queues the jobs and answers; a
 * commit the disk refuses answers every member with its error and
 * queues none. A write from anywhere else while members wait commits the
 * group first (the store sees to that), and that early commit's result
 * is what the timer answers with.
 *
 * A submit with an Idempotency-Key is a member too: its key row is one
 * of its writes (idem_record), so the row commits with its job, in the
 * same savepoint, and a replay of the key waits for the group's commit
 * (idempotency.c). The answer a member gets is the bytes its key row
 * holds (idem_record's text, sent as it is), so a retry's answer is the
 * first one exactly.
 *
 * Rejected: a writer thread with a queue of submits (the store is one
 * connection, used on the loop, and the submit path reads the loop's
 * state), and answering before the commit with the fsync behind it (a
 * crash would lose jobs the clients were told were accepted).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct submit_answer {
	struct kn_http_req *req;
	json_t *answer;
	char *stored; /* a keyed member's: its key row's bytes */
	struct submit_answer *next;
};

static void group_due(void *arg)
{
	submit_group_flush(arg);
}

int submit_group_join(struct server *s, struct kn_error *err)
{
	int rc;

	/* A group committed early is answered before another starts, so
	   each commit's result answers only its own members. */
	if (!kn_store_group_open(s->store))
		submit_group_flush(s);
	rc = kn_store_group_begin(s->store, err);
	if (rc < 0)
		return rc;
	s->group_member = true;
	s->group_mark = s->group_queued;
	return 0;
}

void submit_group_leave(struct server *s, struct kn_http_req *req,
			json_t *answer, char *stored)
{
	struct submit_answer *a;

	s->group_member = false;
	kn_store_group_end(s->store, answer != NULL);
	if (!answer) {
		/* Its jobs are undone in the store: forget them here too. */
		struct queued_job *own = s->group_queued, **end = &own;

		while (*end != s->group_mark)
			end = &(*end)->next;
		*end = NULL;
		s->group_queued = s->group_mark;
		jobs_held_settle(s, own, false);
		return;
	}
	a = kn_xcalloc(1, sizeof(*a));
	a->req = req;
	a->answer = answer;
	a->stored = stored;
	if (!s->group_answers)
		s->group_tail = &s->group_answers;
	*s->group_tail = a;
	s->group_tail = &a->next;
	if (!s->group_timer)
		s->group_timer = kn_timer_new(s->loop, group_due, s);
	if (!kn_timer_pending(s->group_timer))
		kn_timer_arm(s->group_timer, 0);
}

void submit_group_flush(struct server *s)
{
	struct submit_answer *a = s->group_answers, *next;
	struct queued_job *held = NULL;
	struct kn_error err;
	int rc = kn_store_group_commit(s->store, &err);

	/* Held newest first: settled oldest first, as they came. */
	while (s->group_queued) {
		struct queued_job *q = s->group_queued;

		s->group_queued = q->next;
		q->next = held;
		held = q;
	}

	s->group_answers = NULL;
	s->group_tail = &s->group_answers;
	s->group_mark = NULL;
	jobs_held_settle(s, held, rc == 0);
	for (; a; a = next) {
		next = a->next;
		if (rc == 0 && a->stored) {
			json_decref(a->answer);
			kn_http_reply_text(a->req, 201, "application/json",
					   a->stored, strlen(a->stored));
		} else if (rc == 0) {
			kn_http_reply_json(a->req, 201, a->answer);
		} else {
			json_decref(a->answer);
			kn_http_reply_error(a->req, &err);
		}
		KN_FREE_ALL(a->stored, a);
	}
}
