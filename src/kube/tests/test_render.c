/*
 * Unit tests for rendering: each mapping from a spec field to the
 * manifest (gang, retries, timeout, GPUs whole, shared and MIG, models to
 * product labels, placement, spread, spot, checkpoint grace, deployments
 * and probes), the errors, the product table and the YAML writer.
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

static json_t *render_job(const char *yaml, const char *image)
{
	struct kn_kube_render_opts opts = {.image = image,
					   .products = fixture_products};
	struct kn_job_spec *spec;
	struct kn_error err = {0};
	json_t *docs = NULL;
	char *text = kn_asprintf("kind: Job\n%s", yaml);

	spec = fixture_job_spec(text);
	free(text);
	assert_int_equal(kn_kube_render_job(spec, &opts, &docs, &err), 0);
	kn_job_spec_free(spec);
	return docs;
}

static int render_job_error(const char *yaml, const char *image,
			    struct kn_error *err)
{
	struct kn_kube_render_opts opts = {.image = image,
					   .products = fixture_products};
	struct kn_job_spec *spec;
	json_t *docs = NULL;
	char *text = kn_asprintf("kind: Job\n%s", yaml);
	int rc;

	spec = fixture_job_spec(text);
	free(text);
	rc = kn_kube_render_job(spec, &opts, &docs, err);
	assert_null(docs);
	kn_job_spec_free(spec);
	return rc;
}

static const char *env(json_t *container, const char *name)
{
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(container, "env"), i, e) if (
		!strcmp(json_string_value(json_object_get(e, "name")),
			name)) return json_string_value(json_object_get(e,
									"valu"
									"e"))
		? json_string_value(json_object_get(e, "value"))
		: json_string_value(
			  fixture_at(e, "valueFrom.fieldRef.fieldPath"));
	return NULL;
}

static bool has_toleration(json_t *pod, const char *key, const char *value)
{
	size_t i;
	json_t *t;

	json_array_foreach(json_object_get(pod, "tolerations"), i, t)
		if (!strcmp(json_string_value(json_object_get(t, "key")), key) &&
		    !strcmp(json_string_value(json_object_get(t, "value")),
			    value) &&
		    !strcmp(json_string_value(json_object_get(t, "effect")),
			    "NoSchedule"))
			return true;
	return false;
}

static void test_single_task(void **state)
{
	json_t *docs = render_job("name: one\ncommand: [a, b]\n", "img");
	json_t *job = json_array_get(docs, 0);
	json_t *pod = fixture_at(job, "spec.template.spec");
	json_t *c = fixture_at(pod, "containers.[0]");

	(void)state;
	assert_int_equal(json_array_size(docs), 1); /* no Service */
	assert_string_equal(fixture_str(job, "kind"), "Job");
	assert_null(fixture_at(job, "spec.completionMode"));
	assert_int_equal(fixture_num(job, "spec.completions"), 1);
	assert_int_equal(fixture_num(job, "spec.backoffLimit"), 0);
	assert_null(fixture_at(job, "spec.activeDeadlineSeconds"));
	assert_string_equal(env(c, "RANK"), "0");
	assert_null(env(c, "MASTER_ADDR"));
	assert_null(
		fixture_at(pod, "tolerations")); /* no GPU, not preemptible */
	assert_null(fixture_at(pod, "terminationGracePeriodSeconds"));
	assert_null(fixture_at(c, "lifecycle"));
	assert_string_equal(fixture_str(c, "image"), "img");
	assert_string_equal(fixture_str(c, "command.[1]"), "b");
	json_decref(docs);
}

static void test_gang(void **state)
{
	json_t *docs = render_job("name: g\ncommand: [a]\ntasks: 3\n"
				  "retries: 4\ntimeout: 61s\n", "img");
	json_t *job = json_array_get(docs, 0), *svc = json_array_get(docs, 1);
	json_t *c = fixture_at(job, "spec.template.spec.containers.[0]");

	(void)state;
	assert_string_equal(fixture_str(job, "spec.completionMode"), "Indexed");
	assert_int_equal(fixture_num(job, "spec.completions"), 3);
	assert_int_equal(fixture_num(job, "spec.parallelism"), 3);
	assert_int_equal(fixture_num(job, "spec.backoffLimit"), 4);
	assert_int_equal(fixture_num(job, "spec.activeDeadlineSeconds"), 61);
	assert_string_equal(fixture_str(job, "spec.template.spec.subdomain"),
			    "g");
	assert_string_equal(fixture_str(job,
					"spec.template.metadata.annotations."
					"kiln.dev/gang-size"),
			    "3");
	assert_string_equal(env(c, "RANK"),
			    "metadata.annotations['batch.kubernetes.io/"
			    "job-completion-index']");
	assert_string_equal(env(c, "WORLD_SIZE"), "3");
	assert_string_equal(env(c, "MASTER_ADDR"), "g-0.g");
	assert_string_equal(env(c, "MASTER_PORT"), "29500");
	assert_string_equal(fixture_str(svc, "kind"), "Service");
	assert_string_equal(fixture_str(svc, "spec.clusterIP"), "None");
	assert_true(
		json_is_true(fixture_at(svc, "spec.publishNotReadyAddresses")));
	assert_string_equal(fixture_str(svc, "spec.selector.kiln.dev/job"),
			    "g");
	json_decref(docs);
}

static void test_gpus(void **state)
{
	json_t *docs, *pod, *lim;

	(void)state;
	docs = render_job("name: w\ncommand: [a]\nresources: {gpus: 2, "
			  "cpus: 1.5, memory: 1536Mi}\n", "img");
	pod = fixture_at(json_array_get(docs, 0), "spec.template.spec");
	lim = fixture_at(pod, "containers.[0].resources");
	assert_string_equal(fixture_str(lim, "limits.nvidia.com/gpu"), "2");
	assert_string_equal(fixture_str(lim, "requests.cpu"), "1500m");
	assert_string_equal(fixture_str(lim, "requests.memory"), "1536Mi");
	assert_string_equal(fixture_str(lim, "limits.memory"), "1536Mi");
	assert_true(has_toleration(pod, "sku", "gpu"));
	assert_null(fixture_at(pod, "schedulerName"));
	json_decref(docs);

	docs = render_job("name: m\ncommand: [a]\n"
			  "resources: {gpus: 'mig:3g.40gb'}\n", "img");
	pod = fixture_at(json_array_get(docs, 0), "spec.template.spec");
	assert_string_equal(fixture_str(pod, "containers.[0].resources.limits."
					     "nvidia.com/mig-3g.40gb"),
			    "1");
	assert_null(fixture_at(
		pod, "containers.[0].resources.limits.nvidia.com/gpu"));
	assert_true(has_toleration(pod, "sku", "gpu"));
	json_decref(docs);

	docs = render_job("name: s\ncommand: [a]\nresources: {gpus: 0.5}\n",
			  "img");
	pod = fixture_at(json_array_get(docs, 0), "spec.template.spec");
	assert_string_equal(fixture_str(pod, "schedulerName"), "kiln");
	assert_null(fixture_at(pod, "containers.[0].resources.limits"));
	assert_string_equal(fixture_str(json_array_get(docs, 0),
					"spec.template.metadata.annotations."
					"kiln.dev/gpu-milli"),
			    "500");
	assert_string_equal(env(fixture_at(pod, "containers.[0]"),
				"NVIDIA_VISIBLE_DEVICES"),
			    "metadata.annotations['kiln.dev/gpu']");
	json_decref(docs);
}

static void test_models_and_placement(void **state)
{
	json_t *docs = render_job(
		"name: p\ncommand: [a]\npreemptible: true\n"
		"resources: {gpus: 1, gpu_model: [A100-80GB, T4-16GB]}\n"
		"placement:\n  selector: {pool: gpu}\n  spread: fault_domain\n"
		"  tolerations: [{key: team, operator: Exists}]\n"
		"  affinity:\n    required: [{key: zone, operator: In, values: "
		"[a, b]}]\n    preferred: [{key: ib, operator: Exists, "
		"weight: 30}]\n", "img");
	json_t *pod = fixture_at(json_array_get(docs, 0), "spec.template.spec");
	json_t *term = fixture_at(
		pod, "affinity.nodeAffinity."
		     "requiredDuringSchedulingIgnoredDuringExecution."
		     "nodeSelectorTerms.[0].matchExpressions");
	json_t *pref = fixture_at(
		pod, "affinity.nodeAffinity."
		     "preferredDuringSchedulingIgnoredDuringExecution.[0]");

	(void)state;
	assert_string_equal(fixture_str(pod, "nodeSelector.pool"), "gpu");
	assert_string_equal(fixture_str(term, "[0].key"), "zone");
	assert_string_equal(fixture_str(term, "[0].values.[1]"), "b");
	assert_string_equal(fixture_str(term, "[1].key"),
			    "nvidia.com/gpu.product");
	assert_string_equal(fixture_str(term, "[1].operator"), "In");
	/* A100-80GB has two boards (SXM4 and PCIe), then the T4. */
	assert_string_equal(fixture_str(term, "[1].values.[0]"),
			    "NVIDIA-A100-SXM4-80GB");
	assert_string_equal(fixture_str(term, "[1].values.[1]"),
			    "NVIDIA-A100-80GB-PCIe");
	assert_string_equal(fixture_str(term, "[1].values.[2]"), "Tesla-T4");
	assert_int_equal(fixture_num(pref, "weight"), 30);
	assert_string_equal(
		fixture_str(pref, "preference.matchExpressions.[0].operator"),
		"Exists");
	assert_null(fixture_at(pref, "preference.matchExpressions.[0].values"));
	assert_true(has_toleration(pod, "kubernetes.azure.com/scalesetpriority",
				   "spot"));
	assert_string_equal(fixture_str(pod, "tolerations.[2].key"), "team");
	assert_string_equal(fixture_str(pod, "tolerations.[2].operator"),
			    "Exists");
	assert_string_equal(
		fixture_str(pod, "topologySpreadConstraints.[0].topologyKey"),
		"topology.kubernetes.io/zone");
	assert_int_equal(
		fixture_num(pod, "topologySpreadConstraints.[0].maxSkew"), 1);
	json_decref(docs);
}

static void test_checkpoint_grace(void **state)
{
	json_t *docs = render_job("name: c\ncommand: [a]\ncheckpoint: "
				  "{grace: 1500ms, signal: USR2}\n", "img");
	json_t *pod = fixture_at(json_array_get(docs, 0), "spec.template.spec");

	(void)state;
	assert_int_equal(fixture_num(pod, "terminationGracePeriodSeconds"), 2);
	assert_string_equal(
		fixture_str(
			pod,
			"containers.[0].lifecycle.preStop.exec.command.[2]"),
		"kill -s USR2 1; while kill -0 1 2>/dev/null; do sleep 1; "
		"done");
	json_decref(docs);
}

static void test_errors(void **state)
{
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(render_job_error("name: e\ncommand: [a]\n", NULL,
					  &err), -EINVAL);
	assert_string_equal(err.field, "image");
	assert_int_equal(render_job_error("name: e\ncommand: [a]\nresources: "
					  "{gpus: 1, gpu_model: MI300X}\n",
					  "img", &err), -EINVAL);
	assert_string_equal(err.field, "resources.gpu_model");
	assert_int_equal(render_job_error("name: 9lives\ncommand: [a]\n",
					  "img", &err), -EINVAL);
	assert_string_equal(err.field, "name");
	assert_int_equal(render_job_error("name: ends-\ncommand: [a]\n",
					  "img", &err), -EINVAL);
	assert_string_equal(err.field, "name");
}

/* A terminal's task is the container's first process, on its terminal:
   no shim, even with a shim image; what only the shim does is refused. */
static void test_tty(void **state)
{
	struct kn_kube_render_opts opts = {.image = "img",
					   .shim_image = "kiln:1",
					   .products = fixture_products};
	const char *yaml = "kind: Job\nname: sh\ncommand: [bash, -i]\n"
			   "tty: true\n";
	struct kn_job_spec *spec;
	struct kn_error err = {0};
	json_t *docs = NULL, *pod, *c;

	(void)state;
	spec = fixture_job_spec(yaml);
	assert_int_equal(kn_kube_render_job(spec, &opts, &docs, &err), 0);
	kn_job_spec_free(spec);
	pod = fixture_at(json_array_get(docs, 0), "spec.template.spec");
	c = fixture_at(pod, "containers.[0]");
	assert_true(json_is_true(json_object_get(c, "stdin")));
	assert_true(json_is_true(json_object_get(c, "tty")));
	assert_string_equal(fixture_str(c, "command.[0]"), "bash");
	assert_null(fixture_at(pod, "initContainers"));
	json_decref(docs);

	assert_int_equal(render_job_error("name: e\ncommand: [a]\ntty: true\n"
					  "checkpoint: {every: 10m}\n",
					  "img", &err), -EINVAL);
	assert_string_equal(err.field, "checkpoint");
}

/* Every container of pod as docs/kubernetes.md promises; its root file
   system read-only as read_only_root says. */
static void assert_locked_down(json_t *pod, bool read_only_root)
{
	const char *const lists[] = {"containers", "initContainers"};
	size_t i;
	json_t *c;

	assert_true(json_is_false(
		json_object_get(pod, "automountServiceAccountToken")));
	for (size_t l = 0; l < 2; l++)
		json_array_foreach(json_object_get(pod, lists[l]), i, c) {
			json_t *sc = json_object_get(c, "securityContext");

			assert_true(json_is_true(
				json_object_get(sc, "runAsNonRoot")));
			assert_true(fixture_num(sc, "runAsUser") > 0);
			assert_true(fixture_num(sc, "runAsGroup") > 0);
			assert_true(json_is_false(json_object_get(
				sc, "allowPrivilegeEscalation")));
			assert_int_equal(json_is_true(json_object_get(
						 sc, "readOnlyRootFilesystem")),
					 read_only_root);
			assert_string_equal(fixture_str(sc, "capabilities.drop.[0]"),
					    "ALL");
			assert_int_equal(json_array_size(fixture_at(
						 sc, "capabilities.drop")), 1);
			assert_null(fixture_at(sc, "capabilities.add"));
			assert_null(json_object_get(sc, "privileged"));
			assert_string_equal(fixture_str(sc, "seccompProfile.type"),
					    "RuntimeDefault");
		}
	/* Nothing of the node's is shared with the task. */
	assert_null(json_object_get(pod, "hostNetwork"));
	assert_null(json_object_get(pod, "hostPID"));
	assert_null(json_object_get(pod, "hostIPC"));
	assert_null(json_object_get(pod, "serviceAccountName"));
}

/* Every pod template kiln renders, the terminal's too, gets no API
   credential and the same locked-down containers; a dev environment's
   a writable home. */
static void test_pods_locked_down(void **state)
{
	static const struct {
		const char *yaml;
		bool read_only_root;
	} cases[] = {
		{"kind: Job\nname: one\ncommand: [a]\n", true},
		{"kind: Job\nname: gang\ncommand: [a]\ntasks: 3\n"
		 "resources: {gpus: 1}\n", true},
		{"kind: Job\nname: arr\ncommand: [a]\narray: {count: 4}\n",
		 true},
		{"kind: Job\nname: ckpt\ncommand: [a]\npreemptible: true\n"
		 "checkpoint: {every: 10m}\n", true},
		/* Without the shim, whose directories a task writes in: the
		   root stays writable, nothing else widens. */
		{"kind: Job\nname: sh\ncommand: [bash]\ntty: true\n", false},
		{"kind: DevEnvironment\nname: box\nresources: {gpus: 1}\n",
		 true},
	};
	struct kn_kube_render_opts opts = {.image = "img",
					   .shim_image = "kiln:1",
					   .store_url = "azure://acct/ckpt",
					   .products = fixture_products};
	const char *dep_yaml = "kind: Deployment\nname: web\nmodel: job:7\n"
			       "command: [srv]\n";
	struct kn_deployment_spec *d;
	struct kn_job_spec *spec;
	struct kn_error err = {0};
	const char *home;
	json_t *docs, *pod;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		spec = fixture_job_spec(cases[i].yaml);
		assert_int_equal(kn_kube_render_job(spec, &opts, &docs, &err),
				 0);
		kn_job_spec_free(spec);
		pod = fixture_at(json_array_get(docs, 0), "spec.template.spec");
		assert_locked_down(pod, cases[i].read_only_root);
		/* A dev environment's home is the pod's writable /tmp. */
		home = env(fixture_at(pod, "containers.[0]"), "HOME");
		if (strstr(cases[i].yaml, "DevEnvironment"))
			assert_string_equal(home, "/tmp");
		else
			assert_null(home);
		json_decref(docs);
	}
	/* A deployment's server writes where its image says. */
	d = fixture_deployment_spec(dep_yaml);
	assert_int_equal(kn_kube_render_deployment(d, &opts, &docs, &err), 0);
	kn_deployment_spec_free(d);
	assert_locked_down(fixture_at(json_array_get(docs, 0),
				      "spec.template.spec"), false);
	json_decref(docs);
}

static void test_deployment(void **state)
{
	const char *yaml = "kind: Deployment\nname: web.v2\nmodel: job:7\n"
			   "command: [srv]\nreplicas: 2\n"
			   "readiness: {path: /r, period_s: 3, "
			   "initial_delay_s: 10}\n";
	struct kn_kube_render_opts opts = {.image = "img",
					   .namespace_ = "prod",
					   .scheduler_name = "kiln",
					   .products = fixture_products};
	struct kn_deployment_spec *d;
	struct kn_error err = {0};
	json_t *docs, *dep, *svc, *c;

	(void)state;
	d = fixture_deployment_spec(yaml);
	assert_int_equal(kn_kube_render_deployment(d, &opts, &docs, &err), 0);
	dep = json_array_get(docs, 0);
	svc = json_array_get(docs, 1);
	c = fixture_at(dep, "spec.template.spec.containers.[0]");
	assert_string_equal(fixture_str(dep, "apiVersion"), "apps/v1");
	assert_string_equal(fixture_str(dep, "metadata.name"), "web-v2");
	assert_string_equal(fixture_str(dep, "metadata.namespace"), "prod");
	assert_int_equal(fixture_num(dep, "spec.replicas"), 2);
	assert_int_equal(
		fixture_num(dep, "spec.strategy.rollingUpdate.maxUnavailable"),
		0);
	assert_string_equal(
		fixture_str(dep, "spec.template.spec.schedulerName"), "kiln");
	assert_string_equal(env(c, "KILN_MODEL"), "job:7");
	assert_string_equal(env(c, "KILN_PORT"), "8000");
	assert_string_equal(fixture_str(c, "readinessProbe.httpGet.path"),
			    "/r");
	assert_int_equal(fixture_num(c, "readinessProbe.periodSeconds"), 3);
	assert_int_equal(fixture_num(c, "readinessProbe.initialDelaySeconds"),
			 10);
	assert_null(fixture_at(c, "livenessProbe"));
	assert_string_equal(
		fixture_str(svc, "spec.selector.kiln.dev/deployment"),
		"web-v2");
	assert_string_equal(fixture_str(svc, "spec.ports.[0].targetPort"),
			    "http");
	json_decref(docs);
	kn_deployment_spec_free(d);
}

static void test_products(void **state)
{
	struct kn_kube_products *p;
	struct kn_error err = {0};
	const char *names[4];
	const char *bad[] = {
		"model,product\nA,B,src\n",  /* header */
		"model,product,source\n,B,src\n",
		"model,product,source\nA,B C,src\n",
		"model,product,source\nA,B,\n",
	};
	const char *fields[] = {NULL, "model", "product", "source"};

	(void)state;
	assert_int_equal(kn_kube_products_for(fixture_products, "h100", names,
					      4), 2);
	assert_string_equal(names[0], "NVIDIA-H100-80GB-HBM3");
	assert_string_equal(kn_kube_model_for(fixture_products, "Tesla-T4"),
			    "T4-16GB");
	assert_null(kn_kube_model_for(fixture_products, "NVIDIA-B200"));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(kn_kube_products_parse(bad[i], strlen(bad[i]),
							"t.csv", &p, &err),
				 -EINVAL);
		assert_string_equal(err.field, fields[i] ? fields[i] : "");
		assert_non_null(strstr(err.message, "t.csv:"));
	}
}

static void test_yaml(void **state)
{
	json_t *docs = json_loads(
		"[{\"a\": \"1\", \"b\": {\"c\": [1, {\"d\": true, \"e\": null}],"
		" \"f\": []}, \"g h\": \"x\\ny\", \"i\": {}, \"On\": \"no\"},"
		" {\"k\": [[2]]}]",
		0, NULL);
	char *text = kn_kube_yaml(docs);

	(void)state;
	assert_string_equal(text, "---\n"
				  "a: \"1\"\n"
				  "b:\n"
				  "  c:\n"
				  "  - 1\n"
				  "  - d: true\n"
				  "    e: null\n"
				  "  f: []\n"
				  "\"g h\": \"x\\ny\"\n"
				  "i: {}\n"
				  "\"On\": \"no\"\n"
				  "---\n"
				  "k:\n"
				  "- - 2\n");
	free(text);
	json_decref(docs);
}

/* A long string stays on one line; control characters are escaped. */
static void test_yaml_long_and_control(void **state)
{
	char long_text[400], *want, *text;
	json_t *docs;

	(void)state;
	memset(long_text, 'w', sizeof(long_text) - 1);
	memcpy(long_text + 100, " two  spaces ", 13);
	long_text[sizeof(long_text) - 1] = '\0';
	docs = json_pack("[{s:s, s:s}]", "long", long_text, "ctl",
			 "tab\there\x01\"q\"");
	text = kn_kube_yaml(docs);
	want = kn_asprintf(
		"---\nlong: \"%s\"\nctl: \"tab\\there\\x01\\\"q\\\"\"\n",
		long_text);
	assert_string_equal(text, want);
	KN_FREE_ALL(want, text);
	json_decref(docs);
}

KN_TEST_MAIN(fixture_products_load, fixture_products_free,
	cmocka_unit_test(test_single_task),
	cmocka_unit_test(test_gang),
	cmocka_unit_test(test_gpus),
	cmocka_unit_test(test_models_and_placement),
	cmocka_unit_test(test_checkpoint_grace),
	cmocka_unit_test(test_errors),
	cmocka_unit_test(test_tty),
	cmocka_unit_test(test_pods_locked_down),
	cmocka_unit_test(test_deployment),
	cmocka_unit_test(test_products),
	cmocka_unit_test(test_yaml),
	cmocka_unit_test(test_yaml_long_and_control))
