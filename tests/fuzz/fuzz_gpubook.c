/* The two binary records of the GPU room from arbitrary bytes: a booking's
 * file (lib/room/gpubook.c) and the driver probe's answer (lib/driver/gpuprobe.c); the
 * first byte picks which. What parses is bounded and terminated. */
#include "fuzz.h"
#include "gpubook.h"
#include "gpuprobe.h"

static void booking(const uint8_t *data, size_t size)
{
	cs_booking_rec rec;
	if (cs_booking_parse(data, size, &rec) < 0)
		return;
	FUZZ_CHECK(rec.state == CS_BOOKING_WAITING || cs_booking_takes(rec.state));
	FUZZ_CHECK(rec.ngpu <= CS_TARGET_GPUS);
	FUZZ_CHECK(strnlen(rec.who, sizeof(rec.who)) < sizeof(rec.who));
	for (unsigned k = 0; k < rec.ngpu; k++)
		FUZZ_CHECK(strnlen(rec.gpu[k].uuid, sizeof(rec.gpu[k].uuid)) < sizeof(rec.gpu[k].uuid));
}

static void probe(const uint8_t *data, size_t size)
{
	cs_nvml_gpu *g = NULL;
	size_t n = 7;
	if (cs_gpu_probe_parse(data, size, &g, &n) < 0) {
		FUZZ_CHECK(g == NULL && n == 0);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		FUZZ_CHECK(strnlen(g[i].uuid, sizeof(g[i].uuid)) < sizeof(g[i].uuid));
		FUZZ_CHECK(strnlen(g[i].name, sizeof(g[i].name)) < sizeof(g[i].name));
		FUZZ_CHECK(!g[i].memory_known || g[i].memory_free <= g[i].memory_total);
		FUZZ_CHECK(g[i].minor == -1 && g[i].index == i);
	}
	free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1)
		probe(data + 1, size - 1);
	else
		booking(data + 1, size - 1);
	return 0;
}
