/*
 * bench-launch's control arm (`--control`): a SPANK plugin that registers the same
 * `--gpu-affinity` option and exports the same hooks as gpu_affinity.so, and does
 * nothing in any of them. Against an empty plugstack it measures what loading any
 * SPANK plugin costs srun and slurmstepd on this Slurm, the floor under gpu_affinity.so's
 * own `off` arm. Built by bench-launch with the C compiler, for the cluster's series:
 * CONTROL_PLUGIN_VERSION is that series' SLURM_VERSION_NUMBER, which the loader
 * checks, so no Slurm header is needed.
 */

struct spank_handle;
typedef struct spank_handle *spank_t;

/* spank.h's struct spank_option, unchanged from 22.05 to 26.05. */
struct spank_option {
	const char *name;
	const char *arginfo;
	const char *usage;
	int has_arg;
	int val;
	int (*cb)(int val, const char *optarg, int remote);
};

const char plugin_name[] = "gpu_affinity_control";
const char plugin_type[] = "spank";
const unsigned int plugin_version = CONTROL_PLUGIN_VERSION;
const unsigned int spank_plugin_version = 0;

static int on_option(int val, const char *optarg, int remote)
{
	(void) val;
	(void) optarg;
	(void) remote;
	return 0;
}

struct spank_option spank_options[] = {
	{ "gpu-affinity", "MODE", "bench-launch's no-op control", 1, 0, on_option },
	{ 0, 0, 0, 0, 0, 0 },
};

#define NOOP_HOOK(name) \
	int name(spank_t sp, int ac, char **av) \
	{ \
		(void) sp; \
		(void) ac; \
		(void) av; \
		return 0; \
	}

NOOP_HOOK(slurm_spank_init)
NOOP_HOOK(slurm_spank_init_post_opt)
NOOP_HOOK(slurm_spank_local_user_init)
NOOP_HOOK(slurm_spank_user_init)
NOOP_HOOK(slurm_spank_task_post_fork)
NOOP_HOOK(slurm_spank_task_init)
NOOP_HOOK(slurm_spank_exit)
