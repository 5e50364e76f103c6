#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/file.h>
#include <unistd.h>

#include "gpumem.h"
#include "internal.h"
#include "proto.h"
#include "settings.h"

/* The free memory of every GPU, as the caller's NVML reports it, sent with
 * a restore: the caller measures, as only it sees its own /proc like its
 * NVML; the target judges, as only it knows what its checkpoint moved and
 * which GPU it will use.
 *
 * Concurrent restores from one caller (cudasnap restores up to 8 processes
 * at once) share a measurement, since a look at every process of /proc
 * takes tens of ms when there are hundreds. A call takes only a
 * measurement that began after the call did, so that it is never older
 * than the call: what a measurement of its own would have given. */

static pthread_mutex_t room_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t room_cv = PTHREAD_COND_INITIALIZER;
static int measuring;
static unsigned long started, finished; /* measurements, counted */
static struct fc_room latest;           /* the one numbered finished */

static void measure(struct fc_room *room)
{
	struct fc_gpus g;
	struct fc_gpu_memory m[FC_MAX_GPUS];
	fc_gpus_load(&g);
	fc_gpu_memory(&g, m);
	room->ngpus = (uint32_t)g.count;
	room->scanned = g.count > 0 && m[0].scanned;
	for (int i = 0; i < g.count; i++) {
		room->gpu[i] = (struct fc_gpu_free){ g.uuid[i], m[i].free };
		room->users[i] = m[i].users;
	}
	room->context = fc_mib_setting("FAKECUDA_CONTEXT_MIB");
	room->extra = fc_mib_setting("FAKECUDA_RESTORE_EXTRA_MIB");
}

/* Called with room_mu held; measures without it. */
static void measure_shared(void)
{
	struct fc_room room = { 0 };
	unsigned long mine = ++started;
	measuring = 1;
	pthread_mutex_unlock(&room_mu);
	measure(&room);
	pthread_mutex_lock(&room_mu);
	latest = room;
	finished = mine;
	measuring = 0;
	pthread_cond_broadcast(&room_cv);
}

void fc_measure_room(struct fc_room *room)
{
	pthread_mutex_lock(&room_mu);
	unsigned long want = started + 1;
	while (finished < want) {
		if (measuring)
			pthread_cond_wait(&room_cv, &room_mu);
		else
			measure_shared();
	}
	*room = latest;
	pthread_mutex_unlock(&room_mu);
}

/* A child forked in the middle of a measurement never sees it end. */
static void after_fork_child(void)
{
	pthread_mutex_init(&room_mu, NULL);
	pthread_cond_init(&room_cv, NULL);
	measuring = 0;
	started = finished;
}

__attribute__((constructor)) static void room_atfork(void)
{
	pthread_atfork(NULL, NULL, after_fork_child);
}

/* The real driver's allocations are atomic: two restores that each fit
 * alone are never both let through onto a GPU that holds only one, one
 * of them runs out of memory. And it judges the room when the target
 * admits the restore, which may be long after its caller asked (a
 * request outlives its caller). So the caller sends the target the file
 * of the device directory whose flock makes one admission at a time, and
 * its /proc: the target takes the lock, looks again at what the processes
 * hold, and allocates before it lets go (room_admit.c). Without
 * CUDASNAP_DEV_DIR (no GPU of the double's own) there is no file. */
int fc_room_file(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	const char *set = fc_setting("CUDASNAP_DEV_DIR", dir, sizeof(dir));
	if (set == NULL || *set == '\0')
		return -1;
	snprintf(path, sizeof(path), "%s/.fakecuda-room", set);
	return open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
}
