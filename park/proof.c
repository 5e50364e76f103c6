/* Lines on a control connection, and the proof exchange by which two
 * interposed processes show each other that they hold the same secret
 * (an exported allocation's, or a VMM import's claim) without sending it:
 *
 *   asker:   VERB ID NI          (its nonce)
 *   holder:  chal NE TE          (its nonce, and its tag: it holds the secret)
 *   asker:   proof TI            (its tag, once TE checked out)
 *   holder:  the answer to VERB  (once TI checked out)
 *
 * The tags are SipHash-2-4 under the secret of both nonces, the verb, the
 * id and the side (request.c). So a process that only sits at the pid the
 * asker expected (a pid reused, another PID namespace) learns nothing and
 * cannot pass for the holder, and a peer that does not hold the secret
 * gets nothing. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "park.h"

ssize_t park_read_line(int conn, char *buf, size_t size)
{
	size_t n = 0;
	bool over = false;
	for (;;) {
		char c;
		ssize_t r = recv(conn, &c, 1, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (n == 0 && !over)
				return r;
			break;
		}
		if (c == '\n')
			break;
		if (n + 1 < size)
			buf[n++] = c;
		else
			over = true;
	}
	/* A line too long for the buffer is refused whole: its tail must not
	 * be read as a request of its own. */
	if (over)
		n = 0;
	buf[n] = 0;
	return (ssize_t)n + 1;
}

static int send_all(int conn, const char *text)
{
	size_t len = strlen(text), done = 0;
	while (done < len) {
		ssize_t w = send(conn, text + done, len - done, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

static bool nonce(uint8_t out[PARK_NONCE_LEN])
{
	return getrandom(out, PARK_NONCE_LEN, 0) == PARK_NONCE_LEN;
}

/* "WORD HEX" with exactly 2n hex digits after the word's space. */
static bool field(const char *line, size_t len, const char *word, uint8_t *out, size_t n)
{
	size_t w = strlen(word);
	return len > w && strncmp(line, word, w) == 0 && line[w] == ' ' &&
		park_unhex(line + w + 1, len - w - 1, out, n);
}

bool park_proof_ask(int conn, enum park_verb verb, uint64_t id, const uint8_t secret[PARK_SECRET_LEN])
{
	uint8_t ni[PARK_NONCE_LEN], ne[PARK_NONCE_LEN], te[8];
	char hex[2 * PARK_NONCE_LEN + 1], line[PARK_LINE_MAX];
	if (!nonce(ni))
		return false;
	park_hex(ni, sizeof(ni), hex);
	snprintf(line, sizeof(line), "%s %llx %s\n", park_req_word(verb), (unsigned long long)id, hex);
	ssize_t n = send_all(conn, line) == 0 ? park_read_line(conn, line, sizeof(line)) : -1;
	/* "chal NE TE": 4 + 1 + 32 + 1 + 16 */
	if (n != 55 || !field(line, 37, "chal", ne, sizeof(ne)) || line[37] != ' ' ||
	    !park_unhex(line + 38, 16, te, sizeof(te)))
		return false;
	uint64_t want = park_proof_tag(secret, 'E', verb, id, ni, ne), got = 0;
	for (int i = 0; i < 8; i++)
		got = got << 8 | te[i];
	if (!park_same(&want, &got, sizeof(want)))
		return false;
	snprintf(line, sizeof(line), "proof %016llx\n",
		 (unsigned long long)park_proof_tag(secret, 'I', verb, id, ni, ne));
	return send_all(conn, line) == 0;
}

bool park_proof_check(int conn, const struct park_req *rq, const uint8_t secret[PARK_SECRET_LEN])
{
	uint8_t ne[PARK_NONCE_LEN];
	char hex[2 * PARK_NONCE_LEN + 1], line[PARK_LINE_MAX];
	if (!nonce(ne))
		return false;
	park_hex(ne, sizeof(ne), hex);
	snprintf(line, sizeof(line), "chal %s %016llx\n", hex,
		 (unsigned long long)park_proof_tag(secret, 'E', rq->verb, rq->id, rq->nonce, ne));
	ssize_t n = send_all(conn, line) == 0 ? park_read_line(conn, line, sizeof(line)) : -1;
	struct park_req proof;
	if (n <= 0)
		return false;
	park_req_parse(line, (size_t)n - 1, &proof);
	uint64_t want = park_proof_tag(secret, 'I', rq->verb, rq->id, rq->nonce, ne);
	return proof.verb == PARK_REQ_PROOF && park_same(&proof.mac, &want, sizeof(want));
}
