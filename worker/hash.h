/*
 * The worker's hash of bytes: count_by_value's table, and the shuffle's
 * partitioner, which must give the same bucket for the same key in every
 * worker of the machine (the loads are in host order: one machine's
 * workers all agree).
 */
#ifndef EMBER_WORKER_HASH_H
#define EMBER_WORKER_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Read 8 bytes, unaligned, in host order. */
static inline uint64_t
hash_load64(const char *p)
{
	uint64_t	v;

	memcpy(&v, p, 8);
	return (v);
}

/* Multiply to 128 bits and fold.  On x86-64 in one mulq: GCC moves a
 * __uint128_t product through the stack when registers are short, as
 * in count_by_value's step loop. */
static inline uint64_t
hash_mix(uint64_t a, uint64_t b)
{
#ifdef __x86_64__
	uint64_t	lo, hi;

	__asm__("mulq %3" : "=a" (lo), "=d" (hi) : "%0" (a), "rm" (b) :
	    "cc");
	return (lo ^ hi);
#else
	__uint128_t	r = (__uint128_t)a * b;

	return ((uint64_t)r ^ (uint64_t)(r >> 64));
#endif
}

/* Hash a record, 16 bytes a step (in the manner of wyhash). */
static inline uint64_t
hash_bytes(const char *p, size_t len)
{
	static const uint64_t	k0 = 0xa0761d6478bd642fULL,
				k1 = 0xe7037ed1a0b428dbULL,
				k2 = 0x8ebc6af09c88c6e3ULL;
	uint64_t		h = k0 ^ len, a, b;
	size_t			n = len;

	while (n > 16) {
		h = hash_mix(hash_load64(p) ^ k1, hash_load64(p + 8) ^ h);
		p += 16;
		n -= 16;
	}
	if (n >= 8) {
		a = hash_load64(p);
		b = hash_load64(p + n - 8);
	} else if (n >= 4) {
		uint32_t	x, y;

		memcpy(&x, p, 4);
		memcpy(&y, p + n - 4, 4);
		a = x;
		b = y;
	} else if (n > 0) {
		a = ((uint64_t)(unsigned char)p[0] << 16) |
		    ((uint64_t)(unsigned char)p[n / 2] << 8) |
		    (unsigned char)p[n - 1];
		b = 0;
	} else
		a = b = 0;
	return (hash_mix(k1 ^ len, hash_mix(a ^ k2, b ^ h)));
}

/* Hash a key of up to 16 bytes given as two zero-padded words: the
 * tables that keep short keys in their slots. */
static inline uint64_t
hash_short(uint64_t k0, uint64_t k1, uint64_t len)
{
	return (hash_mix(k0 ^ 0xa0761d6478bd642fULL,
	    k1 ^ 0xe7037ed1a0b428dbULL ^ len));
}

#endif
