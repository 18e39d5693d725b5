#!/usr/bin/env python3
"""The demo's word count (scripts/demo.sh, job 1) through the Python client.

usage: wordcount.py [GLOB] [N]

Counts the words of at least three letters in the files GLOB matches
(default: ember's docs) and prints the N most frequent (default 15) as
"count<TAB>word", the largest count first, then by word, as
`ember run --action count_by_value` does.  The socket is $EMBER_SOCKET,
else /run/ember/emberd.sock.
"""

import os
import sys

import ember


def main() -> int:
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pattern = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(top, "docs", "*.md")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    with ember.connect() as sc:
        words = (sc.text_file(pattern, partitions=4)
                 .map_lower()
                 .flat_map_split(" ")
                 .filter_regex("^[a-z]{3,}$"))
        counts = words.count_by_value()
    for word, count in sorted(counts.items(), key=lambda kv: (-kv[1],
                                                              kv[0]))[:n]:
        print("%d\t%s" % (count, word))
    return 0


if __name__ == "__main__":
    sys.exit(main())
