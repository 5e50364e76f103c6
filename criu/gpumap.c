#include "gpumap.h"
#include "automap.h"
#include "host.h"
#include "nvml.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>

int auto_device_map(const cs_manifest *m, pid_t sample, char **map)
{
	*map = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	_cleanup_(cs_automap_freep) cs_automap a = { 0 };
	int r = cs_automap_make(m, gpus, ngpus, sample, &a);
	if (r == -ENOSPC)
		plog(CS_CRIU_LOG_ERROR,
		     "%zu of the %zu GPUs the dump's processes used %s not on this machine (%s first), and "
		     "the restored processes can use too few of its GPUs to stand in for them; give the "
		     "container more GPUs, or set CUDASNAP_DEVICE_MAP in /etc/cudasnap/cudasnap.conf",
		     a.nabsent, a.nrecorded, a.nabsent == 1 ? "is" : "are", a.stand_in[a.nstand_in - 1].absent);
	if (r < 0)
		return -1;
	for (size_t i = 0; i < a.nstand_in; i++) {
		const cs_nvml_gpu *to = a.stand_in[i].onto;
		plog(CS_CRIU_LOG_INFO,
		     "%s, which the dump's processes used, is not on this machine: restoring onto %s (GPU %u, "
		     "%s); set CUDASNAP_DEVICE_MAP in /etc/cudasnap/cudasnap.conf to choose",
		     a.stand_in[i].absent, to->uuid, to->index,
		     a.by_device_file ? "whose device file the restored processes have" : "a GPU of this machine");
	}
	*map = TAKE_PTR(a.map);
	return 0;
}
