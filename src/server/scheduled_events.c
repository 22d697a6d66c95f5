/*
 * Azure Scheduled Events: the metadata service tells a VM, about 30 s
 * ahead for a spot eviction (Preempt) and minutes ahead for Terminate,
 * Reboot and Redeploy, that it is about to go. The server polls it once a
 * second (as Microsoft recommends), and for an event that names this
 * machine: cordons the node, evicts its preemptible jobs with a grace that
 * ends before NotBefore, and acknowledges the event once those jobs have
 * stopped or NotBefore has come, whichever is first.
 *
 * The metadata endpoint cannot be reached outside Azure; its base URL is
 * configurable and the tests replay recorded documents from a stub on
 * loopback.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_MS 1000
/* Evicted tasks must be down this long before NotBefore. */
#define DEADLINE_MARGIN_MS 2000
#define MAX_EVENTS 32

struct sched_event {
	char id[96];
	char type[16];
	int64_t not_before_ms; /* 0 = already started */
	bool acked;
	bool ack_in_flight;
};

struct kn_events {
	struct server *s;
	struct kn_timer *timer;
	char *url;
	char vm_name[128];
	bool poll_in_flight;
	char ack_id[96];        /* the event being acknowledged, or "" */
	struct sched_event events[MAX_EVENTS];
	size_t n_events;
};

/* "Mon, 11 Apr 2022 22:26:58 GMT" -> ms since the epoch; 0 if empty. */
static int64_t parse_rfc1123(const char *s)
{
	int64_t ms = 0;

	if (s)
		kn_parse_time(s, "%a, %d %b %Y %H:%M:%S GMT", &ms);
	return ms;
}

static bool names_us(struct kn_events *ev, json_t *resources)
{
	size_t i;
	json_t *r;

	/* An event for no named resource concerns everyone it reaches. */
	if (json_array_size(resources) == 0)
		return true;
	json_array_foreach(resources, i, r)
		if (json_is_string(r) &&
		    !strcasecmp(json_string_value(r), ev->vm_name))
			return true;
	return false;
}

static bool any_eviction_pending(struct server *s)
{
	for (struct run *r = s->runs; r; r = r->next)
		if (r->evicting)
			return true;
	return false;
}

static void ack_done(int status, const char *body, size_t len,
		     const char *error, void *arg)
{
	struct kn_events *ev = arg;
	struct sched_event *e = NULL;

	(void)body;
	(void)len;
	/* Found again by id: the table may have moved meanwhile. */
	for (size_t i = 0; i < ev->n_events; i++)
		if (!strcmp(ev->events[i].id, ev->ack_id))
			e = &ev->events[i];
	ev->ack_id[0] = '\0';
	if (!e)
		return;
	e->ack_in_flight = false;
	if (status == 200) {
		e->acked = true;
		kn_log(KN_LOG_INFO, "scheduled event %s (%s) acknowledged", e->id,
		       e->type);
	} else {
		kn_log(KN_LOG_WARN, "acknowledging scheduled event %s: %s",
		       e->id, error ? error : "refused");
	}
}

static void acknowledge(struct kn_events *ev, struct sched_event *e)
{
	static const char *const headers[] = {"Metadata: true", NULL};
	json_t *doc = json_pack("{s:[{s:s}]}", "StartRequests", "EventId",
				e->id);
	char *body = json_dumps(doc, JSON_COMPACT);

	json_decref(doc);
	kn_strlcpy(ev->ack_id, e->id, sizeof(ev->ack_id));
	if (kn_http_fetch(ev->s->loop, "POST", ev->url, headers, body, 5000,
			  ack_done, ev) == 0)
		e->ack_in_flight = true;
	free(body);
}

static void handle_event(struct kn_events *ev, const char *id,
			 const char *type, int64_t not_before)
{
	struct server *s = ev->s;
	struct sched_event *e;
	struct kn_error err;
	char why[192];
	int64_t grace, now = kn_now_ms();

	for (size_t i = 0; i < ev->n_events; i++)
		if (!strcmp(ev->events[i].id, id))
			return; /* seen already */
	if (ev->n_events == MAX_EVENTS) {
		/* Forget the oldest: events come a few a day at most. */
		memmove(&ev->events[0], &ev->events[1],
			sizeof(ev->events[0]) * (MAX_EVENTS - 1));
		ev->n_events--;
	}
	e = &ev->events[ev->n_events++];
	memset(e, 0, sizeof(*e));
	kn_strlcpy(e->id, id, sizeof(e->id));
	kn_strlcpy(e->type, type, sizeof(e->type));
	e->not_before_ms = not_before;
	snprintf(why, sizeof(why), "Azure scheduled event %s %s", type, id);
	kn_log(KN_LOG_WARN, "%s: evicting preemptible jobs", why);
	/* The event is about this VM, which every node runs on. */
	for (size_t i = 0; i < s->cluster.n_nodes; i++)
		if (nodes_set_state(s, NULL, s->nodes[i].name, "cordoned", why,
				    &err) < 0)
			kn_log(KN_LOG_ERROR, "cordoning %s for %s: %s",
			       s->nodes[i].name, id, err.message);
	grace = not_before ? not_before - now - DEADLINE_MARGIN_MS : 0;
	if (grace < 0)
		grace = 0;
	for (struct run *r = s->runs; r; r = r->next) {
		int64_t g;
		if (!r->spec->preemptible || r->stopping)
			continue;
		g = r->spec->checkpoint.set &&
				    r->spec->checkpoint.grace_ms < grace
			    ? r->spec->checkpoint.grace_ms
			    : grace;
		if (jobs_evict(s, NULL, r->job_id, g, why, &err) < 0)
			kn_log(KN_LOG_WARN, "evicting job %lld: %s",
			       (long long)r->job_id, err.message);
	}
}

static void poll_done(int status, const char *body, size_t len,
		      const char *error, void *arg)
{
	struct kn_events *ev = arg;
	json_t *doc, *events, *e;
	size_t i;

	ev->poll_in_flight = false;
	if (status != 200) {
		kn_log(KN_LOG_DEBUG, "scheduled events: %s",
		       error ? error : "unexpected status");
		return;
	}
	doc = json_loadb(body, len, 0, NULL);
	events = json_object_get(doc, "Events");
	json_array_foreach(events, i, e) {
		const char *id = json_string_value(json_object_get(e, "EventId"));
		const char *type =
			json_string_value(json_object_get(e, "EventType"));
		if (!id || !type)
			continue;
		if (strcmp(type, "Preempt") && strcmp(type, "Terminate") &&
		    strcmp(type, "Reboot") && strcmp(type, "Redeploy"))
			continue; /* Freeze: a pause of seconds, nothing to do */
		if (!names_us(ev, json_object_get(e, "Resources")))
			continue;
		handle_event(ev, id, type,
			     parse_rfc1123(json_string_value(
				     json_object_get(e, "NotBefore"))));
	}
	json_decref(doc);
}

static void events_tick(void *arg)
{
	static const char *const headers[] = {"Metadata: true", NULL};
	struct kn_events *ev = arg;
	int64_t now = kn_now_ms();
	bool evicting = any_eviction_pending(ev->s);

	for (size_t i = 0; i < ev->n_events; i++) {
		struct sched_event *e = &ev->events[i];
		if (e->acked || e->ack_in_flight || ev->ack_id[0])
			continue;
		if (!evicting ||
		    (e->not_before_ms && now >= e->not_before_ms - DEADLINE_MARGIN_MS))
			acknowledge(ev, e);
	}
	if (!ev->poll_in_flight &&
	    kn_http_fetch(ev->s->loop, "GET", ev->url, headers, NULL, 2000,
			  poll_done, ev) == 0)
		ev->poll_in_flight = true;
	kn_timer_arm(ev->timer, POLL_MS);
}

int events_start(struct server *s, const char *url, const char *vm_name,
		 struct kn_events **out, struct kn_error *err)
{
	struct kn_events *ev;

	if (strncmp(url, "http://", 7) != 0)
		return kn_errorf(err, KN_EINVAL, "azure-events-url",
				 "--azure-events-url must be an http:// URL; got "
				 "\"%s\"", url);
	ev = kn_xcalloc(1, sizeof(*ev));
	ev->s = s;
	ev->url = kn_xstrdup(url);
	kn_strlcpy(ev->vm_name, vm_name, sizeof(ev->vm_name));
	ev->timer = kn_timer_new(s->loop, events_tick, ev);
	kn_timer_arm(ev->timer, 0);
	kn_log(KN_LOG_INFO, "watching Azure scheduled events at %s for VM %s",
	       url, vm_name);
	*out = ev;
	return 0;
}

void events_free(struct kn_events *ev)
{
	if (!ev)
		return;
	kn_timer_free(ev->timer);
	KN_FREE_ALL(ev->url, ev);
}
