"""tests/security: a package, so that its conftest is not the top-level module
``conftest`` that python-client/tests imports from."""
