/* CRIU's inventory.img, the one image every set of CRIU images has: which
 * plugins a restore of the images needs (CRIU 4.0 on records them there,
 * and refuses a restore without one of them: "Missing required plugin").
 * Read by 'cudasnap inspect' from images that may come from anywhere. */
#ifndef CS_INVENTORY_H
#define CS_INVENTORY_H

#include <stdbool.h>
#include <stddef.h>

/* inventory.img is a few hundred bytes: anything much larger is not one. */
#define CS_INVENTORY_MAX (1u << 20)
#define CS_INVENTORY_PLUGINS 16

typedef struct cs_inventory {
	unsigned img_version; /* CRIU's images version (2 since CRIU 1.x) */
	bool plugins_listed; /* the images record their plugins (CRIU 4.0 or newer) */
	char plugins[CS_INVENTORY_PLUGINS][64]; /* the first of them, sanitized */
	size_t nplugins; /* every plugin listed, kept or not */
} cs_inventory;

/* Parses an inventory image: CRIU's inventory magic (0x58313116), then one
 * protobuf InventoryEntry with its 32-bit length, from untrusted bytes.
 * Returns 0, or -EINVAL (what not filled beyond zeros) when buf is not one. */
int cs_inventory_parse(const void *buf, size_t len, cs_inventory *out);
/* Whether the inventory names plugin among the plugins a restore needs. */
bool cs_inventory_needs(const cs_inventory *inv, const char *plugin);
/* Whether images with this inventory need plugin, as CRIU decides: one that
 * lists plugins (CRIU 4.0 and newer) names it; one that lists none (an
 * older CRIU, whose restore then asks every plugin) leaves it to whether
 * the plugin's record is in the images (record). */
bool cs_inventory_gpu_part(const cs_inventory *inv, const char *plugin, bool record);

#endif
