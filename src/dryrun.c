/* --dry-run: what checkpoint or restore would do to each process, and every
 * reason known in advance why it would fail; nothing is changed. */
#include "json.h"
#include "jsonout.h"
#include "plan.h"
#include "txncli.h"

#include <stdio.h>

#define GIB (1024.0 * 1024 * 1024)

static void bytes_text(char *buf, size_t size, unsigned long long b, bool known, bool bound)
{
	if (!known)
		snprintf(buf, size, "unknown");
	else
		snprintf(buf, size, "%s%.2f GiB", bound ? "<=" : "", (double)b / GIB);
}

static void print_memory(const cs_plan_entry *e)
{
	const cs_fit *f = &e->fit;
	char gpu[32], need[32];
	bytes_text(gpu, sizeof(gpu), f->gpu, f->known, f->known == CS_GPU_AT_MOST);
	bytes_text(need, sizeof(need), f->need, f->known, f->known == CS_GPU_AT_MOST);
	long long room = -1, limit = -1;
	const char *which = NULL;
	const cs_memcg_node *n = cs_fit_tightest(f, &room, &limit, &which);
	if (n)
		cli_msg("    memory: GPU %s, host needed %s; cgroup %.*s: %.2f GiB left under %s %.2f GiB", gpu, need,
			(int)n->len, f->cg.path, (double)room / GIB, which, (double)limit / GIB);
	else
		cli_msg("    memory: GPU %s, host needed %s; cgroup %s: %s", gpu, need,
			f->cg.path[0] ? f->cg.path : "unknown",
			f->cg.seen == CS_MEMCG_NONE || f->cg.seen == CS_MEMCG_WHOLE ? "no limit" : "no limit read");
	if (f->cg.problem[0])
		cli_msg("    note: %s", f->cg.problem);
}

static void print_gpus(const cs_plan_entry *e)
{
	for (unsigned k = 0; k < e->ngpu; k++) {
		const cs_plan_gpu *g = &e->gpu[k];
		char need[32], gpu[80], free[48] = "";
		bytes_text(need, sizeof(need), g->need, g->need > 0, e->fit.known == CS_GPU_AT_MOST);
		if (g->index >= 0)
			snprintf(gpu, sizeof(gpu), "GPU %d (%s)", g->index, g->uuid);
		else
			snprintf(gpu, sizeof(gpu), "%s (not on this machine)", g->uuid);
		if (g->free_known)
			snprintf(free, sizeof(free), "; %.2f GiB free", (double)g->free / GIB);
		cli_msg("    GPU memory: %s, restore needs %s%s", gpu, need, free);
	}
}

static void print_entry(const cs_plan *p, const cs_plan_entry *e)
{
	const char *state = cs_state_name(e->state);
	cli_msg("%d (%s): %s, %s: %s", (int)e->pid, e->comm, cs_class_name(e->cls), state ? state : "state unknown",
		e->blocked        ? "WOULD FAIL" :
			e->target ? "would be acted on" :
				    "left alone");
	if (e->target && (p->op == CS_OP_CHECKPOINT || p->op == CS_OP_CHECKPOINT_LOCKED))
		print_memory(e);
	if (e->target && p->op == CS_OP_RESTORE)
		print_gpus(e);
	for (size_t k = 0; k < e->nreasons; k++) {
		cli_msg("    %s %s: %s", e->reason[k].blocks ? "!" : "-", e->reason[k].code, e->reason[k].text);
		if (e->reason[k].fix[0])
			cli_msg("      fix: %s", e->reason[k].fix);
	}
}

static void print_human(const txn_ctx *x, const cs_plan *p)
{
	cli_msg("%s --dry-run: nothing was changed", x->c->cmd);
	for (size_t i = 0; i < p->n; i++)
		print_entry(p, &p->e[i]);
	if (p->problem.status)
		cli_error(&p->problem);
	cli_msg("%zu process%s to act on, %.2f GiB of GPU memory%s; expected driver time about %.1f s", p->targets,
		p->targets == 1 ? "" : "es", (double)p->gpu_bytes / GIB, p->unknown_memory ? " (some unknown)" : "",
		p->seconds);
	if (p->go)
		cli_msg("%s would go through", x->c->cmd);
	else
		cli_msg("%s would FAIL, with exit status %d: see %s", x->c->cmd, cli_exit_plan(p),
			p->blocked ? "the reasons marked '!'" : "the error above");
}

int txn_dry_run(txn_ctx *x)
{
	_cleanup_(cs_plan_freep) cs_plan p = { 0 };
	cs_error err = { 0 };
	if (cs_session_plan(x->s, true, &p, &err) < 0)
		return txn_early_error(x, &err);
	int status = p.go ? EXIT_DONE : EXIT_FAILED;
	print_human(x, &p);
	if (x->c->json) {
		json_object *o = cs_json_plan(&p);
		json_object_object_add(o, "exit_status", json_object_new_int(status));
		json_object_object_add(o, "real_exit_status", json_object_new_int(cli_exit_plan(&p)));
		json_object_object_add(o, "error", p.problem.status ? cs_json_error(&p.problem) : NULL);
		cs_json_print(o);
	}
	return status;
}
