"""The generate command's tests read the tiny saved checkpoints `tests/models` builds."""

from tests.models.conftest import tiny_checkpoints  # noqa: F401  (a shared session fixture)
