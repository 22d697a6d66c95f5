/*
 * Unit tests for spec: a table of bad specs with the exact message each
 * must give (position, field path, what is allowed), good specs checked
 * field by field, defaults, JSON input and the normalized JSON output.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "spec/spec.h"
#include "spec_cases.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The smallest valid spec; bad cases add lines after it (line 4 on). */
#define BASE "kind: Job\nname: x\ncommand: [a]\n"

static const struct bad_case bad_cases[] = {
	/* Unknown fields, with and without a suggestion. */
	{BASE "retires: 3\n", "retires",
	 "job.yaml:4:1: unknown field \"retires\" in job; did you mean "
	 "\"retries\"?"},
	{BASE "resources:\n  gpu: 1\n", "resources.gpu",
	 "job.yaml:5:3: unknown field \"gpu\" in resources; did you mean "
	 "\"gpus\"?"},
	{BASE "gpus: 2\n", "gpus",
	 "job.yaml:4:1: unknown field \"gpus\" in job; did you mean "
	 "\"resources.gpus\"?"},
	{BASE "colour: red\n", "colour",
	 "job.yaml:4:1: unknown field \"colour\" in job"},
	{BASE "placement:\n  tolerations:\n    - key: a\n      efect: "
	      "NoSchedule\n",
	 "placement.tolerations[0].efect",
	 "job.yaml:7:7: unknown field \"efect\" in placement.tolerations[0]; "
	 "did you mean \"effect\"?"},
	/* Required fields: the position is the enclosing mapping. */
	{"kind: Job\nname: x\n", "command",
	 "job.yaml:1:1: missing required field \"command\" in job"},
	{"kind: Job\ncommand: [a]\n", "name",
	 "job.yaml:1:1: missing required field \"name\" in job"},
	{"name: x\ncommand: [a]\n", "kind",
	 "job.yaml:1:1: missing required field \"kind\" in job (kind: Job)"},
	{BASE "placement:\n  tolerations:\n    - operator: Exists\n",
	 "placement.tolerations[0].key",
	 "job.yaml:6:7: missing required field \"key\" in "
	 "placement.tolerations[0]"},
	/* kind and apiVersion. */
	{"kind: Workflow\nsteps: []\n", "kind",
	 "job.yaml:1:7: kind: must be \"Job\"; got \"Workflow\""},
	{BASE "apiVersion: kiln/v2\n", "apiVersion",
	 "job.yaml:4:13: apiVersion: must be \"kiln/v1\"; got \"kiln/v2\""},
	/* name. */
	{"kind: Job\nname: Train\ncommand: [a]\n", "name",
	 "job.yaml:2:7: name: must be 1 to 63 characters: lowercase letters, "
	 "digits, '.', '_' and '-', starting with a letter or digit; got "
	 "\"Train\""},
	{"kind: Job\nname: [x]\ncommand: [a]\n", "name",
	 "job.yaml:2:7: name: must be 1 to 63 characters: lowercase letters, "
	 "digits, '.', '_' and '-', starting with a letter or digit; got a "
	 "list"},
	{"kind: Job\nname: -x\ncommand: [a]\n", "name",
	 "job.yaml:2:7: name: must be 1 to 63 characters: lowercase letters, "
	 "digits, '.', '_' and '-', starting with a letter or digit; got "
	 "\"-x\""},
	{"kind: Job\nname: "
	 "a123456789012345678901234567890123456789012345678901234567890123\n"
	 "command: [a]\n",
	 "name",
	 "job.yaml:2:7: name: must be 1 to 63 characters: lowercase letters, "
	 "digits, '.', '_' and '-', starting with a letter or digit; got "
	 "\"a12345678901234567890123456789012345678901234567...\""},
	/* command. */
	{"kind: Job\nname: x\ncommand: []\n", "command",
	 "job.yaml:3:10: command: must be a non-empty list of strings (the "
	 "program and its arguments), e.g. [\"python\", \"train.py\"]; got an "
	 "empty list"},
	{"kind: Job\nname: x\ncommand: python train.py\n", "command",
	 "job.yaml:3:10: command: must be a non-empty list of strings (the "
	 "program and its arguments), e.g. [\"python\", \"train.py\"]; got "
	 "\"python train.py\""},
	{"kind: Job\nname: x\ncommand:\n  - python\n  - {a: b}\n",
	 "command[1]",
	 "job.yaml:5:5: command[1]: must be a string; got a "
	 "mapping"},
	{"kind: Job\nname: x\ncommand: [\"\"]\n", "command[0]",
	 "job.yaml:3:11: command[0]: must be a non-empty string; got an empty "
	 "string"},
	/* env. */
	{BASE "env: [A]\n", "env",
	 "job.yaml:4:6: env: must be a mapping of variable names to values; "
	 "got a list"},
	{BASE "env:\n  CUDA_VISIBLE_DEVICES: 0\n", "env",
	 "job.yaml:5:3: env: \"CUDA_VISIBLE_DEVICES\" is set by kiln for each "
	 "task and cannot be set in a spec (reserved: CUDA_VISIBLE_DEVICES, "
	 "NVIDIA_VISIBLE_DEVICES, RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, "
	 "MASTER_PORT, KILN_*)"},
	{BASE "env:\n  KILN_TOKEN: x\n", "env",
	 "job.yaml:5:3: env: \"KILN_TOKEN\" is set by kiln*"},
	{BASE "env:\n  MY-VAR: x\n", "env",
	 "job.yaml:5:3: env: \"MY-VAR\" is not a valid variable name (letters, "
	 "digits and _, not starting with a digit)"},
	{BASE "env:\n  A: ~\n", "env.A",
	 "job.yaml:5:6: env.A: must be a string, number or boolean; got null"},
	{BASE "env:\n  A: 1\n  B: 2\n  A: 3\n", "env.A",
	 "job.yaml:7:3: duplicate key \"A\" in env (first at 5:3)"},
	/* workdir. */
	{BASE "workdir: true\n", "workdir",
	 "job.yaml:4:10: workdir: must be a non-empty string; got true"},
	{BASE "workdir:\n", "workdir",
	 "job.yaml:4:1: workdir: must be a non-empty string; got null"},
	/* Integers: tasks, retries, priority. */
	{BASE "tasks: 0\n", "tasks",
	 "job.yaml:4:8: tasks: must be an integer 1..1024; got 0"},
	{BASE "tasks: 1025\n", "tasks",
	 "job.yaml:4:8: tasks: must be an integer 1..1024; got 1025"},
	{BASE "tasks: \"4\"\n", "tasks",
	 "job.yaml:4:8: tasks: must be an integer 1..1024; got \"4\""},
	{BASE "tasks: 2.5\n", "tasks",
	 "job.yaml:4:8: tasks: must be an integer 1..1024; got 2.5"},
	{BASE "tasks: 99999999999999999999\n", "tasks",
	 "job.yaml:4:8: tasks: must be an integer 1..1024; got "
	 "99999999999999999999"},
	{BASE "retries: 101\n", "retries",
	 "job.yaml:4:10: retries: must be an integer 0..100; got 101"},
	{BASE "priority: -1\n", "priority",
	 "job.yaml:4:11: priority: must be an integer 0..1000; got -1"},
	{BASE "priority: 1001\n", "priority",
	 "job.yaml:4:11: priority: must be an integer 0..1000; got 1001"},
	/* Booleans. */
	{BASE "preemptible: yes\n", "preemptible",
	 "job.yaml:4:14: preemptible: must be true or false; got \"yes\""},
	{BASE "preemptible: 1\n", "preemptible",
	 "job.yaml:4:14: preemptible: must be true or false; got 1"},
	/* Durations. */
	{BASE "timeout: soon\n", "timeout",
	 "job.yaml:4:10: timeout: must be a duration such as 90s, 5m or "
	 "1h30m, at most 3650d (0 for none); got \"soon\""},
	{BASE "backoff: 10\n", "backoff",
	 "job.yaml:4:10: backoff: must be a duration such as 90s, 5m or "
	 "1h30m, at most 3650d; got 10"},
	{BASE "backoff: 106751991167d\n", "backoff",
	 "job.yaml:4:10: backoff: must be a duration such as 90s, 5m or "
	 "1h30m, at most 3650d; got \"106751991167d\""},
	{BASE "backoff: 20m\n", "backoff",
	 "job.yaml:4:10: backoff: must be at most backoff_max (10m0s); got "
	 "20m0s"},
	{BASE "backoff: 2m\nbackoff_max: 1m\n", "backoff_max",
	 "job.yaml:5:14: backoff_max: must be at least backoff (2m0s); got "
	 "1m0s"},
	/* checkpoint. */
	{BASE "checkpoint: every 5m\n", "checkpoint",
	 "job.yaml:4:13: checkpoint: must be a mapping with fields every, "
	 "keep, store, grace, signal; got \"every 5m\""},
	{BASE "checkpoint:\n  every: 0s\n", "checkpoint.every",
	 "job.yaml:5:10: checkpoint.every: must be a duration greater than 0 "
	 "(e.g. 90s or 5m); got \"0s\""},
	{BASE "checkpoint:\n  grace: 30\n", "checkpoint.grace",
	 "job.yaml:5:10: checkpoint.grace: must be a duration such as 90s, 5m "
	 "or 1h30m, at most 3650d; got 30"},
	{BASE "checkpoint:\n  keep: 0\n", "checkpoint.keep",
	 "job.yaml:5:9: checkpoint.keep: must be an integer 1..1000; got 0"},
	{BASE "checkpoint:\n  store: s3://bucket/ckpt\n", "checkpoint.store",
	 "job.yaml:5:10: checkpoint.store: must be a store's name (as the "
	 "server's stores: name it) or a URL starting with file://, https:// "
	 "or http://; got \"s3://bucket/ckpt\""},
	{BASE "checkpoint:\n  store: Ckpt West\n", "checkpoint.store",
	 "job.yaml:5:10: checkpoint.store: must be a store's name (as the "
	 "server's stores: name it) or a URL starting with file://, https:// "
	 "or http://; got \"Ckpt West\""},
	{BASE "checkpoint:\n  signal: SIGFOO\n", "checkpoint.signal",
	 "job.yaml:5:11: checkpoint.signal: must be a signal name such as "
	 "SIGTERM, SIGUSR1 or INT; got \"SIGFOO\""},
	{BASE "checkpoint:\n  signal: SIGKILL\n", "checkpoint.signal",
	 "job.yaml:5:11: checkpoint.signal: must be a signal the task can "
	 "catch (not SIGKILL or SIGSTOP); got \"SIGKILL\""},
	/* resources. */
	{BASE "resources: 2\n", "resources",
	 "job.yaml:4:12: resources: must be a mapping with fields gpus, "
	 "gpu_model, cpus, memory, sharing, pids; got 2"},
	{"kind: Job\nname: x\ncommand: [a]\ntasks: 1\nretries: 0\n"
	 "resources:\n  gpus: lots\n",
	 "resources.gpus",
	 "job.yaml:7:9: resources.gpus: must be an integer 0..8, a fraction "
	 "between 0 and 1 (e.g. 0.5), or \"mig:<profile>\"; got \"lots\""},
	{BASE "resources:\n  gpus: 1.5\n", "resources.gpus",
	 "job.yaml:5:9: resources.gpus: must be an integer 0..8, a fraction "
	 "between 0 and 1 (e.g. 0.5), or \"mig:<profile>\"; got 1.5"},
	{BASE "resources:\n  gpus: 9\n", "resources.gpus",
	 "job.yaml:5:9: resources.gpus: must be an integer 0..8, a fraction "
	 "between 0 and 1 (e.g. 0.5), or \"mig:<profile>\"; got 9"},
	{BASE "resources:\n  gpus: -1\n", "resources.gpus",
	 "job.yaml:5:9: resources.gpus: must be an integer 0..8, a fraction "
	 "between 0 and 1 (e.g. 0.5), or \"mig:<profile>\"; got -1"},
	{BASE "resources:\n  gpus: 0.0005\n", "resources.gpus",
	 "job.yaml:5:9: resources.gpus: a share of a GPU is counted in "
	 "thousandths (0.001 steps); got 0.0005"},
	{BASE "resources:\n  gpus: mig:1g\n", "resources.gpus",
	 "job.yaml:5:9: resources.gpus: MIG profile must look like "
	 "\"mig:1g.10gb\" (<n>g.<m>gb, optionally with a suffix such as "
	 "\"+me\"); got \"mig:1g\""},
	{BASE "resources:\n  gpus: mig:1g.10gb+\n", "resources.gpus",
	 "job.yaml:5:9: resources.gpus: MIG profile must look like*"},
	{BASE "resources:\n  cpus: 0\n", "resources.cpus",
	 "job.yaml:5:9: resources.cpus: must be a number of CPUs greater than "
	 "0 and at most 1024 (e.g. 0.5 or 4); got 0"},
	{BASE "resources:\n  cpus: 500m\n", "resources.cpus",
	 "job.yaml:5:9: resources.cpus: must be a number of CPUs greater than "
	 "0 and at most 1024 (e.g. 0.5 or 4); got \"500m\""},
	{BASE "resources:\n  cpus: 0.0001\n", "resources.cpus",
	 "job.yaml:5:9: resources.cpus: CPUs are counted in thousandths "
	 "(0.001 steps); got 0.0001"},
	{BASE "resources:\n  memory: 2GB\n", "resources.memory",
	 "job.yaml:5:11: resources.memory: must be a size greater than 0 such "
	 "as 512Mi, 2Gi or 1G; got \"2GB\""},
	{BASE "resources:\n  memory: 0\n", "resources.memory",
	 "job.yaml:5:11: resources.memory: must be a size greater than 0 such "
	 "as 512Mi, 2Gi or 1G; got 0"},
	{BASE "resources:\n  pids: 8\n", "resources.pids",
	 "job.yaml:5:9: resources.pids: must be an integer 16..4194304; got 8"},
	{BASE "resources:\n  gpu_model: {a: b}\n", "resources.gpu_model",
	 "job.yaml:5:14: resources.gpu_model: must be a GPU model name or a "
	 "non-empty list of names, e.g. [\"H100\", \"A100\"]; got a mapping"},
	/* placement. */
	{BASE "placement:\n  tolerations:\n    - key: a\n    - key: b\n"
	      "      effect: NoExecute\n",
	 "placement.tolerations[1].effect",
	 "job.yaml:8:15: placement.tolerations[1].effect: must be NoSchedule "
	 "or PreferNoSchedule (or absent for any effect); got \"NoExecute\""},
	{BASE "placement:\n  tolerations:\n    - key: a\n      operator: "
	      "In\n",
	 "placement.tolerations[0].operator",
	 "job.yaml:7:17: placement.tolerations[0].operator: must be Equal or "
	 "Exists; got \"In\""},
	{BASE "placement:\n  tolerations:\n    - key: a\n      operator: "
	      "Exists\n      value: b\n",
	 "placement.tolerations[0].value",
	 "job.yaml:8:14: placement.tolerations[0].value: must be absent when "
	 "operator is Exists"},
	{BASE "placement:\n  tolerations: {key: a}\n", "placement.tolerations",
	 "job.yaml:5:16: placement.tolerations: must be a list of {key, "
	 "operator, value, effect} mappings; got a mapping"},
	{BASE "placement:\n  tolerations: [a]\n", "placement.tolerations[0]",
	 "job.yaml:5:17: placement.tolerations[0]: must be a mapping with "
	 "fields key, operator, value, effect; got \"a\""},
	{BASE "placement:\n  selector:\n    zone: [a, b]\n",
	 "placement.selector.zone",
	 "job.yaml:6:11: placement.selector.zone: must be a string, number or "
	 "boolean; got a list"},
	{BASE "placement:\n  spread: region\n", "placement.spread",
	 "job.yaml:5:11: placement.spread: must be zone or fault_domain; got "
	 "\"region\""},
	/* placement.affinity. */
	{BASE "placement:\n  afinity: {}\n", "placement.afinity",
	 "job.yaml:5:3: unknown field \"afinity\" in placement; did you mean "
	 "\"affinity\"?"},
	{BASE "placement:\n  affinity:\n    require: []\n",
	 "placement.affinity.require",
	 "job.yaml:6:5: unknown field \"require\" in placement.affinity; did "
	 "you mean \"required\"?"},
	{BASE "required: []\n", "required",
	 "job.yaml:4:1: unknown field \"required\" in job; did you mean "
	 "\"placement.affinity.required\"?"},
	{BASE "placement:\n  affinity:\n    required: {key: zone}\n",
	 "placement.affinity.required",
	 "job.yaml:6:15: placement.affinity.required: must be a list of {key, "
	 "operator, values} mappings; got a mapping"},
	{BASE "placement:\n  affinity:\n    required:\n      - key: zone\n"
	      "        operator: Is\n        values: [a]\n",
	 "placement.affinity.required[0].operator",
	 "job.yaml:8:19: placement.affinity.required[0].operator: must be In, "
	 "NotIn, Exists or DoesNotExist; got \"Is\""},
	{BASE "placement:\n  affinity:\n    required:\n      - key: zone\n"
	      "        operator: In\n",
	 "placement.affinity.required[0].values",
	 "job.yaml:7:9: missing required field \"values\" in "
	 "placement.affinity.required[0] (operator In compares the label "
	 "with a list of values)"},
	{BASE "placement:\n  affinity:\n    required:\n      - key: zone\n"
	      "        operator: Exists\n        values: [a]\n",
	 "placement.affinity.required[0].values",
	 "job.yaml:9:17: placement.affinity.required[0].values: must be "
	 "absent when operator is Exists (it looks at the label name only)"},
	{BASE "placement:\n  affinity:\n    required:\n      - key: zone\n"
	      "        operator: NotIn\n        values: []\n",
	 "placement.affinity.required[0].values",
	 "job.yaml:9:17: placement.affinity.required[0].values: must be a "
	 "non-empty list of label values, e.g. [eastus-1, eastus-2]; got an "
	 "empty list"},
	{BASE "placement:\n  affinity:\n    required:\n      - operator: "
	      "Exists\n",
	 "placement.affinity.required[0].key",
	 "job.yaml:7:9: missing required field \"key\" in "
	 "placement.affinity.required[0]"},
	{BASE "placement:\n  affinity:\n    required:\n      - key: \"a b\"\n"
	      "        operator: Exists\n",
	 "placement.affinity.required[0].key",
	 "job.yaml:7:14: placement.affinity.required[0].key: \"a b\" is not a "
	 "valid label name (letters, digits, '.', '_', '-' and '/', starting "
	 "with a letter or digit, at most 253 characters)"},
	{BASE "placement:\n  affinity:\n    required:\n      - key: zone\n"
	      "        operator: Exists\n        weight: 5\n",
	 "placement.affinity.required[0].weight",
	 "job.yaml:9:9: unknown field \"weight\" in "
	 "placement.affinity.required[0]"},
	{BASE "placement:\n  affinity:\n    preferred:\n      - key: zone\n"
	      "        operator: Exists\n",
	 "placement.affinity.preferred[0].weight",
	 "job.yaml:7:9: missing required field \"weight\" in "
	 "placement.affinity.preferred[0]"},
	{BASE "placement:\n  affinity:\n    preferred:\n      - key: zone\n"
	      "        operator: Exists\n        weight: 101\n",
	 "placement.affinity.preferred[0].weight",
	 "job.yaml:9:17: placement.affinity.preferred[0].weight: *"},
	{BASE "placement:\n  affinity:\n    preferred:\n      - key: zone\n"
	      "        operator: Exists\n        wieght: 10\n",
	 "placement.affinity.preferred[0].wieght",
	 "job.yaml:9:9: unknown field \"wieght\" in "
	 "placement.affinity.preferred[0]; did you mean \"weight\"?"},
	/* resources.sharing. */
	{BASE "resources:\n  gpus: 0.5\n  sharing: mig\n", "resources.sharing",
	 "job.yaml:6:12: resources.sharing: must be time-slicing or mps; got "
	 "\"mig\""},
	{BASE "resources:\n  gpus: 1\n  sharing: mps\n", "resources.sharing",
	 "job.yaml:6:12: resources.sharing: applies only to a fraction of a "
	 "GPU (resources.gpus between 0 and 1, e.g. 0.5); resources.gpus is a "
	 "whole number"},
	{BASE "resources:\n  sharing: time-slicing\n", "resources.sharing",
	 "job.yaml:5:12: resources.sharing: applies only to a fraction of a "
	 "GPU (resources.gpus between 0 and 1, e.g. 0.5); resources.gpus is "
	 "not set"},
	{BASE "resources:\n  sharing: mps\n  gpus: mig:1g.10gb\n",
	 "resources.sharing",
	 "job.yaml:5:12: resources.sharing: applies only to a fraction of a "
	 "GPU (resources.gpus between 0 and 1, e.g. 0.5); resources.gpus is "
	 "a MIG profile"},
	/* YAML itself. */
	{"kind: Job\nname: x\nname: y\ncommand: [a]\n", "name",
	 "job.yaml:3:1: duplicate key \"name\" in job (first at 2:1)"},
	{"kind: Job\nname: [x\n", "", "job.yaml:3:1: invalid YAML: *"},
	{"kind: Job\n  name: x\n", "", "job.yaml:1:7: invalid YAML: *"},
	{BASE "---\nkind: Job\n", "",
	 "job.yaml:4:1: a spec is one YAML document; a second one starts "
	 "here"},
	{"", "",
	 "job.yaml:1:1: spec is empty; expected a mapping with kind: Job, "
	 "name and command"},
	{"# only a comment\n", "",
	 "job.yaml:1:1: spec is empty; expected a mapping with kind: Job, "
	 "name and command"},
	{"- kind: Job\n", "",
	 "job.yaml:1:1: a job spec must be a mapping with fields kind, "
	 "apiVersion, name, command, env, workdir, resources, tasks, retries, "
	 "backoff, backoff_max, priority, preemptible, timeout, checkpoint, "
	 "placement, image, inputs, array, tty; got a list"},
	{BASE "workdir: &w /data\nenv: {A: *w}\n", "env.A",
	 "job.yaml:5:10: env.A: aliases (*name) are not supported; write the "
	 "value out"},
	{BASE "tasks: !!int 3\n", "tasks",
	 "job.yaml:4:14: tasks: YAML tags (!name) are not supported; quote "
	 "strings instead"},
	{BASE "[a]: 1\n", "", "job.yaml:4:1: keys must be names; got a list"},
	{BASE "workdir: \"a\\0b\"\n", "workdir",
	 "job.yaml:4:10: workdir: value contains a NUL character"},
	{BASE "workdir: \"\xc3\x28\"\n", "", "job.yaml:4:11: spec is not valid "
					   "UTF-8"},
	/* inputs. */
	{BASE "inputs: data.txt\n", "inputs",
	 "job.yaml:4:9: inputs: must be a non-empty list of file paths "
	 "(relative to the spec's directory) or file://, http:// or https:// "
	 "store URLs; got \"data.txt\""},
	{BASE "inputs: []\n", "inputs",
	 "job.yaml:4:9: inputs: must be a non-empty list of file paths "
	 "(relative to the spec's directory) or file://, http:// or https:// "
	 "store URLs; got an empty list"},
	{BASE "inputs: [a.txt, \"\"]\n", "inputs[1]",
	 "job.yaml:4:17: inputs[1]: must be a non-empty string; got an empty "
	 "string"},
	{BASE "inputs: [a.txt, {url: b}]\n", "inputs[1]",
	 "job.yaml:4:17: inputs[1]: must be a non-empty string; got a "
	 "mapping"},
	{BASE "inputs:\n  - data/\n", "inputs[0]",
	 "job.yaml:5:5: inputs[0]: must name a file (its last path segment "
	 "is its name in $KILN_INPUT_DIR); got \"data/\""},
	{BASE "inputs:\n  - a.txt\n  - ../up/..\n", "inputs[1]",
	 "job.yaml:6:5: inputs[1]: must name a file (its last path segment "
	 "is its name in $KILN_INPUT_DIR); got \"../up/..\""},
	{BASE "inputs:\n  - a.txt\n  - b.txt\n  - s3://bucket/c.txt\n",
	 "inputs[2]",
	 "job.yaml:7:5: inputs[2]: is neither a path nor a file://, http:// "
	 "or https:// URL; got \"s3://bucket/c.txt\""},
	{BASE "inputs: [\"file://host/c.txt\"]\n", "inputs[0]",
	 "job.yaml:4:10: inputs[0]: a file:// URL names an absolute path "
	 "(file:///DIR/NAME); got \"file://host/c.txt\""},
	{BASE "inputs: [\"https://acct.blob.core.windows.net\"]\n",
	 "inputs[0]",
	 "job.yaml:4:10: inputs[0]: an http(s) URL names the store's host and "
	 "a blob (https://HOST/CONTAINER/NAME); got "
	 "\"https://acct.blob.core.windows.net\""},
	{BASE "inputs: [\"https://a.example/c/x.bin?sig=secret\"]\n",
	 "inputs[0]",
	 "job.yaml:4:10: inputs[0]: a URL may not carry a query or fragment "
	 "(the store's credentials come from the server's environment); got "
	 "\"https://a.example/c/x.bin?sig=secret\""},
	{BASE "inputs:\n  - data/train.bin\n  - file:///srv/train.bin\n",
	 "inputs[1]",
	 "job.yaml:6:5: inputs[1]: lands in $KILN_INPUT_DIR as train.bin, as "
	 "inputs[0] does; inputs need different file names"},
	/* array. */
	{BASE "array: 5\n", "array",
	 "job.yaml:4:8: array: must be a range \"FIRST-LAST\" or "
	 "\"FIRST-LAST%PARALLEL\" (e.g. \"0-999\", \"0-9%2\") or a mapping "
	 "{count: N, parallel: P}; got 5"},
	{BASE "array: 1,5,7\n", "array",
	 "job.yaml:4:8: array: must be a range \"FIRST-LAST\"*"},
	{BASE "array: 9-3\n", "array",
	 "job.yaml:4:8: array: the range's last index must not be below its "
	 "first; got \"9-3\""},
	{BASE "array: 0-10000\n", "array",
	 "job.yaml:4:8: array: the range holds 10001 elements; at most 10000; "
	 "got \"0-10000\""},
	{BASE "array: 0-9%0\n", "array",
	 "job.yaml:4:8: array: %PARALLEL must be at least 1; got \"0-9%0\""},
	{BASE "array:\n  count: 0\n", "array.count",
	 "job.yaml:5:10: array.count: must be an integer 1..10000; got 0"},
	{BASE "array:\n  cuont: 3\n", "array.cuont",
	 "job.yaml:5:3: unknown field \"cuont\" in array; did you mean "
	 "\"count\"?"},
	{BASE "array:\n  parallel: 2\n", "array.count",
	 "job.yaml:5:3: missing required field \"count\" in array"},
	/* JSON input. */
	{"{\"kind\": \"Job\", \"name\": \"x\", \"command\": [\"a\"], \"tasks\": "
	 "\"2\"}",
	 "tasks",
	 "job.yaml:1:57: tasks: must be an integer 1..1024; got \"2\""},
};

static void test_bad_specs(void **state)
{
	(void)state;
	expect_refused(bad_cases, ARRAY_SIZE(bad_cases), "job.yaml", parse_job);
	assert_true(ARRAY_SIZE(bad_cases) >= 30);
}

/* On error *out is not touched: NULL stays NULL, a value stays as is. */
static void test_out_untouched(void **state)
{
	static struct kn_job_spec sentinel;
	struct kn_job_spec *spec = &sentinel;
	struct kn_error err;
	const char *yaml = BASE "tasks: 0\n";

	(void)state;
	assert_int_equal(kn_job_spec_parse(yaml, strlen(yaml), "job.yaml",
					   &spec, &err),
			 kn_errcode_errno(KN_EINVAL));
	assert_ptr_equal(spec, &sentinel);
	spec = NULL;
	assert_int_not_equal(kn_job_spec_parse(yaml, strlen(yaml), "j",
					       &spec, &err),
			     0);
	assert_null(spec);
	/* A NULL error is allowed. */
	assert_int_equal(kn_job_spec_parse(yaml, strlen(yaml), "j", &spec,
					   NULL),
			 kn_errcode_errno(KN_EINVAL));
	assert_null(spec);
}

static void test_too_big(void **state)
{
	size_t len = KN_SPEC_MAX_BYTES + 1;
	char *text = malloc(len);
	struct kn_job_spec *spec = NULL;
	struct kn_error err;

	(void)state;
	assert_non_null(text);
	memset(text, '#', len);
	assert_int_equal(kn_job_spec_parse(text, len, "big.yaml", &spec, &err),
			 kn_errcode_errno(KN_ETOOBIG));
	assert_int_equal(err.code, KN_ETOOBIG);
	assert_string_equal(err.message,
			    "big.yaml: spec is 262145 bytes; the limit is "
			    "262144");
	assert_null(spec);
	/* Exactly at the limit is parsed (a comment: an empty spec). */
	assert_int_equal(kn_job_spec_parse(text, KN_SPEC_MAX_BYTES,
					   "big.yaml", &spec, &err),
			 kn_errcode_errno(KN_EINVAL));
	assert_int_equal(err.code, KN_EINVAL);
	free(text);
}

static void test_nul_byte_and_length(void **state)
{
	static const char with_nul[] = "kind: Job\nname: x\0\ncommand: [a]\n";
	/* A valid spec followed by junk that len excludes. */
	static const char prefix[] = BASE "}}}}";
	struct kn_job_spec *spec = NULL;
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_job_spec_parse(with_nul, sizeof(with_nul) - 1,
					   "job.yaml", &spec, &err),
			 kn_errcode_errno(KN_EINVAL));
	assert_string_equal(err.message,
			    "job.yaml:2:8: spec contains a NUL byte");
	assert_null(spec);
	assert_int_equal(kn_job_spec_parse(prefix, strlen(BASE), "job.yaml",
					   &spec, &err),
			 0);
	assert_non_null(spec);
	assert_string_equal(spec->name, "x");
	kn_job_spec_free(spec);
}

static void test_null_filename(void **state)
{
	const char *yaml = BASE "tasks: 0\n";
	struct kn_job_spec *spec = NULL;
	struct kn_error err;

	(void)state;
	assert_int_not_equal(kn_job_spec_parse(yaml, strlen(yaml), NULL,
					       &spec, &err),
			     0);
	assert_string_equal(err.message,
			    "<spec>:4:8: tasks: must be an integer 1..1024; "
			    "got 0");
}

static struct kn_job_spec *parse_ok(const char *yaml)
{
	struct kn_job_spec *spec = NULL;
	struct kn_error err;
	int rc;

	memset(&err, 0, sizeof(err));
	rc = kn_job_spec_parse(yaml, strlen(yaml), "job.yaml", &spec, &err);
	if (rc != 0)
		fail_msg("unexpected error: %s", err.message);
	assert_non_null(spec);
	return spec;
}

/* The job's numbers and switches, each named by its field when it is
   not the one wanted; the checkpoint store by text. */
static void expect_scalars(const struct kn_job_spec *got,
			   const struct kn_job_spec *want)
{
#define FIELD(name, member)                                                  \
	{name, (int64_t)got->member, (int64_t)want->member}
	const struct {
		const char *field;
		int64_t got, want;
	} f[] = {
		FIELD("resources.gpus", resources.gpu_milli),
		FIELD("resources.cpus", resources.cpu_milli),
		FIELD("resources.memory", resources.memory_bytes),
		FIELD("tasks", tasks),
		FIELD("retries", retries),
		FIELD("backoff", backoff_ms),
		FIELD("backoff_max", backoff_max_ms),
		FIELD("priority", priority),
		FIELD("preemptible", preemptible),
		FIELD("timeout", timeout_ms),
		FIELD("checkpoint (set)", checkpoint.set),
		FIELD("checkpoint.every", checkpoint.every_ms),
		FIELD("checkpoint.keep", checkpoint.keep),
		FIELD("checkpoint.grace", checkpoint.grace_ms),
		FIELD("checkpoint.signal", checkpoint.signal),
		FIELD("placement.selector (count)", placement.n_selector),
		FIELD("placement.tolerations (count)", placement.n_tolerations),
		FIELD("placement.spread", placement.spread),
	};
#undef FIELD

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i].got != f[i].want)
			fail_msg("%s: %lld, not %lld", f[i].field,
				 (long long)f[i].got, (long long)f[i].want);
	if (want->checkpoint.store)
		assert_string_equal(got->checkpoint.store,
				    want->checkpoint.store);
	else
		assert_null(got->checkpoint.store);
}

static void test_defaults(void **state)
{
	struct kn_job_spec *spec = parse_ok(BASE);

	(void)state;
	assert_string_equal(spec->name, "x");
	assert_int_equal(spec->n_command, 1);
	assert_string_equal(spec->command[0], "a");
	assert_null(spec->command[1]);
	assert_int_equal(spec->n_env, 0);
	assert_null(spec->workdir);
	assert_null(spec->resources.mig_profile);
	assert_null(spec->resources.gpu_models);
	expect_scalars(spec, &(struct kn_job_spec){
		.tasks = 1,
		.backoff_ms = 10000,
		.backoff_max_ms = 600000,
		.checkpoint = {.every_ms = 600000, .keep = 3,
			       .grace_ms = 30000, .signal = SIGTERM},
		.placement = {.spread = KN_SPREAD_NONE},
	});
	kn_job_spec_free(spec);
}

static const char FULL[] =
	"apiVersion: kiln/v1\n"
	"kind: Job\n"
	"name: llama-ft.v2_run\n"
	"command: [torchrun, train.py, --epochs, 3, \"\"]\n"
	"env:\n"
	"  LR: 0.001\n"
	"  DEBUG: true\n"
	"  DATA: /data/set\n"
	"  EMPTY: \"\"\n"
	"workdir: /work\n"
	"resources:\n"
	"  gpus: 2\n"
	"  gpu_model: [H100, A100]\n"
	"  cpus: 0.5\n"
	"  memory: 2Gi\n"
	"tasks: 4\n"
	"retries: 3\n"
	"backoff: 30s\n"
	"backoff_max: 1h\n"
	"priority: 1000\n"
	"preemptible: true\n"
	"timeout: 2h30m\n"
	"checkpoint:\n"
	"  every: 5m\n"
	"  keep: 2\n"
	"  store: https://acct.blob.core.windows.net/ckpt\n"
	"  grace: 45s\n"
	"  signal: USR1\n"
	"placement:\n"
	"  selector: {zone: eastus-1, spot: true}\n"
	"  tolerations:\n"
	"    - key: kiln.io/gpu\n"
	"      operator: Exists\n"
	"      effect: NoSchedule\n"
	"    - key: sku\n"
	"      value: nd96\n"
	"    - key: spot\n"
	"      operator: Equal\n"
	"      effect: PreferNoSchedule\n"
	"  spread: fault_domain\n"
	"  affinity:\n"
	"    required:\n"
	"      - {key: zone, operator: In, values: [eastus-1, eastus-2]}\n"
	"      - {key: retiring, operator: DoesNotExist}\n"
	"    preferred:\n"
	"      - {key: sku, operator: NotIn, values: [nc24], weight: 80}\n";

static void test_full_spec(void **state)
{
	struct kn_job_spec *spec = parse_ok(FULL);
	const struct kn_toleration *t;

	(void)state;
	assert_string_equal(spec->name, "llama-ft.v2_run");
	assert_int_equal(spec->n_command, 5);
	assert_string_equal(spec->command[0], "torchrun");
	assert_string_equal(spec->command[3], "3");
	assert_string_equal(spec->command[4], "");
	assert_null(spec->command[5]);
	assert_int_equal(spec->n_env, 4);
	assert_string_equal(spec->env[0].key, "LR");
	assert_string_equal(spec->env[0].value, "0.001");
	assert_string_equal(spec->env[1].key, "DEBUG");
	assert_string_equal(spec->env[1].value, "true");
	assert_string_equal(spec->env[2].value, "/data/set");
	assert_string_equal(spec->env[3].value, "");
	assert_string_equal(spec->workdir, "/work");
	expect_scalars(spec, &(struct kn_job_spec){
		.resources = {.gpu_milli = 2000, .cpu_milli = 500,
			      .memory_bytes = 2LL << 30},
		.tasks = 4,
		.retries = 3,
		.backoff_ms = 30000,
		.backoff_max_ms = 3600000,
		.priority = 1000,
		.preemptible = true,
		.timeout_ms = 9000000,
		.checkpoint = {
			.set = true, .every_ms = 300000, .keep = 2,
			.store = "https://acct.blob.core.windows.net/ckpt",
			.grace_ms = 45000, .signal = SIGUSR1},
		.placement = {.n_selector = 2, .n_tolerations = 3,
			      .spread = KN_SPREAD_FAULT_DOMAIN},
	});
	assert_null(spec->resources.mig_profile);
	assert_int_equal(spec->resources.n_gpu_models, 2);
	assert_string_equal(spec->resources.gpu_models[0], "H100");
	assert_string_equal(spec->resources.gpu_models[1], "A100");
	assert_null(spec->resources.gpu_models[2]);
	assert_string_equal(spec->placement.selector[0].key, "zone");
	assert_string_equal(spec->placement.selector[0].value, "eastus-1");
	assert_string_equal(spec->placement.selector[1].key, "spot");
	assert_string_equal(spec->placement.selector[1].value, "true");
	t = &spec->placement.tolerations[0];
	assert_string_equal(t->key, "kiln.io/gpu");
	assert_string_equal(t->operator_, "Exists");
	assert_null(t->value);
	assert_string_equal(t->effect, "NoSchedule");
	t = &spec->placement.tolerations[1];
	assert_string_equal(t->key, "sku");
	assert_string_equal(t->operator_, "Equal");
	assert_string_equal(t->value, "nd96");
	assert_null(t->effect);
	t = &spec->placement.tolerations[2];
	assert_string_equal(t->operator_, "Equal");
	assert_string_equal(t->value, "");
	assert_string_equal(t->effect, "PreferNoSchedule");
	assert_int_equal(spec->placement.n_required, 2);
	assert_string_equal(spec->placement.required[0].key, "zone");
	assert_int_equal(spec->placement.required[0].op, KN_AFFINITY_IN);
	assert_int_equal(spec->placement.required[0].n_values, 2);
	assert_string_equal(spec->placement.required[0].values[1],
			    "eastus-2");
	assert_int_equal(spec->placement.required[0].weight, 0);
	assert_int_equal(spec->placement.required[1].op,
			 KN_AFFINITY_DOES_NOT_EXIST);
	assert_null(spec->placement.required[1].values);
	assert_int_equal(spec->placement.n_preferred, 1);
	assert_int_equal(spec->placement.preferred[0].op, KN_AFFINITY_NOT_IN);
	assert_string_equal(spec->placement.preferred[0].values[0], "nc24");
	assert_int_equal(spec->placement.preferred[0].weight, 80);
	assert_int_equal(spec->resources.sharing, KN_SHARING_TIME_SLICING);
	kn_job_spec_free(spec);
}

static void test_sharing(void **state)
{
	struct kn_job_spec *spec;

	(void)state;
	spec = parse_ok(BASE "resources: {gpus: 0.25, sharing: mps}\n");
	assert_int_equal(spec->resources.sharing, KN_SHARING_MPS);
	kn_job_spec_free(spec);
	spec = parse_ok(BASE "resources: {sharing: time-slicing, gpus: 0.5}\n");
	assert_int_equal(spec->resources.sharing, KN_SHARING_TIME_SLICING);
	kn_job_spec_free(spec);
	/* The default, and only a share says it. */
	spec = parse_ok(BASE "resources: {gpus: 0.5}\n");
	assert_int_equal(spec->resources.sharing, KN_SHARING_TIME_SLICING);
	kn_job_spec_free(spec);
}

static void test_gpu_forms(void **state)
{
	static const struct {
		const char *gpus;
		int milli;
		const char *mig;
	} cases[] = {
		{"0", 0, NULL},        {"1", 1000, NULL},
		{"8", 8000, NULL},     {"0.5", 500, NULL},
		{".25", 250, NULL},    {"0.001", 1, NULL},
		{"0.9990", 999, NULL}, {"2.0", 2000, NULL},
		{"mig:1g.10gb", 0, "1g.10gb"},
		{"mig:7g.80gb", 0, "7g.80gb"},
		{"\"mig:1g.20gb+me\"", 0, "1g.20gb+me"},
	};
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		char *yaml = kn_asprintf(BASE "resources: {gpus: %s}\n",
					 cases[i].gpus);
		struct kn_job_spec *spec = parse_ok(yaml);

		assert_int_equal(spec->resources.gpu_milli, cases[i].milli);
		if (cases[i].mig)
			assert_string_equal(spec->resources.mig_profile,
					    cases[i].mig);
		else
			assert_null(spec->resources.mig_profile);
		kn_job_spec_free(spec);
		free(yaml);
	}
}

static void test_single_gpu_model_and_cpus(void **state)
{
	struct kn_job_spec *spec =
		parse_ok(BASE "resources:\n  gpus: 1\n  gpu_model: A100\n"
			      "  cpus: 16\n  memory: 512Mi\n  pids: 256\n");

	(void)state;
	assert_int_equal(spec->resources.pids, 256);
	assert_int_equal(spec->resources.n_gpu_models, 1);
	assert_string_equal(spec->resources.gpu_models[0], "A100");
	assert_null(spec->resources.gpu_models[1]);
	assert_int_equal(spec->resources.cpu_milli, 16000);
	assert_int_equal(spec->resources.memory_bytes, 512LL << 20);
	kn_job_spec_free(spec);
}

static void test_json_input(void **state)
{
	struct kn_job_spec *spec =
		parse_ok("{\"kind\":\"Job\",\"name\":\"x\","
			 "\"command\":[\"/bin/true\"]}");

	(void)state;
	assert_string_equal(spec->name, "x");
	assert_string_equal(spec->command[0], "/bin/true");
	kn_job_spec_free(spec);
	spec = parse_ok("{\n  \"kind\": \"Job\",\n  \"name\": \"j\",\n"
			"  \"command\": [\"sh\", \"-c\", \"exit 0\"],\n"
			"  \"tasks\": 2,\n  \"preemptible\": false,\n"
			"  \"env\": {\"N\": 3},\n"
			"  \"resources\": {\"gpus\": 0.25, \"cpus\": 2}\n}\n");
	assert_int_equal(spec->n_command, 3);
	assert_int_equal(spec->tasks, 2);
	assert_false(spec->preemptible);
	assert_string_equal(spec->env[0].value, "3");
	assert_int_equal(spec->resources.gpu_milli, 250);
	assert_int_equal(spec->resources.cpu_milli, 2000);
	kn_job_spec_free(spec);
}

static void assert_json(const struct kn_job_spec *spec, const char *want_text)
{
	json_error_t jerr;
	json_t *want = json_loads(want_text, 0, &jerr);
	json_t *got = kn_job_spec_to_json(spec);

	if (!want)
		fail_msg("bad expected JSON: %s", jerr.text);
	assert_non_null(got);
	if (!json_equal(got, want)) {
		char *dump = json_dumps(got, JSON_SORT_KEYS);
		fail_msg("to_json gave %s", dump);
	}
	json_decref(want);
	json_decref(got);
}

static void test_to_json(void **state)
{
	struct kn_job_spec *spec = parse_ok(FULL);

	(void)state;
	assert_json(
		spec,
		"{\"kind\":\"Job\",\"name\":\"llama-ft.v2_run\","
		"\"command\":[\"torchrun\",\"train.py\",\"--epochs\",\"3\",\"\"],"
		"\"env\":{\"LR\":\"0.001\",\"DEBUG\":\"true\","
		"\"DATA\":\"/data/set\",\"EMPTY\":\"\"},\"workdir\":\"/work\","
		"\"resources\":{\"gpus\":2,\"gpu_milli\":2000,"
		"\"gpu_model\":[\"H100\",\"A100\"],\"cpus\":0.5,"
		"\"cpu_milli\":500,\"memory_bytes\":2147483648,"
		"\"sharing\":null},"
		"\"tasks\":4,\"retries\":3,\"backoff_ms\":30000,"
		"\"backoff_max_ms\":3600000,\"priority\":1000,"
		"\"preemptible\":true,\"timeout_ms\":9000000,"
		"\"checkpoint\":{\"every_ms\":300000,\"keep\":2,"
		"\"store\":\"https://acct.blob.core.windows.net/ckpt\","
		"\"grace_ms\":45000,\"signal\":\"SIGUSR1\"},"
		"\"placement\":{\"selector\":{\"zone\":\"eastus-1\","
		"\"spot\":\"true\"},\"tolerations\":["
		"{\"key\":\"kiln.io/gpu\",\"operator\":\"Exists\","
		"\"value\":null,\"effect\":\"NoSchedule\"},"
		"{\"key\":\"sku\",\"operator\":\"Equal\",\"value\":\"nd96\","
		"\"effect\":null},"
		"{\"key\":\"spot\",\"operator\":\"Equal\",\"value\":\"\","
		"\"effect\":\"PreferNoSchedule\"}],"
		"\"spread\":\"fault_domain\",\"affinity\":{\"required\":["
		"{\"key\":\"zone\",\"operator\":\"In\","
		"\"values\":[\"eastus-1\",\"eastus-2\"]},"
		"{\"key\":\"retiring\",\"operator\":\"DoesNotExist\"}],"
		"\"preferred\":[{\"key\":\"sku\",\"operator\":\"NotIn\","
		"\"values\":[\"nc24\"],\"weight\":80}]}}}");
	kn_job_spec_free(spec);

	spec = parse_ok(BASE "resources: {gpus: 0.5}\ncheckpoint: {}\n");
	assert_json(spec,
		    "{\"kind\":\"Job\",\"name\":\"x\",\"command\":[\"a\"],"
		    "\"env\":{},\"workdir\":null,"
		    "\"resources\":{\"gpus\":0.5,\"gpu_milli\":500,"
		    "\"gpu_model\":[],\"cpus\":0,\"cpu_milli\":0,"
		    "\"memory_bytes\":0,\"sharing\":\"time-slicing\"},"
		    "\"tasks\":1,\"retries\":0,"
		    "\"backoff_ms\":10000,\"backoff_max_ms\":600000,"
		    "\"priority\":0,\"preemptible\":false,\"timeout_ms\":0,"
		    "\"checkpoint\":{\"every_ms\":600000,\"keep\":3,"
		    "\"store\":null,\"grace_ms\":30000,\"signal\":\"SIGTERM\"},"
		    "\"placement\":{\"selector\":{},\"tolerations\":[],"
		    "\"spread\":null,\"affinity\":{\"required\":[],"
		    "\"preferred\":[]}}}");
	kn_job_spec_free(spec);

	spec = parse_ok(BASE "resources: {gpus: \"mig:3g.40gb\"}\n");
	{
		json_t *j = kn_job_spec_to_json(spec);
		json_t *res = json_object_get(j, "resources");

		assert_string_equal(
			json_string_value(json_object_get(res, "gpus")),
			"mig:3g.40gb");
		assert_int_equal(
			json_integer_value(json_object_get(res, "gpu_milli")),
			0);
		assert_true(json_is_null(json_object_get(j, "checkpoint")));
		json_decref(j);
	}
	kn_job_spec_free(spec);
}

static void test_many_env_duplicate_last(void **state)
{
	struct kn_buf buf;
	struct kn_job_spec *spec = NULL;
	struct kn_error err;
	int i;

	(void)state;
	kn_buf_init(&buf, KN_SPEC_MAX_BYTES);
	assert_int_equal(kn_buf_printf(&buf, BASE "env:\n"), 0);
	for (i = 0; i < 2000; i++)
		assert_int_equal(kn_buf_printf(&buf, "  V%d: %d\n", i, i), 0);
	spec = parse_ok(buf.data);
	assert_int_equal(spec->n_env, 2000);
	assert_string_equal(spec->env[1999].key, "V1999");
	kn_job_spec_free(spec);
	spec = NULL;
	assert_int_equal(kn_buf_printf(&buf, "  V7: again\n"), 0);
	assert_int_not_equal(kn_job_spec_parse(buf.data, buf.len, "e.yaml",
					       &spec, &err),
			     0);
	assert_string_equal(err.message,
			    "e.yaml:2005:3: duplicate key \"V7\" in env (first "
			    "at 12:3)");
	assert_string_equal(err.field, "env.V7");
	assert_null(spec);
	kn_buf_release(&buf);
}

static void test_signals(void **state)
{
	(void)state;
	assert_int_equal(kn_signal_from_name("SIGTERM"), SIGTERM);
	assert_int_equal(kn_signal_from_name("TERM"), SIGTERM);
	assert_int_equal(kn_signal_from_name("USR1"), SIGUSR1);
	assert_int_equal(kn_signal_from_name("SIGUSR2"), SIGUSR2);
	assert_int_equal(kn_signal_from_name("HUP"), SIGHUP);
	assert_int_equal(kn_signal_from_name("SIGINT"), SIGINT);
	assert_int_equal(kn_signal_from_name("QUIT"), SIGQUIT);
	assert_int_equal(kn_signal_from_name("KILL"), SIGKILL);
	assert_int_equal(kn_signal_from_name("sigterm"), SIGTERM);
	assert_int_equal(kn_signal_from_name("15"), 15);
	assert_int_equal(kn_signal_from_name("1"), 1);
	assert_int_equal(kn_signal_from_name("64"), 64);
	assert_int_equal(kn_signal_from_name("0"), -1);
	assert_int_equal(kn_signal_from_name("65"), -1);
	assert_int_equal(kn_signal_from_name("99999999999"), -1);
	assert_int_equal(kn_signal_from_name("-1"), -1);
	assert_int_equal(kn_signal_from_name("15x"), -1);
	assert_int_equal(kn_signal_from_name("SIG"), -1);
	assert_int_equal(kn_signal_from_name("FOO"), -1);
	assert_int_equal(kn_signal_from_name(""), -1);
	assert_int_equal(kn_signal_from_name(NULL), -1);
}

/* Paths become file:// URLs against the spec's directory; URLs stay. */
static void test_inputs(void **state)
{
	const char *yaml = BASE "inputs:\n  - data/a.txt\n  - /abs/b.txt\n"
			   "  - file:///srv/c.txt\n"
			   "  - https://acct.blob.core.windows.net/ds/v1/d.bin\n";
	struct kn_job_spec *spec = NULL;
	struct kn_error err;
	json_t *doc, *in;
	char *text;

	(void)state;
	assert_int_equal(kn_job_spec_parse(yaml, strlen(yaml), "job.yaml",
					   &spec, &err),
			 0);
	assert_int_equal(spec->n_inputs, 4);
	assert_string_equal(spec->inputs[0].name, "a.txt");
	assert_null(spec->inputs[0].url);
	assert_int_equal(spec->inputs[0].line, 5);
	assert_int_equal(spec->inputs[0].column, 5);
	assert_string_equal(spec->inputs[3].name, "d.bin");
	assert_string_equal(spec->inputs[3].url,
			    "https://acct.blob.core.windows.net/ds/v1/d.bin");

	/* A relative path needs the directory. */
	assert_int_equal(kn_job_spec_resolve_inputs(spec, NULL, "job.yaml",
						    &err),
			 kn_errcode_errno(KN_EINVAL));
	assert_string_equal(err.message,
			    "job.yaml:5:5: inputs[0]: \"data/a.txt\" is "
			    "relative, and the spec file's directory is "
			    "unknown (submit it from a file, or give an "
			    "absolute path)");
	assert_int_equal(kn_job_spec_resolve_inputs(spec, "/home/u/proj",
						    "job.yaml", &err),
			 0);
	assert_string_equal(spec->inputs[0].url,
			    "file:///home/u/proj/data/a.txt");
	assert_string_equal(spec->inputs[1].url, "file:///abs/b.txt");
	assert_string_equal(spec->inputs[2].url, "file:///srv/c.txt");

	doc = kn_job_spec_to_json(spec);
	in = json_array_get(json_object_get(doc, "inputs"), 0);
	assert_string_equal(json_string_value(json_object_get(in, "input")),
			    "data/a.txt");
	assert_string_equal(json_string_value(json_object_get(in, "name")),
			    "a.txt");
	assert_string_equal(json_string_value(json_object_get(in, "url")),
			    "file:///home/u/proj/data/a.txt");
	json_decref(doc);

	/* The input form keeps them as written. */
	text = kn_job_spec_to_input_text(spec, NULL);
	kn_job_spec_free(spec);
	spec = NULL;
	assert_int_equal(kn_job_spec_parse(text, strlen(text), "again.json",
					   &spec, &err),
			 0);
	free(text);
	assert_int_equal(spec->n_inputs, 4);
	assert_string_equal(spec->inputs[0].text, "data/a.txt");
	assert_string_equal(spec->inputs[3].text,
			    "https://acct.blob.core.windows.net/ds/v1/d.bin");
	kn_job_spec_free(spec);

	/* No inputs: nothing in the normalized JSON. */
	assert_int_equal(kn_job_spec_parse(BASE, strlen(BASE), "job.yaml",
					   &spec, &err),
			 0);
	assert_int_equal(kn_job_spec_resolve_inputs(spec, NULL, "job.yaml",
						    &err),
			 0);
	doc = kn_job_spec_to_json(spec);
	assert_null(json_object_get(doc, "inputs"));
	json_decref(doc);
	kn_job_spec_free(spec);
}

/* Both forms of array:, and the input text reads back the same. */
static void test_arrays(void **state)
{
	static const struct {
		const char *yaml;
		int first, count, parallel;
	} cases[] = {
		{BASE "array: 0-999\n", 0, 1000, 0},
		{BASE "array: \"3-5%2\"\n", 3, 3, 2},
		{BASE "array: 7-7\n", 7, 1, 0},
		{BASE "array: {count: 4, parallel: 9}\n", 0, 4, 4},
		{BASE "array:\n  count: 50\n", 0, 50, 0},
	};
	struct kn_job_array out = {.first = -1};
	char why[160];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct kn_job_spec *spec = NULL, *again = NULL;
		struct kn_error err;
		char *text;

		memset(&err, 0, sizeof(err));
		assert_int_equal(kn_job_spec_parse(cases[i].yaml,
						   strlen(cases[i].yaml),
						   "job.yaml", &spec, &err),
				 0);
		assert_int_equal(spec->array.first, cases[i].first);
		assert_int_equal(spec->array.count, cases[i].count);
		assert_int_equal(spec->array.parallel, cases[i].parallel);
		text = kn_job_spec_to_input_text(spec, NULL);
		assert_int_equal(kn_job_spec_parse(text, strlen(text), "in",
						   &again, &err),
				 0);
		assert_int_equal(again->array.first, cases[i].first);
		assert_int_equal(again->array.count, cases[i].count);
		assert_int_equal(again->array.parallel, cases[i].parallel);
		free(text);
		kn_job_spec_free(again);
		kn_job_spec_free(spec);
	}
	/* A job without array: is no array. */
	{
		struct kn_job_spec *spec = NULL;
		struct kn_error err;

		assert_int_equal(kn_job_spec_parse(BASE, strlen(BASE), "j",
						   &spec, &err),
				 0);
		assert_int_equal(spec->array.count, 0);
		kn_job_spec_free(spec);
	}
	/* The --array form alone; out untouched on error. */
	assert_int_equal(kn_job_array_parse("0-9%", &out, why, sizeof(why)),
			 -EINVAL);
	assert_int_equal(kn_job_array_parse("-1-3", &out, why, sizeof(why)),
			 -EINVAL);
	assert_int_equal(out.first, -1);
	assert_int_equal(kn_job_array_parse("10-19%3", &out, why,
					    sizeof(why)),
			 0);
	assert_int_equal(out.first, 10);
	assert_int_equal(out.count, 10);
	assert_int_equal(out.parallel, 3);
}

static void test_free_null(void **state)
{
	(void)state;
	kn_job_spec_free(NULL);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_bad_specs),
	cmocka_unit_test(test_out_untouched),
	cmocka_unit_test(test_too_big),
	cmocka_unit_test(test_nul_byte_and_length),
	cmocka_unit_test(test_null_filename),
	cmocka_unit_test(test_defaults),
	cmocka_unit_test(test_full_spec),
	cmocka_unit_test(test_gpu_forms),
	cmocka_unit_test(test_single_gpu_model_and_cpus),
	cmocka_unit_test(test_json_input),
	cmocka_unit_test(test_to_json),
	cmocka_unit_test(test_sharing),
	cmocka_unit_test(test_many_env_duplicate_last),
	cmocka_unit_test(test_signals),
	cmocka_unit_test(test_inputs),
	cmocka_unit_test(test_arrays),
	cmocka_unit_test(test_free_null))
