"""The composition root: the ``flatgate`` command, which starts the stub, the
proxy and the edge. The only package that imports both services."""
