#ifndef KILN_SERVER_SERVER_ALERT_H
#define KILN_SERVER_SERVER_ALERT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

struct server;

/*
 * An alert the server raises itself (monitor.c), not by a rule (a failing
 * scheduled backup, a refused model, a failed re-validation, the
 * gateway's anomaly report): recorded like a rule's (kiln alerts), logged,
 * published on the event stream and sent to --alert-webhook, with the
 * body a rule's alert has. Firing records a new row; resolving ends the
 * one firing with the fingerprint (the caller knows one is). Returns 0,
 * or the store's error (nothing is announced then).
 */
struct server_alert {
	const char *rule, *severity, *fingerprint;
	const char *summary;  /* what happened, or (resolving) what ended it */
	json_t *labels;       /* {"name": "value", ...}; borrowed */
	double value;
	int64_t active_at_ms;
	json_t *extra;        /* more fields for the body, or NULL; borrowed */
};
int monitor_server_alert(struct server *s, const struct server_alert *a,
			 bool firing, struct kn_error *err);
/* A critical alert of value 1: something failed, or works again. */
struct server_alert server_alert_critical(const char *rule,
					  const char *fingerprint,
					  const char *summary, json_t *labels,
					  int64_t active_at_ms);

#endif
