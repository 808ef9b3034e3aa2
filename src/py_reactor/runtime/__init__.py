"""Driving executions: claim, run the engine, store how it ended (or parked), recover.

Every caller goes through here (the caller of ``run()``, the thread worker, a Celery job, a
resume, a retry, an undo); the transport that moves work to workers is passed in, never
chosen here.
"""
