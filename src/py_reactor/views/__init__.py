"""What operators see, read from the store: executions (listed, in detail, parked), live holds
and coordination state, declared reactors.

Plain data for the dashboard (``py_reactor.web``) and the command line (``py-reactor
executions``, ``py-reactor holds``) alike: no web framework here, so the command line reads
what the dashboard shows without the ``web`` extra. The store is read through its read model
(``py_reactor.storage.inspect``).
"""
