"""ember: PySpark's habits over emberd's socket.

ember runs data-parallel jobs on one machine: emberd takes jobs on a Unix
socket, splits them into partitions and runs each in a reused worker
process.  This package is its Python client, standard library only::

    import ember

    with ember.connect() as sc:     # $EMBER_SOCKET, else the system socket
        words = (sc.text_file("docs/*.md", partitions=4)
                   .map_lower()
                   .flat_map_split(" ")
                   .filter_regex("^[a-z]{3,}$"))
        print(words.count_by_value().most_common(10))
        for line in sc.range(1000000).filter_contains("777"):
            print(line)             # one partition at a time

Datasets are lazy, like RDDs: ``Session.range``, ``Session.text_file``,
``Session.parallelize`` and ``Session.from_checkpoint`` make one, each op
(``filter_contains``, ``filter_regex``, ``filter_in``, ``map_upper``,
``map_lower``, ``map_trim``, ``map_field``, ``map_json``,
``flat_map_split``, ``sample``, ``limit``, ``pipe``, ``udf``, and the
Python functions ``map``, ``filter``, ``flat_map``, ``map_partitions``)
returns a new one, and ``Dataset.plan`` is the JSON plan of docs/plans.md.  Actions run
it: ``count``, ``collect``, ``count_by_value`` (a Counter), ``reduce`` (and
``sum``, ``min``, ``max``; or a function), ``fold``, ``save``, ``checkpoint``, ``take``, ``first``
and ``to_local_iterator`` (also ``iter(dataset)``; ``to_local_batches``
for lists of them).

Records come back as str (UTF-8; ``errors=`` as for bytes.decode) or as
bytes with ``decode=False``, and None for a null record.  Errors raise the
exception named after emberd's error class (PlanInvalid, TaskFailed, ...),
all under EmberError.

docs/python.md in ember's tree is the guide.
"""

from ._stream import ReattachPolicy
from .dataset import Checkpoint, Dataset, Record, SaveResult
from .errors import *  # noqa: F401,F403 (the classes of errors.__all__)
from .errors import __all__ as _error_names
from .session import (DEFAULT_SOCKET, SOCKET_ENV, Broadcast,
                      ObjectBroadcast, Session, connect, default_socket)
from .spark import submit

__version__ = "0.1.0"

__all__ = [
    "connect", "default_socket", "Session", "Dataset", "Checkpoint",
    "Broadcast", "ObjectBroadcast", "SaveResult", "Record", "ReattachPolicy", "DEFAULT_SOCKET",
    "SOCKET_ENV", "submit",
] + [name for name in _error_names if not name.startswith("error_")]
