/*
 * gen_words: write a text file of words for the word count and regex
 * benchmarks.
 *
 * The vocabulary is a fixed number of distinct lowercase words; each word of
 * the file is drawn from it with a Zipf distribution (the word of rank r has
 * probability proportional to 1/r), so a few words are very common and most
 * are rare, as in natural text.  Lines hold 4 to 12 words (8 on average),
 * separated by one space, and end with a newline.  The output depends only
 * on the options: the same seed gives the same bytes.
 *
 * The vocabulary's random words never hold a 'q'.  A few words of the form
 * qu...k are placed at chosen ranks instead, so that the regex
 * \bqu[a-z]+k\b matches about 1 % of the lines.
 */

#include <sys/types.h>

#include <err.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#define DEFAULT_MB	512
#define DEFAULT_VOCAB	10000
#define DEFAULT_SEED	1
#define MAX_WORD	16
#define OUT_SIZE	(4 * 1024 * 1024)
#define GUIDE_BITS	16

/* The words matching \bqu[a-z]+k\b and the ranks (from 1) they take. */
static const struct {
	long		 rank;
	const char	*word;
} special[] = {
	{ 100,	"quirk" },
	{ 3000,	"quack" },
	{ 9000,	"quibblek" },
};

static uint64_t	 rng_state[4];

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: gen_words [--mb N] [--vocab N] [--seed N] "
	    "FILE\n");
	exit(2);
}

/* Return the next 64 random bits (xoshiro256**). */
static inline uint64_t
rng_next(void)
{
	uint64_t	*s = rng_state, r, t;

	r = s[1] * 5;
	r = ((r << 7) | (r >> 57)) * 9;
	t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = (s[3] << 45) | (s[3] >> 19);
	return (r);
}

/* Seed the generator from one number (splitmix64). */
static void
rng_seed(uint64_t seed)
{
	uint64_t	z;
	int		i;

	for (i = 0; i < 4; i++) {
		z = (seed += UINT64_C(0x9e3779b97f4a7c15));
		z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
		z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
		rng_state[i] = z ^ (z >> 31);
	}
}

/* Return a random number below n. */
static inline uint32_t
rng_below(uint32_t n)
{
	return ((uint32_t)(((rng_next() >> 32) * n) >> 32));
}

/* Hash a word (FNV-1a). */
static uint32_t
word_hash(const char *w)
{
	uint32_t	h = 2166136261u;

	while (*w != '\0')
		h = (h ^ (unsigned char)*w++) * 16777619u;
	return (h);
}

/*
 * Add w to the set of words (nslots slots, a power of two, each -1 or an
 * index into words); 0 if it was new, -1 if it was there.
 */
static int
set_add(long *slots, size_t nslots, char **words, long idx, const char *w)
{
	size_t	i;

	for (i = word_hash(w) & (nslots - 1); slots[i] != -1;
	    i = (i + 1) & (nslots - 1)) {
		if (strcmp(words[slots[i]], w) == 0)
			return (-1);
	}
	slots[i] = idx;
	return (0);
}

/*
 * Make the vocabulary: n distinct words, by rank.  Common words are short:
 * 1 to 3 letters in the first 30 ranks, then longer as the rank grows.
 */
static char **
make_vocab(long n)
{
	static const char	 letters[] = "abcdefghijklmnoprstuvwxyz";
	char			**words, w[MAX_WORD + 1];
	long			*slots, r;
	size_t			 nslots = 1, k;
	uint32_t		 len;

	while (nslots < (size_t)n * 4)
		nslots <<= 1;
	if ((words = calloc((size_t)n, sizeof *words)) == NULL ||
	    (slots = malloc(nslots * sizeof *slots)) == NULL)
		err(1, "malloc");
	memset(slots, 0xff, nslots * sizeof *slots);

	for (k = 0; k < sizeof special / sizeof special[0]; k++) {
		if (special[k].rank > n)
			continue;
		r = special[k].rank - 1;
		if ((words[r] = strdup(special[k].word)) == NULL)
			err(1, "strdup");
		set_add(slots, nslots, words, r, words[r]);
	}
	for (r = 0; r < n; r++) {
		if (words[r] != NULL)
			continue;
		for (;;) {
			if (r < 30)
				len = 1 + rng_below(3);
			else if (r < 1000)
				len = 3 + rng_below(5);
			else
				len = 4 + rng_below(9);
			for (k = 0; k < len; k++)
				w[k] = letters[rng_below(sizeof letters - 1)];
			w[len] = '\0';
			if ((words[r] = strdup(w)) == NULL)
				err(1, "strdup");
			if (set_add(slots, nslots, words, r, w) == 0)
				break;
			free(words[r]);
		}
	}
	free(slots);
	return (words);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "mb",		required_argument, NULL, 'm' },
		{ "vocab",	required_argument, NULL, 'v' },
		{ "seed",	required_argument, NULL, 's' },
		{ NULL,		0,		   NULL, 0 }
	};
	char		**words, *out, *p;
	uint32_t	 *cdf, *guide, u;
	size_t		 *lens;
	double		  sum, acc;
	long		  mb = DEFAULT_MB, n = DEFAULT_VOCAB;
	long		  seed = DEFAULT_SEED, r, i;
	uint64_t	  target, written = 0, lines = 0, nwords = 0;
	int		  ch, fd, k, per;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'm':
			mb = parse_count(optarg, "--mb", 1);
			break;
		case 'v':
			n = parse_count(optarg, "--vocab", 1);
			break;
		case 's':
			seed = parse_count(optarg, "--seed", 1);
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();
	target = (uint64_t)mb * 1000000;
	rng_seed((uint64_t)seed);
	words = make_vocab(n);

	/* The Zipf distribution as a table of 32-bit cumulative thresholds. */
	if ((cdf = calloc((size_t)n, sizeof *cdf)) == NULL ||
	    (lens = calloc((size_t)n, sizeof *lens)) == NULL ||
	    (guide = calloc((size_t)1 << GUIDE_BITS, sizeof *guide)) == NULL)
		err(1, "calloc");
	for (sum = 0, r = 1; r <= n; r++)
		sum += 1.0 / (double)r;
	for (acc = 0, r = 0; r < n; r++) {
		acc += 1.0 / (double)(r + 1) / sum;
		cdf[r] = acc >= 1.0 ? UINT32_MAX : (uint32_t)(acc * 4294967296.0);
		lens[r] = strlen(words[r]);
	}
	cdf[n - 1] = UINT32_MAX;

	/* guide[g]: the first rank whose threshold reaches g's range. */
	for (r = 0, i = 0; i < (1L << GUIDE_BITS); i++) {
		while (cdf[r] < ((uint32_t)i << (32 - GUIDE_BITS)))
			r++;
		guide[i] = (uint32_t)r;
	}

	if ((fd = open(argv[optind], O_WRONLY | O_CREAT | O_TRUNC, 0644)) == -1)
		err(1, "%s", argv[optind]);
	if ((out = malloc(OUT_SIZE)) == NULL)
		err(1, "malloc");
	p = out;
	while (written + (uint64_t)(p - out) < target) {
		per = 4 + (int)rng_below(9);
		for (k = 0; k < per; k++) {
			u = (uint32_t)(rng_next() >> 32);
			for (r = guide[u >> (32 - GUIDE_BITS)]; cdf[r] < u; r++)
				;
			memcpy(p, words[r], lens[r]);
			p += lens[r];
			*p++ = k + 1 < per ? ' ' : '\n';
		}
		nwords += (uint64_t)per;
		lines++;
		if (p - out > OUT_SIZE - 16 * (MAX_WORD + 1)) {
			if (write(fd, out, (size_t)(p - out)) != p - out)
				err(1, "write %s", argv[optind]);
			written += (uint64_t)(p - out);
			p = out;
		}
	}
	if (p > out) {
		if (write(fd, out, (size_t)(p - out)) != p - out)
			err(1, "write %s", argv[optind]);
		written += (uint64_t)(p - out);
	}
	if (close(fd) == -1)
		err(1, "close %s", argv[optind]);

	printf("%s: %llu bytes, %llu lines, %llu words from a vocabulary of "
	    "%ld\n", argv[optind], (unsigned long long)written,
	    (unsigned long long)lines, (unsigned long long)nwords, n);
	for (r = 0; r < n; r++)
		free(words[r]);
	free(words);
	free(cdf);
	free(lens);
	free(guide);
	free(out);
	return (0);
}
