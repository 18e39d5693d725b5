/*
 * A block of lines split at a byte (flat_map split's pieces, taken a
 * block at a time by count_by_value and reduce_by_key's map side): the
 * separators found 64 bytes a step, and a short piece read as the two
 * zero-padded words a table keeps it as, with two loads that may run
 * past the piece (never past the block: the caller checks 16 bytes are
 * left).
 */
#ifndef EMBER_WORKER_PIECES_H
#define EMBER_WORKER_PIECES_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__) && defined(__x86_64__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PIECES_SSE2	1
#include <emmintrin.h>
#include <immintrin.h>

#include "hash.h"

/* The bytes of a load that hold a key of n bytes (n up to 16). */
static const uint64_t	pieces_mask0[17] = {
	0, 0xff, 0xffff, 0xffffff, 0xffffffffULL, 0xffffffffffULL,
	0xffffffffffffULL, 0xffffffffffffffULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL,
	~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL
};
static const uint64_t	pieces_mask1[17] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xffff, 0xffffff, 0xffffffffULL,
	0xffffffffffULL, 0xffffffffffffULL, 0xffffffffffffffULL, ~0ULL
};

/* A bit for each byte of p[0, 64) that is sep or a newline. */
static inline uint64_t
pieces_delims(const char *p, __m128i vsep, __m128i vnl)
{
	uint64_t	m = 0;
	__m128i		v;
	int		i;

	for (i = 0; i < 4; i++) {
		v = _mm_loadu_si128((const __m128i *)(p + 16 * i));
		m |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(
		    _mm_cmpeq_epi8(v, vsep), _mm_cmpeq_epi8(v, vnl))) <<
		    (16 * i);
	}
	return (m);
}

/* pieces_delims, 32 bytes a compare: for code built for AVX2 (a
 * function with target("avx2"), called only where the CPU has it). */
__attribute__((target("avx2"))) static inline uint64_t
pieces_delims_avx2(const char *p, char sep)
{
	__m256i	vsep = _mm256_set1_epi8(sep);
	__m256i	vnl = _mm256_set1_epi8('\n');
	__m256i	v0 = _mm256_loadu_si256((const __m256i *)p);
	__m256i	v1 = _mm256_loadu_si256((const __m256i *)(p + 32));
	uint32_t m0, m1;

	m0 = (uint32_t)_mm256_movemask_epi8(_mm256_or_si256(
	    _mm256_cmpeq_epi8(v0, vsep), _mm256_cmpeq_epi8(v0, vnl)));
	m1 = (uint32_t)_mm256_movemask_epi8(_mm256_or_si256(
	    _mm256_cmpeq_epi8(v1, vsep), _mm256_cmpeq_epi8(v1, vnl)));
	return ((uint64_t)m1 << 32 | m0);
}

/* The zero-padded words of a piece of up to 16 bytes at p, with 16
 * bytes of the block from p on. */
static inline void
pieces_words(const char *p, size_t len, uint64_t *k0, uint64_t *k1)
{
	*k0 = hash_load64(p) & pieces_mask0[len];
	*k1 = hash_load64(p + 8) & pieces_mask1[len];
}
#endif

#endif
