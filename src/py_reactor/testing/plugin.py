"""The pytest plugin py_reactor registers (entry point ``pytest11``): fixtures and assertion
helpers for projects that test their reactors. See ``docs/testing.md``."""
