"""Suite-wide hygiene and speed.

One pytest worker runs many modules, and JAX keeps every compiled executable for the life of the
process: over the whole suite that state piled up and ended once in a crash inside the CPU
compiler on CI. Dropping the in-memory caches after each module keeps a module's footprint its
own. A compilation cache on disk, shared by the workers and by the tests' subprocesses (the
simulated-device scripts inherit the environment), turns the recompilation of a program another
module or process already built into a load: the tests build the same tiny models' steps many
times over. It lives for one session and is removed at the end.
"""

import gc
import os
import shutil
import tempfile

_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_OWNS_CACHE = _CACHE_ENV not in os.environ  # the first process (the controller) creates it
if _OWNS_CACHE:
    os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="jaxtom-tests-xla-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")

import jax  # noqa: E402  (after the environment above: JAX reads it at import)
import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs_after_each_module():
    yield
    jax.clear_caches()
    gc.collect()


def pytest_sessionfinish(session, exitstatus):
    if _OWNS_CACHE and not hasattr(session.config, "workerinput"):
        shutil.rmtree(os.environ[_CACHE_ENV], ignore_errors=True)
