/* cs_inventory_parse over arbitrary bytes (an inventory.img of images from
 * anywhere): it never reads past the input, and what it keeps is sane. A
 * parsed inventory encoded again as CRIU writes it parses to the same. */
#include "fuzz.h"
#include "inventory.h"
#include "utf8check.h"

#include <errno.h>
#include <stdbool.h>

static size_t varint(uint8_t *out, uint64_t v)
{
	size_t n = 0;
	do {
		out[n] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
		n++;
		v >>= 7;
	} while (v);
	return n;
}

/* The inventory as CRIU writes one: magic, length, img_version, plugins. */
static size_t encode(const cs_inventory *inv, uint8_t *buf)
{
	uint8_t msg[2048], inner[1536];
	size_t m = 0, k = 0;
	msg[m++] = 1 << 3;
	m += varint(msg + m, inv->img_version);
	for (size_t i = 0; i < inv->nplugins && i < CS_INVENTORY_PLUGINS; i++) {
		size_t len = strlen(inv->plugins[i]);
		inner[k++] = 12 << 3 | 2;
		k += varint(inner + k, len);
		memcpy(inner + k, inv->plugins[i], len);
		k += len;
	}
	if (inv->plugins_listed) {
		msg[m++] = 12 << 3 | 2;
		m += varint(msg + m, k);
		memcpy(msg + m, inner, k);
		m += k;
	}
	uint32_t head[2] = { 0x58313116u, (uint32_t)m }; /* little-endian machines only, as CRIU */
	memcpy(buf, head, sizeof(head));
	memcpy(buf + sizeof(head), msg, m);
	return sizeof(head) + m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_copy(data, size, 0);
	cs_inventory inv;
	int r = cs_inventory_parse(buf, size, &inv);
	if (r < 0) {
		FUZZ_CHECK(r == -EINVAL);
		FUZZ_CHECK(inv.nplugins == 0 && !inv.plugins_listed);
		free(buf);
		return 0;
	}
	FUZZ_CHECK(r == 0 && size >= 8);
	FUZZ_CHECK(inv.nplugins == 0 || inv.plugins_listed);
	for (size_t i = 0; i < inv.nplugins && i < CS_INVENTORY_PLUGINS; i++) {
		size_t len = strnlen(inv.plugins[i], sizeof(inv.plugins[i]));
		FUZZ_CHECK(len < sizeof(inv.plugins[i]));
		FUZZ_CHECK(cs_check_utf8(inv.plugins[i], len, false));
		FUZZ_CHECK(cs_inventory_needs(&inv, inv.plugins[i]));
	}
	uint8_t again[4096];
	size_t n = encode(&inv, again);
	cs_inventory back;
	FUZZ_CHECK(cs_inventory_parse(again, n, &back) == 0);
	size_t kept = inv.nplugins < CS_INVENTORY_PLUGINS ? inv.nplugins : CS_INVENTORY_PLUGINS;
	FUZZ_CHECK(back.img_version == inv.img_version && back.plugins_listed == inv.plugins_listed);
	FUZZ_CHECK(back.nplugins == kept);
	for (size_t i = 0; i < kept; i++)
		FUZZ_CHECK(strcmp(back.plugins[i], inv.plugins[i]) == 0);
	free(buf);
	return 0;
}
