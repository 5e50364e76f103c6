#include "gpuorphan.h"
#include "halt.h"
#include "proc.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define NS_PER_S 1000000000ULL

static uint64_t ns_inode(const char *which)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/self/ns/%s", cs_proc_dir(), which);
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

uint64_t cs_proc_pidns(void)
{
	return ns_inode("pid");
}

uint64_t cs_proc_timens(void)
{
	return ns_inode("time");
}

void cs_orphans_init(cs_orphans *o, cs_driver *d)
{
	*o = (cs_orphans){ .d = d, .pidns = cs_proc_pidns(), .timens = cs_proc_timens(), .asks = CS_ORPHAN_ASKS };
}

void cs_orphans_look(cs_orphans *o, const char (*uuids)[48], size_t n)
{
	o->uuids = uuids;
	o->nuuids = n;
	o->asks = CS_ORPHAN_ASKS;
}

static cs_orphan_seen *seen(cs_orphans *o, const char *name)
{
	for (size_t i = 0; i < o->nseen; i++)
		if (strcmp(o->seen[i].name, name) == 0)
			return &o->seen[i];
	return NULL;
}

static bool remember(cs_orphans *o, const char *name, uint64_t now)
{
	cs_orphan_seen *s = seen(o, name);
	if (!s && o->nseen < CS_ARRAY_SIZE(o->seen))
		s = &o->seen[o->nseen++];
	if (s) {
		snprintf(s->name, sizeof(s->name), "%s", name);
		s->next = now + (uint64_t)CS_ORPHAN_RECHECK_S * NS_PER_S;
	}
	return true;
}

static bool on_our_gpus(const cs_orphans *o, const cs_booking_rec *rec)
{
	if (!o->uuids)
		return true;
	for (unsigned k = 0; k < rec->ngpu; k++)
		for (size_t i = 0; i < o->nuuids; i++)
			if (strcasecmp(rec->gpu[k].uuid, o->uuids[i]) == 0)
				return true;
	return false;
}

/* Threads left in a process whose leader is a zombie: one whose main
 * thread ended runs on with the others, its restore thread among them. */
static size_t threads(int pdir)
{
	_cleanup_closedir_ DIR *d = cs_opendir_at(pdir, "task");
	size_t n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += de->d_name[0] != '.';
	return n;
}

typedef enum target { T_GONE, T_ALIVE, T_UNKNOWN } target;

/* The target named by rec, as this namespace shows it: gone (or another
 * process under its pid, or dead), alive (*uid its owner), or not known
 * (an error other than its absence). */
static target find(const cs_booking_rec *rec, uid_t *uid)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), rec->target);
	if (pdir < 0)
		return pdir == -ENOENT || pdir == -ESRCH ? T_GONE : T_UNKNOWN;
	cs_stat st;
	struct stat ps;
	int r = cs_proc_read_stat(pdir, &st);
	if (r < 0)
		return r == -ENOENT || r == -ESRCH ? T_GONE : T_UNKNOWN;
	if (st.start_time != rec->target_start)
		return T_GONE;
	if ((st.state == 'Z' || st.state == 'X') && threads(pdir) <= 1)
		return T_GONE; /* its memory went at its exit */
	if (fstat(pdir, &ps) < 0)
		return T_UNKNOWN;
	*uid = ps.st_uid;
	return T_ALIVE;
}

/* What the driver says of the target: whether its restore is over. */
static bool over_by_state(cs_orphans *o, pid_t pid)
{
	int state = CS_STATE_UNKNOWN;
	int r = cs_cu_get_state_by(o->d, pid, CS_ORPHAN_STATE_S, &state);
	if (r == CS_CU_NOT_INITIALIZED)
		return true; /* no longer a process of the driver's */
	if (r != CS_CU_SUCCESS)
		return false; /* in flight (no answer in time), or not ours to read */
	/* Restored, failed, or checkpointed with nothing pending: the answer
	 * came after whatever the restore thread had been asked before. */
	return state == CS_STATE_RUNNING || state == CS_STATE_LOCKED || state == CS_STATE_FAILED ||
		state == CS_STATE_CHECKPOINTED;
}

bool cs_orphan_counts(void *ctx, const char *name, const cs_booking_rec *rec, uid_t owner, uint64_t now, bool expired)
{
	cs_orphans *o = ctx;
	cs_orphan_seen *s = seen(o, name);
	if (s && now < s->next)
		return true;
	/* Not this restore's GPUs, or a target that cannot be told from
	 * another process here: until its bound. */
	bool named = rec->target > 0 && o->pidns && rec->target_pidns == o->pidns &&
		(!rec->timens || !o->timens || rec->timens == o->timens);
	if (!on_our_gpus(o, rec) || !named)
		return !expired;
	uid_t uid = 0;
	target t = find(rec, &uid);
	if (t == T_GONE)
		return false;
	/* Not known now, or named on another user's word: until its bound. */
	if (t == T_UNKNOWN || (owner != 0 && owner != uid))
		return !expired;
	/* Stopped or frozen, its pending request waits for it, for as long as
	 * it lives so; a state read would wait too. */
	if (cs_proc_halt(cs_proc_dir(), rec->target, 0, NULL) != CS_HALT_NONE)
		return remember(o, name, now);
	bool unpark = rec->state == CS_BOOKING_UNPARK;
	if (unpark ? !o->parked : !o->d)
		return !expired;
	if (!o->asks)
		return true; /* asked about enough in this look: next time */
	o->asks--;
	if (unpark)
		return o->parked(rec->target) == 0 ? false : expired ? false : remember(o, name, now);
	return over_by_state(o, rec->target) ? false : remember(o, name, now);
}
