"""The kernel's core: the contracts (gRPC services in `contracts/`, their Python faces in `components`), the
registry that finds plugins, the runtimes that serve a component in process, in a subprocess or in a container,
the conformance suite, errors and JSON I/O. It imports nothing else of the package (tests/kernel/test_layout_rules.py
keeps it so); the pipeline, remote runs and the faces beside it are the application built on it.
"""
