"""The decoder's gRPC tests share the service tests' module-scoped demo server."""

from tests.service.conftest import running  # noqa: F401  (a pytest fixture, used by name)
