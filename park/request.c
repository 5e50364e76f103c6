/* The control protocol's requests (request.h): a strict parser, the hex
 * the protocol carries, and the tags of a proof exchange. Nothing here
 * touches the process's state. */
#include <string.h>

#include "request.h"

static const struct {
	const char *word;
	enum park_verb verb;
} words[] = {
	{ "status", PARK_REQ_STATUS },   { "park", PARK_REQ_PARK },   { "unpark", PARK_REQ_UNPARK },
	{ "commit", PARK_REQ_COMMIT },   { "fd", PARK_REQ_FD },       { "detach", PARK_REQ_DETACH },
	{ "vclaim", PARK_REQ_VCLAIM },   { "vlive", PARK_REQ_VLIVE }, { "vfd", PARK_REQ_VFD },
	{ "vdetach", PARK_REQ_VDETACH }, { "vdrop", PARK_REQ_VDROP }, { "proof", PARK_REQ_PROOF },
};

const char *park_req_word(enum park_verb verb)
{
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (words[i].verb == verb)
			return words[i].word;
	return "?";
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'  ? c - '0' :
		c >= 'a' && c <= 'f' ? c - 'a' + 10 :
		c >= 'A' && c <= 'F' ? c - 'A' + 10 :
				       -1;
}

void park_hex(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = 0;
}

bool park_unhex(const char *text, size_t len, uint8_t *out, size_t n)
{
	if (len != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(text[2 * i]), lo = hexval(text[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

/* 1 to 16 hex digits. */
static bool hex_u64(const char *t, size_t len, uint64_t *v)
{
	if (len == 0 || len > 16)
		return false;
	*v = 0;
	for (size_t i = 0; i < len; i++) {
		int d = hexval(t[i]);
		if (d < 0)
			return false;
		*v = *v << 4 | (uint64_t)d;
	}
	return true;
}

/* 1 to 9 decimal digits, at most PARK_TIMEOUT_MAX once read (a longer
 * wait is cut to it). */
static bool dec_ms(const char *t, size_t len, unsigned *v)
{
	if (len == 0 || len > 9)
		return false;
	unsigned long n = 0;
	for (size_t i = 0; i < len; i++) {
		if (t[i] < '0' || t[i] > '9')
			return false;
		n = n * 10 + (unsigned long)(t[i] - '0');
	}
	*v = n > PARK_TIMEOUT_MAX ? PARK_TIMEOUT_MAX : (unsigned)n;
	return true;
}

static bool is(const char *t, size_t len, const char *word)
{
	return strlen(word) == len && memcmp(t, word, len) == 0;
}

/* The words after the verb of status, park, unpark and commit: a wait
 * (park and unpark, first), unpin (park), files (park and unpark), room
 * (a park, after files), the key; each at most once. */
static bool named(struct park_req *r, const char *t, size_t len, size_t pos)
{
	bool waits = r->verb == PARK_REQ_PARK || r->verb == PARK_REQ_UNPARK;
	if (waits && pos == 1 && t[0] >= '0' && t[0] <= '9')
		return dec_ms(t, len, &r->timeout_ms);
	if (r->verb == PARK_REQ_PARK && is(t, len, "unpin") && !r->unpin) {
		r->unpin = true;
		return true;
	}
	if (waits && len > 6 && len <= 8 && memcmp(t, "files=", 6) == 0 && r->files == 0) {
		unsigned n = 0;
		for (size_t i = 6; i < len; i++)
			if (t[i] < '0' || t[i] > '9' || (i == 6 && t[i] == '0'))
				return false;
			else
				n = n * 10 + (unsigned)(t[i] - '0');
		r->files = n;
		return n >= 1 && n <= PARK_REQ_FILES_MAX;
	}
	if (r->verb == PARK_REQ_PARK && r->files && is(t, len, "room") && !r->room) {
		r->room = true;
		return true;
	}
	if (len > 4 && memcmp(t, "key=", 4) == 0 && !r->has_key) {
		r->has_key = park_unhex(t + 4, len - 4, r->key, sizeof(r->key));
		return r->has_key;
	}
	return false;
}

/* The fixed arguments of the other verbs: an id, then for the proven ones
 * a nonce; a proof's tag. */
static bool fixed(struct park_req *r, const char *t, size_t len, size_t pos)
{
	bool proven = r->verb == PARK_REQ_FD || r->verb == PARK_REQ_VLIVE || r->verb == PARK_REQ_VFD;
	if (r->verb == PARK_REQ_PROOF)
		return pos == 1 && len == 16 && hex_u64(t, len, &r->mac);
	if (pos == 1)
		return hex_u64(t, len, &r->id);
	return proven && pos == 2 && park_unhex(t, len, r->nonce, sizeof(r->nonce));
}

static size_t wanted(enum park_verb verb)
{
	switch (verb) {
	case PARK_REQ_FD:
	case PARK_REQ_VLIVE:
	case PARK_REQ_VFD: return 3;
	case PARK_REQ_DETACH:
	case PARK_REQ_VCLAIM:
	case PARK_REQ_VDETACH:
	case PARK_REQ_VDROP:
	case PARK_REQ_PROOF: return 2;
	default: return 0; /* any number */
	}
}

void park_req_parse(const char *line, size_t len, struct park_req *rq)
{
	struct park_req r;
	memset(&r, 0, sizeof(r));
	memset(rq, 0, sizeof(*rq));
	if (len == 0 || len >= PARK_LINE_MAX)
		return;
	for (size_t i = 0; i < len; i++)
		if (line[i] < 0x20 || line[i] > 0x7e)
			return;
	size_t pos = 0;
	for (size_t at = 0; at <= len; pos++) {
		const char *t = line + at;
		const char *sp = memchr(t, ' ', len - at);
		size_t tl = sp ? (size_t)(sp - t) : len - at;
		if (tl == 0)
			return; /* two spaces, or one at an end */
		bool ok = false;
		if (pos == 0) {
			for (size_t w = 0; w < sizeof(words) / sizeof(words[0]) && !ok; w++)
				if (is(t, tl, words[w].word)) {
					r.verb = words[w].verb;
					ok = true;
				}
		} else {
			ok = wanted(r.verb) ? fixed(&r, t, tl, pos) : named(&r, t, tl, pos);
		}
		if (!ok)
			return;
		at += tl + 1;
	}
	if (wanted(r.verb) && pos != wanted(r.verb))
		return;
	*rq = r;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND \
	do { \
		v0 += v1; \
		v1 = ROTL(v1, 13); \
		v1 ^= v0; \
		v0 = ROTL(v0, 32); \
		v2 += v3; \
		v3 = ROTL(v3, 16); \
		v3 ^= v2; \
		v0 += v3; \
		v3 = ROTL(v3, 21); \
		v3 ^= v0; \
		v2 += v1; \
		v1 = ROTL(v1, 17); \
		v1 ^= v2; \
		v2 = ROTL(v2, 32); \
	} while (0)

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

uint64_t park_siphash(const uint8_t key[16], const void *msg, size_t len)
{
	const uint8_t *in = msg;
	uint64_t k0 = le64(key), k1 = le64(key + 8);
	uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
	uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
	size_t whole = len - len % 8;
	for (size_t i = 0; i < whole; i += 8) {
		uint64_t m = le64(in + i);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	uint64_t b = (uint64_t)len << 56;
	for (size_t i = 0; i < len % 8; i++)
		b |= (uint64_t)in[whole + i] << (8 * i);
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t park_proof_tag(const uint8_t secret[PARK_SECRET_LEN], char who, enum park_verb verb, uint64_t id,
			const uint8_t ni[PARK_NONCE_LEN], const uint8_t ne[PARK_NONCE_LEN])
{
	uint8_t msg[2 + 8 + 2 * PARK_NONCE_LEN];
	msg[0] = (uint8_t)who;
	msg[1] = (uint8_t)verb;
	for (int i = 0; i < 8; i++)
		msg[2 + i] = (uint8_t)(id >> (8 * i));
	memcpy(msg + 10, ni, PARK_NONCE_LEN);
	memcpy(msg + 10 + PARK_NONCE_LEN, ne, PARK_NONCE_LEN);
	return park_siphash(secret, msg, sizeof(msg));
}

bool park_same(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t d = 0;
	for (size_t i = 0; i < n; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}
