/*
 * Unit tests for the scheduler's side of src/kube: placement from the
 * recorded node and pod lists (tests/fixtures/kube, the directory is
 * argv[1]), what filters a node, how bound pods and shares are charged,
 * watch events, bindings; kubeconfig parsing; quantities.
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

#define N0 "aks-gpunc-12345678-vmss000000"
#define N1 "aks-gpunc-12345678-vmss000001"
#define N2 "aks-gpunc-12345678-vmss000002"

/* A pending pod asking for what the arguments say. */
static json_t *pending_pod(const char *name, const char *share, int gpus,
			   bool tolerate)
{
	json_t *pod = json_pack(
		"{s:{s:s, s:s, s:s, s:{}}, s:{s:s, s:[{s:s, s:{s:{s:s}}}],"
		" s:[]}, s:{s:s}}",
		"metadata", "name", name, "namespace", "ml",
		"creationTimestamp", "2026-12-02T21:00:00Z", "annotations",
		"spec", "schedulerName", "kiln", "containers", "name", "task",
		"resources", "requests", "cpu", "500m", "tolerations",
		"status", "phase", "Pending");
	json_t *ctr = json_array_get(json_object_get(json_object_get(pod,
							"spec"), "containers"), 0);
	char count[8];

	if (share)
		json_object_set_new(json_object_get(json_object_get(pod,
								    "metadata"),
						    "annotations"),
				    KN_KUBE_ANN_GPU_MILLI, json_string(share));
	if (gpus) {
		snprintf(count, sizeof(count), "%d", gpus);
		json_object_set_new(json_object_get(ctr, "resources"), "limits",
				    json_pack("{s:s}", "nvidia.com/gpu", count));
	}
	if (tolerate)
		json_array_append_new(
			json_object_get(json_object_get(pod, "spec"),
					"tolerations"),
			json_pack("{s:s, s:s, s:s, s:s}", "key", "sku",
				  "operator", "Equal", "value", "gpu",
				  "effect", "NoSchedule"));
	return pod;
}

static void add(struct kn_kube_cluster *c, json_t *pod)
{
	struct kn_error err = {0};

	assert_int_equal(kn_kube_cluster_pod_event(c, "ADDED", pod, &err), 0);
	json_decref(pod);
}

/* Each placement test's state: the recorded cluster, the last decision
   and the last error. */
struct placing {
	struct kn_kube_cluster *c;
	struct kn_kube_decision d;
	struct kn_error err;
};

/* The recorded cluster: nodes.json and pods.json. */
static int setup(void **state)
{
	struct placing *p = calloc(1, sizeof(*p));
	json_t *nodes = fixture_load("", "nodes.json"),
	       *pods = fixture_load("", "pods.json");

	assert_non_null(p);
	p->c = kn_kube_cluster_new("kiln", fixture_products);
	assert_int_equal(kn_kube_cluster_set_nodes(p->c, nodes, &p->err), 0);
	assert_int_equal(kn_kube_cluster_set_pods(p->c, pods, &p->err), 0);
	json_decref(nodes);
	json_decref(pods);
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct placing *p = *state;

	kn_kube_cluster_free(p->c);
	free(p);
	return 0;
}

/* kn_kube_place of pod ml/name by the named policy into p->d. */
static int place(struct placing *p, const char *policy, const char *name)
{
	return kn_kube_place(p->c, kn_pack_policy_find(policy), "ml", name,
			     &p->d, &p->err);
}

static void test_pending_order(void **state)
{
	struct placing *p = *state;
	struct kn_kube_pod_ref refs[8];

	/* other-f-0 is the default scheduler's; bound and ended pods wait
	   for nothing. */
	assert_int_equal(kn_kube_cluster_pending(p->c, refs, 8), 2);
	assert_string_equal(refs[0].name, "train-d-0");
	assert_string_equal(refs[0].namespace_, "ml");
	assert_string_equal(refs[1].name, "cpu-e-0");
}

static void test_whole_gpus(void **state)
{
	struct placing *p = *state;

	/* vmss000000 has a half-used GPU, vmss000001 a whole one in use,
	   vmss000002's pod has ended, vmss000003 is not ready. */
	assert_int_equal(place(p, "kiln", "train-d-0"), 0);
	assert_string_equal(p->d.node, N2);
	assert_int_equal(p->d.n_gpus, 2);
	assert_int_equal(p->d.gpu_milli, 1000);
	assert_int_equal(kn_kube_cluster_assume(p->c, "ml", "train-d-0", &p->d),
			 0);
	/* Now no node has two idle GPUs. */
	add(p->c, pending_pod("two", NULL, 2, true));
	assert_int_equal(place(p, "kiln", "two"), -ENOSPC);
	assert_non_null(strstr(p->err.message, "ml/two: no node has room for "
					       "2 GPUs"));
	assert_non_null(strstr(p->err.message, "4 of 5 nodes eligible (1 not "
					       "ready, 0 by selector, 0 by "
					       "affinity, 0 by taints)"));
}

static void test_taints_and_shares(void **state)
{
	struct placing *p = *state;
	json_t *binding;

	/* Without the sku=gpu toleration no GPU node is left. */
	assert_int_equal(place(p, "kiln", "cpu-e-0"), -ENOSPC);
	assert_non_null(strstr(p->err.message, "3 by taints"));
	/* A half share fills vmss000000's half-used GPU 0 (its annotation). */
	add(p->c, pending_pod("half", "500", 0, true));
	assert_int_equal(place(p, "kiln", "half"), 0);
	assert_string_equal(p->d.node, N0);
	assert_int_equal(p->d.n_gpus, 1);
	assert_int_equal(p->d.gpus[0], 0);
	assert_int_equal(p->d.gpu_milli, 500);
	binding = kn_kube_binding("ml", "half", &p->d);
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(json_object_get(
			binding, "metadata"), "annotations"), KN_KUBE_ANN_GPU)),
		"0");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
				    binding, "target"), "name")), N0);
	json_decref(binding);
	/* Once it is bound, GPU 0 is full: the next half share goes to a GPU
	   that is not. */
	assert_int_equal(kn_kube_cluster_assume(p->c, "ml", "half", &p->d), 0);
	add(p->c, pending_pod("half2", "500", 0, true));
	assert_int_equal(place(p, "kiln", "half2"), 0);
	assert_false(!strcmp(p->d.node, N0) && p->d.gpus[0] == 0);
	/* A bad share annotation is refused by name. */
	add(p->c, pending_pod("bad", "1500", 0, true));
	assert_int_equal(place(p, "kiln", "bad"), -EINVAL);
	assert_string_equal(p->err.field, KN_KUBE_ANN_GPU_MILLI);
}

static void test_selector_affinity_and_events(void **state)
{
	struct placing *p = *state;
	json_t *pod = pending_pod("zonal", NULL, 1, true), *copy;

	json_object_set_new(json_object_get(pod, "spec"), "nodeSelector",
			    json_pack("{s:s}", "topology.kubernetes.io/zone",
				      "eastus-2"));
	copy = json_deep_copy(pod);
	add(p->c, pod);
	assert_int_equal(place(p, "best-fit", "zonal"), 0);
	assert_string_equal(p->d.node, N1);
	/* Required affinity on the product label: no node has a T4. */
	json_object_del(json_object_get(copy, "spec"), "nodeSelector");
	json_object_set_new(
		json_object_get(copy, "spec"), "affinity",
		json_loads("{\"nodeAffinity\": {\"requiredDuringScheduling"
			   "IgnoredDuringExecution\": {\"nodeSelectorTerms\":"
			   " [{\"matchExpressions\": [{\"key\": \"nvidia.com/"
			   "gpu.product\", \"operator\": \"In\", \"values\": "
			   "[\"Tesla-T4\"]}]}]}}}", 0, NULL));
	assert_int_equal(kn_kube_cluster_pod_event(p->c, "MODIFIED", copy,
						   &p->err), 0);
	assert_int_equal(place(p, "best-fit", "zonal"), -ENOSPC);
	assert_non_null(strstr(p->err.message, "by affinity"));
	/* Deleted: no longer known. */
	assert_int_equal(kn_kube_cluster_pod_event(p->c, "DELETED", copy,
						   &p->err), 0);
	assert_int_equal(place(p, "best-fit", "zonal"), -ENOENT);
	json_decref(copy);
	/* Bookmarks change nothing; a nameless object is an error. */
	assert_int_equal(kn_kube_cluster_pod_event(p->c, "BOOKMARK", NULL,
						   &p->err), 0);
	copy = json_object();
	assert_int_equal(kn_kube_cluster_pod_event(p->c, "ADDED", copy,
						   &p->err), -EINVAL);
	json_decref(copy);
}

static json_t *gang_pod(const char *name, int gpus, const char *size)
{
	json_t *pod = pending_pod(name, NULL, gpus, true);
	json_t *meta = json_object_get(pod, "metadata");

	json_object_set_new(json_object_get(meta, "annotations"),
			    KN_KUBE_ANN_GANG, json_string(size));
	json_object_set_new(meta, "labels",
			    json_pack("{s:s}", KN_KUBE_LABEL_JOB, "g"));
	return pod;
}

/* kn_kube_place_gang by the kiln policy of the gang of ml/name. */
static int place_gang(struct placing *p, const char *name,
		      struct kn_kube_placement out[4], size_t *n)
{
	return kn_kube_place_gang(p->c, kn_pack_policy_find("kiln"), "ml",
				  name, out, 4, n, &p->err);
}

/* Two tasks of two GPUs: one would fit (vmss000002), both do not. */
static void test_gang_too_big(void **state)
{
	struct placing *p = *state;
	struct kn_kube_placement out[4];
	struct kn_kube_pod_ref refs[8];
	size_t n = 0;

	add(p->c, gang_pod("g-0", 2, "2"));
	assert_int_equal(place_gang(p, "g-0", out, &n), -EAGAIN);
	assert_non_null(strstr(p->err.message, "1 of 2 exist"));
	add(p->c, gang_pod("g-1", 2, "2"));
	assert_int_equal(place_gang(p, "g-1", out, &n), -ENOSPC);
	assert_non_null(strstr(p->err.message, "the gang of 2 does not fit at "
					       "once"));
	/* Nothing was charged: the single pod alone still fits. */
	assert_int_equal(kn_kube_cluster_pending(p->c, refs, 8), 4);
	assert_int_equal(place_gang(p, "train-d-0", out, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(out[0].d.node, N2);
}

/* Two tasks of one GPU: both placed, on different GPUs. */
static void test_gang_fits(void **state)
{
	struct placing *p = *state;
	struct kn_kube_placement out[4];
	size_t n = 0;

	add(p->c, gang_pod("g-0", 1, "2"));
	add(p->c, gang_pod("g-1", 1, "2"));
	assert_int_equal(place_gang(p, "g-1", out, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(out[0].name, "g-0");
	assert_string_equal(out[1].name, "g-1");
	assert_string_equal(out[0].namespace_, "ml");
	assert_false(!strcmp(out[0].d.node, out[1].d.node) &&
		     out[0].d.gpus[0] == out[1].d.gpus[0]);
	/* A bad size is refused by name. */
	add(p->c, gang_pod("h-0", 1, "1"));
	assert_int_equal(place_gang(p, "h-0", out, &n), -EINVAL);
	assert_string_equal(p->err.field, KN_KUBE_ANN_GANG);
}

static void test_kubeconfig(void **state)
{
	const char *good =
		"apiVersion: v1\nkind: Config\ncurrent-context: b\n"
		"clusters:\n"
		"- name: one\n  cluster: {server: 'https://a:6443/'}\n"
		"- name: two\n  cluster:\n    server: https://b:443\n"
		"    certificate-authority-data: LS0tQ0EtLS0K\n"
		"contexts:\n"
		"- {name: a, context: {cluster: one, user: tok}}\n"
		"- {name: b, context: {cluster: two, user: cert}}\n"
		"users:\n"
		"- name: tok\n  user: {token: abc, tokenFile: t/token}\n"
		"- name: cert\n  user:\n"
		"    client-certificate-data: Q0VSVA==\n"
		"    client-key-data: S0VZ\n";
	struct kn_kube_auth a = {0};
	struct kn_error err = {0};
	struct {
		const char *text, *message;
	} bad[] = {
		{"kind: Config\n", "current-context: none is set"},
		{"current-context: x\n", "no context named \"x\""},
		{"current-context: x\ncontexts: [{name: x, context: "
		 "{cluster: c}}]\n", "no cluster named \"c\""},
		{"current-context: x\ncontexts: [{name: x, context: "
		 "{cluster: c}}]\nclusters: [{name: c, cluster: "
		 "{server: ftp://h}}]\n", "clusters[c].cluster.server"},
		{"current-context: x\ncontexts: [{name: x, context: "
		 "{cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
		 "{server: 'https://h'}}]\nusers: [{name: u, user: {exec: "
		 "{command: az}}}]\n", "exec and auth-provider"},
		{"current-context: x\ncontexts: [{name: x, context: "
		 "{cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
		 "{server: 'https://h', certificate-authority-data: '*'}}]\n",
		 "certificate-authority-data: not base64"},
		{"a: [b\n", "k.yaml:2:1: invalid YAML"},
		/* Never to libfyaml, which would loop forever on it. */
		{"%m\xef\n", "k.yaml:1:3: kubeconfig is not valid UTF-8"},
	};

	(void)state;
	assert_int_equal(kn_kube_kubeconfig_parse(good, strlen(good),
						  "/etc/k/config", NULL, &a,
						  &err), 0);
	assert_string_equal(a.server, "https://b:443");
	assert_string_equal(a.ca_pem, "---CA---\n");
	assert_string_equal(a.cert_pem, "CERT");
	assert_string_equal(a.key_pem, "KEY");
	assert_null(a.token);
	kn_kube_auth_release(&a);
	assert_int_equal(kn_kube_kubeconfig_parse(good, strlen(good),
						  "/etc/k/config", "a", &a,
						  &err), 0);
	assert_string_equal(a.server, "https://a:6443");
	assert_string_equal(a.token, "abc");
	assert_string_equal(a.token_file, "/etc/k/t/token");
	assert_null(a.ca_pem);
	kn_kube_auth_release(&a);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(kn_kube_kubeconfig_parse(bad[i].text,
							  strlen(bad[i].text),
							  "k.yaml", NULL, &a,
							  &err), -EINVAL);
		if (!strstr(err.message, bad[i].message))
			fail_msg("case %zu: %s", i, err.message);
	}
}

static void test_quantities(void **state)
{
	struct {
		const char *text;
		int64_t milli, bytes;
	} good[] = {
		{"2", 2000, 2}, {"500m", 500, 1}, {"47260m", 47260, 48},
		{"1.5", 1500, 2}, {"16Gi", 17179869184000, 17179869184},
		{"436218448Ki", 446687690752000, 446687690752},
		{"1e9", 1000000000000, 1000000000}, {"1G", 1000000000000,
						     1000000000},
	};
	const char *bad[] = {"", "-1", "1Q", "0x10", "Gi", "1.5.5", "inf"};
	int64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(kn_kube_quantity_milli(good[i].text, &v), 0);
		assert_int_equal(v, good[i].milli);
		assert_int_equal(kn_kube_quantity_bytes(good[i].text, &v), 0);
		assert_int_equal(v, good[i].bytes);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(kn_kube_quantity_bytes(bad[i], &v), -EINVAL);
}

KN_TEST_MAIN_WITH_PATH(kube_fixtures, "FIXTURE-DIR", fixture_products_load,
		       fixture_products_free,
	cmocka_unit_test_setup_teardown(test_pending_order, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_whole_gpus, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_taints_and_shares, setup,
					teardown),
	cmocka_unit_test_setup_teardown(
		test_selector_affinity_and_events, setup, teardown),
	cmocka_unit_test_setup_teardown(test_gang_too_big, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_gang_fits, setup,
					teardown),
	cmocka_unit_test(test_kubeconfig),
	cmocka_unit_test(test_quantities))
