# Shell helpers of the benchmark scripts, sourced by them.

# The current time in seconds, with nanoseconds.
now() {
	date +%s.%N
}

# Seconds from $1 to $2.
elapsed() {
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'
}

# $1 / $2, two decimals.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
}

# Megabytes (10^6 bytes) per second: $1 bytes in $2 seconds.
mbps() {
	awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / 1e6 / s }'
}

# The smaller of $1 and $2, or $1 if $2 is empty.
min() {
	awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 < b + 0) ? a : b }'
}

# Make the word file $1 of $2 MB with bench/gen_words (in $builddir),
# unless it is there with that size already, and print its size.  Workers,
# and the files they read, may run as another user: the directory and the
# file are readable by all.
words_file() {
	mkdir -p "$(dirname "$1")"
	chmod 755 "$(dirname "$1")"
	if [ "$(stat -c %s "$1" 2>/dev/null || echo 0)" -lt $(($2 * 1000000)) ]
	then
		t0=$(now)
		"$builddir/bench/gen_words" --mb "$2" "$1" >&2
		echo "generated in $(elapsed "$t0" "$(now)") s" >&2
	fi
	chmod 644 "$1"
	stat -c %s "$1"
}

# The median, the least and the greatest of the numbers given: "MED MIN
# MAX".
spread() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		printf "%s %s %s\n", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
