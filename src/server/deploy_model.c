/*
 * Where a deployment's model is: a registry version's copy, a job's
 * outputs, or a path the spec names, checked against the server's home.
 */
#include "deploysvc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A registry version: NAME@VERSION or NAME@ALIAS (models.c). */
bool deploy_registry_model(const struct kn_deployment_spec *spec)
{
	return !spec->model_job && strchr(spec->model, '@') &&
	       !strchr(spec->model, '/');
}

/*
 * A model directory a spec names by path is shown to the replicas
 * read-only, even inside the server's home, which their sandbox hides
 * otherwise: so it is resolved (links followed once, here) and refused
 * inside the home, where other jobs' files and the server's secrets are.
 * The server's own copies (registry, job:ID) are made by it, not named.
 * For the local executor: the others' tasks read the path on their nodes.
 */
/* realpath of path, or for one not made yet (a model still to be
   trained) that of its nearest existing ancestor with the rest after. */
static char *resolve_as_far_as_exists(const char *path)
{
	char *head = kn_xstrdup(path), *real = NULL, *slash;

	while (!(real = realpath(head, NULL)) && errno == ENOENT &&
	       (slash = strrchr(head, '/')) && slash != head)
		*slash = '\0';
	if (real && strlen(head) < strlen(path)) {
		char *whole = kn_asprintf("%s%s", strcmp(real, "/") ? real : "",
					  path + strlen(head));
		free(real);
		real = whole;
	}
	free(head);
	return real;
}

static int model_path_outside_home(struct server *s, const char *given,
				   char **out, struct kn_error *err)
{
	char *real = resolve_as_far_as_exists(given), *home;
	int why = errno, rc = 0;
	size_t n;

	home = realpath(core_home(s), NULL);
	n = home ? strlen(home) : 0;
	if (!real)
		rc = kn_errorf(err, KN_EINVAL, "model", "model: %s: %s", given,
			       strerror(why));
	else if (!home || (!strncmp(real, home, n) &&
			   (real[n] == '/' || real[n] == '\0')))
		rc = kn_errorf(err, KN_EPERM, "model",
			       "model: %s is inside the server's home; push "
			       "the model to the registry and deploy "
			       "NAME@VERSION", given);
	if (rc == 0)
		*out = real;
	else
		free(real);
	free(home);
	return rc;
}

/*
 * KILN_MODEL_DIR: a path as given (relative to the spec file's directory
 * when that is known), or for job:<id> the directory its outputs were
 * uploaded to, when the store is a local file:// one.
 */
int deploy_resolve_model_dir(struct server *s,
			     const struct kn_deployment_spec *spec,
			     const char *path, char **out,
			     struct kn_error *err)
{
	struct kn_output_row *outs = NULL;
	struct kn_job_row j;
	size_t n = 0;
	int rc;

	if (deploy_registry_model(spec))
		return models_deploy_dir(s, spec->model, out, err);
	if (!spec->model_job) {
		char *given;

		if (spec->model[0] != '/' && !path)
			return kn_errorf(err, KN_EINVAL, "model",
					 "model: a relative path (%s) needs the "
					 "spec file's absolute path (?path=); "
					 "or give an absolute one",
					 spec->model);
		given = spec->model[0] == '/'
				? kn_xstrdup(spec->model)
				: kn_asprintf("%.*s/%s",
					      (int)(strrchr(path, '/') - path),
					      path, spec->model);
		/* An engine that places tasks itself reads the path on its
		   nodes, where this home is not. */
		if (core_executor(s)->ops->places_tasks) {
			*out = given;
			return 0;
		}
		rc = model_path_outside_home(s, given, out, err);
		free(given);
		return rc;
	}
	memset(&j, 0, sizeof(j));
	rc = kn_store_job_get(core_store(s), spec->model_job, &j, err);
	if (rc < 0)
		return kn_errorf(err, KN_EINVAL, "model",
				 "model: job %lld not found",
				 (long long)spec->model_job);
	rc = kn_store_output_list(core_store(s), j.id, &outs, &n, err);
	if (rc == 0 && (j.state != KN_JOB_SUCCEEDED || n == 0))
		rc = kn_errorf(err, KN_ECONFLICT, "model",
			       "model: job %lld is %s with %zu output file%s; "
			       "a model comes from a succeeded job's outputs",
			       (long long)j.id, kn_job_state_name(j.state), n,
			       n == 1 ? "" : "s");
	if (rc == 0) {
		const char *url = outs[0].url;
		size_t keep = strlen(url) - strlen(outs[0].name) - 1;

		if (strncmp(url, "file://", 7) != 0 || keep <= 7)
			rc = kn_errorf(err, KN_EINVAL, "model",
				       "model: job %lld's outputs are in a "
				       "remote store (%.60s); serving from "
				       "there needs a local copy, which kiln "
				       "does not make yet",
				       (long long)j.id, url);
		else
			*out = kn_asprintf("%.*s", (int)(keep - 7), url + 7);
	}
	kn_output_list_free(outs, n);
	kn_job_row_release(&j);
	return rc;
}
