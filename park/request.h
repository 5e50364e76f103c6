/* The control protocol's requests, as the interposer reads them from a
 * peer it does not trust (cudasnap, another interposed process, or anyone
 * who reached the socket): one line each, parsed here without any state so
 * that a fuzzer can drive it. Grammar (single spaces, nothing else):
 *
 *   status [key=K]            park [MS] [unpin] [files=F [room]] [key=K]
 *   unpark [MS] [files=F] [key=K]                commit [key=K]
 *   fd VA N    vlive S N    vfd S N        (a proof exchange follows)
 *   detach VA  vclaim S  vdetach S  vdrop S
 *   proof M                                (the second step of an exchange)
 *
 * K: the process's key (PARK_KEY_LEN bytes in hex), MS: decimal, VA and S:
 * hex, N: a nonce (PARK_NONCE_LEN bytes in hex), M: 16 hex digits, F: 1 to
 * PARK_FILES_MAX, the files (one descriptor each, in messages of one byte
 * that follow the line) the memory goes into or comes from. */
#ifndef CS_PARK_REQUEST_H
#define CS_PARK_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PARK_REQ_KEY_LEN 32 /* = PARK_KEY_LEN (lib/proc/park_find.h) */
#define PARK_SECRET_LEN 16 /* what a proof exchange is keyed with */
#define PARK_NONCE_LEN 16
#define PARK_LINE_MAX 256 /* longer lines are refused whole */
#define PARK_TIMEOUT_MAX 600000u
#define PARK_REQ_FILES_MAX 8 /* = PARK_FILES_MAX (lib/proc/park_find.h) */

enum park_verb {
	PARK_REQ_BAD = 0,
	PARK_REQ_STATUS,
	PARK_REQ_PARK,
	PARK_REQ_UNPARK,
	PARK_REQ_COMMIT,
	PARK_REQ_FD,
	PARK_REQ_DETACH,
	PARK_REQ_VCLAIM,
	PARK_REQ_VLIVE,
	PARK_REQ_VFD,
	PARK_REQ_VDETACH,
	PARK_REQ_VDROP,
	PARK_REQ_PROOF,
};

struct park_req {
	enum park_verb verb;
	unsigned timeout_ms; /* 0: not given */
	bool unpin;
	unsigned files; /* park, unpark: 0 none */
	bool room; /* park into files: their space is still being reserved */
	bool has_key;
	uint8_t key[PARK_REQ_KEY_LEN];
	uint64_t id; /* an allocation's address, or an export's serial */
	uint8_t nonce[PARK_NONCE_LEN];
	uint64_t mac; /* proof */
};

/* Parses line (len bytes, without its newline; it need not be
 * terminated) into rq: its verb, or PARK_REQ_BAD (rq otherwise zero) for
 * anything outside the grammar: unknown words, a field twice, bytes that
 * are not printable ASCII, numbers out of range, a line of PARK_LINE_MAX
 * bytes or more. */
void park_req_parse(const char *line, size_t len, struct park_req *rq);

/* The verb's word, as a peer sends it ("fd", "vfd"...). */
const char *park_req_word(enum park_verb verb);

/* n bytes as 2n lowercase hex digits and a terminating 0 (out: 2n + 1). */
void park_hex(const uint8_t *in, size_t n, char *out);
/* Exactly 2n hex digits (either case) at text into out; false otherwise. */
bool park_unhex(const char *text, size_t len, uint8_t *out, size_t n);

/* SipHash-2-4 of msg under a 128-bit key. */
uint64_t park_siphash(const uint8_t key[16], const void *msg, size_t len);
/* The tag one side of a proof exchange sends: who ('E' the side that
 * holds the memory, 'I' the one that asks for it), for which verb and id,
 * bound to both sides' nonces. Neither side ever sends the secret. */
uint64_t park_proof_tag(const uint8_t secret[PARK_SECRET_LEN], char who, enum park_verb verb, uint64_t id,
			const uint8_t ni[PARK_NONCE_LEN], const uint8_t ne[PARK_NONCE_LEN]);
/* Constant-time comparison of n bytes. */
bool park_same(const void *a, const void *b, size_t n);

#endif
