/* The target's half of a restore's room: its caller measured the free
 * memory when it asked (caller_room.c); the target looks again when it
 * admits the restore, which may be long after, through the caller's /proc,
 * as the real driver allocates only then. */
#include <stdio.h>
#include <string.h>

#include "gpumem.h"
#include "internal.h"
#include "procinfo.h"
#include "proto.h"

struct rescan {
	const struct fc_room *room;
	uint64_t now[FC_MAX_GPUS];
};

static void add_now(const struct fc_gpu_user *u, void *arg)
{
	struct rescan *r = arg;
	char uuid[FAKECUDA_UUID_STRLEN];
	for (uint32_t i = 0; i < r->room->ngpus && i < FC_MAX_GPUS; i++) {
		fc_uuid_format(&r->room->gpu[i].uuid, uuid, sizeof(uuid));
		if (strcmp(uuid, u->uuid) == 0)
			r->now[i] += u->bytes;
	}
}

void fc_room_admit(struct fc_room *room, int procfd)
{
	if (procfd < 0 || !room->scanned)
		return;
	char root[48];
	struct rescan r = { .room = room };
	/* thread-self: /proc/self of a process whose main thread ended is empty */
	snprintf(root, sizeof(root), "/proc/thread-self/fd/%d", procfd);
	fc_gpu_users_with(root, room->context, add_now, &r);
	/* What the processes took since the caller measured is gone from the
	 * free memory; what they gave back is not counted (a process this
	 * thread may not read would look gone). */
	for (uint32_t i = 0; i < room->ngpus && i < FC_MAX_GPUS; i++) {
		uint64_t more = r.now[i] > room->users[i] ? r.now[i] - room->users[i] : 0;
		room->gpu[i].bytes = room->gpu[i].bytes > more ? room->gpu[i].bytes - more : 0;
	}
}
