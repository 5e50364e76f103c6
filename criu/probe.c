#include "probe.h"
#include "helper.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

typedef struct probe_reply {
	int version;
	cs_error err;
} probe_reply;

static int probe(void *ctx, void **out, size_t *len)
{
	(void)ctx;
	probe_reply *r = calloc(1, sizeof(*r));
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	if (!r)
		return 1;
	int rc = cs_driver_open(&d, &r->err);
	r->version = cs_driver_version(d);
	*out = r;
	*len = sizeof(*r);
	return rc < 0 ? 1 : 0;
}

int driver_probe(int *version, cs_error *err)
{
	_cleanup_free_ void *buf = NULL;
	size_t len;
	int rc = helper_run("loading the driver", probe, NULL, bound_quick(), &buf, &len);
	if (rc < 0 || !buf || len != sizeof(probe_reply))
		return cs_error_set(err, CS_ESYS, NULL, "the driver could not be probed (see the lines above)");
	const probe_reply *r = buf;
	*version = r->version;
	if (rc != 0) {
		*err = r->err;
		return -(err->status ? err->status : CS_EENV);
	}
	return 0;
}

/* A helper loads libcuda (tens of milliseconds) before its first call. */
double bound_quick(void)
{
	return 3 * 10 + 10;
}

double bound_lock(unsigned lock_s)
{
	return bound_quick() + lock_s + 5;
}

double bound_moves(void)
{
	/* the move, the leftover check, the rollback's move */
	return 2 * cs_move_deadline(NULL, 0) + bound_quick();
}
