#!/usr/bin/env python3
"""Count the words of a text file with collections.Counter.

The baseline of bench_wordcount.sh: the file is read in 1 MiB chunks, each
cut at its last newline, split on whitespace and counted.  Prints one
"count word" line per distinct word.
"""

import collections
import sys

CHUNK = 1 << 20


def main():
    counts = collections.Counter()
    rest = b""
    with open(sys.argv[1], "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            chunk = rest + chunk
            cut = chunk.rfind(b"\n") + 1
            rest = chunk[cut:]
            counts.update(chunk[:cut].split())
    counts.update(rest.split())
    out = sys.stdout.buffer
    for word, n in counts.items():
        out.write(b"%d %s\n" % (n, word))


if __name__ == "__main__":
    main()
