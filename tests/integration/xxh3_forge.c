/* Rewrites four 8-byte words of a 1 KiB block of a file so that the XXH3
 * (64-bit, no seed) of a piece holding it stays the same: what anyone who
 * can read and write a file can do to an unkeyed checksum. For the test
 * that a park into files is not checked with one (test_park_files.py).
 *
 *   xxh3-forge FILE PIECE_OFFSET PIECE_LEN BLOCK
 *
 * Block BLOCK of the piece at PIECE_OFFSET (PIECE_LEN bytes, more than
 * 240, the block not its last) gets, in lane 0 of four of its stripes,
 * words whose sum and whose lo32 x hi32 products (with the default
 * secret's words) add up as before, so that the accumulators after the
 * block, and so the hash, are unchanged. Prints the piece's XXH3 before
 * and after; exits 1 when they differ or the words could not change. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t product(uint64_t v, uint64_t s)
{
	uint64_t k = v ^ s;
	return (k & 0xffffffffu) * (k >> 32);
}

/* Lane 0 of stripe n of a block: the word adds to one accumulator, its
 * product with secret word n to another. Stripes 1, 2 (products that sum
 * to the four's whole), 3 (its high half the secret's: product 0) and 4
 * (its low half the secret's: product 0) take new words with the same
 * sum of words. */
static int forge(unsigned char *block)
{
	const unsigned char *sec = XXH3_kSecret;
	uint64_t v[5], s[5], sum = 0, total = 0;
	for (int n = 1; n <= 4; n++) {
		v[n] = rd64(block + 64 * n);
		s[n] = rd64(sec + 8 * n);
		sum += v[n];
		total += product(v[n], s[n]);
	}
	/* products p1 + p2 == total: p2 = lo * hi <= total, p1 the rest */
	uint64_t hi = (total >> 32) + 1, lo = hi > 0xffffffffu ? 0 : total / hi;
	if (hi > 0xffffffffu)
		hi = 0xffffffffu, lo = total / hi;
	uint64_t rest = total - hi * lo;
	if (rest > 0xffffffffu)
		return -1;
	uint64_t w[5];
	w[1] = ((1ull << 32) | rest) ^ s[1];
	w[2] = ((hi << 32) | lo) ^ s[2];
	uint64_t d = sum - w[1] - w[2] - (s[3] & 0xffffffff00000000ull) - (s[4] & 0xffffffffu);
	w[3] = (s[3] & 0xffffffff00000000ull) | (d & 0xffffffffu);
	w[4] = (d & 0xffffffff00000000ull) | (s[4] & 0xffffffffu);
	int changed = 0;
	for (int n = 1; n <= 4; n++) {
		changed |= w[n] != v[n];
		memcpy(block + 64 * n, &w[n], sizeof(w[n]));
	}
	return changed ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: xxh3-forge FILE PIECE_OFFSET PIECE_LEN BLOCK\n");
		return 2;
	}
	off_t off = (off_t)strtoull(argv[2], NULL, 0);
	size_t len = (size_t)strtoull(argv[3], NULL, 0), block = (size_t)strtoull(argv[4], NULL, 0);
	if (len <= 240 || (block + 2) * 1024 > len)
		return 2;
	unsigned char *p = malloc(len);
	int fd = open(argv[1], O_RDWR);
	if (p == NULL || fd < 0 || pread(fd, p, len, off) != (ssize_t)len)
		return 2;
	uint64_t before = XXH3_64bits(p, len);
	if (forge(p + block * 1024) != 0)
		return 1;
	uint64_t after = XXH3_64bits(p, len);
	printf("%016llx %016llx\n", (unsigned long long)before, (unsigned long long)after);
	if (before != after)
		return 1;
	if (pwrite(fd, p + block * 1024, 1024, off + (off_t)(block * 1024)) != 1024)
		return 2;
	close(fd);
	free(p);
	return 0;
}
