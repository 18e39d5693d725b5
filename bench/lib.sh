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
