/*
 * libFuzzer harness for what kiln kube-scheduler reads from outside: the
 * kubeconfig (YAML), the GPU product table (CSV), resource quantities, and
 * node and pod objects from the API. The input is tried as each: as a
 * kubeconfig and a product table, as a quantity, and, when it is a JSON
 * object {"nodes": NodeList, "pods": PodList}, as a snapshot in which
 * every pending pod (or its whole gang) is placed and assumed bound,
 * round after round.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void snapshot(json_t *root)
{
	struct kn_kube_cluster *c = kn_kube_cluster_new("kiln", NULL);
	const struct kn_pack_policy *policy = kn_pack_policy_find("kiln");
	struct kn_kube_pod_ref refs[16];
	struct kn_kube_placement *gang = calloc(KN_SPEC_MAX_TASKS,
						sizeof(*gang));
	struct kn_error err;
	char ns[256], name[256];

	if (!gang)
		abort();
	if (kn_kube_cluster_set_nodes(c, json_object_get(root, "nodes"),
				      &err) < 0 ||
	    kn_kube_cluster_set_pods(c, json_object_get(root, "pods"),
				     &err) < 0)
		goto out;
	kn_kube_cluster_pod_event(c, "ADDED", json_object_get(root, "event"),
				  &err);
	/* Bind one pod per round; assuming it changes the pending list. */
	for (int round = 0; round < 16; round++) {
		size_t n = kn_kube_cluster_pending(c, refs, 16);
		bool bound = false;

		for (size_t i = 0; i < n && i < 16 && !bound; i++) {
			snprintf(ns, sizeof(ns), "%s", refs[i].namespace_);
			snprintf(name, sizeof(name), "%s", refs[i].name);
			size_t placed;

			if (kn_kube_place_gang(c, policy, ns, name, gang,
					       KN_SPEC_MAX_TASKS, &placed,
					       &err) < 0)
				continue;
			for (size_t k = 0; k < placed; k++) {
				json_decref(kn_kube_binding(gang[k].namespace_,
							    gang[k].name,
							    &gang[k].d));
				if (kn_kube_cluster_assume(c, gang[k].namespace_,
							   gang[k].name,
							   &gang[k].d) < 0)
					abort();
			}
			bound = true;
		}
		if (!bound)
			break;
	}
out:
	free(gang);
	kn_kube_cluster_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_kube_products *p;
	struct kn_kube_auth auth;
	struct kn_error err;
	char *text;
	json_t *root;
	int64_t v;

	if (size > 65536)
		return 0;
	text = malloc(size + 1);
	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	if (kn_kube_kubeconfig_parse(text, size, "/k/config", NULL, &auth,
				     &err) == 0) {
		if (!auth.server)
			abort();
		kn_kube_auth_release(&auth);
	}
	if (kn_kube_products_parse(text, size, "p.csv", &p, &err) == 0)
		kn_kube_products_free(p);
	if (size < 64 && !memchr(data, '\0', size)) {
		kn_kube_quantity_milli(text, &v);
		kn_kube_quantity_bytes(text, &v);
	}
	root = json_loadb(text, size, 0, NULL);
	if (json_is_object(root))
		snapshot(root);
	json_decref(root);
	free(text);
	return 0;
}
