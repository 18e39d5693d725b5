"""
emberd's log stays its own: client strings are escaped in the text log,
so that none starts a line of its own or sends an escape sequence to the
operator's terminal.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403

FORGED = "2026-01-01T00:00:00.000Z emberd[1] error: forged by a udf"


def test_client_string_escaped_in_text_log(d):
    """A client name with a newline and an ESC in it, logged by hello,
    stays on its line, escaped."""
    c = d.client(hello=False)
    try:
        reply = c.hello(client="evil\n" + FORGED + "\x1b]0;pwned\x07")
        check(reply["ok"], "hello: %r" % reply)
    finally:
        c.close()
    check(wait_until(lambda: "hello from evil" in d.log_text(), 10),
          "no hello logged")
    text = d.log_text()
    check("\x1b" not in text and "\x07" not in text,
          "control bytes reached the log")
    for line in text.splitlines():
        check(not line.startswith(FORGED[:24]), "a forged line: %r" % line)
    line = [l for l in text.splitlines() if "hello from evil" in l][0]
    check(FORGED in line, "the rest of the name left its line: %r" % line)


if __name__ == "__main__":
    run_tests(globals())
