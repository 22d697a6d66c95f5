/*
 * exec: where tasks run. Executors sit behind one ops table so the server
 * drives local processes today and Slurm or Kubernetes later the same way.
 *
 * The local executor starts each task under a shim: kiln re-executed as
 * `kiln shim --dir TASK_DIR`, in its own session, that runs the task in its
 * own process group, copies its output into rotated log files, enforces
 * the timeout and the kill grace, and records the exit in TASK_DIR/status.json.
 * The shim does not need the server, so tasks outlive a server crash and a
 * restarted server reads their true outcome from the task directory.
 *
 * Devices: the GPUs of this machine come from NVML (dlopen, so the binary
 * runs where there is none) or are simulated from a spec like "4xH100-80GB".
 */
#ifndef KILN_EXEC_H
#define KILN_EXEC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- devices ---- */

#define KN_MAX_DEVICES 64

struct kn_device_info {
	int index;
	char uuid[96];
	char model[64];       /* normalized: "H100-80GB", "T4-16GB" */
	int64_t memory_bytes;
	/* MIG mode: the GPU is split into instances (simulated with
	   "2xA100-80GB:mig"; NVML's MIG mode is not queried). */
	bool mig;
};

struct kn_device_set {
	struct kn_device_info *devices;
	size_t n;
	bool simulated;
	char source[32]; /* "nvml", "simulated", or "none" */
};

/*
 * Simulated devices from "4xH100-80GB" or "2xA100-80GB,4xT4-16GB": count
 * 1..64 in all, model as FAMILY-<N>GB, and ":mig" after a group puts its
 * GPUs in MIG mode ("2xA100-80GB:mig"). err names the bad group.
 */
int kn_devices_simulated(const char *spec, struct kn_device_set *out,
			 struct kn_error *err);
/*
 * Real devices through NVML. No library, or no GPU: an empty set with
 * source "none" and 0 returned. NVML failures after it loaded are errors.
 */
int kn_devices_discover(struct kn_device_set *out, struct kn_error *err);
void kn_device_set_release(struct kn_device_set *set);
/*
 * kiln's model name for an NVML device name and its memory:
 * "NVIDIA H100 80GB HBM3" -> "H100-80GB", "NVIDIA A100-SXM4-80GB" ->
 * "A100-80GB", "NVIDIA H200" with 140.4 GiB -> "H200-141GB".
 */
void kn_device_model_name(const char *name, int64_t memory_bytes, char *out,
			  size_t len);
/*
 * The device nodes a task with GPUs indexes[0..n) may open: DIR/nvidiaN
 * for each (whether or not it exists yet: the driver may create it on
 * first use), then those of NVIDIA's shared control nodes that exist in
 * DIR (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset). DIR is
 * "/dev" for real GPUs. n 0: no nodes at all. NULL-terminated, freed with
 * kn_strv_free; never NULL.
 */
char **kn_device_nodes(const char *dir, const int *indexes, int n);

/* Where the NVIDIA driver lists the minors of its MIG capability nodes. */
#define KN_MIG_MINORS_FILE "/proc/driver/nvidia-caps/mig-minors"

/*
 * A MIG instance's own capability nodes, appended to nodes (from
 * kn_device_nodes, which has room for them): the access nodes of GPU
 * instance gi and of its compute instance ci on GPU gpu, caps_dir/
 * nvidia-cap<minor>, each minor read from minors (the text of
 * KN_MIG_MINORS_FILE: "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13",
 * one per line). Opening a MIG instance takes both; the nodes of other
 * instances stay closed to the task. A minor that is not there (the
 * instance unknown to the driver, a malformed table) fails with err
 * naming file (and line): the task must not start with more or less.
 */
int kn_device_mig_nodes(char **nodes, const char *caps_dir,
			const char *minors, const char *file, int gpu, int gi,
			int ci, struct kn_error *err);

/* ---- tasks ---- */

/* Log files rotate at this size by default, keeping this many old ones. */
#define KN_LOG_MAX_BYTES (64LL * 1024 * 1024)
#define KN_LOG_KEEP 3
#define KN_LOG_FILE "output.log"
/*
 * When each line of output.log arrived (logtimes.c): records of (offset,
 * wall ms) the shim appends, one per read from the task's pipe that starts
 * a line in a new millisecond, rotated with the log.
 */
#define KN_LOG_TIMES_FILE "output.times"

/* The shim's side: append one record to fd. 0 or -errno. */
int kn_log_times_append(int fd, int64_t offset, int64_t ms);

/*
 * A reader of a times file opened as fd (taken: closed by _free). The
 * records are counted once, at _new: a later one is for a later reader.
 */
struct kn_log_times;
struct kn_log_times *kn_log_times_new(int fd);
void kn_log_times_free(struct kn_log_times *lt);
int64_t kn_log_times_count(const struct kn_log_times *lt);
/* When the line whose first byte is at offset arrived (epoch ms); 0 when
   there are no records. */
int64_t kn_log_times_at(struct kn_log_times *lt, int64_t offset);
/* The offset of the first read at or after ms, or -1 when none is. */
int64_t kn_log_times_since(struct kn_log_times *lt, int64_t ms);

struct kn_job_spec; /* spec/spec.h */

/*
 * What the local shim enforces on a task through a cgroup (src/cgroup):
 * its memory (no swap beyond it), CPUs, processes and devices (only the
 * launch's devices and the standard nodes). Zero = not limited.
 */
struct kn_task_limits {
	const char *cgroup_root;   /* where the hierarchies are mounted */
	const char *cgroup_parent; /* the tasks' parent cgroup */
	int64_t memory_bytes;
	int cpu_milli;
	int64_t pids_max;
};

struct kn_task_launch {
	const char *task_dir;    /* exists; the shim's files go here */
	char *const *argv;       /* NULL-terminated */
	char *const *env;        /* "NAME=value", NULL-terminated: added to the
				    server's environment */
	const char *workdir;     /* NULL = task_dir */
	char *const *devices;    /* device nodes the task may open,
				    NULL-terminated; NULL = none */
	int64_t timeout_ms;      /* 0 = none */
	int64_t grace_ms;        /* SIGTERM to SIGKILL */
	int64_t log_max_bytes;
	int log_keep;
	/* The local executor's cgroup limits, or NULL: none. */
	const struct kn_task_limits *limits;
	/* The task's job, for an engine that reads it itself (Slurm's
	   sbatch options, Kubernetes' manifests): its spec, the job and
	   attempt, this task's rank in a gang of ntasks, and KILN_INPUTS
	   and KILN_REQUIRES for the shim (or NULL). */
	const struct kn_job_spec *spec;
	int64_t job_id;
	int attempt;
	int rank;
	int ntasks;
	const char *inputs;
	const char *requires;
	const char *run_as; /* Unix user the task runs as, or NULL for the server's choice */
	/* run_as as the server resolved it (the local executor as root:
	   launch.json's "user", so the shim does no lookup), or NULL. */
	const struct kn_sandbox_user *user;
	/* Unprivileged (a user namespace): the server's own user's name and
	   home, which its tasks' shims share (launch.json's "server_user",
	   so the shim does no lookup), or NULL. */
	const char *server_user, *server_home;
	/* The sandbox (src/sandbox): the directory it hides ($KILN_HOME,
	   or NULL), and true when the operator chose to run tasks without
	   one (`kiln server --unisolated`). */
	const char *home;
	bool unisolated;
	/* The task's first process gets a terminal (the spec's tty): its
	   shim takes sessions that attach to it. */
	bool tty;
};

/* Enough to find a running task again after a restart. */
struct kn_task_proc {
	int pid;          /* the shim's */
	int64_t start;    /* its start time in clock ticks since boot */
};

struct kn_task_status {
	bool ended;
	int exit_code;    /* -1 when killed by a signal or lost */
	int signal;       /* 0 when it exited */
	char reason[96];  /* "timeout", "lost: ...", or "" */
	/* Ended by the platform taking the machine away (a spot eviction
	   the Kubernetes executor saw), not by the task. */
	bool preempted;
	int64_t started_at_ms;
	int64_t ended_at_ms;
	/* What a task that syncs its own checkpoints (a Kubernetes pod's
	   shim) reported: the last one synced and when it was committed,
	   the one it resumed from and the restore's time; "" and 0 else. */
	char checkpoint[128];
	int64_t checkpoint_at_ms;
	char restored[128];
	int64_t restore_ms;
	/* What such a task uploaded from KILN_OUTPUT_DIR itself: how many
	   files and the sha256 of the JOB/outputs/MANIFEST.json it wrote
	   (the server reads the manifest from the store); 0 and "" else. */
	int outputs_files;
	char outputs_manifest_sha256[65];
};

/*
 * Interactive sessions: a local or Slurm task's shim listens on
 * TASK_DIR.sock, beside the task's directory, where no task's sandbox
 * shows it. The server connects there (under Slurm through srun and
 * kn_session_bridge on the task's node) and relays a client's session in src/mux's
 * frames (docs/api.md); the shim checks the peer is the server's user.
 */
#define KN_SESSION_SOCKET_SUFFIX ".sock"
/*
 * A connected, non-blocking socket to task_dir's shim, whose peer runs
 * as this process's user: the descriptor, or the negative errno of what
 * failed (-ENOENT: no socket yet, -ECONNREFUSED: no shim behind it) with
 * err (KN_EUNAVAIL).
 */
int kn_session_socket_connect(const char *task_dir, struct kn_error *err);
/*
 * `kiln shim --bridge TASK_DIR [--port P]`, on a Slurm task's node in a
 * step that srun started in the task's allocation as the task's user.
 * Without a port: connect to TASK_DIR's session socket (waiting a moment
 * for the shim to listen); one it cannot reach is a mux ERROR frame on
 * stdout, so the client reads why. With port P: first one status byte
 * on stdout (a KN_BRIDGE_PORT_* value), then, when it is OK, the bytes
 * of a connection to 127.0.0.1:P, which a process of the task (the
 * shim's, from TASK_DIR/shim.pid) must hold listening. Then bytes are
 * copied between the connection and stdin/stdout until either side
 * ends. Returns the process's exit status.
 */
enum {
	KN_BRIDGE_PORT_OK = 0,
	KN_BRIDGE_PORT_NOT_THE_TASKS = 1, /* no listener of the task's there */
	KN_BRIDGE_PORT_NO_ANSWER = 2,     /* the connect failed */
	KN_BRIDGE_PORT_NO_TASK = 3,       /* no shim.pid to go by */
};
int kn_session_bridge(const char *task_dir, int port);

/*
 * Whether a process of the task whose shim is shim_pid (the shim's
 * descendants) holds a TCP socket listening on port, IPv4 or IPv6.
 * Blocking (sock_diag and /proc): a worker's or the bridge's.
 */
bool kn_task_port_listening(int shim_pid, int port);

struct kn_executor;
struct kn_deployment_spec; /* spec/spec.h */

/*
 * Deployments an engine runs as its own objects (Kubernetes: a
 * Deployment and a Service): the engine keeps the replicas, rollouts and
 * probes, the server the spec, owners, audit and gateway keys. Loop
 * thread.
 */
struct kn_deploy_ops {
	/* Want deployment spec with `replicas` at generation; spec_changed:
	   the spec itself changed, not only the count. */
	int (*set)(struct kn_executor *ex,
		   const struct kn_deployment_spec *spec, int replicas,
		   int64_t generation, bool spec_changed,
		   struct kn_error *err);
	/* Whether the engine can run spec. */
	int (*check)(struct kn_executor *ex,
		     const struct kn_deployment_spec *spec,
		     struct kn_error *err);
	/* Restart name's replicas, rolling (-ENOENT: not wanted). */
	int (*restart)(struct kn_executor *ex, const char *name,
		       int64_t at_ms, struct kn_error *err);
	void (*remove)(struct kn_executor *ex, const char *name);
	/* Every deployment kept has been set: the engine's others go. */
	void (*loaded)(struct kn_executor *ex);
	/* What the engine last saw of name (a new JSON object), or NULL
	   when name is not wanted. */
	struct json_t *(*status)(struct kn_executor *ex, const char *name);
};

struct kn_executor_ops {
	const char *name;
	/*
	 * What the engine does itself, where the server otherwise would:
	 * places tasks and runs deployments (Kubernetes); syncs checkpoints
	 * and outputs from inside the task (a pod's shim); honours this
	 * placement.selector key (Slurm's "pool", a partition) or NULL;
	 * needs the home searchable (o+x) for a task's user to reach its
	 * directory (Slurm); reports the times the engine accounted in the
	 * tasks' statuses, so that an attempt runs from its tasks' first
	 * start to their last end rather than from the server's launch
	 * (Slurm: the allocation's Start and End in sacct).
	 */
	bool places_tasks;
	bool syncs_checkpoints;
	const char *selector_key;
	bool home_searchable;
	bool times_from_engine;
	/*
	 * The engine runs a job array's elements as one array of its own
	 * (Slurm's sbatch --array): the server starts every queued element
	 * at once, charging no placement for them and leaving the array's
	 * parallel limit to the engine, and calls flush after its starts.
	 */
	bool runs_arrays;
	/*
	 * Hand the engine what start and stop collected since the last call
	 * (the elements started as one engine array, their cancels as one
	 * command). Never waits. NULL: start and stop act at once.
	 */
	void (*flush)(struct kn_executor *ex);
	/*
	 * When tasks are not processes of this machine: the nodes answer's
	 * isolation (the engine's) and why the server sets no resource
	 * limits; NULL for tasks the server isolates, limits and samples.
	 */
	const char *isolation;
	const char *limits;
	/* Start one task; on success *out identifies it. */
	int (*start)(struct kn_executor *ex,
		     const struct kn_task_launch *launch,
		     struct kn_task_proc *out, struct kn_error *err);
	/*
	 * Ask a task to stop: its process group gets signo, then SIGKILL
	 * after grace_ms (signo 0 and grace_ms < 0: SIGTERM and the launch's
	 * grace). A task already gone is not an error.
	 */
	int (*stop)(struct kn_executor *ex, const char *task_dir,
		    const struct kn_task_proc *proc, int signo,
		    int64_t grace_ms, struct kn_error *err);
	/* Read a task's state from its directory and process. */
	int (*status)(struct kn_executor *ex, const char *task_dir,
		      const struct kn_task_proc *proc,
		      struct kn_task_status *out, struct kn_error *err);
	/*
	 * Find a task again from its directory after a server restart:
	 * 0 and *out, or -ENOENT when it was never started there.
	 */
	int (*adopt)(struct kn_executor *ex, const char *task_dir,
		     struct kn_task_proc *out, struct kn_error *err);
	/*
	 * Whether the engine can run spec: 0, or -EINVAL with err naming
	 * the field it refuses (the local executor runs no image; a
	 * Kubernetes spec must render). NULL: it runs any valid spec.
	 */
	int (*check)(struct kn_executor *ex, const struct kn_job_spec *spec,
		     struct kn_error *err);
	/* Release impl (NULL: nothing to release). */
	void (*release)(struct kn_executor *ex);
	/* Deployments the engine runs itself, or NULL: the server runs
	   each replica as a job of its own. */
	const struct kn_deploy_ops *deployments;
	/*
	 * The engine's own inventory of nodes (Slurm's), or NULL where the
	 * server's nodes are its own. Never waits: starts a reading when
	 * one is due (refresh: now), takes in one that has finished, and
	 * returns the inventory when it differs from what the last call
	 * returned, else NULL. Valid until the next call.
	 */
	const struct kn_slurm_inventory *(*inventory)(struct kn_executor *ex,
						       bool refresh);
	/*
	 * Whether the engine could ever run spec on the nodes it last read:
	 * 0, or -ENOSPC with err (the 409 of a submission). NULL, or no
	 * reading yet: no judgement.
	 */
	int (*admit)(struct kn_executor *ex, const struct kn_job_spec *spec,
		     struct kn_error *err);
	/*
	 * Take node name out of the engine's service (drain: no new work,
	 * running work ends as it will) with reason, or put it back. The
	 * engine acts on it without the server waiting; the next reading
	 * shows it. NULL: nodes are the server's alone.
	 */
	int (*set_node)(struct kn_executor *ex, const char *name, bool drain,
			const char *reason, struct kn_error *err);
	/*
	 * A connected, non-blocking stream to a running task's shim that
	 * carries one interactive session in src/mux's frames: the
	 * descriptor, or a negative errno with err (KN_EUNAVAIL); -ENOENT
	 * or -ECONNREFUSED while the shim does not listen yet. Local: the
	 * shim's socket; Slurm: srun joining the allocation on the task's
	 * node (`kiln shim --bridge`); Kubernetes: a thread of the server
	 * that plays the shim over the API server's pods/exec or
	 * pods/attach. NULL: the engine takes no sessions (tty jobs are
	 * refused at submission).
	 */
	int (*session_connect)(struct kn_executor *ex, const char *task_dir,
			       struct kn_error *err);
	/*
	 * For an engine whose tasks are not processes of this machine: a
	 * connected, non-blocking stream to the bridge of port (Slurm: srun
	 * and `kiln shim --bridge --port`; Kubernetes: a thread over the
	 * API server's pods/portforward), whose first byte is a
	 * KN_BRIDGE_PORT_* status: the descriptor or a negative errno with
	 * err. NULL: the server connects to its own tasks' ports itself,
	 * or (with isolation set) takes no port-forward.
	 */
	int (*port_connect)(struct kn_executor *ex, const char *task_dir,
			    int port, struct kn_error *err);
};

/* One executor: its engine's ops and that engine's own state. */
struct kn_executor {
	const struct kn_executor_ops *ops;
	void *impl;
};

/* An instance of ops with impl, the engine's state (may be NULL). */
struct kn_executor *kn_executor_new(const struct kn_executor_ops *ops,
				    void *impl);
/* Releases the engine's state (ops->release) and ex; NULL is a no-op. */
void kn_executor_free(struct kn_executor *ex);

/*
 * TASK_DIR/stop.json, which a task's shim reads when it is asked to stop
 * (whatever the engine): the signal for the task (0 or less: the
 * launch's) and the grace before SIGKILL (< 0: the launch's). A file
 * rather than a second signal keeps the request whole if the shim is
 * busy, and it stays for a shim that has not yet blocked its signals.
 * 0 or the error, naming the file.
 */
int kn_task_stop_request(const char *task_dir, int signo, int64_t grace_ms,
			 struct kn_error *err);
/* Tasks as processes of this machine, each under its shim. */
struct kn_executor *kn_local_executor_new(void);

/*
 * The Slurm executor (src/exec/slurm.c): one sbatch per attempt carries the
 * whole gang; its batch step is `srun kiln shim --slurm ATTEMPT_DIR`, so
 * each task runs under the same shim as locally, inside the allocation,
 * and writes the same files into its task directory (which must be on a
 * file system the server shares with the nodes). sbatch, scancel and
 * scontrol run as child processes the server never waits for: start and
 * stop return at once, status reads files, and what Slurm says comes from
 * `scontrol show job -o` written by a child into the attempt directory.
 */
struct kn_slurm_task {
	int rank;                /* this task; the last one submits */
	int ntasks;              /* the gang: --ntasks */
	int gpus;                /* whole GPUs per task: --gpus-per-task */
	int shards;              /* a share: --gres=shard:N per task */
	const char *mig_profile; /* --gres=gpu:PROFILE:1, or NULL */
	int cpus;                /* --cpus-per-task, 0 = Slurm's default */
	int64_t memory_mb;       /* per task (--mem-per-cpu), 0 = default */
	const char *partition;   /* --partition, or NULL for the default */
	bool requeue;            /* --requeue (preemptible), else --no-requeue */
	int checkpoint_signal;   /* --signal=B:SIG@GRACE and the shim's
				    timeout signal; 0 = SIGTERM */
	int64_t checkpoint_grace_ms;
	const char *image;       /* --container-image (pyxis), or NULL */
	const char *job_name;    /* --job-name */
	/* --uid and --gid (a root server submitting for the task's user);
	   ignored unless run_as_set */
	bool run_as_set;
	uid_t uid;
	gid_t gid;
	/* A job array's elements: --array's list ("0-999%50"), or NULL.
	   The batch script and its output (%A_%a) are then the array's. */
	const char *array;
};

struct kn_slurm_inventory; /* below */

/*
 * One run of a Slurm job in Slurm's accounting (src/exec/sacct.c), from
 *   SLURM_TIME_FORMAT=%s sacct -n -P -X -D -j ID -o KN_SACCT_FORMAT
 * Times are seconds since the epoch, 0 when Slurm has none ("Unknown",
 * "None"); the counts are AllocTRES's totals, 0 when absent.
 */
#define KN_SACCT_FORMAT "JobIDRaw,State,ExitCode,Start,End,ElapsedRaw,AllocTRES"
struct kn_sacct_job {
	long long job_id;
	char state[32];  /* "COMPLETED", "FAILED", "CANCELLED", ... */
	int exit_code;   /* ExitCode's code (the batch script's) */
	int signal;      /* and its signal */
	int64_t start_s;
	int64_t end_s;
	int64_t elapsed_s;
	int64_t cpus;
	int64_t gpus;    /* gres/gpu */
	int64_t shards;  /* gres/shard */
	int64_t nodes;
	int64_t mem_mb;
};
/*
 * job_id's record in text, that output: 1 and *out (of several runs, the
 * first that started: kiln's attempt, not the run a requeue queued
 * again), 0 when it has none, or -EINVAL with err naming the line and
 * column of a line that is not sacct's.
 */
int kn_sacct_parse(const char *text, long long job_id,
		   struct kn_sacct_job *out, struct kn_error *err);

/*
 * What the Slurm executor takes from the server's options: gres.conf's
 * shards per GPU (a share of a GPU asks for that many), and the partition
 * map "KEY=PARTITION,..." with keys "default", "spot" (preemptible jobs)
 * and "pool:NAME" (jobs whose placement.selector has pool: NAME), or NULL.
 */
#define KN_SLURM_PARTITION_KEY_MAX 128 /* a map key's bytes, and one more */
struct kn_slurm_config {
	int shards_per_gpu;
	const char *partitions;
	/* Where the inventory's readings are written (the server's
	   HOME/slurm), or NULL: no inventory. */
	const char *state_dir;
};

/*
 * sbatch options for the task l launches (its spec, rank and ntasks):
 * GPUs, a share as shards or a MIG profile, CPUs, memory, requeue, image,
 * checkpoint signal, and the partition of the first of pool, spot and
 * default that the map has (none: Slurm's default). out->partition
 * points into partition (len bytes), which must outlive out.
 */
void kn_slurm_task_fill(const struct kn_slurm_config *cfg,
			const struct kn_task_launch *l,
			struct kn_slurm_task *out, char *partition,
			size_t len);

/* Slurm job states that are over (scontrol's JobState=). */
bool kn_slurm_state_final(const char *state);
/*
 * The first host of a Slurm host list: "gpu[03-05,9],cpu1" -> "gpu03".
 * out gets "" for an empty list.
 */
void kn_slurm_first_host(const char *nodelist, char *out, size_t len);
/*
 * The node a Slurm task's shim runs on, from the text of its
 * TASK_DIR.node (len bytes, not terminated): one node name and at most
 * a newline after it. 0 and out (len_out bytes with the NUL), or -EINVAL
 * when it is anything else: the name goes to srun's --nodelist, so it
 * must be a node name (letters, digits, '.', '_', '-', never first one
 * of the last three), never an option or a list.
 */
int kn_slurm_node_file_parse(const char *text, size_t len, char *out,
			     size_t len_out);
/*
 * sbatch's command line for a gang, "sbatch" first, the batch script
 * (ATTEMPT_DIR/slurm.sh) last; NULL-terminated, freed with
 * kn_strv_free. timeout_ms 0 = no --time. With t->array,
 * attempt_dir is the array's directory and each element's output goes to
 * its out/slurm-%A_%a.out. The job gets only the
 * variables named in --export (PATH, the locale and kiln's own), never
 * the server's environment.
 */
char **kn_slurm_sbatch_args(const struct kn_slurm_task *t,
			    int64_t timeout_ms, const char *attempt_dir);

/* ---- Slurm job arrays (slurm_elements.c) ---- */

/*
 * What the executor asks of a Slurm job array, every element on a line:
 *   squeue -h -r -t all -j ARRAY_JOB_ID -o KN_SQUEUE_ELEMENTS_FORMAT
 */
#define KN_SQUEUE_ELEMENTS_FORMAT "%K|%A|%T|%r"
struct kn_slurm_element {
	int index;          /* SLURM_ARRAY_TASK_ID */
	long long job_id;   /* the element's own job id */
	char state[32];     /* "PENDING", "RUNNING", "COMPLETED", ... */
	char reason[96];    /* squeue's %r, control bytes made '?' */
};
struct kn_slurm_elements {
	struct kn_slurm_element *v; /* sorted by index */
	size_t n;
	bool gone;          /* Slurm no longer knows the array */
};
/*
 * squeue's answer (len bytes) into *out. A line that is not
 * INDEX|JOBID|STATE|REASON with a bounded index and job id and an
 * upper-case state is -EINVAL with err naming its line and column;
 * "N/A" indexes (no array) are passed over. *out only on success.
 */
int kn_slurm_elements_parse(const char *text, size_t len,
			    struct kn_slurm_elements *out,
			    struct kn_error *err);
/* Element index of e, or NULL when the answer does not list it. */
const struct kn_slurm_element *
kn_slurm_elements_find(const struct kn_slurm_elements *e, int index);
void kn_slurm_elements_release(struct kn_slurm_elements *e);
/*
 * sbatch's --array list for indexes (n, ascending): runs folded into
 * ranges, "%P" after when parallel > 0: {0,1,2,5}, 2 -> "0-2,5%2".
 * Malloc'd.
 */
char *kn_slurm_array_list(const int *indexes, size_t n, int parallel);

/*
 * Whether cfg is one the executor can use: shards per GPU in 1..1000, and
 * every map entry KEY=PARTITION with a key above; err names the field.
 */
int kn_slurm_config_check(const struct kn_slurm_config *cfg,
			  struct kn_error *err);
/* cfg is copied (checked first with kn_slurm_config_check). */
struct kn_executor *kn_slurm_executor_new(const struct kn_slurm_config *cfg);

/* ---- Slurm's inventory (slurm_inventory_parse.c) ---- */

/*
 * What the server reads of a Slurm cluster: its nodes from `sinfo --json`
 * (22.05 has it; scontrol there has no --json, and its -o text cannot be
 * split on spaces: Reason= and OS= hold them), and its partitions' limits
 * from `scontrol show partition -o` (sinfo --json has none there).
 */
#define KN_SLURM_GRES_MAX 16

/* One GRES of a node: "gpu:a100:4", "shard:64", "gpu:1g.10gb:2". */
struct kn_slurm_gres {
	char name[16];  /* "gpu", "shard", ... */
	char type[48];  /* "a100", "1g.10gb", or "" */
	int64_t count;
	int64_t used;
	bool mig;       /* a gpu whose type is a MIG profile ("1g.10gb",
			   "a100_1g.10gb") */
};

struct kn_slurm_node {
	char name[64];
	/* As sinfo %T says it, without its suffixes: idle, mixed,
	   allocated, completing, drained, draining, down, future, unknown. */
	char state[16];
	char flags[96];    /* Slurm's state flags: "DRAIN,NOT_RESPONDING" */
	char reason[192];  /* why it is drained or down, or "" */
	char partitions[256];
	char features[256];
	int cpus, cpus_alloc;
	int64_t memory_mb, memory_alloc_mb;
	struct kn_slurm_gres gres[KN_SLURM_GRES_MAX];
	size_t n_gres;
	/* Slurm would start a new job on it: idle, mixed or allocated, and
	   neither draining nor unresponsive. */
	bool schedulable;
};

struct kn_slurm_partition {
	char name[64];
	bool is_default;
	bool up;
	int64_t max_time_min;        /* -1: UNLIMITED */
	int max_nodes;               /* -1: UNLIMITED */
	int max_cpus_per_node;       /* -1: UNLIMITED */
	int64_t max_mem_per_node_mb; /* -1: UNLIMITED */
};

struct kn_slurm_inventory {
	struct kn_slurm_node *nodes;
	size_t n_nodes;
	struct kn_slurm_partition *partitions;
	size_t n_partitions;
};

/*
 * The nodes of `sinfo --json` (len bytes of text) into inv->nodes, which
 * they replace. A document that is not sinfo's, or a node without a name,
 * is -EINVAL with err naming the field; unknown fields are ignored.
 */
int kn_slurm_nodes_parse(const char *text, size_t len,
			 struct kn_slurm_inventory *inv, struct kn_error *err);
/*
 * The partitions of `scontrol show partition -o` (one "PartitionName=..."
 * line each) into inv->partitions, which they replace. A line without a
 * name, or a limit that is not a number, a time or UNLIMITED, is -EINVAL
 * with err naming the line and field.
 */
int kn_slurm_partitions_parse(const char *text, size_t len,
			      struct kn_slurm_inventory *inv,
			      struct kn_error *err);
void kn_slurm_inventory_release(struct kn_slurm_inventory *inv);
/* A node's whole GPUs (gpu GRES that are not MIG instances). */
int64_t kn_slurm_node_gpus(const struct kn_slurm_node *n);
/* The GPU type of a node's first typed whole-GPU GRES, or "". */
const char *kn_slurm_node_gpu_type(const struct kn_slurm_node *n);
/* A MIG instance GRES's profile: "1g.10gb" of "a100_1g.10gb" or of
   "1g.10gb". */
const char *kn_slurm_gres_mig_profile(const struct kn_slurm_gres *g);
/*
 * sbatch's --time for a task: a backstop one minute after its timeout
 * plus the checkpoint grace, in minutes; 0 when timeout_ms is 0.
 */
int64_t kn_slurm_time_minutes(const struct kn_slurm_task *t,
			      int64_t timeout_ms);
/*
 * Whether the gang t (with its --time from timeout_ms) could ever run in
 * its partition (t->partition, else inv's default one), every node of it
 * empty and up: 0, or -ENOSPC with why (len bytes) naming the partition's
 * limits and its largest node. A partition inv does not have is -ENOENT
 * with why naming those it has. No partitions known: 0.
 */
int kn_slurm_admit(const struct kn_slurm_inventory *inv,
		   const struct kn_slurm_task *t, int64_t timeout_ms,
		   char *why, size_t len);

/*
 * `kiln shim --slurm ATTEMPT_DIR`, run by srun once per task: picks the
 * task directory ATTEMPT_DIR/$SLURM_PROCID, sets RANK, WORLD_SIZE,
 * LOCAL_RANK, NODE_RANK and MASTER_ADDR from Slurm's variables, keeps the
 * CUDA_VISIBLE_DEVICES Slurm set, then runs kn_shim_main_prepared with
 * prep (may be NULL). A task that has already recorded its exit (Slurm
 * restarted a finished attempt) is not run again. Returns 0 with
 * *task_exit, the task's exit status as a shell gives it (code, or 128 +
 * signal), which the shim exits with so that Slurm's accounting (sacct's
 * ExitCode) holds the task's; else the shim's own failure, with err.
 */
struct kn_shim_prepare;
int kn_slurm_shim_main(const char *attempt_dir,
		       const struct kn_shim_prepare *prep, int *task_exit,
		       struct kn_error *err);

/*
 * Work the shim does before it starts the task (`kiln shim` fetches a
 * workflow step's inputs): fn gets the task's environment and the task
 * log's descriptor for what to tell the task's owner; it returns 0, or a
 * negative errno with why (len bytes) filled, and the task then ends
 * unstarted with exit code 1 and why as its reason.
 */
/* A task's reason when a workflow step's prerequisite is not met. */
#define KN_PREREQUISITE_PREFIX "prerequisite: "
struct kn_shim_prepare {
	int (*fn)(void *arg, char *const *env, int log_fd, char *why,
		  size_t len);
	void *arg;
};
/*
 * The shim's body (`kiln shim --dir DIR`), with prep (may be NULL) run
 * before the task starts: returns the process exit code.
 */
int kn_shim_main_prepared(const char *task_dir,
			  const struct kn_shim_prepare *prep,
			  struct kn_error *err);
/*
 * Whether a task with environment env needs `kiln shim`'s prep (its
 * KILN_INPUTS to fetch, its KILN_REQUIRES to check), which kiln-shim, the
 * lean shim, does not link: the local executor starts `kiln shim` then.
 */
bool kn_shim_needs_prepare(char *const *env);
/*
 * `kiln shim --kube`, a Kubernetes pod's first process: writes
 * TASK_DIR/launch.json for argv (NULL-terminated; run in the current
 * directory, the container's workingDir, with the pod's environment and
 * its output on stdout, the container's log) and runs
 * kn_shim_main_prepared. stop_signal (0: none) is a stop: passed on to
 * the task, then SIGKILL after grace_ms. *exit_code gets what the
 * container should exit with: the task's exit code, or 128 + the signal
 * that ended it, and reason (len bytes) the shim's reason ("timeout",
 * why prep failed, or ""). 0, or a negative errno with err when the
 * shim failed.
 */
int kn_kube_shim_run(const char *task_dir, char *const *argv,
		     int stop_signal, int64_t grace_ms,
		     const struct kn_shim_prepare *prep, int *exit_code,
		     char *reason, size_t len, struct kn_error *err);
/*
 * Block the signals a task's shim handles: a child's end, a stop
 * (SIGTERM, SIGINT, SIGHUP, and stop_signal when > 0) and Slurm's
 * SIGUSR1 and SIGUSR2, passed on. Before any thread starts, so only the
 * shim's signalfd takes them.
 */
void kn_shim_signals_block(int stop_signal, sigset_t *mask);
/* Write TASK_DIR/shim.pid ("PID START") for the calling process. */
int kn_shim_record_pid(const char *task_dir);

#endif
