/* A reader of the few protobuf fields of CRIU's InventoryEntry that matter
 * here (criu/images/inventory.proto): img_version (1, varint) and
 * plugins_entry (12, a message whose field 12 is the repeated string of
 * plugin names). Every other field is skipped by its wire type. */
#include "inventory.h"
#include "proc.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define INVENTORY_MAGIC 0x58313116u
#define IMG_COMMON_MAGIC 0x54564319u /* never before inventory, but tolerated */

#define FIELD_IMG_VERSION 1
#define FIELD_PLUGINS_ENTRY 12
#define FIELD_PLUGINS 12

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

typedef struct pb {
	const uint8_t *p, *end;
} pb;

static int varint(pb *b, uint64_t *out)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 64; shift += 7) {
		if (b->p >= b->end)
			return -EINVAL;
		uint8_t c = *b->p++;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -EINVAL; /* more than ten bytes */
}

/* One field: its number, wire type, and for WIRE_LEN its bytes in *sub,
 * for WIRE_VARINT its value in *v; the others are skipped. */
static int field(pb *b, unsigned *num, unsigned *wire, pb *sub, uint64_t *v)
{
	uint64_t key;
	if (varint(b, &key) < 0 || key >> 3 == 0 || key >> 3 > 0x1fffffff)
		return -EINVAL;
	*num = (unsigned)(key >> 3);
	*wire = (unsigned)(key & 7);
	uint64_t len;
	switch (*wire) {
	case WIRE_VARINT: return varint(b, v);
	case WIRE_I64: len = 8; break;
	case WIRE_I32: len = 4; break;
	case WIRE_LEN:
		if (varint(b, &len) < 0)
			return -EINVAL;
		break;
	default: return -EINVAL; /* groups: not in CRIU's images */
	}
	if (len > (uint64_t)(b->end - b->p))
		return -EINVAL;
	*sub = (pb){ b->p, b->p + len };
	b->p += len;
	return 0;
}

static int plugins_entry(pb b, cs_inventory *inv)
{
	inv->plugins_listed = true;
	while (b.p < b.end) {
		unsigned num, wire;
		pb s;
		uint64_t v;
		if (field(&b, &num, &wire, &s, &v) < 0)
			return -EINVAL;
		if (num != FIELD_PLUGINS || wire != WIRE_LEN)
			continue;
		if (inv->nplugins < CS_INVENTORY_PLUGINS)
			cs_sanitize(inv->plugins[inv->nplugins], sizeof(inv->plugins[0]), (const char *)s.p,
				    (size_t)(s.end - s.p));
		inv->nplugins++;
	}
	return 0;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int cs_inventory_parse(const void *buf, size_t len, cs_inventory *out)
{
	memset(out, 0, sizeof(*out));
	const uint8_t *p = buf, *end = p + len;
	if (len >= 4 && le32(p) == IMG_COMMON_MAGIC)
		p += 4;
	if (end - p < 8 || le32(p) != INVENTORY_MAGIC)
		return -EINVAL;
	uint32_t size = le32(p + 4);
	p += 8;
	if (size > (size_t)(end - p))
		return -EINVAL;
	pb b = { p, p + size };
	cs_inventory inv = { 0 };
	bool version = false;
	while (b.p < b.end) {
		unsigned num, wire;
		pb s;
		uint64_t v = 0;
		if (field(&b, &num, &wire, &s, &v) < 0)
			return -EINVAL;
		if (num == FIELD_IMG_VERSION && wire == WIRE_VARINT) {
			inv.img_version = v > UINT32_MAX ? UINT32_MAX : (unsigned)v;
			version = true;
		} else if (num == FIELD_PLUGINS_ENTRY && wire == WIRE_LEN && plugins_entry(s, &inv) < 0) {
			return -EINVAL;
		}
	}
	/* img_version is required: without it this is not CRIU's inventory. */
	if (!version)
		return -EINVAL;
	*out = inv;
	return 0;
}

bool cs_inventory_needs(const cs_inventory *inv, const char *plugin)
{
	for (size_t i = 0; i < inv->nplugins && i < CS_INVENTORY_PLUGINS; i++)
		if (strcmp(inv->plugins[i], plugin) == 0)
			return true;
	return false;
}

bool cs_inventory_gpu_part(const cs_inventory *inv, const char *plugin, bool record)
{
	return inv->plugins_listed ? cs_inventory_needs(inv, plugin) : record;
}
