"""The compiled parts of quotaflow: Cython builds each listed module from its own pure-Python source (Cython's
pure-Python mode, typed by ``cython`` annotations or by a ``.pxd`` beside the source), which stays importable as the
pure twin where no compiler is available (``optional``)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

COMPILED_MODULES = [
    "quotaflow.engine.rate",  # typed by rate.pxd beside it
    "quotaflow.gateway.wire.frame_facts",
    "quotaflow.gateway.data.framing",
    "quotaflow.gateway.data.pending",  # typed by pending.pxd beside it
    "quotaflow.gateway.data.enforcement",  # typed by enforcement.pxd beside it
    "quotaflow.gateway.data.connection",  # typed by connection.pxd beside it
    "quotaflow.gateway.observation.row_queue",  # typed by row_queue.pxd beside it
]

setup(ext_modules=cythonize(
    [Extension(name, [f"src/{name.replace('.', '/')}.py"], optional=True) for name in COMPILED_MODULES],
    compiler_directives={"language_level": "3"},
    quiet=True,
))
