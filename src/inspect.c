/* cudasnap inspect: what the GPU part of a checkpoint holds, and whether it
 * would restore on this node. */
#include "cli.h"
#include "inspect.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void inspect_usage(FILE *f)
{
	fprintf(f,
		"Usage: %s inspect PATH [--json] [--timeout SEC] [--max-bytes SIZE]\n"
		"                [--max-ratio N]\n"
		"Say what the GPU part of a checkpoint holds (each process, the GPUs it saw\n"
		"and used, the GPU memory its checkpoint moved, the GPUs, the driver and the\n"
		"cudasnap that wrote it, when), and whether it would restore on this node.\n"
		"PATH is a CRIU images directory (criu dump -D DIR), or a checkpoint archive:\n"
		"a tar, plain or compressed (gzip, zstd, xz, bzip2, lz4), with the images at\n"
		"its top or under checkpoint/ (podman container checkpoint --export=FILE, the\n"
		"kubelet's checkpoint-*.tar). Only CRIU's inventory, cudasnap's record and the\n"
		"engine's config.dump and spec.dump are kept; nothing is unpacked. An archive\n"
		"is read to its end, as an extractor reads it, in a process of its own within\n"
		"%llu MiB of memory and the bounds below; one that holds one of those files\n"
		"twice (under any name that means it: checkpoint//x, checkpoint/./x), a name\n"
		"with '..', or a link where one of them or checkpoint/ belongs is refused\n"
		"(exit status 2), and so is a directory with such a link.\n"
		"The verdict makes the checks of the CRIU plugin's restore: the plugin in\n"
		"CRIU's plugin directory (and not CRIU's own cuda_plugin.so beside it), the\n"
		"driver (the checkpoint API, not older than the one that checkpointed, GPU\n"
		"remapping where needed), the GPUs (here, or stand-ins: CUDASNAP_DEVICE_MAP,\n"
		"else as the plugin chooses them), and the free memory of each GPU for the\n"
		"processes restored onto it.\n\n"
		"Options:\n"
		"  --json            print one JSON object on stdout\n"
		"  --timeout SEC     give up reading an archive after SEC seconds (default\n"
		"                    %.0f; 0: no bound)\n"
		"  --max-bytes SIZE  decompress at most SIZE bytes of an archive (K, M, G, T:\n"
		"                    binary multiples; default 1T; 0: no bound)\n"
		"  --max-ratio N     refuse a compressed archive that expands more than N\n"
		"                    times, once %llu MiB are decompressed (default %u;\n"
		"                    0: no bound)\n"
		"  -h, --help        show this help\n\n"
		"Environment:\n"
		"  CUDASNAP_LIBARCHIVE         path of libarchive, to read archives (default:\n"
		"                              libarchive.so.13)\n"
		"  CUDASNAP_DEVICE_MAP         the map the CRIU plugin restores onto (also from\n"
		"                              /etc/cudasnap/cudasnap.conf)\n"
		"  CUDASNAP_CRIU_PLUGIN_DIR    CRIU's plugin directory, where the verdict looks\n"
		"                              for the plugins (default: %s)\n\n"
		"Exit status: 0 it would restore here, or it has no GPU part; 1 it would not\n"
		"(every reason printed); 2 PATH is not a checkpoint, cannot be read or passed\n"
		"a bound (named), or a usage error.\n",
		cs_prog, CS_INSPECT_MAX_MEMORY >> 20, CS_INSPECT_SECONDS, CS_INSPECT_RATIO_AFTER >> 20,
		CS_INSPECT_MAX_RATIO, CS_CRIU_PLUGIN_DIR);
}

/* "64", "512M", "1T": bytes, with binary multiples. */
static int parse_size(const char *s, unsigned long long *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		return -EINVAL;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	static const char units[] = "KMGT";
	const char *u = *end ? strchr(units, *end) : NULL;
	if (*end && (!u || end[1]))
		return -EINVAL;
	unsigned shift = u ? 10 * (unsigned)(u - units + 1) : 0;
	if (shift && v > (~0ULL >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

enum { OPT_JSON = 1000, OPT_TIMEOUT, OPT_MAX_BYTES, OPT_MAX_RATIO };

static int parse_opt(int c, cs_archive_bounds *b, bool *json)
{
	long v;
	switch (c) {
	case OPT_JSON: *json = true; return CLI_GO_ON;
	case OPT_TIMEOUT:
		if (cs_parse_long(optarg, 0, 86400L * 7, &v) < 0) {
			cli_errorf(NULL, "inspect: --timeout takes whole seconds from 0, not '%s'", optarg);
			return cli_usage_error("inspect");
		}
		b->seconds = (double)v;
		return CLI_GO_ON;
	case OPT_MAX_BYTES:
		if (parse_size(optarg, &b->lim.max_bytes) < 0) {
			cli_errorf(NULL, "inspect: --max-bytes takes a size (64G, 1T; 0: no bound), not '%s'", optarg);
			return cli_usage_error("inspect");
		}
		return CLI_GO_ON;
	case OPT_MAX_RATIO:
		if (cs_parse_long(optarg, 0, 1L << 30, &v) < 0) {
			cli_errorf(NULL, "inspect: --max-ratio takes a whole number from 0, not '%s'", optarg);
			return cli_usage_error("inspect");
		}
		b->lim.max_ratio = (unsigned)v;
		return CLI_GO_ON;
	default: return cli_usage_error("inspect");
	}
}

static int parse_args(int argc, char **argv, const char **path, bool *json, cs_archive_bounds *b)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "max-bytes", required_argument, NULL, OPT_MAX_BYTES },
		{ "max-ratio", required_argument, NULL, OPT_MAX_RATIO },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	*json = false;
	cs_inspect_default_bounds(b);
	for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
		if (c == 'h') {
			inspect_usage(stdout);
			return EXIT_DONE;
		}
		int rc = parse_opt(c, b, json);
		if (rc != CLI_GO_ON)
			return rc;
	}
	if (argc - optind != 1) {
		cli_errorf(NULL, "inspect takes one PATH, a CRIU images directory or a checkpoint archive");
		return cli_usage_error("inspect");
	}
	*path = argv[optind];
	return CLI_GO_ON;
}

static const char *size_text(unsigned long long bytes, char *buf, size_t size)
{
	if (bytes >= 1ULL << 30)
		snprintf(buf, size, "%.2f GiB", (double)bytes / (1ULL << 30));
	else
		snprintf(buf, size, "%.1f MiB", (double)bytes / (1ULL << 20));
	return buf;
}

static void print_source(const cs_inspect *c)
{
	char where[64] = "";
	if (c->images[0])
		snprintf(where, sizeof(where), ", CRIU images under %s", c->images);
	if (c->archive)
		printf("checkpoint: %s (%s%star archive%s)\n", c->path, c->filters, c->filters[0] ? " " : "", where);
	else
		printf("checkpoint: %s (directory%s)\n", c->path, where);
	const cs_ckpt_meta *m = &c->meta;
	if (!cs_ckpt_meta_any(m))
		return;
	printf("container:  %s", m->name[0] ? m->name : m->k8s_container[0] ? m->k8s_container : "(unnamed)");
	if (m->pod[0])
		printf(" (Kubernetes pod %s%s%s)", m->pod, m->pod_namespace[0] ? " in namespace " : "",
		       m->pod_namespace);
	if (m->image[0])
		printf("; image %s", m->image);
	printf("\n");
}

static void print_record(const cs_manifest *m)
{
	char cuda[16], b[32];
	cs_cuda_version_text(m->driver_version, cuda, sizeof(cuda));
	printf("written:    %s by cudasnap %s, driver CUDA %s\n", m->created[0] ? m->created : "(time not recorded)",
	       m->cudasnap_version[0] ? m->cudasnap_version : "(version not recorded: an older cudasnap)", cuda);
	if (!m->gpus_known)
		printf("GPUs:       not recorded (a record of an older cudasnap)\n");
	for (size_t k = 0; k < m->ngpus; k++)
		printf("%s%s  %s  %s\n", k ? "            " : "GPUs:       ", m->gpus[k].uuid,
		       m->gpus[k].name[0] ? m->gpus[k].name : "(model not recorded)",
		       m->gpus[k].memory_total ? size_text(m->gpus[k].memory_total, b, sizeof(b)) : "");
	unsigned long long sum = 0;
	for (size_t i = 0; i < m->n; i++)
		sum += m->e[i].bytes;
	printf("processes:  %zu, %s of GPU memory moved\n", m->n, size_text(sum, b, sizeof(b)));
	for (size_t i = 0; i < m->n; i++) {
		const cs_manifest_entry *e = &m->e[i];
		printf("  pid %d (%s): moved %s; saw %s", (int)(e->nspid ? e->nspid : e->pid), e->comm,
		       e->bytes || e->bytes_known ? size_text(e->bytes, b, sizeof(b)) : "an unrecorded amount",
		       e->gpus[0] ? e->gpus : "no GPU recorded");
		if (!e->use_known)
			printf("; used: not recorded");
		for (unsigned k = 0; e->use_known && k < e->nuse; k++)
			printf("%s%s%s%s%s", k ? ", " : "; used ", e->use[k].uuid, e->use[k].bytes ? " (" : "",
			       e->use[k].bytes ? size_text(e->use[k].bytes, b, sizeof(b)) : "",
			       e->use[k].bytes ? ")" : "");
		printf("\n");
	}
}

static void print_node(const cs_manifest *m, const cs_verdict *v)
{
	char cuda[16], b[32], f[32];
	cs_cuda_version_text(v->driver_version, cuda, sizeof(cuda));
	if (v->driver_loaded)
		printf("this node:  driver CUDA %s (%s)%s%s; %zu GPU%s\n", cuda,
		       v->can_remap ? "remaps GPUs" : "cannot remap GPUs", v->nvidia_driver[0] ? ", NVIDIA " : "",
		       v->nvidia_driver, v->ngpus, v->ngpus == 1 ? "" : "s");
	else
		printf("this node:  no driver that can restore; %zu GPU%s\n", v->ngpus, v->ngpus == 1 ? "" : "s");
	if (v->criu_plugin)
		printf("  CRIU plugins: %s/%s%s\n", v->criu_plugin_dir, CS_CRIU_PLUGIN_FILE,
		       v->criu_cuda_plugin ? ", and CRIU's own " CS_CRIU_CUDA_PLUGIN_FILE " beside it" : "");
	else
		printf("  CRIU plugins: no %s in %s\n", CS_CRIU_PLUGIN_FILE, v->criu_plugin_dir);
	for (size_t k = 0; k < v->ngpus; k++) {
		const cs_nvml_gpu *g = &v->gpus[k];
		printf("  GPU %u  %s  %s  ", g->index, g->name, g->uuid);
		if (g->memory_known)
			printf("%s free of %s\n", size_text(g->memory_free, f, sizeof(f)),
			       size_text(g->memory_total, b, sizeof(b)));
		else
			printf("free memory unknown\n");
	}
	for (size_t k = 0; k < v->automap.nstand_in; k++)
		if (v->automap.stand_in[k].onto)
			printf("  %s is not here: restored onto GPU %u (%s)\n", v->automap.stand_in[k].absent,
			       v->automap.stand_in[k].onto->index, v->automap.stand_in[k].onto->uuid);
	if (v->map_from_settings)
		printf("  restored onto CUDASNAP_DEVICE_MAP=%s\n", v->device_map);
	static const char *const fits[] = {
		[CS_GPU_FITS] = "fits",
		[CS_GPU_SHORT] = "does NOT fit",
		[CS_GPU_ABSENT] = "that GPU is NOT here",
		[CS_GPU_ROOM_UNKNOWN] = "not judged",
		[CS_GPU_NONE] = "fits",
	};
	for (size_t i = 0; v->judged && i < m->n; i++) {
		const cs_target *t = &v->t[i];
		int verdict = v->room[i].verdict;
		for (unsigned k = 0; k < t->nneed; k++) {
			const cs_nvml_gpu *g = cs_gpu_by_uuid(v->gpus, v->ngpus, t->need[k].uuid);
			char onto[64];
			if (g)
				snprintf(onto, sizeof(onto), "GPU %u", g->index);
			else
				snprintf(onto, sizeof(onto), "%s", t->need[k].uuid);
			printf("  pid %d (%s) onto %s needs %s: %s\n", (int)t->nspid, t->comm, onto,
			       t->need[k].bytes ? size_text(t->need[k].bytes, b, sizeof(b)) : "an unknown amount",
			       verdict >= 0 && (size_t)verdict < CS_ARRAY_SIZE(fits) ? fits[verdict] : "?");
		}
	}
}

static void print_verdict(const cs_verdict *v)
{
	size_t blocking = 0;
	for (size_t k = 0; k < v->nreasons; k++)
		blocking += v->reason[k].blocks;
	if (v->go)
		printf("verdict:    WOULD RESTORE here\n");
	else
		printf("verdict:    would NOT restore here (%zu reason%s)\n", blocking, blocking == 1 ? "" : "s");
	for (size_t k = 0; k < v->nreasons; k++) {
		const cs_verdict_reason *r = &v->reason[k];
		printf("  %s%s: %s\n", r->blocks ? "" : "note, ", r->code, r->text);
		if (r->fix[0])
			printf("    fix: %s\n", r->fix);
	}
}

int cmd_inspect(int argc, char **argv)
{
	const char *path = NULL;
	bool json;
	cs_archive_bounds bounds;
	int rc = parse_args(argc, argv, &path, &json, &bounds);
	if (rc != CLI_GO_ON)
		return rc;
	_cleanup_(cs_inspect_freep) cs_inspect c = { 0 };
	cs_error err = { 0 };
	if (cs_inspect_read(path, &bounds, &c, &err) < 0) {
		if (json)
			cs_json_print(cs_json_inspect_error(&c, &err, EXIT_USAGE));
		cli_error(&err);
		return EXIT_USAGE;
	}
	_cleanup_(cs_verdict_freep) cs_verdict v = { 0 };
	if (c.gpu_part)
		cs_inspect_judge(&c, &v);
	rc = !c.gpu_part || v.go ? EXIT_DONE : EXIT_FAILED;
	if (json)
		return cs_json_print(cs_json_inspect(&c, c.gpu_part ? &v : NULL, rc)) < 0 ? EXIT_FAILED : rc;
	print_source(&c);
	if (!c.gpu_part) {
		printf("no GPU part: CRIU restores it without cudasnap\n");
		return rc;
	}
	print_record(&c.record);
	print_node(&c.record, &v);
	print_verdict(&v);
	return rc;
}
