"""What a broadcast of a Python object becomes in a function a worker
runs.  cloudpickle sends this module's functions by value (the workers
do not have the ember package), and the function finds ember_worker, the
module the worker's interpreter runs the python ops with."""


def worker_broadcast(bid):
    """The worker's handle of broadcast bid: its .value is unpickled at
    most once per worker."""
    import ember_worker
    return ember_worker.broadcast(bid)
