/*
 * libFuzzer harness for the Prometheus exposition reader. Any input must
 * either parse, and then go through the history and the evaluator of a
 * fixed rule set, or fail with a "line N:COL:" message, leaving the
 * out-parameters alone. Sanitizers catch the rest.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alert/alert.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char RULES[] =
	"rules:\n"
	"  - name: Ratio\n"
	"    expr: a / (a + b{x=~\"1|2\"}) & 3\n"
	"    op: \">\"\n"
	"    value: 0.5\n"
	"  - name: Band\n"
	"    expr: a\n"
	"    band: {window: 1m, k: 1, min_samples: 2}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kn_alert_rules *rules;
	struct kn_expo_sample *s = (void *)0x1;
	struct kn_alert_transition *tr = NULL;
	struct kn_alert_history *h;
	struct kn_alert_eval *ev;
	struct kn_error err;
	size_t n = 7, nt = 0;

	if (!rules && kn_alert_rules_parse(RULES, strlen(RULES), "fuzz.yaml",
					   &rules, &err) != 0)
		abort();
	memset(&err, 0, sizeof(err));
	if (kn_expo_parse((const char *)data, size, &s, &n, &err) != 0) {
		if (s != (void *)0x1 || n != 7 ||
		    strncmp(err.message, "line ", 5) != 0)
			abort();
		return 0;
	}
	h = kn_alert_history_new(60000, 30000);
	ev = kn_alert_eval_new(rules);
	/* Twice, so the band has history and alerts can resolve. */
	for (int64_t t = 1000; t <= 3000; t += 1000) {
		kn_alert_history_add(h, rules, s, n, "fuzz", t);
		kn_alert_history_add(h, NULL, s, n / 2, NULL, t);
		kn_alert_eval_run(ev, h, t, &tr, &nt);
		kn_alert_transitions_free(tr, nt);
	}
	kn_alert_eval_free(ev);
	kn_alert_history_free(h);
	kn_expo_free(s, n);
	return 0;
}
