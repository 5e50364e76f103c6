/* The driver says nothing while it moves memory: resident memory of each
 * target grows (checkpoint) or shrinks (restore) by its GPU memory, which
 * is what the progress line shows. */
#include "progress.h"
#include "cli.h"
#include "halt.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PLAIN_EVERY_S 5.0
#define STALL_AFTER_S 5.0

static double gib(unsigned long long b)
{
	return (double)b / (1024.0 * 1024 * 1024);
}

typedef struct sums {
	unsigned long long moved, total;
	bool total_known;
	size_t done, active;
} sums;

static sums add_up(const cs_target *t, size_t n)
{
	sums s = { .total_known = true };
	for (size_t i = 0; i < n; i++) {
		int f = __atomic_load_n(&t[i].stepping, __ATOMIC_ACQUIRE);
		if (t[i].skipped)
			continue;
		s.active++;
		/* Resident memory grows a little more than the GPU memory it takes in. */
		s.moved += t[i].gpu_bytes && t[i].moved > t[i].gpu_bytes ? t[i].gpu_bytes : t[i].moved;
		s.total += t[i].gpu_bytes;
		s.total_known &= t[i].gpu_bytes > 0;
		s.done += f == 2;
	}
	return s;
}

static void format(char *line, size_t size, const txn_watch_state *w, cs_step step, const sums *s, double elapsed)
{
	double gbps = elapsed > 0 ? (double)s->moved / elapsed / 1e9 : 0;
	int k = snprintf(line, size, "%s: ", cs_step_name(step));
	if (s->total_known && s->total) {
		double left = s->total > s->moved ? (double)(s->total - s->moved) : 0;
		k += snprintf(line + k, size - (size_t)k, "%.2f of %.2f GiB, %.2f GB/s", gib(s->moved), gib(s->total),
			      gbps);
		if (gbps > 0.01)
			k += snprintf(line + k, size - (size_t)k, ", ETA %.0f s", left / (gbps * 1e9));
	} else {
		k += snprintf(line + k, size - (size_t)k, "%.2f GiB moved, %.2f GB/s", gib(s->moved), gbps);
	}
	snprintf(line + k, size - (size_t)k, ", %zu/%zu processes done, %.1f s", s->done, s->active, elapsed);
	(void)w;
}

static bool named(const txn_watch_state *w, pid_t pid)
{
	for (size_t i = 0; i < w->nstalled; i++)
		if (w->stalled[i] == pid)
			return true;
	return false;
}

/* Whether t's memory has all but moved: the driver finishes its call
 * (a 30 GiB checkpoint sat 5 s and more at its size on the H100), which
 * is no stall. */
static bool finishing(const cs_target *t)
{
	return t->gpu_bytes && t->moved >= t->gpu_bytes - t->gpu_bytes / 10;
}

/* A process whose memory stopped moving: stalled when it is stopped or
 * frozen (the call waits for it: something to act on), else the driver is
 * still at work, which is said once, with what /proc shows. */
static void say_still(const cs_target *t, cs_step step)
{
	cs_halt_info h;
	char why[400];
	if (cs_proc_halt(cs_proc_dir(), t->pid, t->restore_tid, &h) != CS_HALT_NONE) {
		cs_halt_clause(&h, t->pid, why, sizeof(why));
		cli_msg("%d (%s) %s stalled: no memory moved for %.0f s (%.2f GiB so far); it is %s", (int)t->pid,
			t->comm, cs_step_name(step), t->stalled_s, gib(t->moved), why);
		return;
	}
	char path[64], stat[1024];
	cs_stat st;
	snprintf(path, sizeof(path), "%s/%d/stat", cs_proc_dir(), (int)t->pid);
	ssize_t n = cs_read_at(AT_FDCWD, path, stat, sizeof(stat));
	if (n > 0 && cs_parse_stat(stat, (size_t)n, &st) == 0)
		snprintf(why, sizeof(why), "/proc state %c", st.state);
	else
		snprintf(why, sizeof(why), "gone from /proc");
	cli_msg("%d (%s) %s still in the driver: no memory moved for %.0f s (%.2f GiB so far; %s)", (int)t->pid,
		t->comm, cs_step_name(step), t->stalled_s, gib(t->moved), why);
}

static void name_stalled(txn_watch_state *w, const cs_target *t, size_t n, cs_step step)
{
	for (size_t i = 0; i < n; i++) {
		if (__atomic_load_n(&t[i].stepping, __ATOMIC_ACQUIRE) != 1 || t[i].stalled_s < STALL_AFTER_S ||
		    finishing(&t[i]) || named(w, t[i].pid) || w->nstalled >= CS_ARRAY_SIZE(w->stalled))
			continue;
		w->stalled[w->nstalled++] = t[i].pid;
		say_still(&t[i], step);
	}
}

void txn_watch(void *ctx, const cs_target *t, size_t n, cs_step step, double elapsed)
{
	txn_watch_state *w = ctx;
	if (w->tty < 0)
		w->tty = isatty(STDERR_FILENO) && !cli_timestamps;
	sums s = add_up(t, n);
	char line[256];
	format(line, sizeof(line), w, step, &s, elapsed);
	if (w->tty) {
		cli_status(line);
	} else if (elapsed - w->last_plain >= PLAIN_EVERY_S) {
		w->last_plain = elapsed;
		cli_msg("%s", line);
	}
	name_stalled(w, t, n, step);
}

void txn_watch_end(txn_watch_state *w)
{
	if (w->tty > 0)
		cli_status(NULL);
}
