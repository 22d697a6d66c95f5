/*
 * Unit tests for deployments under the Kubernetes executor: kiln's view
 * of recorded Deployment and Pod objects (tests/fixtures/kube/executor;
 * the fixtures directory is argv[1]) through a rollout, and the
 * manifests with kiln's labels.
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
#include "kube/kube.h"
#include "fixture.h"

/* The view of a Deployment fixture (or none) and up to three pods. */
static json_t *view_of(const char *deployment, const char *p0,
		       const char *p1, const char *p2)
{
	json_t *d = deployment ? fixture_load("executor", deployment) : NULL,
	       *pods = json_array();
	const char *names[] = {p0, p1, p2};
	json_t *v;

	for (int i = 0; i < 3; i++) {
		json_t *pod;
		char name[64];

		if (!names[i])
			continue;
		pod = fixture_load("executor", names[i]);
		/* Listed out of order: the view sorts by name. */
		snprintf(name, sizeof(name), "chat-7d4b9c6f5d-%d", 2 - i);
		json_object_set_new(json_object_get(pod, "metadata"), "name",
				    json_string(name));
		json_array_append_new(pods, pod);
	}
	v = kn_kube_deployment_view(d, pods);
	json_decref(d);
	json_decref(pods);
	return v;
}

static void test_not_created(void **state)
{
	json_t *v = view_of(NULL, NULL, NULL, NULL);

	(void)state;
	assert_string_equal(fixture_str(v, "rollout"), "pending");
	assert_int_equal(fixture_num(v, "ready"), 0);
	assert_int_equal(json_array_size(json_object_get(v, "pods")), 0);
	assert_true(json_is_null(json_object_get(v, "reason")));
	json_decref(v);
}

static void test_progressing(void **state)
{
	json_t *v = view_of("deployment-progressing.json",
			    "pod-serving-loading.json",
			    "pod-serving-ready.json", NULL);
	json_t *pods = json_object_get(v, "pods"), *p;

	(void)state;
	assert_int_equal(fixture_num(v, "desired"), 2);
	assert_int_equal(fixture_num(v, "ready"), 1);
	assert_int_equal(fixture_num(v, "updated"), 2);
	assert_int_equal(fixture_num(v, "available"), 1);
	assert_string_equal(fixture_str(v, "rollout"), "progressing");
	/* Available=False says why better than Progressing=True. */
	assert_string_equal(fixture_str(v, "reason"),
			    "MinimumReplicasUnavailable");
	assert_string_equal(fixture_str(v, "message"),
			    "Deployment does not have minimum availability.");
	assert_int_equal(json_array_size(json_object_get(v, "conditions")), 2);
	assert_int_equal(json_array_size(pods), 2);
	p = json_array_get(pods, 0);
	assert_string_equal(fixture_str(p, "name"), "chat-7d4b9c6f5d-1");
	assert_true(json_is_true(json_object_get(p, "ready")));
	assert_true(json_is_null(json_object_get(p, "reason")));
	assert_string_equal(fixture_str(p, "node"),
			    "aks-gpunc-12345678-vmss000001");
	p = json_array_get(pods, 1);
	assert_string_equal(fixture_str(p, "name"), "chat-7d4b9c6f5d-2");
	assert_false(json_is_true(json_object_get(p, "ready")));
	assert_string_equal(fixture_str(p, "reason"),
			    "ContainersNotReady: containers with unready "
			    "status: [server]");
	json_decref(v);
}

static void test_complete(void **state)
{
	json_t *v = view_of("deployment-available.json",
			    "pod-serving-ready.json", "pod-serving-ready.json",
			    NULL);

	(void)state;
	assert_int_equal(fixture_num(v, "ready"), 2);
	assert_string_equal(fixture_str(v, "rollout"), "complete");
	assert_string_equal(fixture_str(v, "reason"), "NewReplicaSetAvailable");
	json_decref(v);
}

static void test_deadline_and_pod_reasons(void **state)
{
	json_t *v = view_of("deployment-deadline.json",
			    "pod-serving-unschedulable.json",
			    "pod-serving-crashloop.json",
			    "pod-serving-ready.json");
	json_t *pods = json_object_get(v, "pods"), *p;

	(void)state;
	assert_string_equal(fixture_str(v, "rollout"), "failed");
	assert_string_equal(fixture_str(v, "reason"),
			    "ProgressDeadlineExceeded");
	assert_string_equal(fixture_str(v, "message"),
			    "ReplicaSet \"chat-5f8c7b9d4e\" "
			    "has timed out progressing.");
	p = json_array_get(pods, 1);
	assert_string_equal(fixture_str(p, "phase"), "Running");
	assert_int_equal(fixture_num(p, "restarts"), 3);
	assert_non_null(strstr(fixture_str(p, "reason"),
			       "CrashLoopBackOff: back-off "
			       "40s restarting failed"));
	p = json_array_get(pods, 2);
	assert_string_equal(fixture_str(p, "phase"), "Pending");
	assert_true(json_is_null(json_object_get(p, "node")));
	assert_non_null(strstr(fixture_str(p, "reason"),
			       "Unschedulable: 0/5 nodes are "
			       "available"));
	json_decref(v);
}

static void test_unobserved_and_terminating(void **state)
{
	json_t *d = fixture_load("executor", "deployment-available.json"),
	       *pods = json_array();
	json_t *pod = fixture_load("executor", "pod-serving-ready.json"), *v,
	       *p;

	(void)state;
	/* A spec the controller has not seen yet: nothing is complete. */
	json_object_set_new(json_object_get(d, "metadata"), "generation",
			    json_integer(2));
	json_object_set_new(json_object_get(pod, "metadata"),
			    "deletionTimestamp",
			    json_string("2026-12-03T04:30:00Z"));
	json_array_append_new(pods, pod);
	v = kn_kube_deployment_view(d, pods);
	assert_string_equal(fixture_str(v, "rollout"), "pending");
	p = json_array_get(json_object_get(v, "pods"), 0);
	assert_false(json_is_true(json_object_get(p, "ready")));
	assert_string_equal(fixture_str(p, "reason"), "terminating");
	json_decref(v);
	json_decref(d);
	json_decref(pods);
}

static void test_manifests(void **state)
{
	const char *yaml = "kind: Deployment\nname: chat_v2\nmodel: /m\n"
			   "command: [srv]\nreplicas: 2\n";
	struct kn_kube_exec_config cfg = {.namespace_ = "ml", .image = "img"};
	struct kn_deployment_spec *d;
	struct kn_error err = {0};
	json_t *docs, *dep, *labels, *tlabels;

	(void)state;
	d = fixture_deployment_spec(yaml);
	assert_int_equal(kn_kube_deploy_manifests(&cfg, d, 5, 7, &docs, &err),
			 0);
	dep = json_array_get(docs, 0);
	labels = json_object_get(json_object_get(dep, "metadata"), "labels");
	tlabels = json_object_get(json_object_get(json_object_get(
		json_object_get(dep, "spec"), "template"), "metadata"),
		"labels");
	assert_string_equal(
		fixture_str(json_object_get(dep, "metadata"), "name"),
		"chat-v2");
	assert_string_equal(fixture_str(labels, KN_KUBE_LABEL_GENERATION), "7");
	assert_string_equal(fixture_str(labels, KN_KUBE_LABEL_DEPLOYMENT),
			    "chat-v2");
	/* The template keeps no generation: a scale would roll pods. */
	assert_null(json_object_get(tlabels, KN_KUBE_LABEL_GENERATION));
	assert_int_equal(fixture_num(json_object_get(dep, "spec"), "replicas"),
			 5);
	assert_string_equal(
		fixture_str(json_object_get(json_object_get(dep, "metadata"),
					    "annotations"),
			    "kiln.dev/name"),
		"chat_v2");
	json_decref(docs);
	cfg.image = NULL;
	assert_int_equal(kn_kube_deploy_manifests(&cfg, d, 1, 1, &docs, &err),
			 -EINVAL);
	assert_string_equal(err.field, "image");
	kn_deployment_spec_free(d);
}

KN_TEST_MAIN_WITH_PATH(kube_fixtures, "FIXTURES_DIR", NULL, NULL,
	cmocka_unit_test(test_not_created),
	cmocka_unit_test(test_progressing),
	cmocka_unit_test(test_complete),
	cmocka_unit_test(test_deadline_and_pod_reasons),
	cmocka_unit_test(test_unobserved_and_terminating),
	cmocka_unit_test(test_manifests))
