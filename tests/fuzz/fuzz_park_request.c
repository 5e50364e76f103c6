/* What the interposer reads from a peer it does not trust: a request line
 * of its control socket (park/request.c), before anything acts on it.
 * Checks: no byte past the line is read (the copy has no terminator); a
 * request parsed is one of the grammar's, from a line of printable ASCII
 * shorter than PARK_LINE_MAX, with a wait of at most PARK_TIMEOUT_MAX;
 * written back in the grammar's words it parses to the same request; a
 * line that is not one leaves nothing behind. And the proof tags' SipHash
 * is SipHash-2-4 (its reference vector), hex goes there and back. */
#include "fuzz.h"
#include "../../park/request.h"

#include <stdio.h>
#include <string.h>

static void check_siphash(void)
{
	static int done;
	uint8_t key[16], msg[15];
	if (done++)
		return;
	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < 15; i++)
		msg[i] = (uint8_t)i;
	/* the reference implementation's vector for 15 bytes */
	FUZZ_CHECK(park_siphash(key, msg, sizeof(msg)) == 0xa129ca6149be45e5ULL);
}

/* rq in the grammar's own words. */
static int write_back(const struct park_req *rq, char *out, size_t size)
{
	char key[2 * PARK_REQ_KEY_LEN + 1], nonce[2 * PARK_NONCE_LEN + 1];
	park_hex(rq->key, sizeof(rq->key), key);
	park_hex(rq->nonce, sizeof(rq->nonce), nonce);
	const char *word = park_req_word(rq->verb);
	switch (rq->verb) {
	case PARK_REQ_FD:
	case PARK_REQ_VLIVE:
	case PARK_REQ_VFD: return snprintf(out, size, "%s %llx %s", word, (unsigned long long)rq->id, nonce);
	case PARK_REQ_DETACH:
	case PARK_REQ_VCLAIM:
	case PARK_REQ_VDETACH:
	case PARK_REQ_VDROP: return snprintf(out, size, "%s %llx", word, (unsigned long long)rq->id);
	case PARK_REQ_PROOF: return snprintf(out, size, "proof %016llx", (unsigned long long)rq->mac);
	default: break;
	}
	int n = snprintf(out, size, "%s", word);
	if (rq->timeout_ms)
		n += snprintf(out + n, size - (size_t)n, " %u", rq->timeout_ms);
	if (rq->unpin)
		n += snprintf(out + n, size - (size_t)n, " unpin");
	if (rq->files)
		n += snprintf(out + n, size - (size_t)n, " files=%u", rq->files);
	if (rq->room)
		n += snprintf(out + n, size - (size_t)n, " room");
	if (rq->has_key)
		n += snprintf(out + n, size - (size_t)n, " key=%s", key);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_siphash();
	char *line = fuzz_copy(data, size, 0);
	struct park_req rq, again;
	park_req_parse(line, size, &rq);
	if (rq.verb == PARK_REQ_BAD) {
		static const struct park_req zero;
		FUZZ_CHECK(memcmp(&rq, &zero, sizeof(rq)) == 0);
	} else {
		FUZZ_CHECK(size > 0 && size < PARK_LINE_MAX);
		for (size_t i = 0; i < size; i++)
			FUZZ_CHECK(line[i] >= 0x20 && line[i] <= 0x7e);
		FUZZ_CHECK(rq.timeout_ms <= PARK_TIMEOUT_MAX);
		FUZZ_CHECK(rq.verb == PARK_REQ_PARK || !rq.unpin);
		FUZZ_CHECK(!rq.room || (rq.verb == PARK_REQ_PARK && rq.files));
		char back[PARK_LINE_MAX * 2];
		int n = write_back(&rq, back, sizeof(back));
		FUZZ_CHECK(n > 0 && (size_t)n < sizeof(back));
		park_req_parse(back, (size_t)n, &again);
		FUZZ_CHECK(memcmp(&rq, &again, sizeof(rq)) == 0);
	}
	/* hex there and back, of the input's first bytes */
	uint8_t raw[32], out[32];
	char hex[65];
	size_t n = size < sizeof(raw) ? size : sizeof(raw);
	memcpy(raw, data, n);
	park_hex(raw, n, hex);
	FUZZ_CHECK(strlen(hex) == 2 * n);
	FUZZ_CHECK(park_unhex(hex, 2 * n, out, n) && memcmp(raw, out, n) == 0);
	free(line);
	return 0;
}
